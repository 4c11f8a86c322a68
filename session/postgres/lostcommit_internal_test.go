//go:build unix

package postgres

import (
	"context"
	"log/slog"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
	"github.com/anteroomhq/anteroom/session/postgres/pgtest"
)

// TestALostCommitKeepsTheFirstWaiterFirst: the server crashes right after
// the writer's asynchronous COMMIT of a release that promoted the first
// waiter, before that commit reached the disk, and crash recovery undoes
// it (the caller gets an error). The writer's lower bound of the first
// waiting position (Store.lb) moved past that waiter in the lost commit;
// it must not stay there, or this instance's next promotion skips the
// first waiter for good.
func TestALostCommitKeepsTheFirstWaiterFirst(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server of its own and crashes it")
	}
	_, url := pgtest.Own(t)
	ctx := context.Background()
	s, err := Open(ctx, url, Options{Logger: slog.New(slog.DiscardHandler), ReconnectDelay: 50 * time.Millisecond})
	require.NoError(t, err)
	defer s.Close()
	require.True(t, s.async)
	cfg := session.GateConfig{Name: "g", ActiveLimit: 1, ActiveTimeout: time.Hour, WaitingTimeout: time.Hour}
	_, err = s.Load(ctx, []string{"g"})
	require.NoError(t, err)
	for _, id := range []string{"a", "b", "w1", "w2"} {
		_, err = s.Join(ctx, cfg, id, time.Now())
		require.NoError(t, err)
	}

	// Hold the WAL writer, so that the asynchronous commit stays in the
	// WAL buffers until the crash (as it does for a few ms at most).
	admin, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	var walwriter int
	require.NoError(t, admin.QueryRow(ctx, `SELECT pid FROM pg_stat_activity WHERE backend_type = 'walwriter'`).Scan(&walwriter))
	admin.Close(ctx)
	require.NoError(t, syscall.Kill(walwriter, syscall.SIGSTOP))
	defer syscall.Kill(walwriter, syscall.SIGCONT)
	var once sync.Once
	s.afterCommit = func(*pgx.Conn) {
		// The crash: a server process killed; the postmaster restarts
		// every process and recovers from the WAL on disk.
		once.Do(func() {
			_ = syscall.Kill(walwriter, syscall.SIGKILL)
			time.Sleep(time.Second) // the postmaster ends every backend, this one included
		})
	}
	_, err = s.Release(ctx, cfg, "a", time.Now()) // promotes b, at position 2
	require.Error(t, err, "the commit was not flushed: not acknowledged")
	s.afterCommit = nil

	// The server is back; the store resyncs and is ready again.
	require.Eventually(t, func() bool {
		if s.Ready() != nil {
			return false
		}
		got, err := s.Get(ctx, "g", "b")
		return err == nil && got.Status == session.StatusWaiting
	}, 30*time.Second, 50*time.Millisecond, "the release was undone by the crash")
	a, err := s.Get(ctx, "g", "a")
	require.NoError(t, err)
	require.Equal(t, session.StatusActive, a.Status)

	// The release runs again: the slot must go to b, first in line.
	require.Eventually(t, func() bool { _, err := s.Release(ctx, cfg, "a", time.Now()); return err == nil }, 10*time.Second, 50*time.Millisecond)
	b, err := s.Get(ctx, "g", "b")
	require.NoError(t, err)
	w1, err := s.Get(ctx, "g", "w1")
	require.NoError(t, err)
	require.Equal(t, session.StatusWaiting, w1.Status, "w1 (position 3) jumped the line")
	require.Equal(t, session.StatusActive, b.Status, "b (position 2, first in line) was skipped")
}
