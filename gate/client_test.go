package gate_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/gate"
	"github.com/anteroomhq/anteroom/gate/token"
)

// Pages of other sites must not make their visitors join, leave, release or
// mint tickets: a cross-origin POST (text/plain needs no preflight) is
// refused with 403 cross_origin unless its origin is the sidecar's own or in
// AllowedOrigins; a backend with an API key is not a browser and passes.
func TestStateChangingCallsRefuseForeignOrigins(t *testing.T) {
	const key = "backend-key-0123456789"
	h := newHarnessWith(t, 1, func(o *gate.Options) {
		o.AllowedOrigins = []string{"*.example.com", "http://localhost:3000"}
		o.APIKeys = []string{key}
	})
	self := h.url // the Origin a page served by the sidecar sends
	tests := []struct {
		name    string
		headers []string
		ok      bool
	}{
		{"same origin", []string{"Origin", self}, true},
		{"no origin, no fetch metadata (curl)", nil, true},
		{"no origin, same-origin fetch", []string{"Sec-Fetch-Site", "same-origin"}, true},
		{"allowed host pattern", []string{"Origin", "https://app.example.com"}, true},
		{"allowed scheme://host pattern", []string{"Origin", "http://localhost:3000"}, true},
		{"allowed host pattern, upper case", []string{"Origin", "https://APP.Example.com"}, true},
		{"foreign origin", []string{"Origin", "https://evil.example"}, false},
		{"pattern as a prefix", []string{"Origin", "https://app.example.com.evil.net"}, false},
		{"pattern as a suffix", []string{"Origin", "https://evilexample.com"}, false},
		{"scheme pattern, other scheme", []string{"Origin", "https://localhost:3000"}, false},
		{"null origin (sandboxed frame)", []string{"Origin", "null"}, false},
		{"garbage origin", []string{"Origin", "%%%"}, false},
		{"non-web scheme", []string{"Origin", "file://" + strings.TrimPrefix(self, "http://")}, false},
		{"own host behind userinfo", []string{"Origin", "http://evil.example@" + strings.TrimPrefix(self, "http://")}, false},
		{"own host with a path", []string{"Origin", self + "/x"}, false},
		{"allowed host with a query", []string{"Origin", "https://app.example.com?x=1"}, false},
		{"no origin, cross-site fetch", []string{"Sec-Fetch-Site", "cross-site"}, false},
		{"foreign origin with a same-origin claim", []string{"Origin", "https://evil.example", "Sec-Fetch-Site", "same-origin"}, false},
	}
	paths := []string{"/api/join", "/api/leave", "/api/release", "/api/ticket"}
	for _, tt := range tests {
		for _, p := range paths {
			t.Run(tt.name+" "+p, func(t *testing.T) {
				c := newClient(t)
				if p != "/api/join" { // have a session to act on
					require.Equal(t, http.StatusOK, do(t, c, http.MethodPost, h.url+base+"/api/join", "", "", "Origin", self).status)
				}
				before, err := h.waitlist.Global("default")
				require.NoError(t, err)
				r := do(t, c, http.MethodPost, h.url+base+p, "text/plain;charset=UTF-8", "{}", tt.headers...)
				if tt.ok {
					assert.Less(t, r.status, 300, r.raw)
					return
				}
				requireError(t, r, http.StatusForbidden, "cross_origin")
				after, err := h.waitlist.Global("default")
				require.NoError(t, err)
				assert.Equal(t, before, after, "a refused call changed nothing")
			})
		}
	}

	// A backend with an API key is unaffected, whatever Origin it relays.
	r := do(t, newClient(t), http.MethodPost, h.url+base+"/api/join", "application/json", `{"sessionId":"user:42"}`,
		"Origin", "https://evil.example", gate.APIKeyHeader, key)
	require.Equal(t, http.StatusOK, r.status, r.raw)
	assert.Equal(t, "user:42", r.body["session"])
	r = do(t, newClient(t), http.MethodPost, h.url+base+"/api/join", "application/json", `{"sessionId":"user:43"}`,
		"Origin", "https://evil.example", gate.APIKeyHeader, "wrong-key-0123456789")
	requireError(t, r, http.StatusForbidden, "cross_origin")

	// Reads are not state-changing: any origin may read (the browser keeps
	// the answer from the page without CORS anyway).
	r = do(t, newClient(t), http.MethodGet, h.url+base+"/api/global", "", "", "Origin", "https://evil.example")
	assert.Equal(t, http.StatusOK, r.status)
}

// A browser cannot put a header on a websocket handshake or a beacon: it
// asks for a ticket (a Bearer call) and puts that in the URL instead of the
// session token. A ticket names one session for one purpose at one gate.
func TestTicketsStandInForTheTokenInURLs(t *testing.T) {
	h := newHarness(t, 1)
	h.join(t, newClient(t))
	w := h.join(t, newClient(t))
	tok, id := w.body["token"].(string), w.body["session"].(string)
	bearer := []string{"Authorization", "Bearer " + tok}
	ticket := func(purpose, gate string) string {
		t.Helper()
		r := do(t, newClient(t), http.MethodPost, h.url+base+"/api/ticket?gate="+gate, "application/json", `{"purpose":"`+purpose+`"}`, bearer...)
		require.Equal(t, http.StatusOK, r.status, r.raw)
		assert.Equal(t, purpose, r.body["purpose"])
		assert.EqualValues(t, 60, r.body["expiresIn"])
		tk := r.body["ticket"].(string)
		assert.NotContains(t, tk, tok, "a ticket does not carry the token")
		return tk
	}
	wsTicket, leaveTicket, vipTicket := ticket("ws", "default"), ticket("leave", "default"), ticket("ws", "vip")

	// The websocket names the session by its ticket.
	conn := dial(t, h, "?gate=default&ticket="+wsTicket)
	got := map[string]wsMessage{}
	for range 2 {
		m := read(t, conn)
		got[m.Type] = m
	}
	require.Contains(t, got, "session")
	assert.Equal(t, id, got["session"].Session)

	// Tickets of another purpose or gate, tokens and forgeries are refused.
	for name, bad := range map[string]string{
		"leave ticket":    leaveTicket,
		"other gate":      vipTicket,
		"session token":   tok,
		"forged":          strings.Replace(wsTicket, "."+id+".", ".someone-else.", 1),
		"truncated":       wsTicket[:len(wsTicket)-2],
		"just an expiry.": "9999999999",
	} {
		r := do(t, newClient(t), http.MethodGet, h.url+base+"/ws?gate=default&ticket="+bad, "", "")
		requireError(t, r, http.StatusUnauthorized, "invalid_ticket")
		r = do(t, newClient(t), http.MethodPost, h.url+base+"/api/leave?gate=default&ticket="+bad, "text/plain", "")
		if name == "leave ticket" {
			continue
		}
		requireError(t, r, http.StatusUnauthorized, "invalid_ticket")
	}

	// No session, no ticket; unknown purposes are refused.
	requireError(t, do(t, newClient(t), http.MethodPost, h.url+base+"/api/ticket", "", ""), http.StatusUnauthorized, "no_session")
	requireError(t, do(t, newClient(t), http.MethodPost, h.url+base+"/api/ticket", "application/json", `{"purpose":"admin"}`, bearer...),
		http.StatusBadRequest, "invalid_argument")

	// The tab closes: its socket ends (while open, it was the waiter's sign
	// of life) and the beacon's leave ticket marks the departure; gone for
	// longer than waiting_timeout, the waiter is purged.
	require.NoError(t, conn.Close(websocket.StatusNormalClosure, "bye"))
	r := do(t, newClient(t), http.MethodPost, h.url+base+"/api/leave?gate=default&ticket="+leaveTicket, "text/plain;charset=UTF-8", "")
	require.Equal(t, http.StatusNoContent, r.status, r.raw)
	require.Eventually(t, func() bool {
		h.clock.Advance(time.Minute + time.Second)
		_, err := h.waitlist.Update(context.Background())
		require.NoError(t, err)
		return do(t, newClient(t), http.MethodGet, h.url+base+"/api/status", "", "", bearer...).status == http.StatusNotFound
	}, 10*time.Second, 20*time.Millisecond, "purged once its socket closed")
}

// Tokens slide: status re-issues a token that used half its life, one
// signed with the previous secret, and one of the first format ("<id>.<mac>"),
// in the cookie and in the answer's token; a fresh token is left alone. The
// session, and so the place in line, stays the same.
func TestStatusReissuesAgingRotatedAndFirstFormatTokens(t *testing.T) {
	oldSecret, newSecret := []byte(strings.Repeat("o", 32)), []byte(strings.Repeat("n", 32))
	now := time.Now()
	clock := func() time.Time { return now }
	old, err := token.NewSignerWithOptions(oldSecret, token.Options{Now: clock})
	require.NoError(t, err)
	rotated, err := token.NewSignerWithOptions(newSecret, token.Options{Previous: oldSecret, TTL: time.Hour, Now: clock})
	require.NoError(t, err)
	h := newHarnessWith(t, 1, func(o *gate.Options) { o.Signer = rotated })
	h.join(t, newClient(t))

	// A waiter joined before the rotation, under the old secret.
	w := h.join(t, newClient(t))
	id := w.body["session"].(string)
	oldTok, err := old.Sign(id)
	require.NoError(t, err)
	m := hmac.New(sha256.New, oldSecret)
	m.Write([]byte(id))
	firstFormat := id + "." + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
	fresh, err := rotated.Sign(id)
	require.NoError(t, err)

	freshOnly, err := token.NewSignerWithOptions(newSecret, token.Options{TTL: time.Hour, Now: clock})
	require.NoError(t, err)
	for name, tt := range map[string]struct {
		tok     string
		advance time.Duration
		renew   bool
	}{
		"previous secret": {oldTok, 0, true},
		"first format":    {firstFormat, 0, true},
		"fresh":           {fresh, 0, false},
		"half used":       {fresh, 31 * time.Minute, true},
	} {
		t.Run(name, func(t *testing.T) {
			now = now.Add(tt.advance)
			defer func() { now = now.Add(-tt.advance) }()
			r := do(t, newClient(t), http.MethodGet, h.url+base+"/api/status", "", "", "Authorization", "Bearer "+tt.tok)
			require.Equal(t, http.StatusOK, r.status, r.raw)
			assert.Equal(t, id, r.body["session"], "the same session keeps its place")
			if !tt.renew {
				assert.NotContains(t, r.body, "token")
				assert.Empty(t, r.header.Values("Set-Cookie"))
				return
			}
			renewed, _ := r.body["token"].(string)
			got, ok := freshOnly.Check(renewed)
			require.True(t, ok, "the new token verifies under the new secret alone: %q", renewed)
			assert.Equal(t, id, got.ID)
			assert.False(t, got.Renew)
			assert.Contains(t, r.header.Get("Set-Cookie"), gate.CookieName+"="+renewed)
		})
	}

	// An expired token is no session.
	now = now.Add(2 * time.Hour)
	requireError(t, do(t, newClient(t), http.MethodGet, h.url+base+"/api/status", "", "", "Authorization", "Bearer "+fresh),
		http.StatusNotFound, "session_not_found")
}

// Tickets are for clients that need them: the websocket keeps accepting the
// cookie, which a same-origin page sends on the handshake.
func TestWebsocketStillAcceptsTheCookie(t *testing.T) {
	h := newHarness(t, 1)
	h.join(t, newClient(t))
	w := h.join(t, newClient(t))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(h.url, "http")+base+"/ws?gate=default",
		&websocket.DialOptions{HTTPHeader: http.Header{"Cookie": {gate.CookieName + "=" + w.body["token"].(string)}}})
	require.NoError(t, err)
	defer conn.CloseNow()
	got := map[string]wsMessage{}
	for range 2 {
		m := read(t, conn)
		got[m.Type] = m
	}
	assert.Equal(t, w.body["session"], got["session"].Session)
}
