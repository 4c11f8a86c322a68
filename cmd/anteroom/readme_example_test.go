package main

import (
	"context"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/gate/gatetest"
	"github.com/anteroomhq/anteroom/gate/guard"
	"github.com/anteroomhq/anteroom/session"
)

// hostApp is a host app's handler: app under /app/, for active sessions of
// the sidecar at sidecarURL (its root, such as "http://127.0.0.1:8080"),
// and the sidecar's own /anteroom/ (the waiting page's snippet, API and
// websocket) passed on to it, so that the browser reaches it on the app's
// origin.
func hostApp(sidecarURL string, app http.Handler) (http.Handler, error) {
	sidecar, err := url.Parse(sidecarURL)
	if err != nil {
		return nil, err
	}
	checker, err := guard.NewRemote(sidecarURL+"/anteroom", guard.RemoteOptions{Gate: "default"})
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/anteroom/", httputil.NewSingleHostReverseProxy(sidecar))
	mux.Handle("/app/", guard.Middleware(checker, guard.MiddlewareOptions{BasePath: "/anteroom"})(app))
	return mux, nil
}

// The README's Go middleware example is hostApp above, character for
// character (so what runs below is what the README shows).
func TestREADMEMiddlewareExampleIsHostApp(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	require.NoError(t, err)
	block := regexp.MustCompile("(?s)\n  ```go\n(.*?)\n  ```\n").FindAllStringSubmatch(string(readme), -1)
	var example string
	for _, b := range block {
		if strings.Contains(b[1], "func hostApp(") {
			example = b[1]
		}
	}
	require.NotEmpty(t, example, "README has a go block with func hostApp")
	lines := strings.Split(example, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimPrefix(l, "  ")
	}
	example = strings.Join(lines, "\n")

	src, err := os.ReadFile("readme_example_test.go")
	require.NoError(t, err)
	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, "readme_example_test.go", src, parser.ParseComments)
	require.NoError(t, err)
	var here string
	for _, d := range file.Decls {
		if fn, ok := d.(*ast.FuncDecl); ok && fn.Name.Name == "hostApp" {
			here = string(src[fset.Position(fn.Doc.Pos()).Offset:fset.Position(fn.End()).Offset])
		}
	}
	require.NotEmpty(t, here)
	assert.Equal(t, here, example)
}

// Run against a real sidecar, the example admits an active visitor, gives a
// waiting one the waiting page, and that page's snippet, API and websocket
// load through the host app.
func TestREADMEMiddlewareExampleWorks(t *testing.T) {
	sc := gatetest.StartSidecar(t, gatetest.Options{Gates: []session.GateConfig{gatetest.Gate("default", 1)}})
	handler, err := hostApp(sc.URL, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "the app at "+r.URL.Path)
	}))
	require.NoError(t, err)
	host := httptest.NewServer(handler)
	t.Cleanup(host.Close)

	type visitor struct{ *http.Client }
	newVisitor := func() visitor {
		jar, err := cookiejar.New(nil)
		require.NoError(t, err)
		return visitor{&http.Client{Jar: jar}}
	}
	do := func(v visitor, method, path, accept string) (int, http.Header, string) {
		t.Helper()
		req, err := http.NewRequest(method, host.URL+path, nil)
		require.NoError(t, err)
		req.Header.Set("Accept", accept)
		resp, err := v.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, resp.Header, string(body)
	}
	const page = "text/html,application/xhtml+xml,*/*;q=0.8"
	alice, bob := newVisitor(), newVisitor()

	// Before joining, a browser gets the waiting page at the URL it asked
	// for; the page names the snippet under /anteroom/.
	status, h, body := do(alice, http.MethodGet, "/app/orders", page)
	assert.Equal(t, http.StatusUnauthorized, status)
	assert.Contains(t, h.Get("Content-Type"), "text/html")
	assert.Contains(t, body, `src="/anteroom/anteroom.js"`)

	// What the page then loads, through the host app: the snippet and the
	// sidecar's own waiting page.
	status, h, snippet := do(alice, http.MethodGet, "/anteroom/anteroom.js", "*/*")
	assert.Equal(t, http.StatusOK, status, "the snippet loads through the host")
	assert.Contains(t, h.Get("Content-Type"), "javascript")
	assert.Contains(t, snippet, "/api/join")
	status, _, body = do(alice, http.MethodGet, "/anteroom/?gate=default", page)
	assert.Equal(t, http.StatusOK, status)
	assert.Contains(t, body, `src="/anteroom/anteroom.js"`)

	// The snippet's join, through the host: the cookie lands on the app's
	// origin and the app lets the visitor in.
	join := func(v visitor) string {
		status, _, body := do(v, http.MethodPost, "/anteroom/api/join", "application/json")
		require.Equal(t, http.StatusOK, status, body)
		var view struct{ Status string }
		require.NoError(t, json.Unmarshal([]byte(body), &view))
		return view.Status
	}
	assert.Equal(t, "active", join(alice))
	status, _, body = do(alice, http.MethodGet, "/app/orders", page)
	assert.Equal(t, http.StatusOK, status)
	assert.Equal(t, "the app at /app/orders", body)

	// The second visitor waits: the page for a browser, JSON for a script.
	assert.Equal(t, "waiting", join(bob))
	status, _, body = do(bob, http.MethodGet, "/app/orders", page)
	assert.Equal(t, http.StatusForbidden, status)
	assert.Contains(t, body, `src="/anteroom/anteroom.js"`)
	status, _, body = do(bob, http.MethodGet, "/app/orders", "application/json")
	assert.Equal(t, http.StatusForbidden, status)
	assert.Contains(t, body, `"session_not_active"`)

	// The live updates come through the host too, from a page on its origin.
	hostURL, err := url.Parse(host.URL)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ws, resp, err := websocket.Dial(ctx, "ws://"+hostURL.Host+"/anteroom/ws?gate=default", &websocket.DialOptions{
		HTTPClient: bob.Client,
		HTTPHeader: http.Header{"Origin": {host.URL}},
	})
	require.NoError(t, err, "websocket through the host app")
	if resp != nil && resp.Body != nil {
		resp.Body.Close()
	}
	defer ws.CloseNow()
	// The socket carries Bob's cookie: his session's message comes.
	var msg []byte
	for range 3 {
		_, msg, err = ws.Read(ctx)
		require.NoError(t, err)
		if strings.Contains(string(msg), `"type":"session"`) {
			break
		}
	}
	assert.Contains(t, string(msg), `"type":"session"`)
	assert.Contains(t, string(msg), `"status":"waiting"`)

	// Alice leaves for good through the host; Bob is let in.
	status, _, _ = do(alice, http.MethodPost, "/anteroom/api/release", "application/json")
	require.Equal(t, http.StatusNoContent, status)
	status, _, body = do(bob, http.MethodGet, "/app/orders", page)
	assert.Equal(t, http.StatusOK, status)
	assert.Equal(t, "the app at /app/orders", body)
}
