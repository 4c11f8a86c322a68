package sqlite_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
	"github.com/anteroomhq/anteroom/session/sessiontest"
	"github.com/anteroomhq/anteroom/session/sqlite"
)

var quiet = sqlite.Options{Logger: slog.New(slog.DiscardHandler)}

func openStore(tb testing.TB, path string) session.Store {
	tb.Helper()
	s, err := sqlite.Open(path, sqlite.Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(tb, err)
	return s
}

func TestStoreSuite(t *testing.T) {
	sessiontest.RunStoreSuite(t, sessiontest.AtPath(openStore))
}

// plainStore hides what the sqlite Store offers beyond session.Store, so the
// suite takes the paths a Store without sessiontest.Inspector takes.
type plainStore struct{ session.Store }

func TestStoreSuiteWithoutInspector(t *testing.T) {
	if testing.Short() {
		t.Skip("the suite again, through the plain session.Store interface")
	}
	t.Setenv(sessiontest.RandomStepsEnv, "300") // Get per id is slow
	sessiontest.RunStoreSuite(t, sessiontest.AtPath(func(tb testing.TB, path string) session.Store {
		return plainStore{openStore(tb, path)}
	}))
}

func BenchmarkStore(b *testing.B) {
	sessiontest.RunStoreBenchmarks(b, sessiontest.AtPath(openStore))
}

func TestStoreImplementsInspectors(t *testing.T) {
	var s any = (*sqlite.Store)(nil)
	assert.Implements(t, (*sessiontest.Inspector)(nil), s)
	assert.Implements(t, (*sessiontest.TransactionCounter)(nil), s)
}

func TestOpenInvalidPath(t *testing.T) {
	for _, p := range []string{"", ":memory:", "file:x.db?mode=memory", "x.db?_pragma=foo"} {
		_, err := sqlite.Open(p, quiet)
		assert.ErrorIs(t, err, session.ErrInvalidArgument, "path %q", p)
	}
	_, err := sqlite.Open(filepath.Join(t.TempDir(), "no", "such", "dir.db"), quiet)
	assert.Equal(t, session.CodeInternal, session.CodeOf(err))
}

func TestLockSameProcess(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.db")
	s := openStore(t, path)
	_, err := sqlite.Open(path, quiet)
	require.ErrorIs(t, err, sqlite.ErrLocked)
	require.ErrorIs(t, err, session.ErrUnavailable)
	assert.Equal(t, session.CodeUnavailable, session.CodeOf(err))
	assert.Equal(t, `anteroom: database "`+path+`" is in use by another process (lock `+path+`.lock held)`, err.Error())
	require.NoError(t, s.Close())
	s = openStore(t, path)
	require.NoError(t, s.Close())
}

func TestMigrations(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.db")
	var logs bytes.Buffer
	opts := sqlite.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))}
	s, err := sqlite.Open(path, opts)
	require.NoError(t, err)
	require.NoError(t, s.Close())
	assert.Contains(t, logs.String(), "database schema migrated")
	assert.Contains(t, logs.String(), "0001_init.sql")

	raw := func(f func(db *sql.DB)) {
		db, err := sql.Open("sqlite", path)
		require.NoError(t, err)
		defer db.Close()
		f(db)
	}
	raw(func(db *sql.DB) {
		var v int
		require.NoError(t, db.QueryRow("PRAGMA user_version").Scan(&v))
		assert.Equal(t, sqlite.SchemaVersion, v)
		var mode string
		require.NoError(t, db.QueryRow("PRAGMA journal_mode").Scan(&mode))
		assert.Equal(t, "wal", mode)
		for _, table := range []string{"gates", "sessions", "meta"} {
			var n int
			require.NoError(t, db.QueryRow("SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = ?", table).Scan(&n))
			assert.Equal(t, 1, n, "table %s", table)
		}
	})

	// Reopening applies nothing.
	logs.Reset()
	s, err = sqlite.Open(path, opts)
	require.NoError(t, err)
	require.NoError(t, s.Close())
	assert.NotContains(t, logs.String(), "database schema migrated")

	// A newer schema is refused, and left alone.
	raw(func(db *sql.DB) {
		_, err := db.Exec("PRAGMA user_version = " + strconv.Itoa(sqlite.SchemaVersion+1))
		require.NoError(t, err)
	})
	_, err = sqlite.Open(path, opts)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "newer")
	assert.Equal(t, session.CodeInternal, session.CodeOf(err))
	// The failed Open released the lock.
	raw(func(db *sql.DB) {
		_, err := db.Exec("PRAGMA user_version = " + strconv.Itoa(sqlite.SchemaVersion))
		require.NoError(t, err)
	})
	s, err = sqlite.Open(path, opts)
	require.NoError(t, err)
	require.NoError(t, s.Close())
}

func TestSecret(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.db")
	ctx := context.Background()
	s, err := sqlite.Open(path, quiet)
	require.NoError(t, err)

	boom := errors.New("no entropy")
	_, err = s.Secret(ctx, func() ([]byte, error) { return nil, boom })
	require.ErrorIs(t, err, boom)
	_, err = s.Secret(ctx, func() ([]byte, error) { return nil, nil })
	require.ErrorIs(t, err, session.ErrInvalidArgument)

	calls := 0
	gen := func() ([]byte, error) { calls++; return []byte("0123456789abcdef" + strconv.Itoa(calls)), nil }
	first, err := s.Secret(ctx, gen)
	require.NoError(t, err)
	assert.Equal(t, []byte("0123456789abcdef1"), first)
	again, err := s.Secret(ctx, gen)
	require.NoError(t, err)
	assert.Equal(t, first, again)
	assert.Equal(t, 1, calls)

	require.NoError(t, s.Close())
	_, err = s.Secret(ctx, gen)
	require.ErrorIs(t, err, session.ErrUnavailable)

	s, err = sqlite.Open(path, quiet)
	require.NoError(t, err)
	defer s.Close()
	kept, err := s.Secret(ctx, gen)
	require.NoError(t, err)
	assert.Equal(t, first, kept, "the secret survives a restart")
	assert.Equal(t, 1, calls)
}

func TestCloseIdempotent(t *testing.T) {
	s, err := sqlite.Open(filepath.Join(t.TempDir(), "c.db"), quiet)
	require.NoError(t, err)
	require.NoError(t, s.Close())
	require.NoError(t, s.Close())
	_, err = s.Rows(context.Background(), "default")
	require.ErrorIs(t, err, session.ErrUnavailable)
}
