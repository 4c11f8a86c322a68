//go:build !unix

package gate_test

import "syscall"

// smallReceiveBuffer is nil off unix: the slow-reader tests skip.
var smallReceiveBuffer func(network, address string, c syscall.RawConn) error
