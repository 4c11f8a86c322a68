package session_test

import (
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
	"github.com/anteroomhq/anteroom/session/sessiontest"
	"github.com/anteroomhq/anteroom/session/sqlite"
)

// reviewWaitlist is a Waitlist over a fresh SQLite store with one gate of
// the given limit, on a fake clock at t0, with no background loops.
func reviewWaitlist(t *testing.T, limit int64) (*session.Waitlist, *sessiontest.Clock) {
	t.Helper()
	store, err := sqlite.Open(filepath.Join(t.TempDir(), "anteroom.db"), sqlite.Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Close() })
	clock := sessiontest.NewClock(t0)
	w, err := session.New(t.Context(), store, []session.GateConfig{{Name: "g", ActiveLimit: limit, ActiveTimeout: time.Hour, WaitingTimeout: time.Hour}},
		session.Options{Clock: clock, TouchInterval: -1, SweepInterval: -1})
	require.NoError(t, err)
	t.Cleanup(func() { _ = w.Close() })
	return w, clock
}

// TestCodeJoinWaitsDuringPrequeue: a join with a priority code runs under
// the gate's events as a plain join does. During the pre-queue everyone
// waits, also a code holder (it waits in the priority lane); after the
// start it is served first. Before the fix a code join read the gate's
// configuration without its events and was let in during the pre-queue.
func TestCodeJoinWaitsDuringPrequeue(t *testing.T) {
	w, clock := reviewWaitlist(t, 10)
	_, err := w.AddEvent(t.Context(), session.ScheduledEvent{Gate: "g", ID: "launch", PrequeueAt: t0.Add(time.Minute), StartsAt: t0.Add(2 * time.Minute)})
	require.NoError(t, err)
	_, err = w.CreateCode(t.Context(), "g", "VIP-CODE-123456", "", 5, time.Hour)
	require.NoError(t, err)

	clock.Set(t0.Add(time.Minute)) // the pre-queue opens (no sweep ran yet)
	// The code join comes first: nobody waits yet, so only the pre-queue
	// can hold it.
	coded, codeErr, err := w.JoinWithCode(t.Context(), "g", "coded-session-0001", "VIP-CODE-123456")
	require.NoError(t, err)
	require.NoError(t, codeErr)
	assert.Equal(t, session.StatusWaiting, coded.Status, "a code join waits in the pre-queue")
	assert.Equal(t, "priority", coded.Lane)
	plain, err := w.Join(t.Context(), "g", "plain-session-0001")
	require.NoError(t, err)
	assert.Equal(t, session.StatusWaiting, plain.Status, "a plain join waits in the pre-queue")

	clock.Set(t0.Add(2 * time.Minute))
	require.NoError(t, w.Sweep(t.Context()))
	_, err = w.Update(t.Context())
	require.NoError(t, err)
	v, err := w.Status(t.Context(), "g", "coded-session-0001")
	require.NoError(t, err)
	assert.Equal(t, session.StatusActive, v.Status, "admitted at the start")
}

// TestEveryConsumerOfEveryKind: the commit event kinds of every feature
// (the line's, history's, the scheduled events') through every pure
// consumer: history records sessions only (never a scheduled event's
// launch or a lottery move), the webhooks name the right event, and only
// a departure before admission is an abandon.
func TestEveryConsumerOfEveryKind(t *testing.T) {
	s := session.Session{Gate: "g", ID: "s1", Position: 4, Status: session.StatusWaiting, CreatedAt: t0, LastActive: t0.Add(time.Second)}
	active := s
	active.Status = session.StatusActive
	launch := session.Session{Gate: "g", ID: "launch", Position: 12, CreatedAt: t0}
	tests := []struct {
		name    string
		ev      session.Event
		history session.HistoryKind // "" for none
		webhook string
		abandon bool
	}{
		{"activated", session.Event{Kind: session.EventActivated, Session: active}, session.HistoryJoined, "", false},
		{"queued", session.Event{Kind: session.EventQueued, Session: s}, session.HistoryJoined, "", false},
		{"promoted", session.Event{Kind: session.EventPromoted, Session: active}, session.HistoryPromoted, session.WebhookPromoted, false},
		{"refreshed", session.Event{Kind: session.EventRefreshed, Session: active}, "", "", false},
		{"refreshed claim", session.Event{Kind: session.EventRefreshed, Session: active, Claimed: true}, "", "", false},
		{"deactivated idle", session.Event{Kind: session.EventDeactivated, Session: active, Reason: session.Idle}, session.HistoryPurged, session.WebhookPurged, false},
		{"deactivated unclaimed", session.Event{Kind: session.EventDeactivated, Session: active, Reason: session.Unclaimed}, session.HistoryPurged, session.WebhookPurged, true},
		{"deactivated released", session.Event{Kind: session.EventDeactivated, Session: active, Reason: session.Released}, session.HistoryReleased, session.WebhookReleased, false},
		{"dequeued gone", session.Event{Kind: session.EventDequeued, Session: s, Reason: session.Gone}, session.HistoryPurged, session.WebhookPurged, true},
		{"dequeued released", session.Event{Kind: session.EventDequeued, Session: s, Reason: session.Released}, session.HistoryReleased, session.WebhookReleased, true},
		{"left", session.Event{Kind: session.EventLeft, Session: s}, session.HistoryLeft, "", false},
		{"returned", session.Event{Kind: session.EventReturned, Session: s}, session.HistoryReturned, "", false},
		{"claimed", session.Event{Kind: session.EventClaimed, Session: active}, session.HistoryClaimed, session.WebhookClaimed, false},
		{"reordered", session.Event{Kind: session.EventReordered, Session: s}, "", "", false},
		{"launched", session.Event{Kind: session.EventLaunched, Session: launch}, "", session.WebhookEventStarted, false},
		{"unknown kind", session.Event{Kind: 200, Session: s}, "", "", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, ok := session.HistoryOf(tc.ev)
			assert.Equal(t, tc.history != "", ok)
			assert.Equal(t, tc.history, r.Kind)
			assert.Equal(t, tc.webhook, session.WebhookEvent(tc.ev))
			assert.Equal(t, tc.abandon, session.Abandoned(tc.ev))
		})
	}
}
