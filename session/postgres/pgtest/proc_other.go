//go:build unix && !linux

package pgtest

import "syscall"

// sysProcAttr runs the server as cred (nil: as this process).
func sysProcAttr(cred *credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: cred}
}
