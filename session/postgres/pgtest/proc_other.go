//go:build unix && !linux

package pgtest

import "syscall"

// credential is who the server runs as when the tests run as root.
type credential = syscall.Credential

// sysProcAttr runs the server as cred (nil: as this process).
func sysProcAttr(cred *credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: cred}
}
