package sqlite_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
	"github.com/anteroomhq/anteroom/session/sessiontest"
	"github.com/anteroomhq/anteroom/session/sqlite"
)

// joinN opens path, joins n new sessions to the default gate and closes it;
// it returns the position the next session would get.
func joinN(t *testing.T, path, prefix string, n int) int64 {
	t.Helper()
	s, err := sqlite.Open(path, quiet)
	require.NoError(t, err)
	ctx := context.Background()
	cfg := sessiontest.GateConfig("default", 2)
	var last session.Session
	for i := range n {
		last, err = s.Join(ctx, cfg, prefix+strconv.Itoa(i), sessiontest.Epoch)
		require.NoError(t, err)
	}
	require.NoError(t, s.Close())
	return last.Position + 1
}

// requireDamaged checks that Open refuses path with ErrDamaged, saying
// what it found and how to override, and returns the message.
func requireDamaged(t *testing.T, path string, says ...string) string {
	t.Helper()
	s, err := sqlite.Open(path, quiet)
	if err == nil {
		next, _ := s.Join(context.Background(), sessiontest.GateConfig("default", 2), "probe", sessiontest.Epoch)
		_ = s.Close()
		t.Fatalf("Open accepted the damaged database; the next join got position %d", next.Position)
	}
	require.ErrorIs(t, err, sqlite.ErrDamaged)
	assert.Equal(t, session.CodeInternal, session.CodeOf(err))
	for _, w := range append(says, "delete "+path+".id") {
		assert.Contains(t, err.Error(), w)
	}
	return err.Error()
}

// The storage damage Open detects, each refused with a message saying what
// happened and how to go on knowingly; the override (deleting the identity
// file) then opens the file as it is.
func TestOpenRefusesADamagedDatabase(t *testing.T) {
	cases := []struct {
		name   string
		damage func(t *testing.T, path string)
		says   []string
	}{
		{"zero length", func(t *testing.T, path string) {
			require.NoError(t, os.Truncate(path, 0))
		}, []string{"is empty or new", "had handed out positions up to 5"}},
		{"deleted", func(t *testing.T, path string) {
			require.NoError(t, os.Remove(path))
		}, []string{"is empty or new"}},
		{"an older copy", func(t *testing.T, path string) {
			// The copy taken after three joins is put back after five.
			old, err := os.ReadFile(path + ".old")
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(path, old, 0o600))
		}, []string{"lost committed writes", `gate "default" is at next_position 4`, "5 positions were already handed out"}},
		{"another database", func(t *testing.T, path string) {
			other := filepath.Join(t.TempDir(), "other.db")
			joinN(t, other, "o", 9)
			b, err := os.ReadFile(other)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(path, b, 0o600))
		}, []string{"this is another database file"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "anteroom.db")
			require.EqualValues(t, 4, joinN(t, path, "a", 3))
			b, err := os.ReadFile(path)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(path+".old", b, 0o600))
			require.EqualValues(t, 6, joinN(t, path, "b", 2))

			tc.damage(t, path)
			requireDamaged(t, path, tc.says...)
			requireDamaged(t, path, tc.says...) // and again: a refusal changes nothing

			require.NoError(t, os.Remove(path+".id"))
			s, err := sqlite.Open(path, quiet)
			require.NoError(t, err, "the override opens the file as it is")
			require.NoError(t, s.Close())
			_, err = os.Stat(path + ".id")
			require.NoError(t, err, "and records its identity anew")
		})
	}
}

// A healthy file, closed and opened again many times, or never closed, is
// never taken for a damaged one.
func TestOpenAcceptsAHealthyDatabase(t *testing.T) {
	path := filepath.Join(t.TempDir(), "anteroom.db")
	for i := range 5 {
		next := joinN(t, path, "r"+strconv.Itoa(i)+"-", 3)
		assert.EqualValues(t, 3*(i+1)+1, next)
	}
	// A database from before the identity file existed gets one.
	require.NoError(t, os.Remove(path+".id"))
	assert.EqualValues(t, 17, joinN(t, path, "x", 1))
	_, err := os.Stat(path + ".id")
	require.NoError(t, err)
	assert.EqualValues(t, 18, joinN(t, path, "y", 1))
}
