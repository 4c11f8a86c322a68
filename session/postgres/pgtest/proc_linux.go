package pgtest

import "syscall"

// sysProcAttr runs the server as cred (nil: as this process) and has the
// kernel kill it when this process dies, so that a test binary killed on a
// timeout leaves no server behind.
func sysProcAttr(cred *credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
}
