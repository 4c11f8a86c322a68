//go:build !(linux && (amd64 || arm64))

package main

import "errors"

// rawRecvSupported: here readLoop reads through the net.Conn, and reads
// carry no reception stamps.
const rawRecvSupported = false

type stampedReceiver struct{}

func enableStamps(uintptr) bool { return false }

func (r *stampedReceiver) recv(uintptr, []byte) (int, int64, error) {
	return 0, 0, errors.New("recvmsg not supported here")
}
