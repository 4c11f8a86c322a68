package gate_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/gate"
)

// lenientApp is an app that reads a path as loosely as real servers do, all
// at once: backslashes as slashes (IIS), percent-decoding twice (a decoding
// filter in front of a decoding router), ";parameters" dropped from every
// segment (servlet containers), dot segments and repeated slashes resolved
// (path.Clean, like http.FileServer), and letters in any case (a
// case-insensitive file system). It serves a secret under /app and an asset
// under /static, and counts every secret it gives away. seen records the
// request target of the last request it got.
type lenientApp struct {
	*httptest.Server
	secrets atomic.Int64
	mu      sync.Mutex
	seen    string
}

func startLenientApp(t *testing.T) *lenientApp {
	a := &lenientApp{}
	a.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		a.seen = r.RequestURI
		a.mu.Unlock()
		p := lenientPath(r.RequestURI)
		switch {
		case p == "/app" || strings.HasPrefix(p, "/app/"):
			a.secrets.Add(1)
			fmt.Fprint(w, "SECRET of "+p)
		case strings.HasPrefix(p, "/static/"):
			fmt.Fprint(w, "asset "+p)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(a.Close)
	return a
}

func (a *lenientApp) lastTarget() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.seen
}

func lenientPath(target string) string {
	p, _, _ := strings.Cut(target, "?")
	if rest, ok := strings.CutPrefix(p, "http://"); ok { // absolute form
		_, p, _ = strings.Cut(rest, "/")
		p = "/" + p
	}
	for range 2 {
		p = strings.ReplaceAll(p, `\`, "/")
		if d, err := url.PathUnescape(p); err == nil {
			p = d
		}
	}
	segs := strings.Split(p, "/")
	for i, s := range segs {
		segs[i], _, _ = strings.Cut(s, ";")
	}
	return strings.ToLower(path.Clean("/" + strings.Join(segs, "/")))
}

// rawRequest sends target exactly as written (no client-side cleaning) and
// returns the answer.
func rawRequest(t *testing.T, addr, method, target string, headers ...string) (int, http.Header, string) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	require.NoError(t, err)
	defer conn.Close()
	require.NoError(t, conn.SetDeadline(time.Now().Add(10*time.Second)))
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n", method, target, addr)
	for i := 0; i+1 < len(headers); i += 2 {
		fmt.Fprintf(&b, "%s: %s\r\n", headers[i], headers[i+1])
	}
	b.WriteString("\r\n")
	_, err = io.WriteString(conn, b.String())
	require.NoError(t, err)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err, "target %q", target)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, resp.Header, string(body)
}

// The walk-arounds of protect and bypass: each variant either is refused as
// ambiguous (400 invalid_path) or is matched as the app will read it, so
// none reaches the secret without a session: not as an API call, not as a
// browser navigation (which joins a closed gate and waits), not as a
// websocket upgrade.
func TestProxyPathVariantsCannotWalkAroundProtectOrBypass(t *testing.T) {
	const refused, guarded = "refused", "guarded"
	variants := []struct{ target, want string }{
		{"/app/secret.html", guarded},
		{"/app", guarded},
		{"/static/../app/secret.html", guarded},
		{"/static/./../app/secret.html", guarded},
		{"/static//../app/secret.html", guarded},
		{"/static/../App/secret.html", guarded},
		{"/../app/secret.html", guarded},
		{"//app/secret.html", guarded},
		{"///app/secret.html", guarded},
		{"/./app/secret.html", guarded},
		{"/App/secret.html", guarded},
		{"/APP/SECRET.HTML", guarded},
		{"/%61pp/secret.html", guarded},
		{"/static/%2e%2e/app/secret.html", refused},
		{"/static/%2E%2E/app/secret.html", refused},
		{"/static/.%2e/app/secret.html", refused},
		{"/static/%2e%2e%2fapp/secret.html", refused},
		{"/static/..%2fapp/secret.html", refused},
		{"/static/..%2Fapp/secret.html", refused},
		{"/static%2f..%2fapp/secret.html", refused},
		{"/static/..%5capp/secret.html", refused},
		{`/static/..\app\secret.html`, refused},
		{`/static\..\app/secret.html`, refused},
		{"/static/%252e%252e/app/secret.html", refused},
		{"/static/..%252fapp/secret.html", refused},
		{"/static/..;/app/secret.html", refused},
		{"/static;/../app/secret.html", refused},
		{"/app;jsessionid=1/secret.html", refused},
		{"/app%3bjsessionid=1/secret.html", refused},
		{"/app%2fsecret.html", refused},
		{"/static/%00/../../app/secret.html", refused},
	}
	configs := map[string]gate.ProxyOptions{
		"protect everything, bypass /static/": {Bypass: []string{"/static/"}},
		"protect /app/, bypass /static/":      {Protect: []string{"/app/"}, Bypass: []string{"/static/"}},
	}
	kinds := map[string][]string{
		"api call":   {"Accept", "application/json"},
		"navigation": {"Accept", acceptHTML, "Sec-Fetch-Mode", "navigate", "Sec-Fetch-Dest", "document"},
		"websocket": {"Connection", "Upgrade", "Upgrade", "websocket", "Sec-WebSocket-Version", "13",
			"Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="},
	}
	for name, po := range configs {
		t.Run(name, func(t *testing.T) {
			app := startLenientApp(t)
			u, err := url.Parse(app.URL)
			require.NoError(t, err)
			h := newHarnessWith(t, 0, func(o *gate.Options) { // the gate is closed: nobody is let in
				po.Upstream = u
				o.Proxy = po
			})
			addr := strings.TrimPrefix(h.url, "http://")
			// The app really does read every variant as the secret.
			for _, v := range variants {
				require.True(t, lenientPath(v.target) == "/app" || strings.HasPrefix(lenientPath(v.target), "/app/"), v.target)
			}
			targets := make([]string, 0, 2*len(variants))
			wants := map[string]string{}
			for _, v := range variants {
				targets = append(targets, v.target, "http://"+addr+v.target) // origin and absolute form
				wants[v.target], wants["http://"+addr+v.target] = v.want, v.want
			}
			for _, target := range targets {
				for kind, hdr := range kinds {
					status, header, body := rawRequest(t, addr, http.MethodGet, target, hdr...)
					assert.NotContains(t, body, "SECRET", "%s %s", kind, target)
					switch {
					case wants[target] == refused:
						assert.Equal(t, http.StatusBadRequest, status, "%s %s: %s", kind, target, body)
						assert.Contains(t, body, `"code":"invalid_path"`, "%s %s", kind, target)
					case kind == "navigation":
						assert.Equal(t, http.StatusOK, status, "%s %s", kind, target)
						assert.Contains(t, body, "/anteroom/anteroom.js", "%s %s: the waiting page", kind, target)
						assert.Contains(t, header.Get("Set-Cookie"), gate.CookieName, "%s %s", kind, target)
					default:
						assert.Equal(t, http.StatusUnauthorized, status, "%s %s: %s", kind, target, body)
						assert.Contains(t, body, `"code":"no_session"`, "%s %s", kind, target)
					}
				}
			}
			assert.Zero(t, app.secrets.Load(), "the app gave the secret away")

			// Bypassed assets still pass without a session.
			status, _, body := rawRequest(t, addr, http.MethodGet, "/static/logo.svg")
			assert.Equal(t, http.StatusOK, status)
			assert.Equal(t, "asset /static/logo.svg", body)
			// A bypass prefix matches exactly: /STATIC/ is not an asset path.
			status, _, _ = rawRequest(t, addr, http.MethodGet, "/STATIC/logo.svg")
			if po.Protect == nil {
				assert.Equal(t, http.StatusUnauthorized, status)
			}
		})
	}
}

// What is matched is what the app gets: an admitted session's request goes
// to the app with its cleaned path.
func TestProxyForwardsTheCleanedPath(t *testing.T) {
	app := startLenientApp(t)
	u, err := url.Parse(app.URL)
	require.NoError(t, err)
	h := newHarnessWith(t, 1, func(o *gate.Options) {
		o.Proxy = gate.ProxyOptions{Upstream: u, Bypass: []string{"/static/"}}
	})
	c := newClient(t)
	require.Contains(t, do(t, c, http.MethodGet, h.url+"/app/", "", "", "Accept", acceptHTML).raw, "SECRET", "an active session gets in")
	cookie := cookieOf(t, c, mustParse(t, h.url))
	addr := strings.TrimPrefix(h.url, "http://")
	for target, want := range map[string]string{
		"/static/../app/secret.html": "/app/secret.html",
		"//app//x/./y/../z?q=1":      "/app/x/z?q=1",
		"/%61pp/a%20b/":              "/app/a%20b/",
		"/app/..":                    "/",
		"/static/a/../b.css":         "/static/b.css",
	} {
		status, _, _ := rawRequest(t, addr, http.MethodGet, target, "Cookie", cookie)
		require.NotEqual(t, http.StatusBadRequest, status, target)
		assert.Equal(t, want, app.lastTarget(), target)
	}
}

func mustParse(t *testing.T, raw string) *url.URL {
	u, err := url.Parse(raw)
	require.NoError(t, err)
	return u
}
