package session

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var notifyT0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func notifyGate() GateConfig {
	return GateConfig{Name: "g", ActiveLimit: 1, ActiveTimeout: 5 * time.Minute, WaitingTimeout: 2 * time.Minute, ClaimTimeout: time.Minute, NotifyClaimTimeout: 15 * time.Minute}
}

func TestClaimWindow(t *testing.T) {
	cfg := notifyGate()
	noDefault := cfg
	noDefault.NotifyClaimTimeout = 0
	noClaim := cfg
	noClaim.ClaimTimeout = 0
	for _, tc := range []struct {
		name   string
		cfg    GateConfig
		notify bool
		want   time.Duration
	}{
		{"plain", cfg, false, time.Minute},
		{"notify", cfg, true, 15 * time.Minute},
		{"notify, default window", noDefault, true, DefaultNotifyClaimTimeout},
		{"plain, no claim", noClaim, false, 0},
		{"notify needs a claim even without claim_timeout", noClaim, true, 15 * time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := Session{Gate: "g", ID: "x", Status: StatusWaiting, Notify: tc.notify}
			assert.Equal(t, tc.want, ClaimWindow(tc.cfg, s))
			out := Promote(tc.cfg, s, notifyT0)
			if tc.want == 0 {
				assert.True(t, out.Session.ClaimDeadline.IsZero())
			} else {
				assert.Equal(t, notifyT0.Add(tc.want), out.Session.ClaimDeadline)
			}
			assert.Equal(t, tc.notify, out.Session.Notify, "the flag stays")
		})
	}
}

// The staleness rule with a fake clock: a notify waiter is never gone; a
// promoted notify session lives by its claim deadline alone until it
// claims, then by the active timeout as any other.
func TestStaleReasonNotify(t *testing.T) {
	cfg := notifyGate()
	deadline := notifyT0.Add(cfg.NotifyClaimTimeout)
	for _, tc := range []struct {
		name string
		s    Session
		at   time.Time
		want PurgeReason
	}{
		{"plain waiter, silent past the timeout", Session{Status: StatusWaiting, LastActive: notifyT0}, notifyT0.Add(3 * time.Minute), Gone},
		{"notify waiter, silent for a day", Session{Status: StatusWaiting, LastActive: notifyT0, Notify: true}, notifyT0.Add(24 * time.Hour), NotStale},
		{"notify waiter of an old row (no last_active)", Session{Status: StatusWaiting, CreatedAt: notifyT0, Notify: true}, notifyT0.Add(24 * time.Hour), NotStale},
		{"promoted notify, past the active timeout, before its deadline", Session{Status: StatusActive, LastActive: notifyT0, ClaimDeadline: deadline, Notify: true}, notifyT0.Add(10 * time.Minute), NotStale},
		{"promoted notify, at its deadline", Session{Status: StatusActive, LastActive: notifyT0, ClaimDeadline: deadline, Notify: true}, deadline, NotStale},
		{"promoted notify, 1ns past its deadline", Session{Status: StatusActive, LastActive: notifyT0, ClaimDeadline: deadline, Notify: true}, deadline.Add(time.Nanosecond), Unclaimed},
		{"claimed notify, idle", Session{Status: StatusActive, LastActive: notifyT0, Notify: true}, notifyT0.Add(6 * time.Minute), Idle},
		{"plain promoted, idle before its deadline", Session{Status: StatusActive, LastActive: notifyT0, ClaimDeadline: notifyT0.Add(time.Hour)}, notifyT0.Add(6 * time.Minute), Idle},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, StaleReason(cfg, tc.s, tc.at))
		})
	}
}

func TestDecideNotify(t *testing.T) {
	assert.Equal(t, ActionNone, DecideNotify(nil, true, notifyT0).Action)
	s := Session{Gate: "g", ID: "x", Position: 4, Status: StatusWaiting, LastActive: notifyT0}
	out := DecideNotify(&s, true, notifyT0.Add(time.Minute))
	assert.Equal(t, ActionUpdate, out.Action)
	assert.True(t, out.Session.Notify)
	assert.Equal(t, notifyT0.Add(time.Minute), out.Session.LastActive)
	assert.Equal(t, Counters{}, out.Delta, "no counter moves")
	assert.Equal(t, int64(4), out.Session.Position)
	// A clock that went back does not move LastActive back.
	out = DecideNotify(&out.Session, false, notifyT0)
	assert.False(t, out.Session.Notify)
	assert.Equal(t, notifyT0.Add(time.Minute), out.Session.LastActive)
}

func TestValidateNotifyClaimTimeout(t *testing.T) {
	cfg := notifyGate()
	cfg.NotifyClaimTimeout = -time.Second
	assert.ErrorIs(t, cfg.Validate(), ErrInvalidArgument)
}

func TestWebhookEvent(t *testing.T) {
	s := Session{Gate: "g", ID: "x"}
	for _, tc := range []struct {
		ev   Event
		want string
	}{
		{Event{Kind: EventPromoted, Session: s}, WebhookPromoted},
		{Event{Kind: EventRefreshed, Session: s}, ""},
		{Event{Kind: EventRefreshed, Session: s, Claimed: true}, ""},
		{Event{Kind: EventClaimed, Session: s}, WebhookClaimed},
		{Event{Kind: EventDeactivated, Session: s, Reason: Released}, WebhookReleased},
		{Event{Kind: EventDequeued, Session: s, Reason: Released}, WebhookReleased},
		{Event{Kind: EventDequeued, Session: s, Reason: Gone}, WebhookPurged},
		{Event{Kind: EventDeactivated, Session: s, Reason: Unclaimed}, WebhookPurged},
		{Event{Kind: EventDeactivated, Session: s, Reason: Idle}, WebhookPurged},
		{Event{Kind: EventActivated, Session: s}, ""},
		{Event{Kind: EventQueued, Session: s}, ""},
	} {
		assert.Equal(t, tc.want, WebhookEvent(tc.ev), "%+v", tc.ev)
	}
}

func TestOutboxRouting(t *testing.T) {
	_, err := NewOutboxRouting([]OutboxTarget{{Name: "a", Events: []string{"nope"}}})
	assert.ErrorIs(t, err, ErrInvalidArgument)
	_, err = NewOutboxRouting([]OutboxTarget{{Name: "a"}, {Name: "a"}})
	assert.ErrorIs(t, err, ErrInvalidArgument)
	_, err = NewOutboxRouting([]OutboxTarget{{Name: ""}})
	assert.ErrorIs(t, err, ErrInvalidArgument)
	var none *OutboxRouting
	assert.True(t, none.Empty())
	assert.Nil(t, none.Messages([]Event{{Kind: EventPromoted}}, notifyT0))

	r, err := NewOutboxRouting([]OutboxTarget{{Name: "a", Events: []string{WebhookPromoted, WebhookPurged}}, {Name: "b", Events: []string{WebhookPurged}}})
	require.NoError(t, err)
	dl := notifyT0.Add(15 * time.Minute)
	evs := []Event{
		{Kind: EventQueued, Session: Session{Gate: "g", ID: "q"}},
		{Kind: EventPromoted, Session: Session{Gate: "g", ID: "p", Position: 3, Status: StatusActive, Notify: true, ClaimDeadline: dl}},
		{Kind: EventDequeued, Session: Session{Gate: "g", ID: "gone", Status: StatusWaiting}, Reason: Gone},
	}
	ms := r.Messages(evs, notifyT0)
	require.Len(t, ms, 3)
	assert.Equal(t, []string{"a", "a", "b"}, []string{ms[0].Target, ms[1].Target, ms[2].Target})
	var d OutboxData
	require.NoError(t, json.Unmarshal(ms[0].Payload, &d))
	assert.Equal(t, OutboxData{Session: "p", Gate: "g", Position: 3, Status: StatusActive, Notify: true, ClaimDeadline: &dl, At: notifyT0}, d)
	d = OutboxData{}
	require.NoError(t, json.Unmarshal(ms[2].Payload, &d))
	assert.Equal(t, "gone", d.Reason)
	assert.Nil(t, d.ClaimDeadline)
	assert.Len(t, r.Custom(WebhookEventStarted, "g", "k", []byte(`{}`), notifyT0), 0, "nobody wants it")
}
