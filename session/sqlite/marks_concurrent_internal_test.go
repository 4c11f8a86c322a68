package sqlite

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
	"github.com/anteroomhq/anteroom/session/sessiontest"
)

// The purge marks while updates yield at every step to joins, leaves and
// touches dated around the edges of seconds (some set back),
// with the cleaner running: afterwards the counters equal the live rows,
// before and after a restart, and an update with nothing else running
// leaves no stale row.
func TestMarksHoldWhileUpdatesYieldToWriters(t *testing.T) {
	old := updateYieldAfter
	updateYieldAfter = 0
	t.Cleanup(func() { updateYieldAfter = old })
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "c.db")
	s, err := Open(path, Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	cfg := sessiontest.GateConfig("default", 20)
	// Times in tenths of the marks' unit of order (seenSecondNanos).
	tenth := time.Duration(seenSecondNanos) / 10
	cfg.WaitingTimeout = 20*tenth + 3*tenth/10
	cfg.ActiveTimeout = 30*tenth + 7*tenth/10
	var clock atomic.Int64
	clock.Store(epoch.UnixNano())
	// 600 waiters in a handful of seconds
	for i := range 600 {
		_, err := s.Join(ctx, cfg, fmt.Sprintf("s%d", i), epoch.Add(time.Duration(i%5)*tenth+time.Duration(i%3)))
		require.NoError(t, err)
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for g := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 9))
			for {
				select {
				case <-stop:
					return
				default:
				}
				now := time.Unix(0, clock.Load()).UTC()
				at := now.Truncate(tenth).Add(-time.Duration(rng.IntN(30)) * tenth).Add(time.Duration(rng.IntN(3) - 1))
				id := fmt.Sprintf("s%d", rng.IntN(800))
				switch rng.IntN(4) {
				case 0:
					_, err := s.Join(ctx, cfg, id, at)
					require.NoError(t, err)
				case 1:
					_, err := s.Leave(ctx, cfg, id, at)
					if !errors.Is(err, session.ErrNotFound) {
						require.NoError(t, err)
					}
				default:
					require.NoError(t, s.Touch(ctx, cfg.Name, []session.Touch{{ID: id, LastActive: at}}))
				}
			}
		}()
	}
	rng := rand.New(rand.NewPCG(42, 9))
	for range 60 {
		now := time.Unix(0, clock.Load()).UTC().Add(time.Duration(rng.IntN(900)) * tenth / 100)
		if rng.IntN(5) == 0 {
			now = now.Add(-20 * tenth)
		}
		clock.Store(now.UnixNano())
		_, err := s.Update(ctx, cfg, now, 1+rng.IntN(64))
		require.NoError(t, err)
	}
	close(stop)
	wg.Wait()
	requireCountersMatchRows(t, s, cfg.Name, "after the concurrent ops")
	now := time.Unix(0, clock.Load()).UTC().Add(10 * tenth)
	_, err = s.Update(ctx, cfg, now, 7)
	require.NoError(t, err)
	_, rows := requireCountersMatchRows(t, s, cfg.Name, "after the last update")
	for _, r := range rows {
		require.False(t, session.IsStale(cfg, r, now), "%s stale after the update", r.ID)
	}
	require.NoError(t, s.Close())
	var log sessiontest.LogBuffer
	s2, err := Open(path, Options{Logger: slog.New(slog.NewTextHandler(&log, nil))})
	require.NoError(t, err)
	defer s2.Close()
	require.NotContains(t, log.String(), "repaired")
	requireCountersMatchRows(t, s2, cfg.Name, "after a clean restart")
}
