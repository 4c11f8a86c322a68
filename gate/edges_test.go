package gate_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
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
	"github.com/anteroomhq/anteroom/session"
)

// Attacks on the HTTP edges found by a review, kept as tests: each failed
// before its fix.

// appServer starts app on a loopback port for the test and returns its URL.
func appServer(t *testing.T, app http.HandlerFunc) *url.URL {
	t.Helper()
	srv := httptest.NewServer(app)
	t.Cleanup(srv.Close)
	return mustParse(t, srv.URL)
}

// proxiedSidecar starts a sidecar in reverse-proxy mode in front of app,
// its default gate at limit.
func proxiedSidecar(t *testing.T, limit int64, app http.HandlerFunc) *gatetest.Sidecar {
	t.Helper()
	u := appServer(t, app)
	return gatetest.StartSidecar(t, gatetest.Options{
		Gates: []session.GateConfig{gatetest.Gate("default", limit)},
		Gate:  func(o *gate.Options) { o.Proxy = gate.ProxyOptions{Upstream: u} },
	})
}

// An admin path names a session as encodeURIComponent spells it: the id is
// decoded, once. Before, DELETE sessions/user%3A42 answered 204 and ended
// nobody (echo routes on the raw path and hands its parameters over as
// sent).
func TestAdminEndSessionDecodesTheID(t *testing.T) {
	sc := gatetest.StartSidecar(t, gatetest.Options{
		Gates: []session.GateConfig{gatetest.Gate("default", 10)},
		Gate: func(o *gate.Options) {
			o.APIKeys = []string{admissionKey}
			o.AdminToken = adminToken
		},
	})
	b := sc.URL + gatetest.BasePath
	for _, tc := range []struct{ id, inPath string }{
		{"user:42", "user%3A42"},     // encodeURIComponent("user:42")
		{"user/42", "user%2F42"},     // a '/' must be escaped in a segment
		{"50%off", "50%25off"},       // a '%' of the id: decoded once, not twice
		{"a:b%41", "a%3Ab%2541"},     // both: the raw path is decoded once
		{"plain-id", "plain-id"},     // nothing to decode
		{"sp%20ce", "sp%2520ce"},     // an escape-looking id survives
		{"x:%2F", "x%3A%252F"},       // ... also beside a raw-path escape
		{"semi;colon", "semi;colon"}, // sent as is, not an escape
	} {
		t.Run(tc.id, func(t *testing.T) {
			a := call(t, "POST", b+"/api/join", `{"sessionId":"`+tc.id+`"}`, gate.APIKeyHeader, admissionKey)
			require.Equal(t, http.StatusOK, a.status, "%s", a.body)
			a = call(t, "DELETE", b+"/admin/api/gates/default/sessions/"+tc.inPath, "", "Authorization", "Bearer "+adminToken)
			require.Equal(t, http.StatusNoContent, a.status, "%s", a.body)
			_, err := sc.Waitlist.Status(t.Context(), "default", tc.id)
			assert.ErrorIs(t, err, session.ErrNotFound, "204, yet %q is still there", tc.id)
		})
	}
}

// Strict JSON bodies refuse anything after the object. json.Decoder.More
// alone let a stray '}' or ']' through, and the PATCH was applied.
func TestBodiesRefuseTrailingData(t *testing.T) {
	sc := gatetest.StartSidecar(t, gatetest.Options{
		Gates: []session.GateConfig{gatetest.Gate("default", 5)},
		Gate:  func(o *gate.Options) { o.AdminToken = adminToken },
	})
	b := sc.URL + gatetest.BasePath
	auth := []string{"Authorization", "Bearer " + adminToken}
	for _, tc := range []struct {
		name, method, path, body string
		headers                  []string
	}{
		{"patch, brackets", "PATCH", "/admin/api/gates/default", `{"activeLimit":7}]]}}`, auth},
		{"patch, a second object", "PATCH", "/admin/api/gates/default", `{"activeLimit":7} {}`, auth},
		{"join, a brace", "POST", "/api/join", `{"gate":"default"}}`, nil},
		{"join, a comma", "POST", "/api/join", `{"gate":"default"},`, nil},
		{"add gate, a bracket", "POST", "/admin/api/gates", `{"name":"added"}]`, auth},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := call(t, tc.method, b+tc.path, tc.body, tc.headers...)
			assert.Equal(t, http.StatusBadRequest, a.status, "%s", a.body)
			assert.Equal(t, session.Code("invalid_json"), errorCode(t, string(a.body)))
		})
	}
	cfg, err := sc.Waitlist.GateConfig("default")
	require.NoError(t, err)
	assert.EqualValues(t, 5, cfg.ActiveLimit, "a refused PATCH changed nothing")
	_, err = sc.Waitlist.GateConfig("added")
	assert.ErrorIs(t, err, session.ErrUnknownGate, "a refused POST added nothing")
	// Trailing whitespace is still fine.
	a := call(t, "PATCH", b+"/admin/api/gates/default", "{\"activeLimit\":6} \n", auth...)
	assert.Equal(t, http.StatusOK, a.status, "%s", a.body)
}

// The gate that requests without a gate use, and the one reverse-proxy
// mode guards, cannot be removed: before, the removal answered 204 and the
// whole proxied site answered 404 unknown_gate from then on.
func TestAdminKeepsTheDefaultGate(t *testing.T) {
	u := appServer(t, func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "app") })
	for _, proxied := range []bool{false, true} {
		t.Run(map[bool]string{false: "sidecar", true: "reverse proxy"}[proxied], func(t *testing.T) {
			sc := gatetest.StartSidecar(t, gatetest.Options{
				Gates: []session.GateConfig{gatetest.Gate("default", 5), gatetest.Gate("other", 5)},
				Gate: func(o *gate.Options) {
					if proxied {
						o.Proxy = gate.ProxyOptions{Upstream: u}
					}
					o.AdminToken = adminToken
				},
			})
			b := sc.URL + gatetest.BasePath + "/admin/api/gates/"
			a := call(t, "DELETE", b+"default", "", "Authorization", "Bearer "+adminToken)
			assert.Equal(t, http.StatusConflict, a.status, "%s", a.body)
			assert.Equal(t, session.CodeGateInUse, errorCode(t, string(a.body)))
			_, err := sc.Waitlist.GateConfig("default")
			require.NoError(t, err, "the default gate is still there")
			// Another empty gate goes as before.
			a = call(t, "DELETE", b+"other", "", "Authorization", "Bearer "+adminToken)
			assert.Equal(t, http.StatusNoContent, a.status, "%s", a.body)
			if proxied {
				a = call(t, "GET", sc.URL+"/shop", "", "Accept", "text/html", "Sec-Fetch-Mode", "navigate")
				assert.Equal(t, http.StatusOK, a.status, "a browser's visit: %s", a.body)
			}
		})
	}
}

// /metrics compares the admin token too: its guesses spend from the admin
// API's per-IP limit, where before they were unlimited.
func TestMetricsTokenGuessesAreRateLimited(t *testing.T) {
	sc := gatetest.StartSidecar(t, gatetest.Options{
		Gates: []session.GateConfig{gatetest.Gate("default", 5)},
		Gate: func(o *gate.Options) {
			o.AdminToken = adminToken
			o.AdminRateLimit = gate.RateLimitOptions{PerSecond: 1, Burst: 5}
			o.Metrics = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "m 1\n") })
		},
	})
	b := sc.URL + gatetest.BasePath
	statuses := map[int]int{}
	for i := range 20 {
		statuses[call(t, "GET", b+"/metrics", "", "Authorization", "Bearer wrong-guess-"+strings.Repeat("x", 32)+string(rune('a'+i))).status]++
	}
	assert.Equal(t, map[int]int{http.StatusUnauthorized: 5, http.StatusTooManyRequests: 15}, statuses)
	// The same budget: the admin API refuses this client as well now.
	a := call(t, "GET", b+"/admin/api/gates", "", "Authorization", "Bearer "+adminToken)
	assert.Equal(t, http.StatusTooManyRequests, a.status, "%s", a.body)
}

// Without an admin token /metrics is public and not limited by the admin
// API's limit (which does not exist then).
func TestMetricsWithoutAdminTokenStayOpen(t *testing.T) {
	sc := gatetest.StartSidecar(t, gatetest.Options{
		Gates: []session.GateConfig{gatetest.Gate("default", 5)},
		Gate: func(o *gate.Options) {
			o.Metrics = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "m 1\n") })
		},
	})
	for range 40 {
		a := call(t, "GET", sc.URL+gatetest.BasePath+"/metrics", "")
		require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	}
}

// A refused /ws handshake answers the contract's JSON error, like every
// other route, before anything is done for the session: before, the
// library answered text/plain (426, 403, 400).
func TestWebsocketRefusalsAreJSON(t *testing.T) {
	sc := gatetest.StartSidecar(t, gatetest.Options{Gates: []session.GateConfig{gatetest.Gate("default", 5)}})
	u := sc.URL + gatetest.BasePath + "/ws?gate=default"
	hs := func(extra ...string) []string {
		h := map[string]string{"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
			"Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}
		for i := 0; i+1 < len(extra); i += 2 {
			h[extra[i]] = extra[i+1]
		}
		var out []string
		for k, v := range h {
			out = append(out, k, v)
		}
		return out
	}
	for _, tc := range []struct {
		name    string
		headers []string
		status  int
		code    session.Code
	}{
		{"a plain GET", nil, http.StatusBadRequest, session.CodeInvalidArgument},
		{"Upgrade without Connection", []string{"Upgrade", "websocket"}, http.StatusBadRequest, session.CodeInvalidArgument},
		{"another origin", hs("Origin", "http://evil.example"), http.StatusForbidden, "cross_origin"},
		{"a null origin", hs("Origin", "null"), http.StatusForbidden, "cross_origin"},
		{"version 8", hs("Sec-WebSocket-Version", "8"), http.StatusBadRequest, session.CodeInvalidArgument},
		{"a short key", hs("Sec-WebSocket-Key", "c2hvcnQ="), http.StatusBadRequest, session.CodeInvalidArgument},
		{"a key that is not base64", hs("Sec-WebSocket-Key", "!!!!!!!!!!!!!!!!!!!!!!!!"), http.StatusBadRequest, session.CodeInvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := call(t, "GET", u, "", tc.headers...)
			assert.Equal(t, tc.status, a.status, "%s", a.body)
			assert.Contains(t, a.header.Get("Content-Type"), "application/json")
			assert.Equal(t, tc.code, errorCode(t, string(a.body)), "%s", a.body)
			assert.Equal(t, "nosniff", a.header.Get("X-Content-Type-Options"))
		})
	}
	a := call(t, "GET", u, "", hs("Sec-WebSocket-Version", "8")...)
	assert.Equal(t, "13", a.header.Get("Sec-WebSocket-Version"), "the version served is named")
}

// In reverse-proxy mode another spelling of a sidecar path ("//", "/./",
// "/x/../") reached the catch-all and went to the app, cleaned into the
// sidecar's own path; an unknown path under it went to the app too. Paths
// under the base are never the app's: 404.
func TestProxyKeepsTheBasePathFromTheApp(t *testing.T) {
	seen := make(chan string, 16)
	sc := proxiedSidecar(t, 5, func(w http.ResponseWriter, r *http.Request) {
		seen <- r.URL.Path
		_, _ = io.WriteString(w, "app")
	})
	_, err := sc.Waitlist.Join(t.Context(), "default", "visitor1")
	require.NoError(t, err)
	tok := "Bearer " + sc.Token(t, "visitor1")
	for _, p := range []string{
		"/anteroom//admin/api/gates",
		"/anteroom/./admin/api/gates",
		"/x/../anteroom/admin/api/gates",
		"/anteroom//api/status",
		"/anteroom/unknown",
		"/ANTEROOM/admin/api/gates", // protect matches in any letter case; so does this
		"/Anteroom",
	} {
		t.Run(p, func(t *testing.T) {
			a := call(t, "GET", sc.URL+p, "", "Authorization", tok)
			assert.Equal(t, http.StatusNotFound, a.status, "%s", a.body)
			assert.Equal(t, session.Code("not_found"), errorCode(t, string(a.body)))
		})
	}
	// The app's own paths still go through, cleaned, also one that only
	// starts like the base.
	for _, p := range []string{"/shop/./cart", "/anteroomish"} {
		a := call(t, "GET", sc.URL+p, "", "Authorization", tok)
		assert.Equal(t, http.StatusOK, a.status, "%s", a.body)
	}
	require.Len(t, seen, 2, "only the app's paths reached the app")
	assert.Equal(t, "/shop/cart", <-seen)
	assert.Equal(t, "/anteroomish", <-seen)
}

// The hub's cap per client counts an IPv6 client by its /64, as the rate
// limit does: before, six addresses of one /64 got six sockets with a cap
// of two.
func TestWebsocketCapCountsAnIPv6ClientByItsSlash64(t *testing.T) {
	_, loop, err := net.ParseCIDR("127.0.0.0/8")
	require.NoError(t, err)
	sc := gatetest.StartSidecar(t, gatetest.Options{
		Gates: []session.GateConfig{gatetest.Gate("default", 1)},
		Hub:   broadcast.Options{MaxConnectionsPerClient: 2},
		Gate:  func(o *gate.Options) { o.TrustedProxies = []*net.IPNet{loop} },
	})
	u := "ws" + strings.TrimPrefix(sc.URL, "http") + gatetest.BasePath + "/ws?gate=default"
	served := func(from string) bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, _, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPHeader: http.Header{"X-Forwarded-For": {from}}})
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.CloseNow() })
		_, _, err = c.Read(ctx)
		return err == nil
	}
	n := 0
	for i := 1; i <= 4; i++ {
		if served(fmt.Sprintf("2001:db8:1:2::%x", i)) { // one /64
			n++
		}
	}
	assert.Equal(t, 2, n, "one /64 is one client")
	assert.True(t, served("2001:db8:1:3::1"), "the next /64 is another client")
	assert.True(t, served("192.0.2.7"), "an IPv4 client is its address")
}

// In reverse-proxy mode a newcomer let in at once gets the app's page and
// its session cookie in one answer: the app's caching headers must not let
// a shared cache keep it (and hand the session to everyone). Before, the
// app's "public, max-age=600" went out beside the new cookie.
func TestProxyNewcomersCookieIsNeverOnACacheableAnswer(t *testing.T) {
	sc := proxiedSidecar(t, 10, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=600")
		w.Header().Set("Expires", "Thu, 01 Jan 2099 00:00:00 GMT")
		_, _ = io.WriteString(w, "<h1>product page</h1>")
	})
	a := call(t, "GET", sc.URL+"/product/42", "", "Accept", "text/html,application/xhtml+xml,*/*;q=0.8")
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	require.Contains(t, string(a.body), "product page", "let in at once: the app's page")
	require.Contains(t, strings.Join(a.header.Values("Set-Cookie"), ";"), gate.CookieName+"=")
	assert.Equal(t, []string{"private, no-store"}, a.header.Values("Cache-Control"))
	assert.Empty(t, a.header.Values("Expires"))

	// An admitted visitor's later requests keep the app's own caching.
	var cookie string
	for _, c := range a.header.Values("Set-Cookie") {
		cookie = strings.SplitN(c, ";", 2)[0]
	}
	a = call(t, "GET", sc.URL+"/product/42", "", "Accept", "text/html", "Cookie", cookie)
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	assert.Empty(t, a.header.Values("Set-Cookie"))
	assert.Equal(t, []string{"public, max-age=600"}, a.header.Values("Cache-Control"))
}
