package postgres

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
	"github.com/anteroomhq/anteroom/session/postgres/pgtest"
)

// commitAndFlush returns the statements of the first writer transaction's
// COMMIT batch and of the round trip that follows it on its connection
// (nil: none).
func (r *roundTrips) commitAndFlush(t *testing.T) (commit, flush []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var conn *pgx.Conn
	for _, tr := range r.trips {
		if conn == nil && strings.EqualFold(tr.sql, "begin") {
			conn = tr.conn
		}
		if conn == nil || tr.conn != conn {
			continue
		}
		if commit != nil {
			return commit, tr.all
		}
		if strings.HasSuffix(tr.sql, " COMMIT") {
			commit = tr.all
		}
	}
	if commit == nil {
		t.Fatalf("no writer transaction among %d round trips", len(r.trips))
	}
	return commit, nil
}

func openAsync(t *testing.T, url string, opts Options) *Store {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	s, err := Open(context.Background(), url, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	require.True(t, s.async, "the server takes pg_logical_emit_message")
	return s
}

// paused makes s's writer stop after its next COMMIT, before the flush:
// reached is closed there, and the writer goes on when release is closed.
func paused(s *Store) (reached, release chan struct{}) {
	reached, release = make(chan struct{}), make(chan struct{})
	var once sync.Once
	s.afterCommit = func(*pgx.Conn) {
		once.Do(func() {
			close(reached)
			<-release
		})
	}
	return reached, release
}

// The other instances hear of a commit only once it is flushed: between
// the writer's asynchronous COMMIT and its flush, the row is in the table
// but no notification was sent, and when the notification comes the WAL is
// flushed past the commit.
func TestNotifiedOnlyOnceFlushed(t *testing.T) {
	url := pgtest.DB(t)
	ctx := context.Background()
	s := openAsync(t, url, Options{})
	cfg := session.GateConfig{Name: "g", ActiveLimit: 1, ActiveTimeout: time.Hour, WaitingTimeout: time.Hour}
	_, err := s.Load(ctx, []string{"g"})
	require.NoError(t, err)

	ln, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer ln.Close(ctx)
	_, err = ln.Exec(ctx, "LISTEN "+channel)
	require.NoError(t, err)
	probe, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer probe.Close(ctx)

	reached, release := paused(s)
	joined := make(chan error, 1)
	go func() {
		_, err := s.Join(ctx, cfg, "a", time.Now())
		joined <- err
	}()
	<-reached
	var rows int
	require.NoError(t, probe.QueryRow(ctx, "SELECT count(*) FROM anteroom_sessions WHERE id = 'a'").Scan(&rows))
	assert.Equal(t, 1, rows, "committed")
	var committedAt string
	require.NoError(t, probe.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&committedAt))
	// A marker sent now: had the commit notified, its notification would
	// come first.
	_, err = ln.Exec(ctx, "SELECT pg_notify($1, 'marker')", channel)
	require.NoError(t, err)
	n, err := ln.WaitForNotification(ctx)
	require.NoError(t, err)
	assert.Equal(t, "marker", n.Payload, "the commit was announced before its flush")
	select {
	case err := <-joined:
		t.Fatalf("answered before the flush: %v", err)
	default:
	}
	close(release)
	require.NoError(t, <-joined)
	n, err = ln.WaitForNotification(ctx)
	require.NoError(t, err)
	assert.Equal(t, "1 g", n.Payload)
	var flushedPast bool
	require.NoError(t, probe.QueryRow(ctx, "SELECT pg_current_wal_flush_lsn() >= $1::text::pg_lsn", committedAt).Scan(&flushedPast))
	assert.True(t, flushedPast, "notified before the WAL was flushed past the commit")
}

// A commit of this instance that the follower reads from the outbox before
// the writer delivers it (another instance's later commit brought it) is
// still this instance's own: not Remote, so its metrics count it.
func TestOwnCommitReadBeforeItsFlushIsNotRemote(t *testing.T) {
	url := pgtest.DB(t)
	ctx := context.Background()
	a := openAsync(t, url, Options{})
	b := openAsync(t, url, Options{})
	cfg := session.GateConfig{Name: "g", ActiveLimit: 10, ActiveTimeout: time.Hour, WaitingTimeout: time.Hour}
	for _, s := range []*Store{a, b} {
		_, err := s.Load(ctx, []string{"g"})
		require.NoError(t, err)
	}
	var mu sync.Mutex
	remote := map[string]bool{}
	a.SetCommitListener(func(c session.Commit) {
		mu.Lock()
		defer mu.Unlock()
		for _, ev := range c.Events {
			remote[ev.Session.ID] = c.Remote
		}
	})
	reached, release := paused(a)
	joined := make(chan error, 1)
	go func() {
		_, err := a.Join(ctx, cfg, "mine", time.Now())
		joined <- err
	}()
	<-reached
	_, err := b.Join(ctx, cfg, "theirs", time.Now())
	require.NoError(t, err)
	// a's follower reads both commits, its own first.
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		_, ok := remote["theirs"]
		return ok
	}, 10*time.Second, 5*time.Millisecond)
	close(release)
	require.NoError(t, <-joined)
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, map[string]bool{"mine": false, "theirs": true}, remote)
}

// When the flush fails the caller gets an error (the commit may or may not
// last), the Store is unready until it has resynced the gate from the
// tables, and then its memory has the commit.
func TestFailedFlushFailsTheCallerAndResyncs(t *testing.T) {
	url := pgtest.DB(t)
	ctx := context.Background()
	s := openAsync(t, url, Options{})
	cfg := session.GateConfig{Name: "g", ActiveLimit: 10, ActiveTimeout: time.Hour, WaitingTimeout: time.Hour}
	_, err := s.Load(ctx, []string{"g"})
	require.NoError(t, err)
	var mu sync.Mutex
	var resynced []session.GateSnapshot
	s.SetCommitListener(func(c session.Commit) {
		mu.Lock()
		defer mu.Unlock()
		if snap, ok := c.Resync["g"]; ok {
			resynced = append(resynced, snap)
		}
	})
	var once sync.Once
	s.afterCommit = func(c *pgx.Conn) {
		once.Do(func() { _ = c.Close(ctx) }) // the flush cannot run
	}
	_, err = s.Join(ctx, cfg, "a", time.Now())
	require.Error(t, err)
	assert.Equal(t, session.CodeUnavailable, session.CodeOf(err), "%v", err)
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(resynced) == 1 && s.Ready() == nil
	}, 10*time.Second, 5*time.Millisecond)
	mu.Lock()
	snap := resynced[0]
	mu.Unlock()
	require.Len(t, snap.Active, 1)
	assert.Equal(t, "a", snap.Active[0].ID)
	// The next join is answered.
	_, err = s.Join(ctx, cfg, "b", time.Now())
	require.NoError(t, err)
}

// A read of the tables that bypasses the notifications is flushed before
// it is used: a resync's snapshot, and a session Get reads as active.
func TestReadsOfTheTablesAreFlushed(t *testing.T) {
	url := pgtest.DB(t)
	ctx := context.Background()
	rt := &roundTrips{}
	s := openAsync(t, url, Options{Tracer: rt})
	cfg := session.GateConfig{Name: "g", ActiveLimit: 1, ActiveTimeout: time.Hour, WaitingTimeout: time.Hour}
	_, err := s.Load(ctx, []string{"g"})
	require.NoError(t, err)
	for _, id := range []string{"a", "b"} {
		_, err = s.Join(ctx, cfg, id, time.Now())
		require.NoError(t, err)
	}
	flushes := func() int {
		rt.mu.Lock()
		defer rt.mu.Unlock()
		n := 0
		for _, tr := range rt.trips {
			if tr.sql == sqlFlushWAL {
				n++
			}
		}
		rt.trips = nil
		return n
	}
	flushes()
	got, err := s.Get(ctx, "g", "a")
	require.NoError(t, err)
	require.Equal(t, session.StatusActive, got.Status)
	assert.Equal(t, 1, flushes(), "Get of an active session")
	got, err = s.Get(ctx, "g", "b")
	require.NoError(t, err)
	require.Equal(t, session.StatusWaiting, got.Status)
	assert.Equal(t, 0, flushes(), "Get of a waiting session")

	ccfg, err := pgx.ParseConfig(url)
	require.NoError(t, err)
	ccfg.Tracer = rt
	c, err := pgx.ConnectConfig(ctx, ccfg)
	require.NoError(t, err)
	defer c.Close(ctx)
	snap, _, err := readSnapshot(ctx, c, "g")
	require.NoError(t, err)
	assert.Len(t, snap.Active, 1)
	assert.Equal(t, 1, flushes(), "a resync's snapshot")
}

// With Options.SynchronousCommit the writer commits as before: the
// notification in the transaction, no flush of its own.
func TestSynchronousCommitOption(t *testing.T) {
	url := pgtest.DB(t)
	ctx := context.Background()
	rt := &roundTrips{}
	s, err := Open(ctx, url, Options{Logger: slog.New(slog.DiscardHandler), Tracer: rt, SynchronousCommit: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	require.False(t, s.async)
	cfg := session.GateConfig{Name: "g", ActiveLimit: 1, ActiveTimeout: time.Hour, WaitingTimeout: time.Hour}
	_, err = s.Load(ctx, []string{"g"})
	require.NoError(t, err)
	rt.mu.Lock()
	rt.trips = nil
	rt.mu.Unlock()
	_, err = s.Join(ctx, cfg, "a", time.Now())
	require.NoError(t, err)
	commit, _ := rt.commitAndFlush(t)
	assert.Contains(t, commit, sqlNotify)
	assert.NotContains(t, commit, sqlAsyncCommit)
}
