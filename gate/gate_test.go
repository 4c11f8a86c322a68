package gate_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/broadcast"
	"github.com/anteroomhq/anteroom/gate"
	"github.com/anteroomhq/anteroom/gate/gatetest"
	"github.com/anteroomhq/anteroom/gate/token"
	"github.com/anteroomhq/anteroom/session"
	"github.com/anteroomhq/anteroom/session/sessiontest"
)

type harness struct {
	url      string
	waitlist *session.Waitlist
	clock    *sessiontest.Clock
	signer   *token.Signer
	hub      *broadcast.Hub
}

const base = "/anteroom"

func newHarness(t *testing.T, limit int64) *harness {
	t.Helper()
	return newHarnessWith(t, limit, nil)
}

// newHarnessWith builds the sidecar over a real SQLite file with a fake
// clock (gatetest); configure, when not nil, adjusts the gate options.
func newHarnessWith(t *testing.T, limit int64, configure func(*gate.Options)) *harness {
	t.Helper()
	sc := gatetest.StartSidecar(t, gatetest.Options{
		Gates: []session.GateConfig{gatetest.Gate("default", limit), gatetest.Gate("vip", 1)},
		Gate: func(o *gate.Options) {
			o.Demo = true
			if configure != nil {
				configure(o)
			}
		},
	})
	return &harness{url: sc.URL, waitlist: sc.Waitlist, clock: sc.Clock, signer: sc.Signer, hub: sc.Hub}
}

// client is a browser-like HTTP client with its own cookie jar.
func newClient(t *testing.T) *http.Client {
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	return &http.Client{Jar: jar, Timeout: 10 * time.Second}
}

type reply struct {
	status int
	header http.Header
	body   map[string]any
	raw    string
}

func do(t *testing.T, c *http.Client, method, url, contentType, body string, headers ...string) reply {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	require.NoError(t, err)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := c.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	r := reply{status: resp.StatusCode, header: resp.Header, raw: string(raw)}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") && method != http.MethodHead {
		require.NoError(t, json.Unmarshal(raw, &r.body), string(raw))
	}
	return r
}

func (h *harness) join(t *testing.T, c *http.Client) reply {
	t.Helper()
	r := do(t, c, http.MethodPost, h.url+base+"/api/join", "application/json", `{"gate":"default"}`)
	require.Equal(t, http.StatusOK, r.status, r.raw)
	return r
}

// requireError checks the contract's error body.
func requireError(t *testing.T, r reply, status int, code string) {
	t.Helper()
	require.Equal(t, status, r.status, r.raw)
	require.Equal(t, "application/json", strings.Split(r.header.Get("Content-Type"), ";")[0], r.raw)
	e, ok := r.body["error"].(map[string]any)
	require.True(t, ok, "error body: %s", r.raw)
	assert.Equal(t, code, e["code"])
	assert.NotEmpty(t, e["message"])
}

func TestJoinAdmitsUpToTheLimitThenQueues(t *testing.T) {
	h := newHarness(t, 2)
	var views []reply
	for range 4 {
		views = append(views, h.join(t, newClient(t)))
	}
	for i, want := range []string{"active", "active", "waiting", "waiting"} {
		v := views[i].body
		assert.Equal(t, want, v["status"], "joiner %d", i)
		assert.EqualValues(t, i+1, v["position"])
		assert.Equal(t, "default", v["gate"])
		assert.EqualValues(t, 2, v["limit"])
		assert.NotEmpty(t, v["session"])
		assert.NotEmpty(t, v["token"])
		for _, k := range []string{"firstWaitingPosition", "lastWaitingPosition", "waiting", "active", "admittedPerMinute"} {
			assert.Contains(t, v, k)
		}
	}
	last := views[3].body
	assert.EqualValues(t, 3, last["firstWaitingPosition"])
	assert.EqualValues(t, 4, last["lastWaitingPosition"])
	assert.EqualValues(t, 2, last["waiting"])
	assert.NotEmpty(t, views[3].header.Get("Retry-After"), "waiting clients are told when to ask again")
}

func TestJoinSetsTheCookieAndIsIdempotent(t *testing.T) {
	h := newHarness(t, 1)
	c := newClient(t)
	first := h.join(t, c)
	cookie := first.header.Get("Set-Cookie")
	for _, attr := range []string{gate.CookieName + "=", "Path=/", "HttpOnly", "SameSite=Lax", "Max-Age="} {
		assert.Contains(t, cookie, attr)
	}
	assert.NotContains(t, cookie, "Secure", "plain HTTP: no Secure flag")
	again := h.join(t, c)
	assert.Equal(t, first.body["session"], again.body["session"])
	assert.Equal(t, first.body["position"], again.body["position"])

	behindTLS := do(t, newClient(t), http.MethodPost, h.url+base+"/api/join", "", "", "X-Forwarded-Proto", "https")
	assert.Contains(t, behindTLS.header.Get("Set-Cookie"), "Secure")
}

func TestJoinBodies(t *testing.T) {
	h := newHarness(t, 5)
	tests := []struct {
		name        string
		contentType string
		body        string
		status      int
		code        string
	}{
		{"no body", "", "", http.StatusOK, ""},
		{"empty object", "application/json", "{}", http.StatusOK, ""},
		{"named gate", "application/json", `{"gate":"vip"}`, http.StatusOK, ""},
		{"malformed JSON", "application/json", `{"gate":`, http.StatusBadRequest, "invalid_json"},
		{"not an object", "application/json", `[1,2]`, http.StatusBadRequest, "invalid_json"},
		{"unknown field", "application/json", `{"gaet":"default"}`, http.StatusBadRequest, "invalid_json"},
		{"two objects", "application/json", `{} {}`, http.StatusBadRequest, "invalid_json"},
		{"unknown gate", "application/json", `{"gate":"nope"}`, http.StatusNotFound, "unknown_gate"},
		{"1 MiB body", "application/json", `{"gate":"` + strings.Repeat("a", 1<<20) + `"}`, http.StatusRequestEntityTooLarge, "body_too_large"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := do(t, newClient(t), http.MethodPost, h.url+base+"/api/join", tt.contentType, tt.body)
			if tt.code == "" {
				assert.Equal(t, tt.status, r.status, r.raw)
				return
			}
			requireError(t, r, tt.status, tt.code)
		})
	}
	r := do(t, newClient(t), http.MethodPost, h.url+base+"/api/join?gate=vip", "", "")
	assert.Equal(t, "vip", r.body["gate"])
}

func TestForgedAndTruncatedTokensAreNoSession(t *testing.T) {
	h := newHarness(t, 5)
	c := newClient(t)
	v := h.join(t, c)
	tok := v.body["token"].(string)
	id := v.body["session"].(string)
	forged := id + "." + strings.Repeat("A", 43)
	for name, bad := range map[string]string{"forged": forged, "truncated": tok[:len(tok)-3], "empty": "", "garbage": "%%%"} {
		t.Run(name, func(t *testing.T) {
			requireError(t, do(t, newClient(t), http.MethodGet, h.url+base+"/check", "", "", "Authorization", "Bearer "+bad), http.StatusUnauthorized, "no_session")
			requireError(t, do(t, newClient(t), http.MethodGet, h.url+base+"/api/status", "", "", "Cookie", gate.CookieName+"="+bad), http.StatusNotFound, "session_not_found")
			// Joining with a bad token starts a fresh session: never the one named.
			j := do(t, newClient(t), http.MethodPost, h.url+base+"/api/join", "", "", "Authorization", "Bearer "+bad)
			require.Equal(t, http.StatusOK, j.status)
			assert.NotEqual(t, id, j.body["session"])
		})
	}
	// The valid token works by each of the three carriers.
	for name, hdr := range map[string][]string{
		"bearer": {"Authorization", "Bearer " + tok},
		"cookie": {"Cookie", gate.CookieName + "=" + tok},
	} {
		r := do(t, newClient(t), http.MethodGet, h.url+base+"/api/status", "", "", hdr...)
		assert.Equal(t, id, r.body["session"], name)
	}
	r := do(t, newClient(t), http.MethodGet, h.url+base+"/api/status?session="+tok, "", "")
	assert.Equal(t, id, r.body["session"], "query")
}

func TestStatus(t *testing.T) {
	h := newHarness(t, 1)
	active, waiting := newClient(t), newClient(t)
	h.join(t, active)
	h.join(t, waiting)

	r := do(t, active, http.MethodGet, h.url+base+"/api/status", "", "")
	require.Equal(t, http.StatusOK, r.status)
	assert.Equal(t, "active", r.body["status"])
	assert.Empty(t, r.header.Get("Retry-After"))
	assert.Equal(t, "no-store", r.header.Get("Cache-Control"))

	r = do(t, waiting, http.MethodGet, h.url+base+"/api/status", "", "")
	require.Equal(t, http.StatusOK, r.status)
	assert.Equal(t, "waiting", r.body["status"])
	assert.EqualValues(t, 2, r.body["position"])
	assert.NotEmpty(t, r.header.Get("Retry-After"))

	requireError(t, do(t, newClient(t), http.MethodGet, h.url+base+"/api/status", "", ""), http.StatusNotFound, "session_not_found")
	requireError(t, do(t, waiting, http.MethodGet, h.url+base+"/api/status?gate=nope", "", ""), http.StatusNotFound, "unknown_gate")
	// A session of one gate is no session of another.
	requireError(t, do(t, waiting, http.MethodGet, h.url+base+"/api/status?gate=vip", "", ""), http.StatusNotFound, "session_not_found")
}

func TestGlobal(t *testing.T) {
	h := newHarness(t, 1)
	h.join(t, newClient(t))
	h.join(t, newClient(t))
	r := do(t, newClient(t), http.MethodGet, h.url+base+"/api/global?gate=default", "", "")
	require.Equal(t, http.StatusOK, r.status)
	assert.Equal(t, map[string]any{"gate": "default", "firstWaitingPosition": 2.0, "lastWaitingPosition": 2.0,
		"waiting": 1.0, "active": 1.0, "limit": 1.0, "admittedPerMinute": 0.0, "buckets": []any{0.0, 1.0}}, r.body)
	requireError(t, do(t, newClient(t), http.MethodGet, h.url+base+"/api/global?gate=nope", "", ""), http.StatusNotFound, "unknown_gate")
}

func TestLeaveAcceptsBeaconsAndKeepsThePlaceOfAReturningWaiter(t *testing.T) {
	h := newHarness(t, 1)
	h.join(t, newClient(t))
	waiter := newClient(t)
	v := h.join(t, waiter)
	tok := v.body["token"].(string)

	// What navigator.sendBeacon sends: text/plain, any body, ?session=.
	r := do(t, newClient(t), http.MethodPost, h.url+base+"/api/leave?gate=default&session="+tok, "text/plain;charset=UTF-8", "bye")
	assert.Equal(t, http.StatusNoContent, r.status)
	r = do(t, waiter, http.MethodPost, h.url+base+"/api/leave", "", "")
	assert.Equal(t, http.StatusNoContent, r.status, "idempotent")
	r = do(t, newClient(t), http.MethodPost, h.url+base+"/api/leave", "", "")
	assert.Equal(t, http.StatusNoContent, r.status, "no session: nothing to do")
	requireError(t, do(t, waiter, http.MethodPost, h.url+base+"/api/leave?gate=nope", "", ""), http.StatusNotFound, "unknown_gate")
	requireError(t, do(t, waiter, http.MethodPost, h.url+base+"/api/leave", "text/plain", strings.Repeat("x", 1<<20)), http.StatusRequestEntityTooLarge, "body_too_large")

	// Back within waiting_timeout: same place, and the join is a sign of
	// life, so the next update keeps it for waiting_timeout from there.
	h.clock.Advance(30 * time.Second)
	again := h.join(t, waiter)
	assert.Equal(t, v.body["position"], again.body["position"])
	h.clock.Advance(50 * time.Second)
	_, err := h.waitlist.Update(context.Background())
	require.NoError(t, err)
	r = do(t, waiter, http.MethodGet, h.url+base+"/api/status", "", "")
	assert.Equal(t, "waiting", r.body["status"])

	// Gone for longer than waiting_timeout: purged.
	do(t, waiter, http.MethodPost, h.url+base+"/api/leave", "", "")
	h.clock.Advance(time.Minute + time.Second)
	_, err = h.waitlist.Update(context.Background())
	require.NoError(t, err)
	requireError(t, do(t, waiter, http.MethodGet, h.url+base+"/api/status", "", ""), http.StatusNotFound, "session_not_found")
}

func TestReleasePromotesTheNextWaiterAtOnce(t *testing.T) {
	h := newHarness(t, 1)
	active, waiter := newClient(t), newClient(t)
	h.join(t, active)
	h.join(t, waiter)
	r := do(t, active, http.MethodPost, h.url+base+"/api/release", "", "")
	assert.Equal(t, http.StatusNoContent, r.status)
	r = do(t, waiter, http.MethodGet, h.url+base+"/api/status", "", "")
	assert.Equal(t, "active", r.body["status"], "no tick needed")
	requireError(t, do(t, active, http.MethodGet, h.url+base+"/api/status", "", ""), http.StatusNotFound, "session_not_found")
	assert.Equal(t, http.StatusNoContent, do(t, active, http.MethodPost, h.url+base+"/api/release", "", "").status, "idempotent")
}

func TestCheckForwardAuth(t *testing.T) {
	h := newHarness(t, 1)
	active, waiter := newClient(t), newClient(t)
	h.join(t, active)
	h.join(t, waiter)

	r := do(t, active, http.MethodGet, h.url+base+"/check", "", "")
	assert.Equal(t, http.StatusOK, r.status)
	status := do(t, active, http.MethodGet, h.url+base+"/api/status", "", "")
	assert.Equal(t, status.body["session"], r.header.Get(gate.SessionHeader), "the 200 names the session for the proxy to pass on")
	r = do(t, waiter, http.MethodGet, h.url+base+"/check", "", "")
	requireError(t, r, http.StatusForbidden, "session_not_active")
	assert.Empty(t, r.header.Get(gate.SessionHeader))
	assert.NotEmpty(t, r.header.Get("Retry-After"))
	requireError(t, do(t, newClient(t), http.MethodGet, h.url+base+"/check", "", ""), http.StatusUnauthorized, "no_session")
	requireError(t, do(t, active, http.MethodGet, h.url+base+"/check?gate=nope", "", ""), http.StatusNotFound, "unknown_gate")
	// The gate may come as a header (Traefik, Caddy).
	requireError(t, do(t, active, http.MethodGet, h.url+base+"/check", "", "", gate.GateHeader, "vip"), http.StatusUnauthorized, "no_session")

	// check refreshes last_active: an active session checked every few
	// minutes outlives active_timeout.
	// The waiter polls the check too: a request naming it is its sign of
	// life, which keeps its place.
	for range 3 {
		h.clock.Advance(4 * time.Minute)
		require.Equal(t, http.StatusOK, do(t, active, http.MethodGet, h.url+base+"/check", "", "").status)
		requireError(t, do(t, waiter, http.MethodGet, h.url+base+"/check", "", ""), http.StatusForbidden, "session_not_active")
		_, err := h.waitlist.Update(context.Background())
		require.NoError(t, err)
	}
	assert.Equal(t, http.StatusOK, do(t, active, http.MethodGet, h.url+base+"/check", "", "").status)
	// Unchecked for longer than active_timeout: purged, and the waiter is in.
	h.clock.Advance(6 * time.Minute)
	requireError(t, do(t, waiter, http.MethodGet, h.url+base+"/check", "", ""), http.StatusForbidden, "session_not_active")
	_, err := h.waitlist.Update(context.Background())
	require.NoError(t, err)
	requireError(t, do(t, active, http.MethodGet, h.url+base+"/check", "", ""), http.StatusUnauthorized, "no_session")
	assert.Equal(t, http.StatusOK, do(t, waiter, http.MethodGet, h.url+base+"/check", "", "").status)
}

func TestPagesSnippetHealthAndUnknownRoutes(t *testing.T) {
	h := newHarness(t, 1)
	c := newClient(t)
	r := do(t, c, http.MethodGet, h.url+base+"/anteroom.js", "", "")
	assert.Equal(t, http.StatusOK, r.status)
	assert.Contains(t, r.header.Get("Content-Type"), "javascript")
	assert.Contains(t, r.raw, "/api/join")
	etag := r.header.Get("ETag")
	require.NotEmpty(t, etag)
	assert.Equal(t, http.StatusNotModified, do(t, c, http.MethodGet, h.url+base+"/anteroom.js", "", "", "If-None-Match", etag).status)

	for _, path := range []string{base + "/", base, "/"} {
		r = do(t, c, http.MethodGet, h.url+path, "", "")
		assert.Equal(t, http.StatusOK, r.status, path)
		assert.Contains(t, r.header.Get("Content-Type"), "text/html", path)
		assert.Contains(t, r.raw, base+"/anteroom.js", path)
		assert.Equal(t, "nosniff", r.header.Get("X-Content-Type-Options"))
		csp := r.header.Get("Content-Security-Policy")
		require.Contains(t, csp, "script-src 'self' 'nonce-", path)
		nonce := strings.TrimSuffix(strings.SplitN(strings.SplitN(csp, "'nonce-", 2)[1], "'", 2)[0], "'")
		assert.Equal(t, strings.Count(r.raw, "<script")+strings.Count(r.raw, "<style"), strings.Count(r.raw, `nonce="`+nonce+`"`),
			"%s: every script and style carries this response's nonce", path)
		assert.Contains(t, csp, "frame-ancestors 'self'")
	}
	again := do(t, c, http.MethodGet, h.url+"/", "", "")
	assert.NotEqual(t, r.header.Get("Content-Security-Policy"), again.header.Get("Content-Security-Policy"), "a fresh nonce per response")
	requireError(t, do(t, c, http.MethodGet, h.url+base+"/?gate=nope", "", ""), http.StatusNotFound, "unknown_gate")
	r = do(t, c, http.MethodGet, h.url+base+"/?next=/app/cart", "", "")
	assert.Contains(t, r.raw, `data-redirect-url="/app/cart"`, "a local next is where the page goes once admitted")
	for _, foreign := range []string{"//evil.example/x", "https://evil.example/", `/\evil.example`} {
		r = do(t, c, http.MethodGet, h.url+base+"/?next="+url.QueryEscape(foreign), "", "")
		assert.NotContains(t, r.raw, "data-redirect-url", "foreign next %q is ignored", foreign)
	}

	assert.Equal(t, http.StatusOK, do(t, c, http.MethodGet, h.url+"/healthz", "", "").status)
	assert.Equal(t, http.StatusOK, do(t, c, http.MethodGet, h.url+"/readyz", "", "").status)
	requireError(t, do(t, c, http.MethodGet, h.url+base+"/nope", "", ""), http.StatusNotFound, "not_found")
	requireError(t, do(t, c, http.MethodGet, h.url+base+"/api/join", "", ""), http.StatusMethodNotAllowed, "method_not_allowed")
}

func TestDemoSecretIsProtectedByValidateSessionIsActive(t *testing.T) {
	h := newHarness(t, 1)
	active, waiter := newClient(t), newClient(t)
	h.join(t, active)
	h.join(t, waiter)
	r := do(t, active, http.MethodGet, h.url+"/demo/api/secret", "", "")
	assert.Equal(t, http.StatusOK, r.status)
	assert.NotEmpty(t, r.body["message"])
	requireError(t, do(t, waiter, http.MethodGet, h.url+"/demo/api/secret", "", ""), http.StatusForbidden, "session_not_active")
	requireError(t, do(t, newClient(t), http.MethodGet, h.url+"/demo/api/secret", "", ""), http.StatusUnauthorized, "no_session")

	// Using the protected route keeps the slot past active_timeout.
	for range 3 {
		h.clock.Advance(4 * time.Minute)
		require.Equal(t, http.StatusOK, do(t, active, http.MethodGet, h.url+"/demo/api/secret", "", "").status)
		_, err := h.waitlist.Update(context.Background())
		require.NoError(t, err)
	}
	assert.Equal(t, http.StatusOK, do(t, active, http.MethodGet, h.url+"/demo/api/secret", "", "").status)
}

type wsMessage struct {
	Type                 string `json:"type"`
	Gate                 string `json:"gate"`
	FirstWaitingPosition int64  `json:"firstWaitingPosition"`
	LastWaitingPosition  int64  `json:"lastWaitingPosition"`
	Waiting              int64  `json:"waiting"`
	Active               int64  `json:"active"`
	Status               string `json:"status"`
	Position             int64  `json:"position"`
	Session              string `json:"session"`
}

func dial(t *testing.T, h *harness, query string) *websocket.Conn {
	t.Helper()
	return dialWith(t, h, query, nil)
}

func read(t *testing.T, conn *websocket.Conn) wsMessage {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, data, err := conn.Read(ctx)
	require.NoError(t, err)
	var m wsMessage
	require.NoError(t, json.Unmarshal(data, &m), string(data))
	return m
}

func TestWebsocketSendsTheViewAtOnceThenChangesAndThePromotion(t *testing.T) {
	h := newHarness(t, 1)
	active := newClient(t)
	h.join(t, active)
	w := h.join(t, newClient(t))
	tok := w.body["token"].(string)

	conn := dial(t, h, "?gate=default&session="+tok)
	first := read(t, conn)
	second := read(t, conn)
	byType := map[string]wsMessage{first.Type: first, second.Type: second}
	require.Contains(t, byType, "session")
	require.Contains(t, byType, "global")
	assert.Equal(t, "waiting", byType["session"].Status)
	assert.EqualValues(t, 2, byType["session"].Position)
	assert.EqualValues(t, 2, byType["global"].FirstWaitingPosition)

	anon := dial(t, h, "?gate=default")
	m := read(t, anon)
	assert.Equal(t, "global", m.Type)
	assert.EqualValues(t, 1, m.Waiting)

	// The active session leaves for good: the waiter gets its promotion
	// notice, and everyone the new global view.
	require.Equal(t, http.StatusNoContent, do(t, active, http.MethodPost, h.url+base+"/api/release", "", "").status)
	var promoted, global bool
	for !(promoted && global) {
		m := read(t, conn)
		switch m.Type {
		case "session":
			assert.Equal(t, "active", m.Status)
			assert.Equal(t, w.body["session"], m.Session)
			promoted = true
		case "global":
			if m.Waiting == 0 {
				global = true
			}
		}
	}
	for {
		m := read(t, anon)
		require.Equal(t, "global", m.Type, "anonymous sockets get no session messages")
		if m.Waiting == 0 {
			assert.EqualValues(t, 1, m.Active)
			break
		}
	}
}

func TestWebsocketRefusesUnknownGatesAndForeignOrigins(t *testing.T) {
	h := newHarness(t, 1)
	r := do(t, newClient(t), http.MethodGet, h.url+base+"/ws?gate=nope", "", "")
	requireError(t, r, http.StatusNotFound, "unknown_gate")

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(h.url, "http")+base+"/ws",
		&websocket.DialOptions{HTTPHeader: http.Header{"Origin": {"https://evil.example"}}})
	require.Error(t, err)
	require.NotNil(t, resp)
	assert.Equal(t, http.StatusForbidden, resp.StatusCode)
}

// A sibling subdomain may set its own anteroom_session cookie for the parent
// domain, and the browser then sends both: the first one that verifies names
// the session, wherever it stands.
func TestTwoSessionCookiesTheFirstThatVerifiesWins(t *testing.T) {
	h := newHarness(t, 1)
	joined := h.join(t, newClient(t))
	tok, id := joined.body["token"].(string), joined.body["session"].(string)
	require.NotEmpty(t, tok)
	other, err := token.NewSigner([]byte(strings.Repeat("f", 32)))
	require.NoError(t, err)
	forged, err := other.Sign(id)
	require.NoError(t, err)
	stranger, err := other.Sign("someone-else")
	require.NoError(t, err)

	for name, cookie := range map[string]string{
		"forged first":         gate.CookieName + "=" + forged + "; " + gate.CookieName + "=" + tok,
		"other signer's first": gate.CookieName + "=" + stranger + "; " + gate.CookieName + "=" + tok,
		"garbage first":        gate.CookieName + "=garbage; a=1; " + gate.CookieName + "=" + tok,
		"empty first":          gate.CookieName + "=; " + gate.CookieName + "=" + tok,
		"quoted second":        gate.CookieName + "=" + forged + "; " + gate.CookieName + `="` + tok + `"`,
		"valid first":          gate.CookieName + "=" + tok + "; " + gate.CookieName + "=" + forged,
	} {
		t.Run(name, func(t *testing.T) {
			c := &http.Client{Timeout: 10 * time.Second}
			r := do(t, c, http.MethodGet, h.url+base+"/check", "", "", "Cookie", cookie)
			require.Equal(t, http.StatusOK, r.status, r.raw)
			assert.Equal(t, id, r.header.Get(gate.SessionHeader))
			r = do(t, c, http.MethodGet, h.url+base+"/api/status", "", "", "Cookie", cookie)
			require.Equal(t, http.StatusOK, r.status, r.raw)
			assert.Equal(t, id, r.body["session"])
			r = do(t, c, http.MethodPost, h.url+base+"/api/join", "", "", "Cookie", cookie)
			require.Equal(t, http.StatusOK, r.status, r.raw)
			assert.Equal(t, id, r.body["session"], "a join keeps the session, it does not mint a new one")
		})
	}
	t.Run("none verifies", func(t *testing.T) {
		requireError(t, do(t, &http.Client{}, http.MethodGet, h.url+base+"/check", "", "", "Cookie",
			gate.CookieName+"="+forged+"; "+gate.CookieName+"="+stranger), http.StatusUnauthorized, "no_session")
	})
}
