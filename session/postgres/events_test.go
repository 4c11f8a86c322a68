package postgres_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
	"github.com/anteroomhq/anteroom/session/postgres/pgtest"
	"github.com/anteroomhq/anteroom/session/sessiontest"
)

// TestEventStartsOnceAcrossInstances: three instances on one database, each
// on its own clock and sweeping on its own; an event added on one reaches
// the others (they read the events again), joins on all of them wait in
// the pre-queue, and at the start, swept by all three at once, the lottery
// is drawn exactly once: one EventLaunched, and every pre-queue session
// where a single draw of the published seed puts it.
func TestEventStartsOnceAcrossInstances(t *testing.T) {
	url := pgtest.DB(t)
	ctx := context.Background()
	cfg := sessiontest.GateConfig(multiGate, 2)
	epoch := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	var launched atomic.Int64
	type inst struct {
		wl    *session.Waitlist
		clock *sessiontest.Clock
	}
	var ins []inst
	for i := 0; i < 3; i++ {
		st := open(t, url, quiet)
		t.Cleanup(func() { _ = st.Close() })
		clock := sessiontest.NewClock(epoch)
		first := i == 0
		wl, err := session.New(ctx, st, []session.GateConfig{cfg}, session.Options{
			Clock: clock, TouchInterval: -1, SweepInterval: -1, Logger: quiet.Logger, Ready: st.Ready,
			Observer: func(c session.Commit) {
				if !first {
					return // every instance sees every commit: count on one
				}
				for _, e := range c.Events {
					if e.Kind == session.EventLaunched {
						launched.Add(1)
					}
				}
			},
		})
		require.NoError(t, err)
		t.Cleanup(func() { _ = wl.Close() })
		ins = append(ins, inst{wl, clock})
	}
	set := func(at time.Time) {
		for _, in := range ins {
			in.clock.Set(at)
		}
	}
	ev, err := ins[0].wl.AddEvent(ctx, session.ScheduledEvent{Gate: multiGate, ID: "drop",
		PrequeueAt: epoch.Add(time.Minute), StartsAt: epoch.Add(2 * time.Minute), Shuffle: true})
	require.NoError(t, err)

	// The others read the events again within their reload interval.
	set(epoch.Add(5 * time.Second))
	for _, in := range ins {
		require.NoError(t, in.wl.Sweep(ctx))
		evs, err := in.wl.Events(multiGate)
		require.NoError(t, err)
		require.Len(t, evs, 1, "every instance knows the event")
	}

	set(ev.PrequeueAt)
	arrived := map[int64]string{}
	for i := 0; i < 30; i++ {
		in := ins[i%3]
		id := fmt.Sprintf("s%02d", i)
		v, err := in.wl.Join(ctx, multiGate, id)
		require.NoError(t, err)
		require.Equal(t, session.StatusWaiting, v.Status, "%s waits in the pre-queue", id)
		arrived[v.Position] = id
	}

	set(ev.StartsAt)
	var wg sync.WaitGroup
	errs := make([]error, len(ins))
	for i, in := range ins {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = in.wl.Sweep(ctx)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool { return launched.Load() >= 1 }, 10*time.Second, 10*time.Millisecond)
	evs, err := ins[2].wl.Events(multiGate)
	require.NoError(t, err)
	require.Equal(t, session.EventStarted, evs[0].Phase)
	served, err := session.LotteryOrder(evs[0].Seed, evs[0].Positions)
	require.NoError(t, err)
	require.Len(t, served, 30)
	for k, old := range served {
		v, err := ins[k%3].wl.Status(ctx, multiGate, arrived[old])
		require.NoError(t, err)
		assert.Equal(t, evs[0].Positions[k], v.Position, "%s drawn once", arrived[old])
		if k < 2 {
			assert.Equal(t, session.StatusActive, v.Status, "the first two of the draw are let in")
		}
	}
	// More sweeps start nothing again.
	for _, in := range ins {
		require.NoError(t, in.wl.Sweep(ctx))
	}
	assert.Equal(t, int64(1), launched.Load(), "the lottery is drawn once")
}
