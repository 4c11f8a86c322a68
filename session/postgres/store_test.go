package postgres_test

import (
	"context"
	"log/slog"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
	"github.com/anteroomhq/anteroom/session/postgres"
	"github.com/anteroomhq/anteroom/session/postgres/pgtest"
	"github.com/anteroomhq/anteroom/session/sessiontest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

var quiet = postgres.Options{Logger: slog.New(slog.DiscardHandler)}

func open(tb testing.TB, url string, opts postgres.Options) *postgres.Store {
	tb.Helper()
	s, err := postgres.Open(context.Background(), url, opts)
	require.NoError(tb, err)
	return s
}

// opener gives each test a fresh database; reopening opens the same one.
func opener(tb testing.TB) func() session.Store {
	url := pgtest.DB(tb)
	return func() session.Store { return open(tb, url, quiet) }
}

func TestStoreSuite(t *testing.T) {
	if os.Getenv(sessiontest.RandomStepsEnv) == "" {
		t.Setenv(sessiontest.RandomStepsEnv, "1000")
	}
	sessiontest.RunStoreSuite(t, opener)
}

func BenchmarkStore(b *testing.B) {
	sessiontest.RunStoreBenchmarks(b, opener)
}
