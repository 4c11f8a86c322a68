package guard_test

import (
	"context"
	"math"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/gate/gatetest"
	"github.com/anteroomhq/anteroom/gate/guard"
	"github.com/anteroomhq/anteroom/session"
)

// TestRetryAfterKeepsTheClaimWindow: a client polling as told shows a sign
// of life within its claim window: the advice is at most a quarter of the
// view's window (whole seconds, at least 1 s), and for a promoted session
// not yet claimed at most a quarter of the time left before its deadline;
// hostile windows and deadlines from the wire cap nothing or give 1 s,
// never 0 or more than 30 s.
func TestRetryAfterKeepsTheClaimWindow(t *testing.T) {
	now := time.Date(2026, time.March, 1, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *time.Time { t := now.Add(d); return &t }
	slow := session.SessionView{Status: session.StatusWaiting, Position: 10, Place: 10}
	slow.FirstWaitingPosition, slow.LastWaitingPosition, slow.Waiting, slow.AdmittedPerMinute = 1, 20, 20, 1 // 30 s uncapped
	promoted := session.SessionView{Status: session.StatusActive, Position: 10}
	for _, tc := range []struct {
		name     string
		window   float64
		deadline *time.Time
		want     time.Duration
	}{
		{"no window", 0, nil, 30 * time.Second},
		{"a minute", 60, nil, 15 * time.Second},
		{"two minutes: above the usual", 120, nil, 30 * time.Second},
		{"12 s", 12, nil, 3 * time.Second},
		{"7.9 s", 7.9, nil, time.Second},
		{"3 s: 1 s, never 0", 3, nil, time.Second},
		{"a millisecond", 0.001, nil, time.Second},
		{"negative: from the wire", -60, nil, 30 * time.Second},
		{"NaN", math.NaN(), nil, 30 * time.Second},
		{"+Inf", math.Inf(1), nil, 30 * time.Second},
		{"1e300", 1e300, nil, 30 * time.Second},
		{"just under a day", 86399, nil, 30 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := slow
			v.ClaimWindow = tc.window
			assert.Equal(t, tc.want, guard.RetryAfterAt(v, now))
		})
	}
	for _, tc := range []struct {
		name     string
		window   float64
		deadline *time.Time
		want     time.Duration
	}{
		{"unclaimed, no deadline", 0, nil, 5 * time.Second},
		{"a minute left", 60, at(time.Minute), 5 * time.Second},
		{"12 s left of a minute", 60, at(12 * time.Second), 3 * time.Second},
		{"8 s left", 60, at(8 * time.Second), 2 * time.Second},
		{"1 ns left", 60, at(time.Nanosecond), time.Second},
		{"at the deadline", 60, at(0), time.Second},
		{"past the deadline", 60, at(-time.Hour), time.Second},
		{"a deadline far away: the window caps", 8, at(1000 * time.Hour), 2 * time.Second},
		{"the year 9999", 0, func() *time.Time { t := time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC); return &t }(), 5 * time.Second},
		{"the year 1", 0, func() *time.Time { t := time.Date(1, 1, 2, 0, 0, 0, 0, time.UTC); return &t }(), time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := promoted
			v.ClaimWindow, v.ClaimDeadline = tc.window, tc.deadline
			assert.Equal(t, tc.want, guard.RetryAfterAt(v, now))
		})
	}
	assert.Equal(t, time.Second, guard.ClaimCap(0))
	assert.Equal(t, time.Second, guard.ClaimCap(-time.Hour))
	assert.Equal(t, 15*time.Second, guard.ClaimCap(time.Minute))
}

// TestInProcessRetryAfterKeepsTheClaimWindow: the in-process checker's
// Retry-After for a waiter is capped by the claim window the waiter gets
// once promoted (the gate's claim timeout, or its notify claim timeout for
// a called-back session) and by the waiting timeout, as the sidecar's is.
func TestInProcessRetryAfterKeepsTheClaimWindow(t *testing.T) {
	for _, tc := range []struct {
		name                   string
		claim, notify, waiting time.Duration
		called                 bool
		want                   time.Duration
	}{
		{"no claim window", 0, 0, time.Hour, false, 5 * time.Second},
		{"claim timeout 4 s", 4 * time.Second, 0, time.Hour, false, time.Second},
		{"claim timeout 8 s", 8 * time.Second, time.Hour, time.Hour, false, 2 * time.Second},
		{"called back: its own window", 8 * time.Second, time.Hour, time.Hour, true, 5 * time.Second},
		{"called back, a short notify window", 0, 12 * time.Second, time.Hour, true, 3 * time.Second},
		{"waiting timeout 12 s", 0, 0, 12 * time.Second, false, 3 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := gatetest.Gate("default", 1)
			cfg.ClaimTimeout, cfg.NotifyClaimTimeout, cfg.WaitingTimeout = tc.claim, tc.notify, tc.waiting
			sc := gatetest.StartSidecar(t, gatetest.Options{Gates: []session.GateConfig{cfg}})
			ctx := context.Background()
			_, err := sc.Waitlist.Join(ctx, "default", "holder")
			require.NoError(t, err)
			v, err := sc.Waitlist.Join(ctx, "default", "w")
			require.NoError(t, err)
			require.Equal(t, session.StatusWaiting, v.Status)
			if tc.called {
				_, err = sc.Waitlist.SetNotify(ctx, "default", "w", true)
				require.NoError(t, err)
			}
			c, err := guard.NewInProcess(sc.Waitlist, sc.Signer, guard.InProcessOptions{})
			require.NoError(t, err)
			tok, err := sc.Signer.Sign("w")
			require.NoError(t, err)
			r := httptest.NewRequest(http.MethodGet, "/x", nil)
			r.Header.Set("Authorization", "Bearer "+tok)
			var na *guard.NotActiveError
			require.ErrorAs(t, c.ValidateSessionIsActive(r), &na)
			assert.Equal(t, tc.want, na.RetryAfter)
		})
	}
}
