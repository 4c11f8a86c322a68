package pgtest

import "syscall"

// credential is who the server would run as when the tests run as root;
// Windows has no root nor setuid, and this package never fills it there.
type credential struct{ Uid, Gid uint32 }

// sysProcAttr starts the server as this process.
func sysProcAttr(*credential) *syscall.SysProcAttr { return nil }
