package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
	"github.com/anteroomhq/anteroom/session/postgres/pgtest"
	"github.com/anteroomhq/anteroom/session/sessiontest"
)

// clocked is one sidecar with its own fake clock, its background flusher
// and sweeper off: the test runs them as they would run.
type clocked struct {
	instance
	clock *sessiontest.Clock
}

func startClocked(t *testing.T, url string, cfg session.GateConfig, start time.Time) *clocked {
	t.Helper()
	in := &clocked{instance: instance{store: open(t, url, quiet), pub: &recorder{}}, clock: sessiontest.NewClock(start)}
	t.Cleanup(func() { _ = in.store.Close() })
	var err error
	in.wl, err = session.New(context.Background(), in.store, []session.GateConfig{cfg}, session.Options{
		Clock: in.clock, Publisher: in.pub, TouchInterval: -1, SweepInterval: -1, Logger: quiet.Logger,
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = in.wl.Close() })
	return in
}

// TestPresenceAcrossInstances: presence seen on one instance keeps a waiter
// in a line whose update runs on another, the exact place counts the
// waiters of every instance, and claims and claim deadlines reach every
// instance through the outbox.
func TestPresenceAcrossInstances(t *testing.T) {
	url := pgtest.DB(t)
	ctx := context.Background()
	cfg := sessiontest.GateConfig(multiGate, 1)
	cfg.ClaimTimeout = 30 * time.Second
	epoch := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	a := startClocked(t, url, cfg, epoch)
	b := startClocked(t, url, cfg, epoch)
	advance := func(d time.Duration) {
		a.clock.Advance(d)
		b.clock.Advance(d)
	}
	join := func(in *clocked, id string) session.SessionView {
		t.Helper()
		v, err := in.wl.Join(ctx, multiGate, id)
		require.NoError(t, err)
		return v
	}
	place := func(in *clocked, id string) int64 {
		v, err := in.wl.Status(ctx, multiGate, id)
		if err != nil {
			return -1
		}
		return v.Place
	}

	require.Equal(t, session.StatusActive, join(a, "front").Status)
	join(a, "silent") // 2: never heard of again
	join(b, "hidden") // 3: a hidden tab, its socket open on B
	join(b, "poller") // 4: polls B, no socket
	closeHidden, err := b.wl.Connect(multiGate, "hidden")
	require.NoError(t, err)
	defer closeHidden()

	// A's exact place counts the waiters who joined through B.
	require.Eventually(t, func() bool { return place(a, "poller") == 3 }, 10*time.Second, 5*time.Millisecond,
		"A places B's poller behind silent and hidden")

	// Far past the waiting timeout, with A running every update. B's
	// flusher persists its waiters' presence every WaitingTimeout/4; the
	// silent waiter shows nothing anywhere.
	for i := 0; i < 10; i++ {
		advance(cfg.WaitingTimeout / 4)
		_, err := b.wl.Status(ctx, multiGate, "poller")
		require.NoError(t, err)
		require.NoError(t, b.wl.FlushTouches(ctx), "B's background flusher")
		reps, err := a.wl.Update(ctx)
		require.NoError(t, err)
		require.Len(t, reps, 1)
		require.Zero(t, reps[0].PurgedActive)
	}
	require.Greater(t, 10*cfg.WaitingTimeout/4, cfg.WaitingTimeout)
	_, err = a.store.Get(ctx, multiGate, "silent")
	require.ErrorIs(t, err, session.ErrNotFound, "the silent waiter is purged")
	for _, id := range []string{"hidden", "poller"} {
		s, err := a.store.Get(ctx, multiGate, id)
		require.NoError(t, err, "%s, present on B, keeps its place", id)
		assert.Equal(t, session.StatusWaiting, s.Status)
	}
	// B's place index follows the purge run by A.
	require.Eventually(t, func() bool { return place(b, "hidden") == 1 && place(b, "poller") == 2 }, 10*time.Second, 5*time.Millisecond,
		"B's places after A purged the waiter ahead")
	assert.Equal(t, int64(2), place(a, "poller"))

	// front leaves through A: hidden is promoted by A's commit; its socket
	// on B claims at once, and B's flush persists the claim.
	require.NoError(t, a.wl.Release(ctx, multiGate, "front"))
	h, err := a.store.Get(ctx, multiGate, "hidden")
	require.NoError(t, err)
	require.Equal(t, session.StatusActive, h.Status)
	require.False(t, h.ClaimDeadline.IsZero(), "promoted unclaimed")
	// B applied the promotion (watched through its line: a validation
	// would claim the slot itself).
	require.Eventually(t, func() bool { g, err := b.wl.Global(multiGate); return err == nil && g.Waiting == 1 }, 10*time.Second, 5*time.Millisecond)
	require.NoError(t, b.wl.FlushTouches(ctx))
	h, err = a.store.Get(ctx, multiGate, "hidden")
	require.NoError(t, err)
	assert.True(t, h.ClaimDeadline.IsZero(), "B's socket claimed the slot")
	advance(cfg.ClaimTimeout + time.Second)
	require.NoError(t, a.wl.Sweep(ctx))
	require.NoError(t, a.wl.ValidateSessionIsActive(multiGate, "hidden"), "A's sweep leaves a claimed slot alone")

	// hidden leaves through B: poller is promoted by B's commit, unclaimed
	// (no socket anywhere). A learns its claim deadline from the outbox
	// and its sweep passes the slot on past it.
	join(a, "next")
	closeHidden()
	require.NoError(t, b.wl.Release(ctx, multiGate, "hidden"))
	p, err := a.store.Get(ctx, multiGate, "poller")
	require.NoError(t, err)
	require.Equal(t, session.StatusActive, p.Status)
	require.False(t, p.ClaimDeadline.IsZero())
	require.Eventually(t, func() bool { g, err := a.wl.Global(multiGate); return err == nil && g.Waiting == 1 }, 10*time.Second, 5*time.Millisecond,
		"A applied the promotion (a validation would claim it)")
	require.NoError(t, a.wl.Sweep(ctx))
	p, err = a.store.Get(ctx, multiGate, "poller")
	require.NoError(t, err, "not before its deadline")
	require.Equal(t, session.StatusActive, p.Status)
	a.clock.Set(p.ClaimDeadline.Add(time.Millisecond))
	require.NoError(t, a.wl.Sweep(ctx))
	_, err = a.store.Get(ctx, multiGate, "poller")
	require.ErrorIs(t, err, session.ErrNotFound, "A's sweep purged the slot B promoted, unclaimed past its deadline")
	n, err := a.store.Get(ctx, multiGate, "next")
	require.NoError(t, err)
	assert.Equal(t, session.StatusActive, n.Status, "the slot passed on at once")
	require.Eventually(t, func() bool {
		return b.wl.ValidateSessionIsActive(multiGate, "next") == nil &&
			b.wl.ValidateSessionIsActive(multiGate, "poller") != nil
	}, 10*time.Second, 5*time.Millisecond, "B follows A's purge and promotion")
}
