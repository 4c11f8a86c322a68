package session_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
	"github.com/anteroomhq/anteroom/session/sessiontest"
	"github.com/anteroomhq/anteroom/session/sqlite"
)

// TestGlobalViewBucketsMatchARecount drives a gate on a real store through
// random rounds of concurrent joins (batched into shared commits, a tenth
// with a priority code), departures from the line, releases that promote,
// and updates that purge the waiters who stopped showing signs of life,
// until the line is long enough for buckets of more than the minimum
// size; after each round the global message (both lanes) must be
// byte-for-byte what a full recount of the line gives.
func TestGlobalViewBucketsMatchARecount(t *testing.T) {
	ctx := context.Background()
	clock := sessiontest.NewClock(t0)
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "anteroom.db"), sqlite.Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	cfg := session.GateConfig{Name: "g", ActiveLimit: 3, ActiveTimeout: time.Hour, WaitingTimeout: 3 * time.Minute}
	w, err := session.New(ctx, st, []session.GateConfig{cfg}, session.Options{Clock: clock, TouchInterval: -1, SweepInterval: -1, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = w.Close() })
	_, err = w.CreateCode(ctx, "g", "VIP-CODE-123456", "", 1_000_000, 24*time.Hour)
	require.NoError(t, err)

	rng := rand.New(rand.NewPCG(14, 1))
	var ids []string
	next := 0
	check := func(round int, what string) {
		got, err := w.Global("g")
		require.NoError(t, err)
		want, err := w.GlobalRecounted("g")
		require.NoError(t, err)
		gb, err := json.Marshal(got)
		require.NoError(t, err)
		wb, err := json.Marshal(want)
		require.NoError(t, err)
		require.Equal(t, string(wb), string(gb), "round %d (%s): the global message against a recount (%d waiting)", round, what, got.Waiting)
	}
	parallel := func(n int, fn func(i int) error) {
		var wg sync.WaitGroup
		errs := make([]error, n)
		for i := range n {
			wg.Go(func() { errs[i] = fn(i) })
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil && !errors.Is(err, session.ErrNotFound) {
				require.NoError(t, err)
			}
		}
	}
	maxWaiting := int64(0)
	for round := range 90 {
		switch r := rng.IntN(10); {
		case r < 6:
			n := 1 + rng.IntN(160)
			batch := make([]string, n)
			for i := range batch {
				batch[i] = fmt.Sprintf("join-%07d", next)
				next++
			}
			code := make([]bool, n)
			for i := range code {
				code[i] = rng.IntN(10) == 0
			}
			parallel(n, func(i int) error {
				if code[i] {
					_, codeErr, err := w.JoinWithCode(ctx, "g", batch[i], "VIP-CODE-123456")
					return errors.Join(codeErr, err)
				}
				_, err := w.Join(ctx, "g", batch[i])
				return err
			})
			ids = append(ids, batch...)
			check(round, "joins")
		case r < 8 && len(ids) > 0:
			n := min(len(ids), 1+rng.IntN(20))
			pick := make([]string, n)
			for i := range pick {
				pick[i] = ids[rng.IntN(len(ids))]
			}
			parallel(n, func(i int) error {
				if i%2 == 0 {
					return w.Leave(ctx, "g", pick[i])
				}
				return w.Release(ctx, "g", pick[i]) // an active one's release promotes
			})
			check(round, "departures and releases")
		default:
			// Time passes; an update purges the waiters who joined more
			// than the waiting timeout ago (a departure run from the front).
			clock.Advance(time.Duration(10+rng.IntN(50)) * time.Second)
			_, err := w.Update(ctx)
			require.NoError(t, err)
			check(round, "update")
		}
		g, err := w.Global("g")
		require.NoError(t, err)
		maxWaiting = max(maxWaiting, g.Waiting)
	}
	require.Greater(t, maxWaiting, int64(session.MaxBuckets*session.MinBucketSize), "the line grew past buckets of the minimum size")
}
