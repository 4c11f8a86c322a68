package sqlite_test

import (
	"context"
	"log/slog"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
	"github.com/anteroomhq/anteroom/session/sessiontest"
	"github.com/anteroomhq/anteroom/session/sqlite"
)

// OnCommit is told of every committed transaction: how many operations it
// ran (the group commit's batch) and how long it took.
func TestOnCommitReportsBatchAndLatency(t *testing.T) {
	var mu sync.Mutex
	var batches []int
	var durations []time.Duration
	s, err := sqlite.Open(filepath.Join(t.TempDir(), "a.db"), sqlite.Options{
		Logger: slog.New(slog.DiscardHandler),
		OnCommit: func(ops int, d time.Duration) {
			mu.Lock()
			batches = append(batches, ops)
			durations = append(durations, d)
			mu.Unlock()
		},
	})
	require.NoError(t, err)
	defer s.Close()
	cfg := sessiontest.GateConfig("default", 1)
	ctx := context.Background()
	now := sessiontest.Epoch
	const n = 50
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := s.Join(ctx, cfg, "s"+strconv.Itoa(i), now)
			assert.NoError(t, err)
		}()
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	total := 0
	for i, b := range batches {
		assert.Positive(t, b)
		assert.Positive(t, durations[i])
		total += b
	}
	assert.Equal(t, int64(len(batches)), s.Transactions(), "one call per committed transaction")
	assert.Equal(t, n, total, "every join counted once")
}

// The Waitlist's observers see every commit after it is applied, with the
// departure reasons, and every update report.
func TestWaitlistObservers(t *testing.T) {
	s, err := sqlite.Open(filepath.Join(t.TempDir(), "a.db"), quiet)
	require.NoError(t, err)
	defer s.Close()
	clock := sessiontest.NewClock(sessiontest.Epoch)
	var mu sync.Mutex
	var evs []session.Event
	var reports []session.UpdateReport
	var w *session.Waitlist
	w, err = session.New(context.Background(), s, []session.GateConfig{sessiontest.GateConfig("default", 1)}, session.Options{
		Clock: clock, TouchInterval: -1, SweepInterval: -1,
		Observer: func(c session.Commit) {
			// Memory is up to date when the observer runs.
			for _, e := range c.Events {
				if e.Kind == session.EventPromoted {
					assert.NoError(t, w.ValidateSessionIsActive("default", e.Session.ID))
				}
			}
			mu.Lock()
			evs = append(evs, c.Events...)
			mu.Unlock()
		},
		UpdateObserver: func(r session.UpdateReport) {
			mu.Lock()
			reports = append(reports, r)
			mu.Unlock()
		},
	})
	require.NoError(t, err)
	defer w.Close()
	ctx := context.Background()
	_, err = w.Join(ctx, "default", "a")
	require.NoError(t, err)
	_, err = w.Join(ctx, "default", "b")
	require.NoError(t, err)
	require.NoError(t, w.Release(ctx, "default", "a"))
	_, err = w.Update(ctx)
	require.NoError(t, err)

	mu.Lock()
	defer mu.Unlock()
	var got []string
	for _, e := range evs {
		got = append(got, e.Session.ID+":"+e.Reason.String()+":"+kind(e.Kind))
	}
	assert.Equal(t, []string{"a:not_stale:activated", "b:not_stale:queued", "a:released:deactivated", "b:not_stale:promoted"}, got)
	require.Len(t, reports, 1)
	assert.Equal(t, "default", reports[0].Gate)
	assert.Positive(t, reports[0].Duration)
}

func kind(k session.EventKind) string {
	return map[session.EventKind]string{session.EventActivated: "activated", session.EventQueued: "queued",
		session.EventDeactivated: "deactivated", session.EventPromoted: "promoted"}[k]
}
