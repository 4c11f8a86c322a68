package session_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
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
