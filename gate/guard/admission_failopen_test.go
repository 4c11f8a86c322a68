package guard_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/gate/guard"
)

// A redeem whose caller went away (a visitor who hangs up at once) says
// nothing of the sidecar: it neither starts nor lengthens an outage, so an
// attacker cannot replay a redeemed admission by hanging up again and
// again for FailOpenAfter while the sidecar is up.
func TestFailOpenIgnoresCallersThatHangUp(t *testing.T) {
	e := newAdmEnv(t, func(o *guard.AdmissionOptions) { o.FailOpenAfter = time.Minute })
	tok := e.admission(t, "sale")
	status, _ := e.checkout(t, guard.AdmissionHeader, tok) // keys fetched, tok redeemed
	require.Equal(t, http.StatusOK, status)

	gone, cancel := context.WithCancel(context.Background())
	cancel()
	for range 14 { // a hang-up every 5 s for over a minute
		a, err := e.verifier.Redeem(gone, tok)
		require.Error(t, err)
		assert.False(t, a.FailedOpen, "a redeemed admission let through again")
		e.sc.Clock.Advance(5 * time.Second)
	}
	// The sidecar is down now: the outage starts at its first failure, not
	// at the hang-ups.
	e.down.Store(true)
	status, _ = e.checkout(t, guard.AdmissionHeader, tok)
	assert.Equal(t, http.StatusServiceUnavailable, status, "a replay of a redeemed token passed")
	assert.EqualValues(t, 1, e.served.Load())
}

// Failures more than FailStreakGap apart are not one outage: a blip long
// ago does not make the first failure of the next blip fail open.
func TestFailOpenNeedsFailuresWithoutABreak(t *testing.T) {
	e := newAdmEnv(t, func(o *guard.AdmissionOptions) { o.FailOpenAfter = time.Minute })
	tok := e.admission(t, "sale")
	status, _ := e.checkout(t, guard.AdmissionHeader, tok)
	require.Equal(t, http.StatusOK, status) // redeemed

	for _, gap := range []time.Duration{2 * time.Minute, guard.FailStreakGap + time.Second} {
		e.down.Store(true) // a blip one request sees
		status, _ = e.checkout(t, guard.AdmissionHeader, tok)
		require.Equal(t, http.StatusServiceUnavailable, status)
		e.down.Store(false)
		e.sc.Clock.Advance(gap) // quiet: nobody asks
	}
	e.down.Store(true)
	status, _ = e.checkout(t, guard.AdmissionHeader, tok)
	assert.Equal(t, http.StatusServiceUnavailable, status, "a replay of a redeemed token passed on the first failure of a new blip")
	assert.EqualValues(t, 1, e.served.Load())
}

// A redeem cut by the caller's own deadline (a host that gives a request
// less time than the redeem's Timeout) is unanswered: it counts toward
// FailOpenAfter like any other, or such a host would never fail open.
func TestFailOpenCountsTheCallersDeadline(t *testing.T) {
	e := newAdmEnv(t, func(o *guard.AdmissionOptions) { o.FailOpenAfter = time.Minute })
	warm := e.admission(t, "sale")
	status, _ := e.checkout(t, guard.AdmissionHeader, warm) // keys fetched
	require.Equal(t, http.StatusOK, status)
	tok := e.admission(t, "sale")
	late, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	var a guard.Admission
	var err error
	for range 13 { // a minute of failures 5 s apart
		a, err = e.verifier.Redeem(late, tok)
		e.sc.Clock.Advance(5 * time.Second)
	}
	require.NoError(t, err)
	assert.True(t, a.FailedOpen, "unanswered for FailOpenAfter: open")
}

// A 429 is not an outage: the sidecar never sends one for a redeem, so it
// comes from a limiter in front of it, which an attacker replaying a
// redeemed token can set off on purpose while the sidecar is up. It is
// refused (fail closed) and never makes FailOpenAfter let a token through
// unredeemed; a 5xx for as long does (so a limiter must answer 429: nginx's
// default is 503).
func TestFailOpenIgnoresRateLimits(t *testing.T) {
	for _, tc := range []struct {
		status int32
		opens  bool
	}{
		{http.StatusTooManyRequests, false},
		{http.StatusServiceUnavailable, true},
		{http.StatusBadGateway, true},
	} {
		t.Run(http.StatusText(int(tc.status)), func(t *testing.T) {
			e := newAdmEnv(t, func(o *guard.AdmissionOptions) { o.FailOpenAfter = time.Minute })
			tok := e.admission(t, "sale")
			status, _ := e.checkout(t, guard.AdmissionHeader, tok) // keys fetched, tok redeemed
			require.Equal(t, http.StatusOK, status)

			e.redeemStatus.Store(tc.status)
			for range 14 { // a replay every 5 s for over a minute
				status, _ = e.checkout(t, guard.AdmissionHeader, tok)
				e.sc.Clock.Advance(5 * time.Second)
			}
			if tc.opens {
				assert.Equal(t, http.StatusOK, status, "failed for FailOpenAfter without a break: open")
				assert.True(t, e.last.Load().FailedOpen)
				return
			}
			assert.Equal(t, http.StatusServiceUnavailable, status, "a replay of a redeemed token passed behind a limiter")
			assert.EqualValues(t, 1, e.served.Load())
		})
	}
}

// Nor is a 429 an answer: a limiter tripped once during a real outage (the
// sidecar's proxy answering 502) leaves the outage's streak as it was, and
// FailOpenAfter still lets a genuine token through once it has lasted that
// long.
func TestFailOpenKeepsAnOutageThroughARateLimit(t *testing.T) {
	e := newAdmEnv(t, func(o *guard.AdmissionOptions) { o.FailOpenAfter = time.Minute })
	warm := e.admission(t, "sale")
	status, _ := e.checkout(t, guard.AdmissionHeader, warm) // keys fetched
	require.Equal(t, http.StatusOK, status)
	tok := e.admission(t, "sale") // genuine, never redeemed
	for i := range 14 {           // 0..65 s, every 5 s
		e.redeemStatus.Store(http.StatusBadGateway)
		if i == 7 {
			e.redeemStatus.Store(http.StatusTooManyRequests) // at 35 s, once
		}
		status, _ = e.checkout(t, guard.AdmissionHeader, tok)
		if i < 13 {
			e.sc.Clock.Advance(5 * time.Second)
		}
	}
	assert.Equal(t, http.StatusOK, status, "65 s of outage, FailOpenAfter 1m: the 429 restarted the streak")
	assert.True(t, e.last.Load().FailedOpen)
}
