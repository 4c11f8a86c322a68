package sqlite_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session/sqlite"
)

// A database path that names something else is refused before anything
// touches it. Before, Open first took group and other permissions off
// whatever the path named (as root, database: /dev/null made /dev/null
// 0600 for every process) and left a lock file beside it, then failed with
// "file is not a database" or "disk I/O error".
func TestOpenRefusesWhatIsNotADatabase(t *testing.T) {
	refusedUntouched(t, openEdgeCases(t, t.TempDir()))
}

type openEdgeCase struct{ name, path, want, file string }

func openEdgeCases(t *testing.T, dir string) []openEdgeCase {
	text := filepath.Join(dir, "anteroom.yaml")
	require.NoError(t, os.WriteFile(text, []byte("listen: 127.0.0.1:8080\n"), 0o644))
	require.NoError(t, os.Chmod(text, 0o644))
	link := filepath.Join(dir, "link.db")
	require.NoError(t, os.Symlink(text, link))
	sub := filepath.Join(dir, "sub")
	require.NoError(t, os.Mkdir(sub, 0o755))
	return []openEdgeCase{
		{"a text file", text, "not an SQLite database", text},
		{"a symlink to it", link, "not an SQLite database", text},
		{"a directory", sub, "is a directory", sub},
	}
}

// refusedUntouched checks that Open refuses each case and leaves its file's
// mode, and no lock file beside it.
func refusedUntouched(t *testing.T, cases []openEdgeCase) {
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before, err := os.Stat(tc.file)
			require.NoError(t, err)
			s, err := sqlite.Open(tc.path, quiet)
			if err == nil {
				_ = s.Close()
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			after, err := os.Stat(tc.file)
			require.NoError(t, err)
			assert.Equal(t, before.Mode(), after.Mode(), "a refused Open changed the mode")
			assert.NoFileExists(t, tc.file+".lock")
		})
	}
}
