//go:build unix

package sqlite_test

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// A FIFO as the database path is refused as not a regular file (it gave
// "disk I/O error" before).
func TestOpenRefusesAFIFO(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	require.NoError(t, syscall.Mkfifo(fifo, 0o644))
	require.NoError(t, os.Chmod(fifo, 0o644))
	refusedUntouched(t, []openEdgeCase{{"a FIFO", fifo, "not a regular file", fifo}})
}
