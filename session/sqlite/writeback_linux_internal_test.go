//go:build linux

package sqlite

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// startWriteback starts the writeback of a file's dirty pages (an error
// would come from the call itself: wrong flags or range, an unsupported
// file system) and takes a missing or short file for nothing to write.
func TestStartWriteback(t *testing.T) {
	dir := t.TempDir()
	page := os.Getpagesize()
	write := func(size int) func(string) {
		return func(path string) { require.NoError(t, os.WriteFile(path, make([]byte, size), 0o600)) }
	}
	tests := []struct {
		name     string
		prepare  func(path string)
		appendAt int64
		asked    int64
	}{
		{"a file with dirty pages", write(1 << 20), 1 << 30, 1<<20 - int64(2*page)},
		{"a restarted WAL, the writer appending near its start", write(1 << 20), int64(3*page + 100), int64(page)},
		{"a file of two pages and a bit: nothing before its last two pages", write(2*page + 100), 1 << 30, 0},
		{"the writer at the WAL's start", write(1 << 20), walHeaderSize, 0},
		{"an empty file", write(0), 1 << 30, 0},
		{"no file", func(string) {}, 1 << 30, 0},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, "f"+string(rune('a'+i)))
			tc.prepare(path)
			asked, err := startWriteback(path, tc.appendAt)
			require.NoError(t, err)
			assert.Equal(t, tc.asked, asked, "bytes asked to be written")
		})
	}
}

// Only a refusal of sync_file_range itself turns the writeback off for good;
// an open that failed for want of descriptors is tried again next round.
func TestWritebackRefused(t *testing.T) {
	tests := []struct {
		err  error
		want bool
	}{
		{unix.EINVAL, true},
		{unix.ENOSYS, true},
		{unix.ESPIPE, true},
		{unix.EOPNOTSUPP, true},
		{fmt.Errorf("sync: %w", unix.EINVAL), true},
		{unix.EMFILE, false},
		{&fs.PathError{Op: "open", Path: "x-wal", Err: unix.EMFILE}, false},
		{unix.EIO, false},
	}
	for _, tc := range tests {
		t.Run(tc.err.Error(), func(t *testing.T) {
			assert.Equal(t, tc.want, writebackRefused(tc.err))
		})
	}
}

// The writeback covers whole pages and stops two pages short of where the
// writer appends or of the file's end, whichever comes first.
func TestWritebackLength(t *testing.T) {
	const page = 4096
	tests := []struct {
		name                 string
		size, appendAt, want int64
	}{
		{"a growing WAL: two pages short of its end", 100 * page, 100 * page, 98 * page},
		{"a partly written last page is left with the one before it", 100*page + 10, 1 << 40, 98 * page},
		{"a restarted WAL: two pages short of where the writer appends", 100 * page, 10*page + 500, 8 * page},
		{"the writer near the start: nothing", 100 * page, 2*page + 100, 0},
		{"a short file: nothing", 2*page + 100, 1 << 40, 0},
		{"an empty file: nothing", 0, 1 << 40, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, writebackLength(tc.size, tc.appendAt, page))
		})
	}
}
