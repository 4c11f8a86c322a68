//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package sqlite_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
	"github.com/anteroomhq/anteroom/session/sessiontest"
	"github.com/anteroomhq/anteroom/session/sqlite"
)

// dbFiles lists the files a Store keeps beside its database.
func dbFiles(path string) []string {
	return []string{path, path + "-wal", path + "-shm", path + ".lock", path + ".id"}
}

// The database holds the token secret: it and every file beside it are
// created readable by their owner only, whatever the umask.
func TestFilesAreCreatedOwnerOnly(t *testing.T) {
	for _, umask := range []int{0, 0o022, 0o277} {
		t.Run(os.FileMode(umask).String(), func(t *testing.T) {
			old := syscall.Umask(umask)
			defer syscall.Umask(old)
			path := filepath.Join(t.TempDir(), "anteroom.db")
			s, err := sqlite.Open(path, quiet)
			require.NoError(t, err)
			defer s.Close()
			ctx := context.Background()
			_, err = s.Secret(ctx, func() ([]byte, error) { return []byte("secret"), nil })
			require.NoError(t, err)
			_, err = s.Join(ctx, sessiontest.GateConfig("default", 1), "a", sessiontest.Epoch)
			require.NoError(t, err)
			for _, f := range dbFiles(path) {
				fi, err := os.Stat(f)
				require.NoError(t, err, "%s exists while the store is open", f)
				assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), "mode of %s", f)
			}
		})
	}
}

// A database file (or one beside it) that others can read is restricted
// at Open, with a warning naming it.
func TestOpenRestrictsFilesOthersCanRead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "anteroom.db")
	s, err := sqlite.Open(path, quiet)
	require.NoError(t, err)
	require.NoError(t, s.Close())
	modes := map[string]os.FileMode{path: 0o644, path + ".lock": 0o666, path + ".id": 0o640}
	for f, m := range modes {
		require.NoError(t, os.Chmod(f, m))
	}
	var log sessiontest.LogBuffer
	s, err = sqlite.Open(path, sqlite.Options{Logger: slog.New(slog.NewTextHandler(&log, nil))})
	require.NoError(t, err)
	defer s.Close()
	for _, f := range dbFiles(path) {
		fi, err := os.Stat(f)
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), "mode of %s", f)
	}
	out := log.String()
	for f, m := range modes {
		assert.Contains(t, out, "file="+f+" was="+m.String(), "a warning names %s", f)
	}
	assert.Contains(t, out, "level=WARN")
}

// Two names of one file are one database: opening it through a symbolic
// link (to the file, or to its directory) while it is open is refused, and
// a Store opened through a link works on the file itself.
func TestOpenThroughASymlinkIsTheSameDatabase(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a.db")
	link := filepath.Join(dir, "b.db")
	require.NoError(t, os.Symlink(path, link))
	dirLink := filepath.Join(t.TempDir(), "d")
	require.NoError(t, os.Symlink(dir, dirLink))

	s, err := sqlite.Open(path, quiet)
	require.NoError(t, err)
	for _, other := range []string{link, filepath.Join(dirLink, "a.db"), filepath.Join(dirLink, "b.db")} {
		_, err := sqlite.Open(other, quiet)
		require.ErrorIs(t, err, sqlite.ErrLocked, "open %s while %s is open", other, path)
	}
	require.NoError(t, s.Close())

	s, err = sqlite.Open(link, quiet)
	require.NoError(t, err)
	assert.Equal(t, path, s.Path(), "the link resolved")
	_, err = s.Join(context.Background(), sessiontest.GateConfig("default", 1), "a", sessiontest.Epoch)
	require.NoError(t, err)
	_, err = os.Lstat(link + "-wal")
	assert.True(t, os.IsNotExist(err), "no WAL beside the link")
	_, err = os.Stat(path + "-wal")
	assert.NoError(t, err, "the WAL is beside the file")
	require.NoError(t, s.Close())

	// A link to nowhere is refused rather than created.
	require.NoError(t, os.Symlink(filepath.Join(dir, "nowhere", "x.db"), filepath.Join(dir, "dangling2.db")))
	_, err = sqlite.Open(filepath.Join(dir, "dangling2.db"), quiet)
	require.Error(t, err)
	assert.Equal(t, session.CodeInternal, session.CodeOf(err))
}
