//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package sqlite

import (
	"fmt"
	"os"
)

// lockSupported reports whether Open enforces the exclusive process lock on
// this platform. Here it does not: the lock file is created but not locked,
// so running two processes on one database is not detected.
const lockSupported = false

func acquireLock(dbPath, lockPath string) (*os.File, error) {
	f, err := os.OpenFile(lockPath, os.O_RDWR|os.O_CREATE, fileMode)
	if err != nil {
		return nil, fmt.Errorf("anteroom: open lock file %s: %w", lockPath, err)
	}
	if fi, err := f.Stat(); err == nil && fi.Mode().Perm() != fileMode {
		_ = f.Chmod(fileMode) // the umask may have taken bits away; tightenFiles warned of extra ones
	}
	return f, nil
}

func releaseLock(f *os.File) error {
	if f == nil {
		return nil
	}
	return f.Close()
}
