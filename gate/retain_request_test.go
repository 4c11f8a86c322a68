package gate_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/gate"
	"github.com/anteroomhq/anteroom/gate/gatetest"
	"github.com/anteroomhq/anteroom/session"
	"github.com/anteroomhq/anteroom/session/sessiontest"
)

// get serves GET path?rawQuery through h, the query string being the
// caller's memory as a request line's piece is (net/http cuts RawQuery, and
// url.Values its unescaped values, out of the line).
func get(h http.Handler, path, rawQuery string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodGet, path, nil)
	r.URL.RawQuery = rawQuery
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// The snippet's answer to GET {base}/api/events?positions=0 is cached per
// gate, for as long as the gate's events stay as they are (for good when
// they never change): the cache must keep its own copy of the gate's name,
// not the ?gate= of the request that filled it (a piece of a request line a
// client may pad to 64 KB, on a route outside the rate limit).
func TestTheEventsAnswerCacheKeepsNoRequestMemory(t *testing.T) {
	sc := gatetest.StartSidecar(t, gatetest.Options{Gates: []session.GateConfig{gatetest.Gate("default", 10), gatetest.Gate("other", 10)}})
	for _, gate := range []string{"default", "other"} {
		t.Run(gate, func(t *testing.T) {
			q := "gate=" + gate + "&positions=0"
			sessiontest.RequireFreed(t, q, func(piece string) func() {
				w := get(sc.Handler, gatetest.BasePath+"/api/events", piece)
				require.Equal(t, http.StatusOK, w.Code, w.Body.String())
				return func() {
					w := get(sc.Handler, gatetest.BasePath+"/api/events", strings.Clone(q))
					require.Equal(t, http.StatusOK, w.Code, w.Body.String())
				}
			}, "the events answer cache still holds the request through the gate it names")
		})
	}
}

// The admin feed remembers each ticket's nonce it redeemed until the
// ticket expires (and, when no ticket is redeemed later, for good): a copy,
// not a piece of the feed request's ?ticket= (its request line, padded at
// will by whoever holds a ticket).
func TestTheAdminFeedKeepsNoRequestMemoryOfATicket(t *testing.T) {
	h := newAdminHarness(t, adminToken, nil)
	q := "ticket=" + h.feedTicket()
	sessiontest.RequireFreed(t, q, func(piece string) func() {
		w := get(h.sc.Handler, base+"/admin/api/feed", piece)
		// Redeemed, then refused as no WebSocket handshake.
		require.NotEqual(t, http.StatusUnauthorized, w.Code, w.Body.String())
		return func() {
			w := get(h.sc.Handler, base+"/admin/api/feed", strings.Clone(q))
			require.Equal(t, http.StatusUnauthorized, w.Code, "the ticket is remembered as used: %s", w.Body.String())
		}
	}, "the admin feed still holds the request through a ticket's nonce")
}

// A token outlives its session (released, purged): a join that carries
// one joins under its id, a piece of the request (its Cookie or
// Authorization header, up to the server's 64 KB of headers, or its
// query string), and the session admitted at once stays in memory for as
// long as it is active. Nothing on the way may keep that piece: the whole
// route, up to the update tick that follows (the Store's writer keeps its
// last transaction until its next one).
func TestAJoinUnderAGoneSessionsTokenKeepsNoRequestMemory(t *testing.T) {
	sc := gatetest.StartSidecar(t, gatetest.Options{Gates: []session.GateConfig{gatetest.Gate("default", 10)}})
	for _, tc := range []struct {
		name string
		// carry puts the credential (the request's piece) in r.
		carry  func(r *http.Request, piece string)
		prefix string
	}{
		{"in its Cookie", func(r *http.Request, piece string) { r.Header["Cookie"] = []string{piece} }, gate.CookieName + "="},
		{"as Bearer", func(r *http.Request, piece string) { r.Header["Authorization"] = []string{piece} }, "Bearer "},
		{"in ?session=", func(r *http.Request, piece string) { r.URL.RawQuery = piece }, "session="},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := strings.ReplaceAll(tc.name, " ", "-")
			id = strings.NewReplacer("?", "", "=", "").Replace(id)
			sessiontest.RequireFreed(t, tc.prefix+sc.Token(t, id), func(piece string) func() {
				r := httptest.NewRequest(http.MethodPost, gatetest.BasePath+"/api/join", nil)
				tc.carry(r, piece)
				w := httptest.NewRecorder()
				sc.Handler.ServeHTTP(w, r)
				require.Equal(t, http.StatusOK, w.Code, w.Body.String())
				_, err := sc.Waitlist.Update(context.Background())
				require.NoError(t, err)
				return func() {
					require.NoError(t, sc.Waitlist.ValidateSessionIsActive("default", id), "joined under the token's id")
				}
			}, "a join still holds its request through the id of the token it carried")
		})
	}
}
