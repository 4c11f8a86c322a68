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
// window, or its promotion is taken back before it claims it: Retry-After
// is capped at a quarter of claim_timeout (whole seconds, at least 1s) on
// join, status, the forward-auth check and the proxied page. Without a
// claim timeout the usual value stands (5s: nobody was admitted lately).
func TestRetryAfterStaysInsideTheClaimWindow(t *testing.T) {
	tests := []struct {
		claim time.Duration
		want  string
	}{
		{0, "5"},
		{time.Minute, "5"}, // the cap (15s) is above the usual value
		{12 * time.Second, "3"},
		{8 * time.Second, "2"},
		{7 * time.Second, "1"},
		{2 * time.Second, "1"},
		{time.Millisecond, "1"},
	}
	for _, tt := range tests {
		t.Run(tt.claim.String(), func(t *testing.T) {
			cfg := gatetest.Gate("default", 1)
			cfg.ClaimTimeout = tt.claim
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
