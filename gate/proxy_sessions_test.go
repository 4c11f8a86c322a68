package gate_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/gate"
	"github.com/anteroomhq/anteroom/gate/token"
)

// sessionCount is how many sessions the default gate holds.
func (h *harness) sessionCount(t *testing.T) int64 {
	t.Helper()
	g, err := h.waitlist.Global("default")
	require.NoError(t, err)
	return g.Active + g.Waiting
}

// Only a browser navigation creates a session in proxy mode: scripts, API
// clients, prefetches, previews, frames and websocket upgrades without a
// session get 401 no_session and leave nothing behind.
func TestProxyCreatesSessionsOnlyForNavigations(t *testing.T) {
	app := upstreamApp(t, nil)
	h := proxyHarness(t, app.URL)
	nonNavigations := map[string][]string{
		"no accept":            nil,
		"json":                 {"Accept", "application/json"},
		"any":                  {"Accept", "*/*"},
		"html and json":        {"Accept", "text/html, application/json"},
		"sec-purpose prefetch": {"Accept", acceptHTML, "Sec-Purpose", "prefetch"},
		"prerender":            {"Accept", acceptHTML, "Sec-Purpose", "prefetch;prerender"},
		"purpose prefetch":     {"Accept", acceptHTML, "Purpose", "prefetch"},
		"x-moz prefetch":       {"Accept", acceptHTML, "X-Moz", "prefetch"},
		"x-purpose preview":    {"Accept", acceptHTML, "X-Purpose", "preview"},
		"iframe":               {"Accept", acceptHTML, "Sec-Fetch-Mode", "navigate", "Sec-Fetch-Dest", "iframe"},
		"image":                {"Accept", "image/avif,image/webp,*/*", "Sec-Fetch-Dest", "image"},
		"websocket": {"Connection", "Upgrade", "Upgrade", "websocket", "Sec-WebSocket-Version", "13",
			"Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="},
	}
	for round := range 5 {
		for name, hdr := range nonNavigations {
			for _, method := range []string{http.MethodGet, http.MethodPost, http.MethodHead} {
				r := do(t, newClient(t), method, h.url+"/dashboard", "", "", hdr...)
				assert.Equal(t, http.StatusUnauthorized, r.status, "%s %s (round %d)", method, name, round)
				if method != http.MethodHead {
					requireError(t, r, http.StatusUnauthorized, "no_session")
				}
				assert.Empty(t, r.header.Get("Set-Cookie"), "%s %s", method, name)
			}
		}
		// POST and HEAD asking for a page are not navigations that may join.
		for _, method := range []string{http.MethodPost, http.MethodHead, http.MethodPut} {
			r := do(t, newClient(t), method, h.url+"/dashboard", "", "", "Accept", acceptHTML)
			assert.Equal(t, http.StatusUnauthorized, r.status, method)
		}
	}
	assert.Zero(t, h.sessionCount(t), "no session was created")

	// A forged or foreign token is no session either.
	r := do(t, newClient(t), http.MethodGet, h.url+"/dashboard", "", "", "Cookie", gate.CookieName+"=abc.def", "Accept", "application/json")
	requireError(t, r, http.StatusUnauthorized, "no_session")
	assert.Zero(t, h.sessionCount(t))

	// A navigation creates exactly one, and the page's own requests use it.
	c := newClient(t)
	r = do(t, c, http.MethodGet, h.url+"/dashboard", "", "", "Accept", acceptHTML)
	require.Equal(t, http.StatusOK, r.status)
	assert.Contains(t, r.raw, "app: GET /dashboard")
	assert.EqualValues(t, 1, h.sessionCount(t))
	r = do(t, c, http.MethodPost, h.url+"/api/orders", "application/json", `{}`, "Accept", "application/json")
	assert.Contains(t, r.raw, "app: POST /api/orders")
	assert.EqualValues(t, 1, h.sessionCount(t))

	// A session purged since (released here) is not re-created by a script,
	// only by the next navigation, under the same id.
	require.Equal(t, http.StatusNoContent, do(t, c, http.MethodPost, h.url+base+"/api/release", "", "").status)
	assert.Zero(t, h.sessionCount(t))
	requireError(t, do(t, c, http.MethodGet, h.url+"/api/orders", "", "", "Accept", "application/json"), http.StatusUnauthorized, "no_session")
	assert.Zero(t, h.sessionCount(t))
	r = do(t, c, http.MethodGet, h.url+"/dashboard", "", "", "Accept", acceptHTML)
	assert.Contains(t, r.raw, "app: GET /dashboard")
	assert.Empty(t, r.header.Get("Set-Cookie"), "the cookie still names the session")
	assert.EqualValues(t, 1, h.sessionCount(t))
}

// Session creation spends from the per-IP rate limit: in proxy mode as on
// POST {base}/api/join, from one budget.
func TestProxySessionCreationIsRateLimitedPerIP(t *testing.T) {
	app := upstreamApp(t, nil)
	u := mustParse(t, app.URL)
	h := newHarnessWith(t, 1, func(o *gate.Options) {
		o.Proxy = gate.ProxyOptions{Upstream: u}
		o.RateLimit = gate.RateLimitOptions{PerSecond: 0.001, Burst: 3} // no refill during the test
	})
	created, limited := 0, 0
	for range 10 {
		r := do(t, newClient(t), http.MethodGet, h.url+"/", "", "", "Accept", acceptHTML)
		switch r.status {
		case http.StatusOK:
			created++
			assert.Contains(t, r.header.Get("Set-Cookie"), gate.CookieName)
		case http.StatusTooManyRequests:
			limited++
			requireError(t, r, http.StatusTooManyRequests, "rate_limited")
			assert.NotEmpty(t, r.header.Get("Retry-After"))
			assert.Empty(t, r.header.Get("Set-Cookie"))
		default:
			t.Fatalf("unexpected %d: %s", r.status, r.raw)
		}
	}
	assert.Equal(t, 3, created, "the burst")
	assert.Equal(t, 7, limited)
	assert.EqualValues(t, 3, h.sessionCount(t))
	// The API's join spends from the same budget.
	requireError(t, do(t, newClient(t), http.MethodPost, h.url+base+"/api/join", "", ""), http.StatusTooManyRequests, "rate_limited")
	assert.EqualValues(t, 3, h.sessionCount(t))
}

// The same budget caps POST {base}/api/join without proxy mode.
func TestAPIJoinIsRateLimitedPerIP(t *testing.T) {
	h := newHarnessWith(t, 100, func(o *gate.Options) {
		o.RateLimit = gate.RateLimitOptions{PerSecond: 0.001, Burst: 4}
	})
	for i := range 8 {
		r := do(t, newClient(t), http.MethodPost, h.url+base+"/api/join", "", "")
		if i < 4 {
			assert.Equal(t, http.StatusOK, r.status)
		} else {
			requireError(t, r, http.StatusTooManyRequests, "rate_limited")
		}
	}
	assert.EqualValues(t, 4, h.sessionCount(t))
}

// headerEchoApp answers with what it received: headers, query and path.
func headerEchoApp(t *testing.T) *httptest.Server {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body) // trailers come after the body
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"header": r.Header, "trailer": r.Trailer, "query": r.URL.RawQuery, "path": r.URL.Path})
	}))
	t.Cleanup(ts.Close)
	return ts
}

type echoed struct {
	Header  http.Header `json:"header"`
	Trailer http.Header `json:"trailer"`
	Query   string      `json:"query"`
	Path    string      `json:"path"`
}

// anteroomHeaders lists the headers an app would read as one of anteroom's
// (CGI turns '-' and '_' alike into '_').
func (e echoed) anteroomHeaders() map[string][]string {
	out := map[string][]string{}
	for k, v := range e.Header {
		if strings.HasPrefix(strings.ToLower(strings.ReplaceAll(k, "_", "-")), "x-anteroom") {
			out[k] = v
		}
	}
	return out
}

// The app hears about the session only from the proxy: client-sent
// X-Anteroom-* headers are dropped, the admitted session and its gate are
// named, and anteroom's own credentials (cookie, Bearer token, ?session=)
// stay with anteroom while the app's pass untouched.
func TestProxyStripsAnteroomCredentialsAndSpoofedHeaders(t *testing.T) {
	app := headerEchoApp(t)
	h := newHarnessWith(t, 1, func(o *gate.Options) {
		o.Proxy = gate.ProxyOptions{Upstream: mustParse(t, app.URL), Bypass: []string{"/public/"}}
	})
	c := newClient(t)
	first := do(t, c, http.MethodGet, h.url+"/", "", "", "Accept", acceptHTML)
	require.Equal(t, http.StatusOK, first.status)
	base := mustParse(t, h.url)
	cookie := cookieOf(t, c, base)
	tok := strings.TrimPrefix(cookie, gate.CookieName+"=")
	id, ok := h.signer.Verify(tok)
	require.True(t, ok)

	get := func(target string, hdr ...string) echoed {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, h.url+target, nil)
		require.NoError(t, err)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Add(hdr[i], hdr[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		var e echoed
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&e))
		return e
	}
	spoofed := []string{
		"X-Anteroom-Session", "victim",
		"X-Anteroom-Gate", "vip",
		"X-Anteroom-Key", "k3y-for-the-backend-0123456789",
		"x-anteroom-admin", "yes",
		"X_Anteroom_Session", "victim2",
		"X-ANTEROOM-Session", "victim3",
		"X-Anteroomish", "1",
	}

	// Admitted, with the token in all three places at once.
	hdr := append([]string{
		"Cookie", "a=1; " + gate.CookieName + "=" + tok + "; b=2",
		"Cookie", "c=3",
		"Authorization", "Bearer " + tok,
	}, spoofed...)
	e := get("/orders?x=1&session="+url.QueryEscape(tok)+"&y=%20z&session=not-a-token", hdr...)
	assert.Equal(t, map[string][]string{gate.SessionHeader: {id}, gate.GateHeader: {"default"}}, e.anteroomHeaders(),
		"only the proxy names the session and the gate")
	assert.Equal(t, []string{"a=1; b=2", "c=3"}, e.Header["Cookie"], "the app's cookies pass, anteroom's does not")
	assert.Empty(t, e.Header.Get("Authorization"), "anteroom's bearer token stays with anteroom")
	assert.Equal(t, "x=1&y=%20z&session=not-a-token", e.Query, "the rest of the query passes byte for byte")
	assert.NotContains(t, strings.Join(e.Header.Values("Cookie"), ";")+e.Query, tok)

	// Naming our headers hop-by-hop does not remove them; trailers are
	// scrubbed like headers.
	e = get("/orders", append([]string{"Cookie", cookie, "Connection", "X-Anteroom-Session, X-Anteroom-Gate"}, spoofed...)...)
	assert.Equal(t, map[string][]string{gate.SessionHeader: {id}, gate.GateHeader: {"default"}}, e.anteroomHeaders())
	req, err := http.NewRequest(http.MethodPost, h.url+"/orders", io.MultiReader(strings.NewReader("body")))
	require.NoError(t, err)
	req.Header.Set("Cookie", cookie)
	req.ContentLength = -1
	req.Trailer = http.Header{"X-Anteroom-Session": {"victim"}, "X-App-Checksum": {"1"}}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&e))
	_ = resp.Body.Close()
	assert.NotContains(t, e.Trailer, "X-Anteroom-Session", "no X-Anteroom-* trailer reaches the app")
	assert.Contains(t, e.Trailer, "X-App-Checksum")

	// The app's own bearer token passes; a cookie-only request loses the
	// Cookie header entirely when anteroom's was the only cookie.
	e = get("/api", "Cookie", gate.CookieName+"="+tok, "Authorization", "Bearer app-own-token")
	assert.Equal(t, "Bearer app-own-token", e.Header.Get("Authorization"))
	assert.Empty(t, e.Header["Cookie"])
	assert.Equal(t, []string{id}, e.Header[gate.SessionHeader])

	// Bypassed paths: spoofed headers are dropped, and nothing is named.
	e = get("/public/x.css", spoofed...)
	assert.Empty(t, e.anteroomHeaders())
	e = get("/public/x.css", append([]string{"Cookie", gate.CookieName + "=" + tok}, spoofed...)...)
	assert.Empty(t, e.anteroomHeaders())
	assert.Empty(t, e.Header["Cookie"])
}

// In proxy mode a visitor whose own cookie comes after many foreign ones (a
// sibling subdomain's, set for the parent domain on every prefix of a deep
// path: browsers send the longest paths first) is still the same session:
// let through, no new session, no Set-Cookie that would replace theirs and
// lose their place.
func TestProxyKeepsAVisitorBehindManyForeignCookies(t *testing.T) {
	app := upstreamApp(t, nil)
	h := proxyHarness(t, app.URL)
	r := do(t, newClient(t), http.MethodGet, h.url+"/dashboard", "", "", "Accept", acceptHTML)
	require.Equal(t, http.StatusOK, r.status)
	var own string
	for _, c := range (&http.Response{Header: r.header}).Cookies() {
		if c.Name == gate.CookieName {
			own = c.Value
		}
	}
	require.NotEmpty(t, own)
	other, err := token.NewSigner([]byte(strings.Repeat("f", 32)))
	require.NoError(t, err)
	foreign, err := other.Sign("mallory")
	require.NoError(t, err)
	deep := "/" + strings.Repeat("a/", 60) + "page"
	for _, ahead := range []int{10, 63, 64, 100, 300} {
		parts := slices.Repeat([]string{gate.CookieName + "=" + foreign}, ahead)
		cookie := strings.Join(append(parts, gate.CookieName+"="+own), "; ")
		r := do(t, newClient(t), http.MethodGet, h.url+deep, "", "", "Accept", acceptHTML, "Cookie", cookie)
		assert.Equal(t, http.StatusOK, r.status, "%d foreign cookies ahead", ahead)
		assert.Contains(t, r.raw, "app: GET "+deep, "%d foreign cookies ahead", ahead)
		assert.Empty(t, r.header.Get("Set-Cookie"), "%d foreign cookies ahead: the visitor's cookie replaced", ahead)
	}
	assert.EqualValues(t, 1, h.sessionCount(t), "one visitor, one session")
}
