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

// TestPublishedEventsSurviveReloads: two instances on one database, on one
// fake clock, each reading the events again from the store every couple of
// seconds of that clock (swept by hand). A reload that finds the events
// as memory holds them keeps the gate's PublishedEvents (the HTTP layer's
// cache of the events answer is keyed by it); a change on either
// instance, a transition, and the clock crossing a started event's end
// give a new one, on both.
func TestPublishedEventsSurviveReloads(t *testing.T) {
	url := pgtest.DB(t)
	ctx := context.Background()
	epoch := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	clock := sessiontest.NewClock(epoch)
	cfg := sessiontest.GateConfig(multiGate, 2)
	var wls []*session.Waitlist
	for range 2 {
		st := open(t, url, quiet)
		t.Cleanup(func() { _ = st.Close() })
		wl, err := session.New(ctx, st, []session.GateConfig{cfg}, session.Options{
			Clock: clock, TouchInterval: -1, SweepInterval: -1, Logger: quiet.Logger, Ready: st.Ready,
		})
		require.NoError(t, err)
		t.Cleanup(func() { _ = wl.Close() })
		wls = append(wls, wl)
	}
	a, b := wls[0], wls[1]
	limit := int64(5)
	drop := session.ScheduledEvent{Gate: multiGate, ID: "drop", PrequeueAt: epoch.Add(time.Minute), StartsAt: epoch.Add(2 * time.Minute),
		EndsAt: epoch.Add(time.Hour), Shuffle: true, ActiveLimit: &limit}
	later := session.ScheduledEvent{Gate: multiGate, ID: "later", PrequeueAt: epoch.Add(3 * time.Hour), StartsAt: epoch.Add(4 * time.Hour)}

	// sweepBoth sweeps both instances: each runs the transitions due and,
	// every couple of seconds of the clock, reads the events again.
	sweepBoth := func(t *testing.T) {
		for _, wl := range wls {
			require.NoError(t, wl.Sweep(ctx))
		}
	}
	// reload moves the clock past the reload interval and sweeps.
	reload := func(t *testing.T) {
		clock.Advance(3 * time.Second)
		sweepBoth(t)
	}
	at := func(when time.Time) func(t *testing.T) {
		return func(t *testing.T) {
			clock.Set(when)
			sweepBoth(t)
		}
	}
	scheduled, prequeue, started, ended := session.EventScheduled, session.EventPrequeue, session.EventStarted, session.EventEnded
	for _, tc := range []struct {
		name   string
		act    func(t *testing.T)
		same   bool                 // the same value on each instance as before the step
		phases []session.EventPhase // at the clock's time
	}{
		{"added on one instance, read again by both", func(t *testing.T) {
			_, err := a.AddEvent(ctx, drop)
			require.NoError(t, err)
			reload(t)
		}, false, []session.EventPhase{scheduled}},
		{"read again, nothing changed", reload, true, []session.EventPhase{scheduled}},
		{"read again many times", func(t *testing.T) {
			for range 5 {
				reload(t)
			}
		}, true, []session.EventPhase{scheduled}},
		{"the pre-queue opens", at(drop.PrequeueAt), false, []session.EventPhase{prequeue}},
		{"read again in the pre-queue", func(t *testing.T) {
			for i := range 4 {
				_, err := wls[i%2].Join(ctx, multiGate, "waiter-"+string(rune('a'+i)))
				require.NoError(t, err)
			}
			reload(t)
		}, true, []session.EventPhase{prequeue}},
		{"drawn and started", at(drop.StartsAt), false, []session.EventPhase{started}},
		{"read again after the draw", func(t *testing.T) {
			for range 3 {
				reload(t)
			}
		}, true, []session.EventPhase{started}},
		{"read again a nanosecond before its end", at(drop.EndsAt.Add(-time.Nanosecond)), true, []session.EventPhase{started}},
		{"read again at its end: memory did not change, the phase did", at(drop.EndsAt), false, []session.EventPhase{ended}},
		{"read again after its end", reload, true, []session.EventPhase{ended}},
		{"another event added on the other instance", func(t *testing.T) {
			_, err := b.AddEvent(ctx, later)
			require.NoError(t, err)
			reload(t)
		}, false, []session.EventPhase{ended, scheduled}},
		{"read again with two events", reload, true, []session.EventPhase{ended, scheduled}},
		{"the later one removed on the first", func(t *testing.T) {
			require.NoError(t, a.RemoveEvent(ctx, multiGate, later.ID))
			reload(t)
		}, false, []session.EventPhase{ended}},
		{"read again after the removal", reload, true, []session.EventPhase{ended}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := make([]*session.PublishedEvents, len(wls))
			for i, wl := range wls {
				p, err := wl.PublishedEvents(multiGate, clock.Now())
				require.NoError(t, err)
				before[i] = p
			}
			tc.act(t)
			now := clock.Now()
			for i, wl := range wls {
				got, err := wl.PublishedEvents(multiGate, now)
				require.NoError(t, err)
				if tc.same {
					assert.Same(t, before[i], got, "instance %d", i)
				} else {
					assert.NotSame(t, before[i], got, "instance %d", i)
				}
				assert.True(t, got.Holds(now), "instance %d", i)
				phases := make([]session.EventPhase, len(got.Events))
				for k, e := range got.Events {
					phases[k] = e.PhaseAt(now)
				}
				assert.Equal(t, tc.phases, phases, "instance %d", i)
				evs, err := wl.Events(multiGate)
				require.NoError(t, err)
				assert.Equal(t, evs, append([]session.ScheduledEvent(nil), got.Events...), "instance %d: what memory holds", i)
			}
		})
	}
}
