//go:build linux

package sqlite

import (
	"os"

	"golang.org/x/sys/unix"
)

// writebackSupported says whether startWriteback does anything here.
const writebackSupported = true

// startWriteback asks the kernel to start writing the file at path's dirty
// pages to its disk and returns at once (sync_file_range with
// SYNC_FILE_RANGE_WRITE): it waits for no write and makes nothing durable;
// a later fsync of the file then finds less to write. A missing file is
// not an error. It is for the WAL (see onWALFile).
//
// Errors: the open's, or sync_file_range's (EINVAL, ENOSYS or ESPIPE where
// the file system or the kernel does not support it).
func startWriteback(path string) error {
	return onWALFile(path, func(f *os.File) error {
		return unix.SyncFileRange(int(f.Fd()), 0, 0, unix.SYNC_FILE_RANGE_WRITE)
	})
}
