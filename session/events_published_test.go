package session_test

import (
	"fmt"
	"log/slog"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
	"github.com/anteroomhq/anteroom/session/sessiontest"
	"github.com/anteroomhq/anteroom/session/sqlite"
)

// phasesAt returns the PhaseAt(now) of each of evs.
func phasesAt(evs []session.ScheduledEvent, now time.Time) []session.EventPhase {
	out := make([]session.EventPhase, len(evs))
	for i, e := range evs {
		out[i] = e.PhaseAt(now)
	}
	return out
}

// TestPhaseSpan: the span PhaseSpan gives around now is exactly the time
// over which every event reads the phase it reads at now: the same at both
// ends of the span, a different one just outside either bounded end.
func TestPhaseSpan(t *testing.T) {
	ev := func(phase session.EventPhase, ends time.Time) session.ScheduledEvent {
		return session.ScheduledEvent{Gate: "g", ID: "e", PrequeueAt: t0.Add(-time.Hour), StartsAt: t0.Add(-time.Minute), EndsAt: ends, Phase: phase}
	}
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	var open time.Time
	for _, tc := range []struct {
		name        string
		events      []session.ScheduledEvent
		from, until time.Time
	}{
		{"no events", nil, open, open},
		{"scheduled, with an end", []session.ScheduledEvent{ev(session.EventScheduled, at(time.Hour))}, open, open},
		{"no stored phase", []session.ScheduledEvent{ev("", at(time.Hour))}, open, open},
		{"pre-queue past its end: not started, not ended", []session.ScheduledEvent{ev(session.EventPrequeue, at(-time.Second))}, open, open},
		{"started, no end", []session.ScheduledEvent{ev(session.EventStarted, open)}, open, open},
		{"started, ends later", []session.ScheduledEvent{ev(session.EventStarted, at(time.Hour))}, open, at(time.Hour)},
		{"started, ended", []session.ScheduledEvent{ev(session.EventStarted, at(-time.Hour))}, at(-time.Hour), open},
		{"ends at now: ended", []session.ScheduledEvent{ev(session.EventStarted, t0)}, t0, open},
		{"several", []session.ScheduledEvent{
			ev(session.EventStarted, at(-2*time.Hour)), ev(session.EventStarted, at(-time.Hour)), ev(session.EventStarted, at(3*time.Hour)),
			ev(session.EventStarted, at(2*time.Hour)), ev(session.EventScheduled, at(time.Minute)), ev(session.EventStarted, open),
		}, at(-time.Hour), at(2 * time.Hour)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			from, until := session.PhaseSpan(tc.events, t0)
			assert.Equal(t, tc.from, from, "from")
			assert.Equal(t, tc.until, until, "until")
		})
	}

	// Random events and instants: the phases hold over the whole span and
	// change just outside it.
	rng := rand.New(rand.NewPCG(1, 2))
	phases := []session.EventPhase{"", session.EventScheduled, session.EventPrequeue, session.EventStarted, session.EventStarted}
	for i := range 2000 {
		evs := make([]session.ScheduledEvent, rng.IntN(6))
		for k := range evs {
			ends := open
			if d := rng.IntN(8); d < 7 {
				ends = t0.Add(time.Duration(d-3) * time.Minute)
			}
			evs[k] = ev(phases[rng.IntN(len(phases))], ends)
		}
		now := t0.Add(time.Duration(rng.IntN(5)-2) * time.Minute)
		from, until := session.PhaseSpan(evs, now)
		want := phasesAt(evs, now)
		msg := fmt.Sprintf("case %d: now %v, span [%v, %v)", i, now, from, until)
		if !from.IsZero() {
			assert.Equal(t, want, phasesAt(evs, from), msg)
			assert.NotEqual(t, want, phasesAt(evs, from.Add(-time.Nanosecond)), msg)
		} else {
			assert.Equal(t, want, phasesAt(evs, now.Add(-1000*time.Hour)), msg)
		}
		if !until.IsZero() {
			assert.Equal(t, want, phasesAt(evs, until.Add(-time.Nanosecond)), msg)
			assert.NotEqual(t, want, phasesAt(evs, until), msg)
		} else {
			assert.Equal(t, want, phasesAt(evs, now.Add(1000*time.Hour)), msg)
		}
	}
}

// eventsWaitlist is a Waitlist on a fake clock with gates g and h, no
// sweeper.
func eventsWaitlist(t *testing.T) (*session.Waitlist, *sessiontest.Clock) {
	t.Helper()
	store, err := sqlite.Open(filepath.Join(t.TempDir(), "anteroom.db"), sqlite.Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Close() })
	clock := sessiontest.NewClock(t0)
	gates := []session.GateConfig{
		{Name: "g", ActiveLimit: 1, ActiveTimeout: time.Hour, WaitingTimeout: time.Hour},
		{Name: "h", ActiveLimit: 1, ActiveTimeout: time.Hour, WaitingTimeout: time.Hour},
	}
	w, err := session.New(t.Context(), store, gates, session.Options{Clock: clock, TouchInterval: -1, SweepInterval: -1})
	require.NoError(t, err)
	t.Cleanup(func() { _ = w.Close() })
	return w, clock
}

// TestPublishedEventsChangeWithTheEventsAndTheirPhases: a gate's
// PublishedEvents is the same value while neither its events nor their
// phases change (what the HTTP layer caches an encoding by), and a new one
// after every change of its events (the admin operations, the
// transitions, a gate removed and added again) and once the clock crosses
// a started event's end, also backwards; another gate's changes leave it.
func TestPublishedEventsChangeWithTheEventsAndTheirPhases(t *testing.T) {
	w, clock := eventsWaitlist(t)
	ctx := t.Context()
	launch := session.ScheduledEvent{Gate: "g", ID: "launch", PrequeueAt: t0.Add(time.Minute), StartsAt: t0.Add(2 * time.Minute),
		EndsAt: t0.Add(time.Hour), Shuffle: true, ActiveLimit: i64(5)}
	pub := func(gate string) *session.PublishedEvents {
		t.Helper()
		p, err := w.PublishedEvents(gate, clock.Now())
		require.NoError(t, err)
		return p
	}
	empty := pub("g")
	for _, tc := range []struct {
		name   string
		act    func(t *testing.T)
		gate   string
		same   bool                 // the same value as before the step
		phases []session.EventPhase // at the clock's time
	}{
		{"no events: one view for all gates, for ever", func(t *testing.T) { clock.Set(t0.Add(1000 * time.Hour)); clock.Set(t0) }, "g", true, []session.EventPhase{}},
		{"added", func(t *testing.T) {
			_, err := w.AddEvent(ctx, launch)
			require.NoError(t, err)
		}, "g", false, []session.EventPhase{session.EventScheduled}},
		{"asked again later, nothing changed", func(t *testing.T) { clock.Advance(time.Second) }, "g", true, []session.EventPhase{session.EventScheduled}},
		{"another gate's event added", func(t *testing.T) {
			_, err := w.AddEvent(ctx, session.ScheduledEvent{Gate: "h", ID: "other", PrequeueAt: t0.Add(10 * time.Hour), StartsAt: t0.Add(11 * time.Hour)})
			require.NoError(t, err)
		}, "g", true, []session.EventPhase{session.EventScheduled}},
		{"replaced", func(t *testing.T) {
			next := launch
			next.Shuffle = false
			_, err := w.ReplaceEvent(ctx, next)
			require.NoError(t, err)
		}, "g", false, []session.EventPhase{session.EventScheduled}},
		{"the pre-queue's time, before the transition: as stored", func(t *testing.T) { clock.Set(launch.PrequeueAt) }, "g", true, []session.EventPhase{session.EventScheduled}},
		{"the pre-queue opens", func(t *testing.T) { require.NoError(t, w.Sweep(ctx)) }, "g", false, []session.EventPhase{session.EventPrequeue}},
		{"started", func(t *testing.T) {
			_, err := w.Join(ctx, "g", "waiter-session-01")
			require.NoError(t, err)
			clock.Set(launch.StartsAt)
			require.NoError(t, w.Sweep(ctx))
		}, "g", false, []session.EventPhase{session.EventStarted}},
		{"just before its end", func(t *testing.T) { clock.Set(launch.EndsAt.Add(-time.Nanosecond)) }, "g", true, []session.EventPhase{session.EventStarted}},
		{"at its end: nothing changed in memory, the phase did", func(t *testing.T) { clock.Set(launch.EndsAt) }, "g", false, []session.EventPhase{session.EventEnded}},
		{"later", func(t *testing.T) { clock.Advance(time.Hour) }, "g", true, []session.EventPhase{session.EventEnded}},
		{"the clock goes back before the end", func(t *testing.T) { clock.Set(launch.EndsAt.Add(-time.Second)) }, "g", false, []session.EventPhase{session.EventStarted}},
		{"removed", func(t *testing.T) {
			clock.Set(launch.EndsAt.Add(time.Second))
			require.NoError(t, w.RemoveEvent(ctx, "g", "launch"))
		}, "g", false, []session.EventPhase{}},
		{"the other gate's event", func(t *testing.T) {}, "h", true, []session.EventPhase{session.EventScheduled}},
		{"the other gate removed and added again: its events went with it", func(t *testing.T) {
			require.NoError(t, w.RemoveEvent(ctx, "h", "other"))
			_, err := w.AddEvent(ctx, session.ScheduledEvent{Gate: "h", ID: "again", PrequeueAt: clock.Now().Add(time.Minute), StartsAt: clock.Now().Add(time.Hour)})
			require.NoError(t, err)
			require.NoError(t, w.RemoveGate(ctx, "h"))
			_, err = w.PublishedEvents("h", clock.Now())
			require.ErrorIs(t, err, session.ErrUnknownGate)
			require.NoError(t, w.AddGate(ctx, session.GateConfig{Name: "h", ActiveLimit: 1, ActiveTimeout: time.Hour, WaitingTimeout: time.Hour}))
		}, "h", false, []session.EventPhase{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := pub(tc.gate)
			tc.act(t)
			got := pub(tc.gate)
			if tc.same {
				assert.Same(t, before, got)
			} else {
				assert.NotSame(t, before, got)
			}
			now := clock.Now()
			assert.True(t, got.Holds(now))
			assert.Equal(t, tc.phases, phasesAt(got.Events, now))
			evs, err := w.Events(tc.gate)
			require.NoError(t, err)
			assert.Equal(t, evs, append([]session.ScheduledEvent(nil), got.Events...), "what memory holds")
			if len(tc.phases) == 0 {
				assert.Same(t, empty, got)
			}
			assert.Same(t, got, pub(tc.gate), "asked again at the same time")
		})
	}
	_, err := w.PublishedEvents("nope", clock.Now())
	assert.ErrorIs(t, err, session.ErrUnknownGate)
}

// TestPublishedEventsUnderConcurrentChanges: readers asking at instants
// on both sides of an event's end while its events change get, every
// time, a view that holds at the instant they asked, with the span of its
// own events (go test -race checks the rest).
func TestPublishedEventsUnderConcurrentChanges(t *testing.T) {
	w, clock := eventsWaitlist(t)
	ctx := t.Context()
	_, err := w.AddEvent(ctx, session.ScheduledEvent{Gate: "g", ID: "first", PrequeueAt: t0.Add(time.Minute), StartsAt: t0.Add(2 * time.Minute), EndsAt: t0.Add(time.Hour)})
	require.NoError(t, err)
	clock.Set(t0.Add(2 * time.Minute))
	require.NoError(t, w.Sweep(ctx))
	end := t0.Add(time.Hour)

	stop := make(chan struct{})
	var readers sync.WaitGroup
	for k := range 4 {
		readers.Add(1)
		go func() {
			defer readers.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				now := end.Add(time.Duration(i%3-1+k%2) * time.Nanosecond)
				p, err := w.PublishedEvents("g", now)
				if !assert.NoError(t, err) || !assert.True(t, p.Holds(now)) {
					return
				}
				from, until := session.PhaseSpan(p.Events, now)
				if !assert.Equal(t, [2]time.Time{from, until}, [2]time.Time{p.From, p.Until}) {
					return
				}
			}
		}()
	}
	for i := range 50 {
		ev := session.ScheduledEvent{Gate: "g", ID: fmt.Sprintf("later-%d", i%3), PrequeueAt: t0.Add(2 * time.Hour), StartsAt: t0.Add(3 * time.Hour)}
		if i%2 == 0 {
			_, err := w.AddEvent(ctx, ev)
			require.NoError(t, err)
		} else {
			require.NoError(t, w.RemoveEvent(ctx, "g", fmt.Sprintf("later-%d", (i-1)%3)))
		}
	}
	close(stop)
	readers.Wait()
}

// TestPublishedEventsKeptByReloads: over a shared Store (Options.Ready
// set) the Waitlist reads every gate's events again every couple of
// seconds. A reload that finds what memory holds keeps the gate's
// PublishedEvents, whatever the phase; one that finds a change another
// instance made (here: made on the Store behind the Waitlist's back)
// gives a new one, and so does the clock crossing a started event's end
// with a reload at the same instant.
func TestPublishedEventsKeptByReloads(t *testing.T) {
	store, err := sqlite.Open(filepath.Join(t.TempDir(), "anteroom.db"), sqlite.Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Close() })
	clock := sessiontest.NewClock(t0)
	w, err := session.New(t.Context(), store, []session.GateConfig{{Name: "g", ActiveLimit: 1, ActiveTimeout: time.Hour, WaitingTimeout: time.Hour}},
		session.Options{Clock: clock, TouchInterval: -1, SweepInterval: -1, Ready: func() error { return nil }})
	require.NoError(t, err)
	t.Cleanup(func() { _ = w.Close() })
	ctx := t.Context()
	launch := session.ScheduledEvent{Gate: "g", ID: "launch", PrequeueAt: t0.Add(time.Minute), StartsAt: t0.Add(2 * time.Minute),
		EndsAt: t0.Add(time.Hour), Shuffle: true, ActiveLimit: i64(5)}
	other := session.ScheduledEvent{Gate: "g", ID: "other", PrequeueAt: t0.Add(3 * time.Hour), StartsAt: t0.Add(4 * time.Hour), Seed: testSeed}
	// reload moves the clock past the reload interval and sweeps (which
	// reads the events again and runs the transitions due).
	reload := func(t *testing.T) {
		clock.Advance(3 * time.Second)
		require.NoError(t, w.Sweep(ctx))
	}
	at := func(when time.Time) func(t *testing.T) {
		return func(t *testing.T) {
			clock.Set(when)
			require.NoError(t, w.Sweep(ctx))
		}
	}
	scheduled, prequeue, started, ended := session.EventScheduled, session.EventPrequeue, session.EventStarted, session.EventEnded
	for _, tc := range []struct {
		name   string
		act    func(t *testing.T)
		same   bool
		phases []session.EventPhase
	}{
		{"added", func(t *testing.T) {
			_, err := w.AddEvent(ctx, launch)
			require.NoError(t, err)
		}, false, []session.EventPhase{scheduled}},
		{"read again, nothing changed", reload, true, []session.EventPhase{scheduled}},
		{"read again many times", func(t *testing.T) {
			for range 10 {
				reload(t)
			}
		}, true, []session.EventPhase{scheduled}},
		{"another event added elsewhere, read again", func(t *testing.T) {
			_, err := store.SaveEvent(ctx, other)
			require.NoError(t, err)
			reload(t)
		}, false, []session.EventPhase{scheduled, scheduled}},
		{"read again with both", reload, true, []session.EventPhase{scheduled, scheduled}},
		{"the pre-queue opened elsewhere, read again", func(t *testing.T) {
			clock.Set(launch.PrequeueAt)
			_, changed, err := store.AdvanceEvent(ctx, "g", launch.ID, clock.Now())
			require.NoError(t, err)
			require.True(t, changed)
			reload(t)
		}, false, []session.EventPhase{prequeue, scheduled}},
		{"read again in the pre-queue", func(t *testing.T) {
			for i := range 3 {
				_, err := w.Join(ctx, "g", fmt.Sprintf("waiter-session-%02d", i))
				require.NoError(t, err)
				reload(t)
			}
		}, true, []session.EventPhase{prequeue, scheduled}},
		{"started here", at(launch.StartsAt), false, []session.EventPhase{started, scheduled}},
		{"read again after the draw", reload, true, []session.EventPhase{started, scheduled}},
		{"the other removed elsewhere, read again", func(t *testing.T) {
			require.NoError(t, store.DeleteEvent(ctx, "g", other.ID))
			reload(t)
		}, false, []session.EventPhase{started}},
		{"read again after the removal", reload, true, []session.EventPhase{started}},
		{"read again a nanosecond before its end", at(launch.EndsAt.Add(-time.Nanosecond)), true, []session.EventPhase{started}},
		{"read again at its end: memory did not change, the phase did", at(launch.EndsAt), false, []session.EventPhase{ended}},
		{"read again after its end", reload, true, []session.EventPhase{ended}},
		{"the clock goes back before the end and reads again", at(launch.EndsAt.Add(-time.Second)), false, []session.EventPhase{started}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before, err := w.PublishedEvents("g", clock.Now())
			require.NoError(t, err)
			tc.act(t)
			now := clock.Now()
			got, err := w.PublishedEvents("g", now)
			require.NoError(t, err)
			if tc.same {
				assert.Same(t, before, got)
			} else {
				assert.NotSame(t, before, got)
			}
			assert.True(t, got.Holds(now))
			assert.Equal(t, tc.phases, phasesAt(got.Events, now))
			stored, err := store.Events(ctx, "g")
			require.NoError(t, err)
			require.Len(t, got.Events, len(stored))
			for k := range stored {
				assert.True(t, session.SameEvent(stored[k], got.Events[k]), "published as stored: %s", stored[k].ID)
			}
		})
	}
}

// TestPublishedEventsAgreedByConcurrentCalls: calls at once at one
// instant, the first ones since the view changed (the events, or the
// clock across an event's end), all get the same PublishedEvents: the
// HTTP layer encodes the answer once per value, so concurrent first
// calls that each made their own would each be encoded.
func TestPublishedEventsAgreedByConcurrentCalls(t *testing.T) {
	const callers, rounds = 8, 1000
	w, clock := eventsWaitlist(t)
	ctx := t.Context()
	launch := session.ScheduledEvent{Gate: "g", ID: "launch", PrequeueAt: t0.Add(time.Minute), StartsAt: t0.Add(2 * time.Minute), EndsAt: t0.Add(time.Hour)}
	_, err := w.AddEvent(ctx, launch)
	require.NoError(t, err)
	clock.Set(launch.StartsAt)
	require.NoError(t, w.Sweep(ctx))
	for _, tc := range []struct {
		name   string
		change func(t *testing.T, round int) time.Time // the instant the calls ask at
	}{
		{"the clock across the end, back and forth", func(_ *testing.T, round int) time.Time {
			return launch.EndsAt.Add(-time.Duration(round%2) * time.Nanosecond)
		}},
		{"another event added and removed", func(t *testing.T, round int) time.Time {
			if round%2 == 0 {
				_, err := w.AddEvent(ctx, session.ScheduledEvent{Gate: "g", ID: "later", PrequeueAt: t0.Add(2 * time.Hour), StartsAt: t0.Add(3 * time.Hour)})
				require.NoError(t, err)
			} else {
				require.NoError(t, w.RemoveEvent(ctx, "g", "later"))
			}
			return launch.StartsAt
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for round := range rounds {
				now := tc.change(t, round)
				got := make([]*session.PublishedEvents, callers)
				start := make(chan struct{})
				var wg sync.WaitGroup
				for i := range callers {
					wg.Go(func() {
						<-start
						p, err := w.PublishedEvents("g", now)
						assert.NoError(t, err)
						got[i] = p
					})
				}
				close(start)
				wg.Wait()
				for i := range got {
					require.Same(t, got[0], got[i], "round %d, caller %d", round, i)
				}
				assert.True(t, got[0].Holds(now))
			}
		})
	}
}
