//go:build unix

package broadcast

import "syscall"

const rawWriteSupported = true

// rawWrite writes to the socket's file descriptor, which the runtime's
// netpoller keeps non-blocking: a full socket gives EAGAIN at once instead of
// parking the writer. A closed peer gives EPIPE (Go turns SIGPIPE on sockets
// into that error).
func rawWrite(fd uintptr, p []byte) (int, error) { return syscall.Write(int(fd), p) }
