package gate_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/gate/gatetest"
	"github.com/anteroomhq/anteroom/session"
)

// TestBackendRejoinLeavesClaimToLink: a backend's named re-join of a
// promoted, called-back session answers it active but leaves its slot
// unclaimed (claimDeadline still set); the claim link then claims it, once.
func TestBackendRejoinLeavesClaimToLink(t *testing.T) {
	sc := notifySidecar(t)
	ctx := context.Background()
	for _, id := range []string{"in", "b"} {
		_, err := sc.Waitlist.Join(ctx, "default", id)
		require.NoError(t, err)
	}
	_, err := sc.Waitlist.SetNotify(ctx, "default", "b", true)
	require.NoError(t, err)
	require.NoError(t, sc.Waitlist.Release(ctx, "default", "in"))

	status, body, _ := send(t, http.DefaultClient, "POST", sc.URL+gatetest.BasePath+"/api/join", `{"sessionId":"b"}`, "X-Anteroom-Key", notifyKey, "Content-Type", "application/json")
	require.Equal(t, http.StatusOK, status, body)
	var v session.SessionView
	require.NoError(t, json.Unmarshal([]byte(body), &v))
	assert.Equal(t, session.StatusActive, v.Status)
	assert.NotNil(t, v.ClaimDeadline, "the re-join did not claim the slot")
	s, err := sc.Store.Get(ctx, "default", "b")
	require.NoError(t, err)
	require.False(t, s.ClaimDeadline.IsZero(), "nor in the store")

	u := claimURL(t, sc, "default", "b", s.ClaimDeadline)
	status, body, _ = claimPost(t, noRedirects, u)
	assert.Equal(t, http.StatusSeeOther, status, body)
	status, body, _ = claimPost(t, noRedirects, u)
	assert.Equal(t, http.StatusConflict, status, "the link claims once")
	assert.Contains(t, body, "already_claimed")
}

// TestOwnSignOfLifeClaimsCalledBackSlot: the person's own signs of life
// (a request carrying the session's token: status, the forward-auth check)
// claim a promoted, called-back slot, as they do any promoted slot: the
// token is the session's credential, so the link guards nothing a token
// holder could not use anyway; only a backend's named re-join (no token)
// leaves the claim to the link. The link, visited after, answers 409.
func TestOwnSignOfLifeClaimsCalledBackSlot(t *testing.T) {
	for _, path := range []string{"/api/status", "/check"} {
		t.Run(path, func(t *testing.T) {
			sc := notifySidecar(t)
			ctx := context.Background()
			for _, id := range []string{"in", "b"} {
				_, err := sc.Waitlist.Join(ctx, "default", id)
				require.NoError(t, err)
			}
			_, err := sc.Waitlist.SetNotify(ctx, "default", "b", true)
			require.NoError(t, err)
			require.NoError(t, sc.Waitlist.Release(ctx, "default", "in"))
			s, err := sc.Store.Get(ctx, "default", "b")
			require.NoError(t, err)
			require.False(t, s.ClaimDeadline.IsZero(), "promoted, unclaimed")

			status, body, _ := send(t, http.DefaultClient, "GET", sc.URL+gatetest.BasePath+path, "", "Authorization", "Bearer "+sc.Token(t, "b"))
			require.Equal(t, http.StatusOK, status, body)
			// No other read between: Status would claim too.
			status, body, hdr := claimPost(t, noRedirects, claimURL(t, sc, "default", "b", s.ClaimDeadline))
			assert.Equal(t, http.StatusConflict, status, "claimed by the person's own request: %s", body)
			assert.Empty(t, hdr.Values("Set-Cookie"), "the link hands out no cookie once the slot is claimed")
		})
	}
}
