package postgres

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
)

// TestWireCarriesEveryEventField: a commit followed from the outbox (another
// instance's, or this one's caught up) holds what the local commit held:
// Event.Claimed, Event.At and Session.Notify included.
func TestWireCarriesEveryEventField(t *testing.T) {
	at := time.Unix(0, 1_700_000_000_123_456_789)
	s := session.Session{Gate: "g", ID: "b", Position: 7, Status: session.StatusActive, LastActive: at, CreatedAt: at.Add(-time.Minute),
		ClaimDeadline: at.Add(15 * time.Minute), Notify: true, Lane: session.LanePriority}
	claimed := s
	claimed.ClaimDeadline = time.Time{}
	evs := []session.Event{
		{Kind: session.EventPromoted, Session: s, At: at},
		{Kind: session.EventRefreshed, Session: claimed, Claimed: true, At: at.Add(time.Second)},
		{Kind: session.EventDeactivated, Session: claimed, Reason: session.Unclaimed}, // At unset stays unset
	}
	raw, err := json.Marshal(toWire(evs, session.GateState{Counters: session.Counters{NextPosition: 8, Active: 1}}))
	require.NoError(t, err)
	var p payload
	require.NoError(t, json.Unmarshal(raw, &p))
	got := p.commit("g").Events
	require.Len(t, got, len(evs))
	for i := range evs {
		assert.Equal(t, evs[i].Kind, got[i].Kind)
		assert.Equal(t, evs[i].Claimed, got[i].Claimed, "event %d: Claimed", i)
		assert.True(t, evs[i].At.Equal(got[i].At), "event %d: At %v, got %v", i, evs[i].At, got[i].At)
		assert.Equal(t, evs[i].Session.Notify, got[i].Session.Notify, "event %d: Notify", i)
		assert.True(t, evs[i].Session.ClaimDeadline.Equal(got[i].Session.ClaimDeadline), "event %d: ClaimDeadline", i)
		assert.Equal(t, evs[i].Reason, got[i].Reason)
		assert.Equal(t, evs[i].Session.Lane, got[i].Session.Lane)
	}
}
