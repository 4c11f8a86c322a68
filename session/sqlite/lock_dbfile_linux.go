//go:build linux

package sqlite

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// dbFileLockSupported reports whether Open also locks the database file
// itself.
const dbFileLockSupported = true

// lockDBFile takes an exclusive, non-blocking flock on the database file
// itself. Unlike the lock file's, this lock cannot be defeated by deleting
// or renaming a file, and every name of the file (links) shares it. On Linux
// flock locks and the POSIX (fcntl) locks SQLite takes on the same file are
// independent, and flock belongs to the open file description, so SQLite's
// own descriptors neither see nor drop it.
func lockDBFile(f *os.File, path string) error {
	var err error
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return &lockedError{path: path, lockPath: path}
	}
	if err != nil {
		return fmt.Errorf("anteroom: lock %s: %w", path, err)
	}
	return nil
}
