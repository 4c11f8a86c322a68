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
	f, err := os.OpenFile(lockPath, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("anteroom: open lock file %s: %w", lockPath, err)
	}
	return f, nil
}

func releaseLock(f *os.File) error {
	if f == nil {
		return nil
	}
	return f.Close()
}
