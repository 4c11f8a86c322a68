package session_test

import (
	"context"
	"log/slog"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
	"github.com/anteroomhq/anteroom/session/sessiontest"
	"github.com/anteroomhq/anteroom/session/sqlite"
)

// purgeHookStore runs onPurge before the first Purge it is asked for, and
// counts Releases.
type purgeHookStore struct {
	session.Store
	onPurge  func()
	releases atomic.Int32
}

func (s *purgeHookStore) Purge(ctx context.Context, cfg session.GateConfig, ids []string, now time.Time) (session.UpdateReport, error) {
	if f := s.onPurge; f != nil {
		s.onPurge = nil
		f()
	}
	return s.Store.Purge(ctx, cfg, ids, now)
}

func (s *purgeHookStore) Release(ctx context.Context, cfg session.GateConfig, id string, now time.Time) (session.Session, error) {
	s.releases.Add(1)
	return s.Store.Release(ctx, cfg, id, now)
}

// The sweeper decides to release a session whose last socket closed longer
// than the grace ago, then purges an unclaimed slot before it releases:
// a socket of that session opening meanwhile keeps it. The sweeper asks
// again just before each release.
func TestASocketOpenedAfterTheSweepersWalkKeepsTheSession(t *testing.T) {
	sq, err := sqlite.Open(filepath.Join(t.TempDir(), "r.db"), sqlite.Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sq.Close() })
	st := &purgeHookStore{Store: sq}
	clock := sessiontest.NewClock(sessiontest.Epoch)
	cfg := sessiontest.GateConfig("default", 2)
	cfg.ClaimTimeout, cfg.ReleaseOnDisconnect = 10*time.Second, 5*time.Second
	ctx := context.Background()
	w, err := session.New(ctx, st, []session.GateConfig{cfg}, session.Options{Clock: clock, TouchInterval: -1, SweepInterval: -1})
	require.NoError(t, err)
	t.Cleanup(func() { _ = w.Close() })

	for _, id := range []string{"a", "c", "b"} { // a and c active, b waiting
		_, err := w.Join(ctx, "default", id)
		require.NoError(t, err)
	}
	disconnect, err := w.Connect("default", "c")
	require.NoError(t, err)
	disconnect() // c's last socket closes
	require.NoError(t, w.Release(ctx, "default", "a"))
	b, err := sq.Get(ctx, "default", "b") // the store's row: a request naming b would claim it
	require.NoError(t, err)
	require.Equal(t, session.StatusActive, b.Status)
	require.False(t, b.ClaimDeadline.IsZero(), "b promoted, unclaimed")
	clock.Advance(cfg.ClaimTimeout + time.Second) // b unclaimed, c gone past its grace
	st.releases.Store(0)

	st.onPurge = func() { // between the walk and the releases
		_, err := w.Connect("default", "c")
		assert.NoError(t, err)
	}
	require.NoError(t, w.Sweep(ctx))
	assert.Nil(t, st.onPurge, "the sweep purged the unclaimed slot first")
	assert.Zero(t, st.releases.Load(), "c, connected again, is not released")
	assert.NoError(t, w.ValidateSessionIsActive("default", "c"))
}

// An active session whose only sign of life is its open socket is
// persisted by one flush: the flusher walks the present sessions (which
// sign it, at now) before it collects the active sessions to write.
func TestOneFlushPersistsAnActiveSessionSignedByItsSocket(t *testing.T) {
	sq, err := sqlite.Open(filepath.Join(t.TempDir(), "f.db"), sqlite.Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sq.Close() })
	clock := sessiontest.NewClock(sessiontest.Epoch)
	cfg := sessiontest.GateConfig("default", 2)
	ctx := context.Background()
	w, err := session.New(ctx, sq, []session.GateConfig{cfg}, session.Options{Clock: clock, TouchInterval: -1, SweepInterval: -1})
	require.NoError(t, err)
	t.Cleanup(func() { _ = w.Close() })

	_, err = w.Join(ctx, "default", "a")
	require.NoError(t, err)
	disconnect, err := w.Connect("default", "a")
	require.NoError(t, err)
	t.Cleanup(disconnect)
	clock.Advance(cfg.ActiveTimeout/8 + time.Second) // nothing but the socket since
	require.NoError(t, w.FlushTouches(ctx))
	a, err := sq.Get(ctx, "default", "a")
	require.NoError(t, err)
	assert.True(t, a.LastActive.Equal(clock.Now()), "stored sign of life %v, want the flush's %v", a.LastActive, clock.Now())
}
