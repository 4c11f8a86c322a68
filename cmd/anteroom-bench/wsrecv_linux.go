//go:build linux && (amd64 || arm64)

package main

import (
	"encoding/binary"
	"syscall"
	"unsafe"
)

// stampedReceiver reads a socket with recvmsg(2) and reports, with each
// read, when the kernel received the newest of the bytes read
// (SO_TIMESTAMPNS; the clock is CLOCK_REALTIME, time.Now's wall clock).
// rawRecvSupported: readLoop reads the descriptor itself.
const rawRecvSupported = true

type stampedReceiver struct {
	hdr syscall.Msghdr
	iov syscall.Iovec
	oob [64]byte
}

// enableStamps asks the kernel to stamp what socket fd receives; false when
// it refuses (reads then carry no stamp).
func enableStamps(fd uintptr) bool {
	return syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_TIMESTAMPNS, 1) == nil
}

// recv is one non-blocking recvmsg into p: the bytes read, the kernel's
// reception time of the newest of them (unix ns, 0 when none came), and
// the error (syscall.EAGAIN when nothing is queued).
func (r *stampedReceiver) recv(fd uintptr, p []byte) (int, int64, error) {
	r.iov.Base = &p[0]
	r.iov.SetLen(len(p))
	r.hdr.Iov = &r.iov
	r.hdr.Iovlen = 1
	r.hdr.Control = &r.oob[0]
	r.hdr.SetControllen(len(r.oob))
	n, _, e := syscall.Syscall(syscall.SYS_RECVMSG, fd, uintptr(unsafe.Pointer(&r.hdr)), syscall.MSG_DONTWAIT)
	r.iov.Base, r.hdr.Iov, r.hdr.Control = nil, nil, nil // keep no pointer into p
	if e != 0 {
		return 0, 0, e
	}
	return int(n), r.stamp(int(r.hdr.Controllen)), nil
}

// stamp finds the SCM_TIMESTAMPNS message among the control messages:
// each a 16-byte header (length, level, type) then its data, 8-aligned.
func (r *stampedReceiver) stamp(n int) int64 {
	b := r.oob[:min(n, len(r.oob))]
	for len(b) >= 16 {
		l := int(binary.NativeEndian.Uint64(b[0:8]))
		level := int32(binary.NativeEndian.Uint32(b[8:12]))
		typ := int32(binary.NativeEndian.Uint32(b[12:16]))
		if l < 16 || l > len(b) {
			return 0
		}
		if level == syscall.SOL_SOCKET && typ == syscall.SCM_TIMESTAMPNS && l >= 32 {
			sec := int64(binary.NativeEndian.Uint64(b[16:24]))
			nsec := int64(binary.NativeEndian.Uint64(b[24:32]))
			return sec*1e9 + nsec
		}
		b = b[min((l+7)&^7, len(b)):]
	}
	return 0
}
