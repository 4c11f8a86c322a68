package pgtest_test

import (
	"context"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session/postgres/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

func query(t *testing.T, url string) int {
	t.Helper()
	ctx := context.Background()
	c, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer c.Close(ctx)
	var n int
	require.NoError(t, c.QueryRow(ctx, "SELECT count(*) FROM t").Scan(&n))
	return n
}

func TestFreshDatabasePerTest(t *testing.T) {
	ctx := context.Background()
	a, b := pgtest.DB(t), pgtest.DB(t)
	assert.NotEqual(t, a, b)
	for i, url := range []string{a, b} {
		c, err := pgx.Connect(ctx, url)
		require.NoError(t, err)
		_, err = c.Exec(ctx, "CREATE TABLE t (x int)")
		require.NoError(t, err, "database %d is empty", i)
		for range i + 1 {
			_, err = c.Exec(ctx, "INSERT INTO t VALUES (1)")
			require.NoError(t, err)
		}
		require.NoError(t, c.Close(ctx))
	}
	assert.Equal(t, 1, query(t, a))
	assert.Equal(t, 2, query(t, b))
}

func TestRestartKeepsData(t *testing.T) {
	srv, err := pgtest.Start()
	if err != nil {
		pgtest.Shared(t) // skips or fails as the shared server would
		require.NoError(t, err)
	}
	t.Cleanup(func() { assert.NoError(t, srv.Close()) })
	ctx := context.Background()
	_, url, err := srv.CreateDatabase(ctx)
	require.NoError(t, err)
	c, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	_, err = c.Exec(ctx, "CREATE TABLE t (x int); INSERT INTO t VALUES (1)")
	require.NoError(t, err)

	require.NoError(t, srv.Restart(true)) // a crash
	_, err = c.Exec(ctx, "SELECT 1")
	assert.Error(t, err, "the old connection died with the server")
	assert.Equal(t, 1, query(t, url), "committed rows survive a crash of the server")
	require.NoError(t, srv.Restart(false))
	assert.Equal(t, 1, query(t, url))
}
