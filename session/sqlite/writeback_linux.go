//go:build linux

package sqlite

import (
	"errors"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

// writebackSupported says whether startWriteback does anything here.
const writebackSupported = true

// startWriteback asks the kernel to start writing the file at path's dirty
// pages to its disk and returns at once (sync_file_range with
// SYNC_FILE_RANGE_WRITE): it waits for no write and makes nothing durable;
// a later fsync of the file then finds less to write. A missing file is
// not an error. It opens and closes the file, so path must not name a file
// SQLite keeps POSIX locks on (closing a descriptor drops them): the WAL is
// fine (see walSalt).
//
// Errors: the open's, or sync_file_range's (EINVAL, ENOSYS or ESPIPE where
// the file system or the kernel does not support it).
func startWriteback(path string) error {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	return unix.SyncFileRange(int(f.Fd()), 0, 0, unix.SYNC_FILE_RANGE_WRITE)
}
