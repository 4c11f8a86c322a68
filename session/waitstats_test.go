package session_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
	"github.com/anteroomhq/anteroom/session/sessiontest"
)

// waitHarness is a Waitlist over a listenerStore, fed synthetic commits.
func waitHarness(t *testing.T) (*session.Waitlist, *listenerStore, *sessiontest.Clock) {
	t.Helper()
	clock := sessiontest.NewClock(sessiontest.Epoch)
	st := &listenerStore{snap: session.GateSnapshot{State: session.GateState{Counters: session.Counters{NextPosition: 1}, FirstWaitingPosition: 1}}}
	cfg := session.GateConfig{Name: "g", ActiveLimit: 1000, ActiveTimeout: time.Hour, WaitingTimeout: time.Hour}
	w, err := session.New(context.Background(), st, []session.GateConfig{cfg}, session.Options{Clock: clock, TouchInterval: -1, SweepInterval: -1})
	require.NoError(t, err)
	t.Cleanup(func() { _ = w.Close() })
	return w, st, clock
}

var nextPos int64

// admit plays an admission at now that waited wait: a direct one (wait 0)
// or a promotion.
func admit(st *listenerStore, now time.Time, wait time.Duration) {
	nextPos++
	s := session.Session{Gate: "g", ID: "s", Position: nextPos, Status: session.StatusActive, CreatedAt: now.Add(-wait), LastActive: now}
	kind := session.EventPromoted
	if wait == 0 {
		kind = session.EventActivated
	}
	st.listener(session.Commit{Events: []session.Event{{Kind: kind, Session: s, At: now}}})
}

func TestWaitPercentiles(t *testing.T) {
	tests := []struct {
		name     string
		waits    []time.Duration
		p50, p90 time.Duration
	}{
		{"one to a hundred seconds", seconds(1, 1), 50 * time.Second, 90 * time.Second},
		{"direct admissions count as no wait", append(make([]time.Duration, 10), seconds(10, 10)...), 0, 80 * time.Second},
		{"one long wait", []time.Duration{3 * time.Hour}, 3 * time.Hour, 3 * time.Hour},
		{"sub-second waits", []time.Duration{200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond}, 400 * time.Millisecond, 800 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, st, clock := waitHarness(t)
			for _, d := range tt.waits {
				admit(st, clock.Now(), d)
			}
			s, err := w.Stats("g")
			require.NoError(t, err)
			assert.Equal(t, int64(len(tt.waits)), s.Waits.Admissions)
			assertWithin(t, tt.p50, s.Waits.P50, "p50")
			assertWithin(t, tt.p90, s.Waits.P90, "p90")
		})
	}
}

func seconds(from, step int) []time.Duration {
	var out []time.Duration
	for i := from; i <= 100; i += step {
		out = append(out, time.Duration(i)*time.Second)
	}
	return out
}

// assertWithin: the histogram's buckets are 2^(1/8) wide, so a percentile
// is within 4.5% of the exact value.
func assertWithin(t *testing.T, want, got time.Duration, what string) {
	t.Helper()
	if want == 0 {
		assert.Zero(t, got, what)
		return
	}
	assert.InEpsilon(t, want.Seconds(), got.Seconds(), 0.045, "%s: want %v, got %v", what, want, got)
}

func TestWaitWindowIsTheLastHour(t *testing.T) {
	w, st, clock := waitHarness(t)
	for range 5 {
		admit(st, clock.Now(), 10*time.Minute)
	}
	clock.Advance(30 * time.Minute)
	admit(st, clock.Now(), 10*time.Second)
	s, err := w.Stats("g")
	require.NoError(t, err)
	assert.Equal(t, int64(6), s.Waits.Admissions)
	assertWithin(t, 10*time.Minute, s.Waits.P50, "p50 while all are in the hour")

	clock.Advance(31 * time.Minute) // the first five are over an hour old
	s, err = w.Stats("g")
	require.NoError(t, err)
	assert.Equal(t, int64(1), s.Waits.Admissions)
	assertWithin(t, 10*time.Second, s.Waits.P50, "p50 of the last hour only")

	clock.Advance(time.Hour)
	s, err = w.Stats("g")
	require.NoError(t, err)
	assert.Zero(t, s.Waits.Admissions, "nothing in the last hour")
}

func TestAbandonsPerMinute(t *testing.T) {
	w, st, clock := waitHarness(t)
	waiter := session.Session{Gate: "g", ID: "w", Position: 1, Status: session.StatusWaiting, CreatedAt: clock.Now()}
	active := session.Session{Gate: "g", ID: "a", Position: 2, Status: session.StatusActive, CreatedAt: clock.Now()}
	play := func(evs ...session.Event) { st.listener(session.Commit{Events: evs}) }
	for range 2 {
		for range 2 {
			play(session.Event{Kind: session.EventDequeued, Session: waiter, Reason: session.Gone, At: clock.Now()})
			play(session.Event{Kind: session.EventDequeued, Session: waiter, Reason: session.Released})
			play(session.Event{Kind: session.EventDeactivated, Session: active, Reason: session.Unclaimed, At: clock.Now()})
			// Not abandons: an admitted session that ended, a leave (it may
			// come back).
			play(session.Event{Kind: session.EventDeactivated, Session: active, Reason: session.Idle, At: clock.Now()})
			play(session.Event{Kind: session.EventDeactivated, Session: active, Reason: session.Released, At: clock.Now()})
			play(session.Event{Kind: session.EventLeft, Session: waiter, At: clock.Now()})
		}
		clock.Advance(time.Minute)
	}
	s, err := w.Stats("g")
	require.NoError(t, err)
	// 12 abandons over the time from the first one's ten-second bucket to
	// now: two minutes and one bucket.
	assert.InDelta(t, 12/(2*60.0+10)*60, s.Waits.AbandonsPerMinute, 1e-9)
}

func TestHistoryOf(t *testing.T) {
	at := sessiontest.Epoch
	join := at.Add(-time.Minute)
	w := session.Session{Gate: "g", ID: "w", Position: 4, Status: session.StatusWaiting, CreatedAt: join, LastActive: at}
	a := w
	a.Status = session.StatusActive
	tests := []struct {
		ev     session.Event
		kind   session.HistoryKind
		wait   time.Duration
		reason session.PurgeReason
	}{
		{session.Event{Kind: session.EventActivated, Session: a}, session.HistoryJoined, 0, session.NotStale},
		{session.Event{Kind: session.EventQueued, Session: w}, session.HistoryJoined, -1, session.NotStale},
		{session.Event{Kind: session.EventPromoted, Session: a}, session.HistoryPromoted, time.Minute, session.NotStale},
		{session.Event{Kind: session.EventLeft, Session: w, At: at}, session.HistoryLeft, -1, session.NotStale},
		{session.Event{Kind: session.EventReturned, Session: w, At: at}, session.HistoryReturned, -1, session.NotStale},
		{session.Event{Kind: session.EventClaimed, Session: a}, session.HistoryClaimed, -1, session.NotStale},
		{session.Event{Kind: session.EventDequeued, Session: w, Reason: session.Gone, At: at}, session.HistoryPurged, -1, session.Gone},
		{session.Event{Kind: session.EventDeactivated, Session: a, Reason: session.Unclaimed, At: at}, session.HistoryPurged, -1, session.Unclaimed},
		{session.Event{Kind: session.EventDeactivated, Session: a, Reason: session.Released, At: at}, session.HistoryReleased, -1, session.Released},
	}
	for _, tt := range tests {
		r, ok := session.HistoryOf(tt.ev)
		require.True(t, ok, "%v", tt.ev.Kind)
		assert.Equal(t, tt.kind, r.Kind)
		assert.Equal(t, tt.wait, r.Wait, "%s", tt.kind)
		assert.Equal(t, tt.reason, r.Reason, "%s", tt.kind)
		assert.Equal(t, tt.ev.Session.ID, r.Session)
		assert.Equal(t, int64(4), r.Position)
		if tt.kind == session.HistoryJoined {
			assert.True(t, r.At.Equal(join), "a join is recorded at its creation")
		} else {
			assert.True(t, r.At.Equal(at), "%s at %v", tt.kind, r.At)
		}
	}
	_, ok := session.HistoryOf(session.Event{Kind: session.EventRefreshed, Session: a})
	assert.False(t, ok, "a refresh records nothing")
}
