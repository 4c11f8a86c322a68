package session

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestDecideClaimLink: a claim link claims only the promotion it names (its
// deadline, to the nanosecond), before that deadline, of an active session.
func TestDecideClaimLink(t *testing.T) {
	deadline := notifyT0.Add(15*time.Minute + 123456789*time.Nanosecond)
	promoted := Session{Gate: "g", ID: "b", Status: StatusActive, LastActive: notifyT0, ClaimDeadline: deadline, Notify: true}
	waiting := promoted
	waiting.Status, waiting.ClaimDeadline = StatusWaiting, time.Time{}
	claimed := promoted
	claimed.ClaimDeadline = time.Time{}
	now := notifyT0.Add(time.Second)
	for _, tc := range []struct {
		name     string
		existing *Session
		deadline time.Time
		now      time.Time
		ok       bool
	}{
		{"its own promotion", &promoted, deadline, now, true},
		{"the same instant in another zone", &promoted, deadline.In(time.FixedZone("x", 3600)), now, true},
		{"an earlier promotion's link", &promoted, deadline.Add(-time.Millisecond), now, false},
		{"a nanosecond off", &promoted, deadline.Add(time.Nanosecond), now, false},
		{"whole seconds only", &promoted, deadline.Truncate(time.Second), now, false},
		{"no deadline", &promoted, time.Time{}, now, false},
		{"at the deadline", &promoted, deadline, deadline, false},
		{"claimed already", &claimed, deadline, now, false},
		{"a waiter", &waiting, deadline, now, false},
		{"absent", nil, deadline, now, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := DecideClaimLink(tc.existing, tc.deadline, tc.now)
			if !tc.ok {
				assert.ErrorIs(t, err, ErrNotActive)
				assert.Equal(t, ActionNone, out.Action)
				return
			}
			assert.NoError(t, err)
			assert.Equal(t, ActionUpdate, out.Action)
			assert.True(t, out.Session.ClaimDeadline.IsZero(), "claimed")
			assert.Equal(t, tc.now, out.Session.LastActive)
		})
	}
}
