//go:build linux

package sqlite

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// startWriteback starts the writeback of a file's dirty pages (an error
// would come from the call itself: wrong flags, an unsupported file
// system) and takes a missing file for nothing to write.
func TestStartWriteback(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name    string
		prepare func(path string)
	}{
		{"a file with dirty pages", func(path string) { require.NoError(t, os.WriteFile(path, make([]byte, 1<<20), 0o600)) }},
		{"an empty file", func(path string) { require.NoError(t, os.WriteFile(path, nil, 0o600)) }},
		{"no file", func(string) {}},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, "f"+string(rune('a'+i)))
			tc.prepare(path)
			require.NoError(t, startWriteback(path))
		})
	}
}
