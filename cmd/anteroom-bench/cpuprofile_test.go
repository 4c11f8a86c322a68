package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// -trace writes one execution trace per window, named by it; no path
// records nothing; a path that cannot be created is an error.
func TestStartTrace(t *testing.T) {
	dir := t.TempDir()
	stop, err := startTrace(filepath.Join(dir, "up"), "5M")
	require.NoError(t, err)
	stop()
	fi, err := os.Stat(filepath.Join(dir, "up.5M"))
	require.NoError(t, err)
	assert.Positive(t, fi.Size(), "a trace was written")

	stop, err = startTrace("", "5M")
	require.NoError(t, err)
	stop()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Len(t, entries, 1, "no path, no file")

	_, err = startTrace(filepath.Join(dir, "missing", "up"), "5M")
	assert.ErrorContains(t, err, "trace:")
}
