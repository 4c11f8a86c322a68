package session_test

import (
	"log/slog"
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

// TestGlobalLimitIsTheEventOverride: while a started event overrides the
// limit, every view shows the limit in effect (the one admissions obey),
// and the configured one again after the event ends.
func TestGlobalLimitIsTheEventOverride(t *testing.T) {
	w, clock := reviewWaitlist(t, 1)
	override := int64(3)
	_, err := w.AddEvent(t.Context(), session.ScheduledEvent{Gate: "g", ID: "launch", PrequeueAt: t0.Add(time.Minute), StartsAt: t0.Add(2 * time.Minute),
		EndsAt: t0.Add(time.Hour), ActiveLimit: &override})
	require.NoError(t, err)
	limits := func() (global, stats, status int64) {
		g, err := w.Global("g")
		require.NoError(t, err)
		st, err := w.Stats("g")
		require.NoError(t, err)
		v, err := w.Join(t.Context(), "g", "viewer-session-0001")
		require.NoError(t, err)
		return g.Limit, st.View.Limit, v.Limit
	}
	g, st, sv := limits()
	assert.Equal(t, []int64{1, 1, 1}, []int64{g, st, sv}, "before the event: the configured limit")

	clock.Set(t0.Add(2 * time.Minute))
	require.NoError(t, w.Sweep(t.Context()))
	g, st, sv = limits()
	assert.Equal(t, []int64{3, 3, 3}, []int64{g, st, sv}, "during the event: its override")
	for _, id := range []string{"a-session-000001", "b-session-000001"} {
		v, err := w.Join(t.Context(), "g", id)
		require.NoError(t, err)
		assert.Equal(t, session.StatusActive, v.Status, "the override admits")
	}
	g2, err := w.Global("g")
	require.NoError(t, err)
	assert.LessOrEqual(t, g2.Active, g2.Limit, "active never shows above the shown limit while the override admits")

	clock.Set(t0.Add(time.Hour))
	g, st, sv = limits()
	assert.Equal(t, []int64{1, 1, 1}, []int64{g, st, sv}, "after the event: the configured limit again")
}

// globalViews records the global messages a Waitlist publishes.
type globalViews struct {
	mu     sync.Mutex
	limits []int64
}

func (p *globalViews) PublishGlobal(v session.GlobalView) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.limits = append(p.limits, v.Limit)
}

func (p *globalViews) PublishSession(session.SessionView) {}

func (p *globalViews) last() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.limits) == 0 {
		return -1
	}
	return p.limits[len(p.limits)-1]
}

// TestEventLimitIsBroadcast: the start and the end of an event's limit
// override reach the clients in a global message, also when no commit
// follows (nobody waits, nobody joins).
func TestEventLimitIsBroadcast(t *testing.T) {
	store, err := sqlite.Open(filepath.Join(t.TempDir(), "anteroom.db"), sqlite.Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Close() })
	clock := sessiontest.NewClock(t0)
	pub := &globalViews{}
	w, err := session.New(t.Context(), store, []session.GateConfig{{Name: "g", ActiveLimit: 1, ActiveTimeout: time.Hour, WaitingTimeout: time.Hour}},
		session.Options{Clock: clock, Publisher: pub, TouchInterval: -1, SweepInterval: -1})
	require.NoError(t, err)
	t.Cleanup(func() { _ = w.Close() })
	override := int64(7)
	_, err = w.AddEvent(t.Context(), session.ScheduledEvent{Gate: "g", ID: "launch", PrequeueAt: t0.Add(time.Minute), StartsAt: t0.Add(2 * time.Minute),
		EndsAt: t0.Add(time.Hour), ActiveLimit: &override})
	require.NoError(t, err)

	clock.Set(t0.Add(2 * time.Minute))
	require.NoError(t, w.Sweep(t.Context()))
	assert.Equal(t, int64(7), pub.last(), "the override's start is broadcast")
	clock.Set(t0.Add(time.Hour))
	require.NoError(t, w.Sweep(t.Context()))
	assert.Equal(t, int64(1), pub.last(), "its end too")
}
