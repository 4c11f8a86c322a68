//go:build unix

package gate_test

import "syscall"

// smallReceiveBuffer is a net.Dialer's Control that gives the socket a 2 KB
// receive buffer before it connects (a window a slow reader keeps small).
var smallReceiveBuffer = func(_, _ string, c syscall.RawConn) error {
	var serr error
	if err := c.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 2<<10)
	}); err != nil {
		return err
	}
	return serr
}
