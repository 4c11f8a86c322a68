//go:build linux

package sqlite

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// writebackSupported says whether startWriteback does anything here.
const writebackSupported = true

// startWriteback asks the kernel to start writing the dirty pages of the
// WAL at path to its disk (sync_file_range with SYNC_FILE_RANGE_WRITE): it
// queues the writes and does not wait for them, unless the device's request
// queue is full, and it makes nothing durable; a later fsync of the file
// then finds less to write. It stops two pages short of appendAt (the
// offset where the writer appends next) or of the file's end: on a device
// that needs its pages stable while they are written, an append to a page
// under writeback waits for it. A missing or short file is not an error.
// It is for the WAL (see onWALFile).
//
// It returns how many bytes it asked to be written (0: none).
//
// Errors: the open's, the stat's, or sync_file_range's (see
// writebackRefused).
func startWriteback(path string, appendAt int64) (int64, error) {
	var asked int64
	err := onWALFile(path, func(f *os.File) error {
		fi, err := f.Stat()
		if err != nil {
			return err
		}
		n := writebackLength(fi.Size(), appendAt, int64(os.Getpagesize()))
		if n == 0 {
			return nil
		}
		if err := unix.SyncFileRange(int(f.Fd()), 0, n, unix.SYNC_FILE_RANGE_WRITE); err != nil {
			return err
		}
		asked = n
		return nil
	})
	return asked, err
}

// writebackLength is how many bytes from the start of a WAL of size bytes
// startWriteback asks to write: whole pages (of page bytes), stopping two
// pages short of appendAt or of the end, whichever comes first; 0 for none.
func writebackLength(size, appendAt, page int64) int64 {
	return max(0, min(size, appendAt)/page*page-2*page)
}

// writebackRefused reports whether err says that the file system or the
// kernel does not do sync_file_range at all, so that trying again is
// useless.
func writebackRefused(err error) bool {
	return errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.ESPIPE) || errors.Is(err, unix.EOPNOTSUPP)
}
