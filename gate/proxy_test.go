package gate_test

import (
	"bufio"
	"context"
	"fmt"
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

	"github.com/anteroomhq/anteroom/gate"
)

// upstreamApp is the app behind the proxy: it says who it saw, echoes
// websocket messages, and streams.
func upstreamApp(t *testing.T, release <-chan struct{}) *httptest.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprintf(w, "app: %s %s xff=%s proto=%s host=%s", r.Method, r.URL.Path, r.Header.Get("X-Forwarded-For"), r.Header.Get("X-Forwarded-Proto"), r.Host)
	})
	mux.HandleFunc("/echo", func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		for {
			typ, data, err := c.Read(r.Context())
			if err != nil {
				return
			}
			if err := c.Write(r.Context(), typ, append([]byte("echo: "), data...)); err != nil {
				return
			}
		}
	})
	mux.HandleFunc("/stream", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "first")
		w.(http.Flusher).Flush()
		select { // the rest only after the client has read the first line
		case <-release:
		case <-r.Context().Done():
		}
		fmt.Fprintln(w, "second")
	})
	ts := httptest.NewServer(mux)
	t.Cleanup(ts.Close)
	return ts
}

// acceptHTML is what a browser sends when it loads a page.
const acceptHTML = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"

func proxyHarness(t *testing.T, upstream string) *harness {
	u, err := url.Parse(upstream)
	require.NoError(t, err)
	return newHarnessWith(t, 1, func(o *gate.Options) {
		o.Proxy = gate.ProxyOptions{Upstream: u, Bypass: []string{"/assets/", "/health"}}
	})
}

func TestProxyLetsTheActiveSessionThroughAndQueuesTheOther(t *testing.T) {
	app := upstreamApp(t, nil)
	h := proxyHarness(t, app.URL)
	first, second := newClient(t), newClient(t)

	r := do(t, first, http.MethodGet, h.url+"/dashboard", "", "", "Accept", acceptHTML)
	require.Equal(t, http.StatusOK, r.status)
	assert.Contains(t, r.raw, "app: GET /dashboard", "a newcomer is joined on its first page and, with a free slot, let through")
	assert.Contains(t, r.raw, "xff=127.0.0.1")
	assert.Contains(t, r.raw, "proto=http")
	assert.Contains(t, r.raw, "host="+strings.TrimPrefix(h.url, "http://"), "the app sees the host the browser asked for")

	// The second browser gets the waiting page, not the app.
	r = do(t, second, http.MethodGet, h.url+"/dashboard", "", "", "Accept", "text/html")
	require.Equal(t, http.StatusOK, r.status)
	assert.Contains(t, r.header.Get("Content-Type"), "text/html")
	assert.Equal(t, "no-store", r.header.Get("Cache-Control"))
	assert.Contains(t, r.raw, base+"/anteroom.js")
	assert.NotContains(t, r.raw, "app:")
	// The same session asking for JSON gets 503 with its view.
	r = do(t, second, http.MethodGet, h.url+"/api/orders", "", "", "Accept", "application/json")
	require.Equal(t, http.StatusServiceUnavailable, r.status)
	assert.Equal(t, "waiting", r.body["status"])
	assert.EqualValues(t, 2, r.body["position"])
	assert.NotEmpty(t, r.header.Get("Retry-After"))

	// Bypassed prefixes need no session.
	r = do(t, newClient(t), http.MethodGet, h.url+"/assets/app.css", "", "")
	assert.Contains(t, r.raw, "app: GET /assets/app.css")
	// The sidecar's own routes stay the sidecar's.
	r = do(t, second, http.MethodGet, h.url+base+"/api/status", "", "")
	assert.Equal(t, "waiting", r.body["status"])

	// The first leaves for good: the second is let through at once.
	require.Equal(t, http.StatusNoContent, do(t, first, http.MethodPost, h.url+base+"/api/release", "", "").status)
	r = do(t, second, http.MethodGet, h.url+"/dashboard", "", "")
	assert.Contains(t, r.raw, "app: GET /dashboard")
}

func TestProxyPassesWebsocketsAndStreams(t *testing.T) {
	release := make(chan struct{})
	app := upstreamApp(t, release)
	h := proxyHarness(t, app.URL)
	c := newClient(t)
	require.Contains(t, do(t, c, http.MethodGet, h.url+"/", "", "", "Accept", acceptHTML).raw, "app:")
	u, err := url.Parse(h.url)
	require.NoError(t, err)
	cookies := c.Jar.Cookies(u)
	require.Len(t, cookies, 1)
	cookie := cookies[0].Name + "=" + cookies[0].Value

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(h.url, "http")+"/echo", &websocket.DialOptions{HTTPHeader: http.Header{"Cookie": {cookie}}})
	require.NoError(t, err)
	defer ws.CloseNow()
	require.NoError(t, ws.Write(ctx, websocket.MessageText, []byte("hello")))
	_, data, err := ws.Read(ctx)
	require.NoError(t, err)
	assert.Equal(t, "echo: hello", string(data))

	// A waiter's websocket upgrade does not reach the app.
	waiter := newClient(t)
	do(t, waiter, http.MethodGet, h.url+"/", "", "", "Accept", acceptHTML)
	_, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(h.url, "http")+"/echo", &websocket.DialOptions{HTTPHeader: http.Header{"Cookie": {cookieOf(t, waiter, u)}}})
	require.Error(t, err)
	require.NotNil(t, resp)
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "refused while waiting, not an upgrade")

	// Streaming: the first line arrives while the app still holds the rest.
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.url+"/stream", nil)
	require.NoError(t, err)
	req.Header.Set("Cookie", cookie)
	sresp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer sresp.Body.Close()
	br := bufio.NewReader(sresp.Body)
	line, err := br.ReadString('\n')
	require.NoError(t, err)
	assert.Equal(t, "first\n", line)
	close(release)
	line, err = br.ReadString('\n')
	require.NoError(t, err)
	assert.Equal(t, "second\n", line)
}

func cookieOf(t *testing.T, c *http.Client, u *url.URL) string {
	cookies := c.Jar.Cookies(u)
	require.Len(t, cookies, 1)
	return cookies[0].Name + "=" + cookies[0].Value
}

func TestProxyAnswers502WhenTheUpstreamIsDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	dead := "http://" + ln.Addr().String()
	require.NoError(t, ln.Close()) // nothing listens there now
	h := proxyHarness(t, dead)
	c := newClient(t)
	// A browser gets a page saying so, anything else the JSON error.
	r := do(t, c, http.MethodGet, h.url+"/", "", "", "Accept", acceptHTML)
	assert.Equal(t, http.StatusBadGateway, r.status)
	assert.Contains(t, r.header.Get("Content-Type"), "text/html")
	assert.Contains(t, r.raw, "Bad Gateway")
	requireError(t, do(t, c, http.MethodGet, h.url+"/", "", ""), http.StatusBadGateway, "bad_gateway")
}

func TestProxyOptionsAreChecked(t *testing.T) {
	h := newHarness(t, 1)
	for _, raw := range []string{"ftp://x", "/relative"} {
		u, err := url.Parse(raw)
		require.NoError(t, err)
		_, err = gate.New(gate.Options{BasePath: base, Waitlist: h.waitlist, Signer: h.signer, Hub: h.hub,
			Proxy: gate.ProxyOptions{Upstream: u}})
		assert.ErrorContains(t, err, "Upstream must be an absolute http or https URL", raw)
	}
}

func TestAPIKeyJoinsWithTheAppsOwnID(t *testing.T) {
	const key = "k3y-for-the-backend-0123456789"
	h := newHarnessWith(t, 5, func(o *gate.Options) { o.APIKeys = []string{key} })
	body := `{"gate":"default","sessionId":"user:42"}`

	// Without the key: refused, and nothing changed.
	before := do(t, newClient(t), http.MethodGet, h.url+base+"/api/global", "", "")
	for name, hdr := range map[string][]string{"no key": nil, "wrong key": {gate.APIKeyHeader, "not-the-key-at-all-000"}} {
		r := do(t, newClient(t), http.MethodPost, h.url+base+"/api/join", "application/json", body, hdr...)
		requireError(t, r, http.StatusUnauthorized, "api_key_required")
		assert.Empty(t, r.header.Get("Set-Cookie"), name)
	}
	after := do(t, newClient(t), http.MethodGet, h.url+base+"/api/global", "", "")
	assert.Equal(t, before.body, after.body)

	// With it (header or Bearer): the app's id, and a token /check accepts.
	r := do(t, newClient(t), http.MethodPost, h.url+base+"/api/join", "application/json", body, gate.APIKeyHeader, key)
	require.Equal(t, http.StatusOK, r.status, r.raw)
	assert.Equal(t, "user:42", r.body["session"])
	assert.Empty(t, r.header.Get("Set-Cookie"), "the backend does not get the user's cookie")
	tok := r.body["token"].(string)
	assert.Equal(t, http.StatusOK, do(t, newClient(t), http.MethodGet, h.url+base+"/check", "", "", "Authorization", "Bearer "+tok).status)
	again := do(t, newClient(t), http.MethodPost, h.url+base+"/api/join", "application/json", body, "Authorization", "Bearer "+key)
	assert.Equal(t, r.body["position"], again.body["position"], "idempotent")

	requireError(t, do(t, newClient(t), http.MethodPost, h.url+base+"/api/join", "application/json", `{"sessionId":"a b"}`, gate.APIKeyHeader, key),
		http.StatusBadRequest, "invalid_argument")
	// The backend can release the user's session on logout.
	assert.Equal(t, http.StatusNoContent, do(t, newClient(t), http.MethodPost, h.url+base+"/api/release", "application/json", body, gate.APIKeyHeader, key).status)
	requireError(t, do(t, newClient(t), http.MethodGet, h.url+base+"/check", "", "", "Authorization", "Bearer "+tok), http.StatusUnauthorized, "no_session")
	requireError(t, do(t, newClient(t), http.MethodPost, h.url+base+"/api/release", "application/json", body), http.StatusUnauthorized, "api_key_required")

	_, err := gate.New(gate.Options{BasePath: base, Waitlist: h.waitlist, Signer: h.signer, Hub: h.hub, APIKeys: []string{"short"}})
	assert.ErrorContains(t, err, "at least 16")
}
