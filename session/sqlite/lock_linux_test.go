//go:build linux

package sqlite_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session/sqlite"
)

// The lock cannot be defeated by removing or replacing the lock file: the
// database file itself is locked too.
func TestLockSurvivesTheLockFileRemoved(t *testing.T) {
	cases := []struct {
		name   string
		defeat func(t *testing.T, lock string)
	}{
		{"removed", func(t *testing.T, lock string) { require.NoError(t, os.Remove(lock)) }},
		{"renamed", func(t *testing.T, lock string) { require.NoError(t, os.Rename(lock, lock+".old")) }},
		{"replaced", func(t *testing.T, lock string) {
			require.NoError(t, os.Remove(lock))
			require.NoError(t, os.WriteFile(lock, nil, 0o600))
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "a.db")
			s, err := sqlite.Open(path, quiet)
			require.NoError(t, err)
			tc.defeat(t, path+".lock")
			_, err = sqlite.Open(path, quiet)
			require.ErrorIs(t, err, sqlite.ErrLocked)
			require.Contains(t, err.Error(), "in use by another process")
			require.NoError(t, s.Close())
			s, err = sqlite.Open(path, quiet)
			require.NoError(t, err, "free again after Close")
			require.NoError(t, s.Close())
		})
	}
}

// Across processes, as in the attack: a second process cannot serve the
// same file by opening it through a symbolic link, nor after the lock file
// was deleted.
func TestLockCannotBeBypassedAcrossProcesses(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a.db")
	link := filepath.Join(dir, "b.db")
	require.NoError(t, os.Symlink(path, link))
	s, err := sqlite.Open(path, quiet)
	require.NoError(t, err)

	out := runLockChild(t, link)
	require.Contains(t, out, "CHILD open failed")
	require.Contains(t, out, "locked=true", "through the link")

	require.NoError(t, os.Remove(path+".lock"))
	out = runLockChild(t, path)
	require.Contains(t, out, "CHILD open failed")
	require.Contains(t, out, "locked=true", "with the lock file deleted")
	out = runLockChild(t, link)
	require.Contains(t, out, "locked=true", "both")

	require.NoError(t, s.Close())
	out = runLockChild(t, link)
	require.Contains(t, out, "CHILD open succeeded")
}
