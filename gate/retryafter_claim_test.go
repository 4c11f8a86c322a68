package gate_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/gate"
	"github.com/anteroomhq/anteroom/gate/gatetest"
	"github.com/anteroomhq/anteroom/session"
)

// A called-back waiter's claim window is the gate's notify claim timeout,
// not its claim timeout: its join and status answers carry that window
// (claimWindow, seconds) and its Retry-After is capped by a quarter of it,
// also when the gate has no claim timeout at all.
func TestRetryAfterFollowsTheWaitersOwnClaimWindow(t *testing.T) {
	tests := []struct {
		name          string
		claim, notify time.Duration
		called        bool
		window        float64
		want          string
	}{
		{"claim timeout", 8 * time.Second, time.Hour, false, 8, "2"},
		{"called back, no claim timeout", 0, 8 * time.Second, true, 8, "2"},
		{"called back, a long window", 8 * time.Second, time.Hour, true, 3600, "5"},
		{"no window", 0, 0, false, 0, "5"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := gatetest.Gate("default", 1)
			cfg.ClaimTimeout, cfg.NotifyClaimTimeout, cfg.WaitingTimeout = tt.claim, tt.notify, time.Hour
			sc := gatetest.StartSidecar(t, gatetest.Options{
				Gates: []session.GateConfig{cfg},
				Gate:  func(o *gate.Options) { o.Demo = true },
			})
			h := &harness{url: sc.URL, waitlist: sc.Waitlist, clock: sc.Clock, signer: sc.Signer, hub: sc.Hub}
			h.join(t, newClient(t))
			waiter := newClient(t)
			r := h.join(t, waiter)
			require.Equal(t, "waiting", r.body["status"])
			if tt.called {
				_, err := sc.Waitlist.SetNotify(context.Background(), "default", r.body["session"].(string), true)
				require.NoError(t, err)
			}
			r = do(t, waiter, http.MethodGet, h.url+base+"/api/status", "", "")
			require.Equal(t, http.StatusOK, r.status, r.raw)
			assert.Equal(t, tt.want, r.header.Get("Retry-After"), "status")
			var v session.SessionView
			require.NoError(t, json.Unmarshal([]byte(r.raw), &v))
			assert.Equal(t, tt.window, v.ClaimWindow, "the view's claim window")
			r = do(t, waiter, http.MethodGet, h.url+base+"/check", "", "")
			requireError(t, r, http.StatusForbidden, "session_not_active")
			assert.Equal(t, tt.want, r.header.Get("Retry-After"), "check")
		})
	}
}
