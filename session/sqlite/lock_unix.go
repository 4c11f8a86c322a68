//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package sqlite

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// lockSupported reports whether Open enforces the exclusive process lock on
// this platform.
const lockSupported = true

// acquireLock takes an exclusive, non-blocking flock on lockPath, creating
// the file when needed. The lock lives as long as the returned file is open;
// the kernel drops it when the process dies, so a crash never leaves a stale
// lock behind. The file itself is never removed: removing it would race with
// another process that just opened it.
func acquireLock(dbPath, lockPath string) (*os.File, error) {
	f, err := os.OpenFile(lockPath, os.O_RDWR|os.O_CREATE, fileMode)
	if err != nil {
		return nil, fmt.Errorf("anteroom: open lock file %s: %w", lockPath, err)
	}
	if fi, err := f.Stat(); err == nil && fi.Mode().Perm() != fileMode {
		_ = f.Chmod(fileMode) // the umask may have taken bits away; tightenFiles warned of extra ones
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, &lockedError{path: dbPath, lockPath: lockPath}
		}
		return nil, fmt.Errorf("anteroom: lock %s: %w", lockPath, err)
	}
	return f, nil
}

// releaseLock drops the lock taken by acquireLock.
func releaseLock(f *os.File) error {
	if f == nil {
		return nil
	}
	return f.Close() // closing the last descriptor releases the flock
}
