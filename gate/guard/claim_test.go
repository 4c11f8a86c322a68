package guard_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/gate/gatetest"
	"github.com/anteroomhq/anteroom/gate/guard"
	"github.com/anteroomhq/anteroom/session"
)

// TestValidateWithoutRefreshClaims: a host app that only checks
// ValidateSessionIsActive (or the middleware with SkipRefresh) serves the
// person of a promoted, unclaimed session; that request is the person
// arriving, so it claims the slot, which then outlives its claim deadline
// instead of being purged (unclaimed) while the person uses the app. A
// waiter is still refused and claims nothing.
func TestValidateWithoutRefreshClaims(t *testing.T) {
	for _, tc := range []struct {
		name  string
		check func(t *testing.T, sc *gatetest.Sidecar, tok string) error
		// refreshes: the check is the sidecar's /check, a sign of life
		// that refreshes LastActive; the others claim without a refresh.
		refreshes bool
	}{
		{"in-process checker", func(t *testing.T, sc *gatetest.Sidecar, tok string) error {
			c, err := guard.NewInProcess(sc.Waitlist, sc.Signer, guard.InProcessOptions{})
			require.NoError(t, err)
			req, err := http.NewRequest(http.MethodGet, "http://app.example/", nil)
			require.NoError(t, err)
			req.AddCookie(&http.Cookie{Name: "anteroom_session", Value: tok})
			return c.ValidateSessionIsActive(req)
		}, false},
		{"middleware with SkipRefresh over HTTP", func(t *testing.T, sc *gatetest.Sidecar, tok string) error {
			c, err := guard.NewInProcess(sc.Waitlist, sc.Signer, guard.InProcessOptions{})
			require.NoError(t, err)
			url, reached := app(t, guard.Middleware(c, guard.MiddlewareOptions{SkipRefresh: true}))
			r := get(t, url, tok, viaCookie, "application/json")
			require.Equal(t, http.StatusOK, r.status, r.raw)
			require.Equal(t, int64(1), reached.Load())
			return nil
		}, false},
		{"remote checker (the sidecar's /check)", func(t *testing.T, sc *gatetest.Sidecar, tok string) error {
			c, err := guard.NewRemote(sc.URL+basePath, guard.RemoteOptions{})
			require.NoError(t, err)
			req, err := http.NewRequest(http.MethodGet, "http://app.example/", nil)
			require.NoError(t, err)
			req.Header.Set("Authorization", "Bearer "+tok)
			return c.ValidateSessionIsActive(req)
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			cfg := gatetest.Gate("default", 1)
			cfg.ClaimTimeout = time.Minute
			sc := gatetest.StartSidecar(t, gatetest.Options{Gates: []session.GateConfig{cfg}})
			for _, id := range []string{"a", "b", "c"} {
				_, err := sc.Waitlist.Join(ctx, "default", id)
				require.NoError(t, err)
			}
			require.NoError(t, sc.Waitlist.Release(ctx, "default", "a"))
			// Memory follows the store's commit a moment later; watch it
			// through the global view (a validation would claim).
			require.Eventually(t, func() bool {
				g, err := sc.Waitlist.Global("default")
				return err == nil && g.Waiting == 1
			}, 5*time.Second, time.Millisecond)
			b, err := sc.Store.Get(ctx, "default", "b")
			require.NoError(t, err)
			require.Equal(t, session.StatusActive, b.Status)
			require.False(t, b.ClaimDeadline.IsZero(), "promoted, unclaimed")

			// The waiter is refused and nothing is claimed by it.
			waiterTok, err := sc.Signer.Sign("c")
			require.NoError(t, err)
			inProc, err := guard.NewInProcess(sc.Waitlist, sc.Signer, guard.InProcessOptions{})
			require.NoError(t, err)
			req, err := http.NewRequest(http.MethodGet, "http://app.example/", nil)
			require.NoError(t, err)
			req.AddCookie(&http.Cookie{Name: "anteroom_session", Value: waiterTok})
			require.ErrorIs(t, inProc.ValidateSessionIsActive(req), session.ErrNotActive)

			tok, err := sc.Signer.Sign("b")
			require.NoError(t, err)
			sc.Clock.Advance(10 * time.Second)
			require.NoError(t, tc.check(t, sc, tok))

			// Past the claim deadline the sweep leaves the slot: it was claimed.
			sc.Clock.Set(b.ClaimDeadline.Add(time.Second))
			require.NoError(t, sc.Waitlist.Sweep(ctx))
			require.NoError(t, sc.Waitlist.FlushTouches(ctx))
			got, err := sc.Store.Get(ctx, "default", "b")
			require.NoError(t, err, "the person's slot must not be purged as unclaimed")
			assert.Equal(t, session.StatusActive, got.Status)
			assert.True(t, got.ClaimDeadline.IsZero(), "the claim is persisted")
			if !tc.refreshes {
				assert.True(t, got.LastActive.Equal(b.LastActive),
					"the claim refreshes nothing: LastActive %v is still the promotion's %v", got.LastActive, b.LastActive)
			}
			c, err := sc.Store.Get(ctx, "default", "c")
			require.NoError(t, err)
			assert.Equal(t, session.StatusWaiting, c.Status, "the slot did not pass on")

			// Claimed, a validation without refresh is a read again: it
			// does not move LastActive.
			before := got.LastActive
			sc.Clock.Advance(time.Minute)
			req, err = http.NewRequest(http.MethodGet, "http://app.example/", nil)
			require.NoError(t, err)
			req.AddCookie(&http.Cookie{Name: "anteroom_session", Value: tok})
			require.NoError(t, inProc.ValidateSessionIsActive(req))
			require.NoError(t, sc.Waitlist.FlushTouches(ctx))
			got, err = sc.Store.Get(ctx, "default", "b")
			require.NoError(t, err)
			assert.True(t, got.LastActive.Equal(before), "a read of a claimed session does not refresh it")
		})
	}
}
