package gate_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/gate"
	"github.com/anteroomhq/anteroom/gate/gatetest"
	"github.com/anteroomhq/anteroom/session"
)

// A waiter polling without a socket must ask again well inside the claim
// window, or its promotion is taken back before it claims it, and inside
// waiting_timeout, or it loses its place: Retry-After is capped at a
// quarter of each (whole seconds, at least 1s) on join, status and the
// forward-auth check. Below the caps the usual value stands (5s: nobody was
// admitted lately).
func TestRetryAfterStaysInsideTheClaimWindow(t *testing.T) {
	tests := []struct {
		claim, waiting time.Duration
		want           string
	}{
		{0, time.Minute, "5"},
		{time.Minute, time.Minute, "5"}, // the cap (15s) is above the usual value
		{12 * time.Second, time.Minute, "3"},
		{8 * time.Second, time.Minute, "2"},
		{7 * time.Second, time.Minute, "1"},
		{2 * time.Second, time.Minute, "1"},
		{time.Millisecond, time.Minute, "1"},
		// A waiter polling as told also keeps its place.
		{0, 12 * time.Second, "3"},
		{time.Minute, 8 * time.Second, "2"},
		{8 * time.Second, 12 * time.Second, "2"},
	}
	for _, tt := range tests {
		t.Run(tt.claim.String()+"/"+tt.waiting.String(), func(t *testing.T) {
			cfg := gatetest.Gate("default", 1)
			cfg.ClaimTimeout, cfg.WaitingTimeout = tt.claim, tt.waiting
			sc := gatetest.StartSidecar(t, gatetest.Options{
				Gates: []session.GateConfig{cfg},
				Gate:  func(o *gate.Options) { o.Demo = true },
			})
			h := &harness{url: sc.URL, waitlist: sc.Waitlist, clock: sc.Clock, signer: sc.Signer, hub: sc.Hub}
			h.join(t, newClient(t))
			waiter := newClient(t)
			r := h.join(t, waiter)
			require.Equal(t, "waiting", r.body["status"])
			assert.Equal(t, tt.want, r.header.Get("Retry-After"), "join")
			r = do(t, waiter, http.MethodGet, h.url+base+"/api/status", "", "")
			require.Equal(t, http.StatusOK, r.status, r.raw)
			assert.Equal(t, tt.want, r.header.Get("Retry-After"), "status")
			r = do(t, waiter, http.MethodGet, h.url+base+"/check", "", "")
			requireError(t, r, http.StatusForbidden, "session_not_active")
			assert.Equal(t, tt.want, r.header.Get("Retry-After"), "check")
		})
	}
}
