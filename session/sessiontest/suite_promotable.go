package sessiontest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
)

// testPromotable checks session.Promotable on the store: an update decided
// at now promotes no waiter that joined after now, and stops there (the
// line's order holds), while a release gives its slot to the first waiter
// at once, whenever it joined. Found by an attack review: an update that
// began before an event's pre-queue opened went on promoting, with the
// configuration it read then, the pre-queue's first arrivals, in arrival
// order, before the draw.
func testPromotable(t *testing.T, open Opener) {
	t.Run("UpdateStopsAtALaterArrival", func(t *testing.T) { testPromotableUpdate(t, open) })
	t.Run("ReleasePromotesAtOnce", func(t *testing.T) { testPromotableRelease(t, open) })
	t.Run("UpdateAcrossThePrequeue", func(t *testing.T) { testPromotableAcrossPrequeue(t, open) })
}

func testPromotableUpdate(t *testing.T, open Opener) {
	h := newHarness(t, open)
	cfg := GateConfig(gateName, 1)
	t0 := h.clock.Now()
	h.join(cfg, "a") // active
	h.clock.Advance(10 * time.Second)
	h.join(cfg, "late") // waits, joined at t0+10s
	h.join(cfg, "later")
	// The limit raised to 3: an update decided at t0+5s promotes nobody,
	// both waiters joined after it.
	raised := GateConfig(gateName, 3)
	_, err := h.store.Update(h.ctx, raised, t0.Add(5*time.Second), 0)
	require.NoError(t, err)
	assert.Equal(t, session.Counters{NextPosition: 4, Active: 1, Waiting: 2}, h.state(gateName).Counters)
	// An update decided at their time promotes them.
	h.update(raised, 0)
	assert.Equal(t, session.StatusActive, h.mustGet(gateName, "late").Status)
	assert.Equal(t, session.StatusActive, h.mustGet(gateName, "later").Status)
}

func testPromotableRelease(t *testing.T, open Opener) {
	h := newHarness(t, open)
	cfg := GateConfig(gateName, 1)
	t0 := h.clock.Now()
	h.join(cfg, "a")
	h.clock.Advance(10 * time.Second)
	h.join(cfg, "late")
	// A release decided a moment before the waiter joined (its call raced
	// the join) still hands its slot over at once.
	_, err := h.store.Release(h.ctx, cfg, "a", t0.Add(5*time.Second))
	require.NoError(t, err)
	assert.Equal(t, session.StatusActive, h.mustGet(gateName, "late").Status)
	assert.Equal(t, session.Counters{NextPosition: 3, Active: 1, Waiting: 0}, h.state(gateName).Counters)
}

// pausedUpdate holds each Store.Update until told, after the Waitlist read
// the configuration it runs with (a long update keeps it for its whole run).
type pausedUpdate struct {
	session.Store
	entered, proceed chan struct{}
}

func (p pausedUpdate) Update(ctx context.Context, cfg session.GateConfig, now time.Time, chunk int) (session.UpdateReport, error) {
	p.entered <- struct{}{}
	<-p.proceed
	return p.Store.Update(ctx, cfg, now, chunk)
}

func testPromotableAcrossPrequeue(t *testing.T, open Opener) {
	h := newHarness(t, open)
	ctx := context.Background()
	p := pausedUpdate{Store: teeStore{Store: h.store, h: h}, entered: make(chan struct{}), proceed: make(chan struct{})}
	w, err := session.New(ctx, p, []session.GateConfig{GateConfig(gateName, 10)}, session.Options{
		Clock: h.clock, TouchInterval: -1, SweepInterval: -1, UpdateChunk: 7,
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = w.Close() })
	_, err = w.AddEvent(ctx, suiteEvent("drop", h.clock.Now().Add(10*time.Second)))
	require.NoError(t, err)

	done := make(chan error, 1)
	go func() { _, err := w.Update(ctx); done <- err }()
	<-p.entered // the tick read the gate's configuration before the pre-queue
	h.clock.Advance(11 * time.Second)
	ids := []string{"first-arrival", "second-arrival", "third-arrival"}
	for _, id := range ids {
		v, err := w.Join(ctx, gateName, id)
		require.NoError(t, err)
		require.Equal(t, session.StatusWaiting, v.Status, "the pre-queue holds the line")
		require.Equal(t, session.DrawPending, w.Draw(v))
	}
	close(p.proceed)
	require.NoError(t, <-done)
	for _, id := range ids {
		v, err := w.Status(ctx, gateName, id)
		require.NoError(t, err)
		assert.Equal(t, session.StatusWaiting, v.Status, "%s was admitted during the pre-queue, before the draw", id)
	}
}
