// Package forwardauth_test runs anteroom's forward-auth check behind a real
// nginx (auth_request), with the nginx configuration that docs/forward-auth.md
// documents: the test reads it from that file, so the doc and what is tested
// cannot drift apart.
//
// It skips when nginx is not installed, and fails instead when the
// environment variable CI is set.
package forwardauth_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/gate"
	"github.com/anteroomhq/anteroom/gate/gatetest"
	"github.com/anteroomhq/anteroom/gate/token"
	"github.com/anteroomhq/anteroom/session"
)

const (
	base = "/anteroom"
	// docPath is the document whose nginx block the test runs.
	docPath    = "../../docs/forward-auth.md"
	docBegin   = "<!-- forward-auth nginx config: begin -->"
	docEnd     = "<!-- forward-auth nginx config: end -->"
	appContent = "APP CONTENT for "
)

// TestNginxAuthRequest drives the documented nginx config: anonymous and
// forged visitors get the waiting page at the URL they asked for, a visitor
// who joined through nginx gets the app while a slot is free, a second one
// waits until the first releases, and the gate cannot be picked by the
// visitor.
func TestNginxAuthRequest(t *testing.T) {
	bin := nginxBinary(t)
	sc := startSidecar(t)
	app := startApp(t)
	site := startNginx(t, bin, sc.addr, app.addr)

	// (1) No cookie: the waiting page at the protected URL, never the app.
	anon := newClient(t)
	r := get(t, anon, site+"/x")
	requireWaitingPage(t, r)
	assert.Equal(t, "no-store", r.header.Get("Cache-Control"))
	gateName := dataGate(t, r.body)
	assert.Equal(t, "default", gateName, "the waiting page names the gate the check asks about")
	// Any method: the page comes as a GET without the visitor's body.
	r = send(t, anon, http.MethodPost, site+"/x", "text/plain", "form data")
	requireWaitingPage(t, r)

	// (2) Joining through nginx with a free slot, as the page's snippet does:
	// the cookie comes back through nginx, the reload gets the app.
	first := newClient(t)
	requireWaitingPage(t, get(t, first, site+"/x"))
	joined := join(t, first, site, gateName)
	require.Equal(t, "active", joined.Status)
	r = get(t, first, site+"/x")
	require.Equal(t, http.StatusOK, r.status, r.body)
	assert.Equal(t, appContent+"/x", r.body)
	// POSTs reach the app with their bodies, while the check gets none: a
	// check that announced the body without sending it would leave the
	// kept-alive connection to the sidecar waiting for it.
	for _, size := range []int{5, 300 << 10, 0, 5, 300 << 10} {
		r = send(t, first, http.MethodPost, site+"/x", "text/plain", strings.Repeat("b", size))
		require.Equal(t, appContent+"/x", r.body, "an active session's POST reaches the app")
		assert.Equal(t, fmt.Sprintf("POST %d bytes", size), r.header.Get("X-App-Saw"), "with its method and body")
	}
	// A client without cookies may send the token as a Bearer token.
	r = send(t, newClient(t), http.MethodGet, site+"/api/data", "", "", "Authorization", "Bearer "+joined.Token)
	assert.Equal(t, appContent+"/api/data", r.body)

	// (3) A second visitor joins while the limit is reached: it waits, and
	// sees the waiting page at the protected URL.
	second := newClient(t)
	requireWaitingPage(t, get(t, second, site+"/x"))
	waiting := join(t, second, site, gateName)
	require.Equal(t, "waiting", waiting.Status)
	requireWaitingPage(t, get(t, second, site+"/x"))
	check := get(t, second, site+base+"/check?gate="+gateName) // the public check, as the contract has it
	assert.Equal(t, http.StatusForbidden, check.status)
	assert.Contains(t, check.body, `"session_not_active"`)
	assert.NotEmpty(t, check.header.Get("Retry-After"))

	// (4) The first releases its slot through nginx (naming its gate, as
	// every gate-scoped call must when the gate is not the sidecar's
	// default): the second is promoted at once and gets the app; the first
	// is back at the waiting page.
	r = send(t, first, http.MethodPost, site+base+"/api/release?gate="+gateName, "", "")
	require.Equal(t, http.StatusNoContent, r.status, r.body)
	r = get(t, second, site+"/x")
	require.Equal(t, http.StatusOK, r.status)
	assert.Equal(t, appContent+"/x", r.body)
	requireWaitingPage(t, get(t, first, site+"/x"))

	// (5) Forged tokens are no session: the active session's id signed with
	// another key, and garbage, as cookie or Bearer.
	foreign, err := token.NewSigner([]byte(strings.Repeat("f", 32)))
	require.NoError(t, err)
	forged, err := foreign.Sign(waiting.Session)
	require.NoError(t, err)
	for _, tok := range []string{forged, waiting.Session + ".AAAA", "garbage"} {
		c := newClient(t)
		c.Jar.SetCookies(mustURL(t, site), []*http.Cookie{{Name: gate.CookieName, Value: tok, Path: "/"}})
		requireWaitingPage(t, get(t, c, site+"/x"))
		requireWaitingPage(t, send(t, newClient(t), http.MethodGet, site+"/x", "", "", "Authorization", "Bearer "+tok))
	}

	// (6) The config pins the gate: a visitor active in another gate cannot
	// choose it with the header (or the query of the page's URL).
	other := newClient(t)
	require.Equal(t, "active", join(t, other, site, "open").Status)
	requireWaitingPage(t, send(t, other, http.MethodGet, site+"/x", "", "", gate.GateHeader, "open"))
	requireWaitingPage(t, get(t, other, site+"/x?gate=open"))

	// (7) The waiting page's websocket works through nginx, from the page's
	// own origin.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(site, "http")+base+"/ws?gate=default",
		&websocket.DialOptions{HTTPHeader: http.Header{"Origin": {site}}})
	require.NoError(t, err, "websocket through nginx")
	_, msg, err := ws.Read(ctx)
	require.NoError(t, err)
	assert.Contains(t, string(msg), `"type":"global"`)
	_ = ws.Close(websocket.StatusNormalClosure, "")

	// The app saw exactly the requests that got its content: nothing else
	// went past the check.
	assert.EqualValues(t, 8, app.hits.Load(), "requests that reached the app")
}

// ---- the sidecar and the app -----------------------------------------------

type sidecar struct{ addr string }

// startSidecar runs the sidecar over a real SQLite file with a fake clock.
// Gate "default" admits one session; the sidecar's default gate is "open",
// which admits many, so a config that failed to name "default" would let
// everyone through and fail the test.
func startSidecar(t *testing.T) sidecar {
	t.Helper()
	sc := gatetest.StartSidecar(t, gatetest.Options{
		Gates: []session.GateConfig{gatetest.Gate("default", 1), gatetest.Gate("open", 100)},
		// A config that forgets to pin the gate gets "open" and lets everyone in.
		Gate: func(o *gate.Options) { o.DefaultGate = "open" },
	})
	return sidecar{addr: sc.Server.Listener.Addr().String()}
}

type app struct {
	addr string
	hits *atomic.Int64
}

// startApp runs the protected app: "APP CONTENT for <path>", and the method
// and body size it saw in X-App-Saw.
func startApp(t *testing.T) app {
	t.Helper()
	hits := new(atomic.Int64)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		n, _ := io.Copy(io.Discard, r.Body)
		w.Header().Set("X-App-Saw", fmt.Sprintf("%s %d bytes", r.Method, n))
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, appContent+r.URL.Path)
	}))
	t.Cleanup(ts.Close)
	return app{addr: ts.Listener.Addr().String(), hits: hits}
}

// ---- nginx -------------------------------------------------------------------

// nginxBinary finds nginx with the auth_request module, or skips (fails
// under CI).
func nginxBinary(t *testing.T) string {
	t.Helper()
	missing := func(format string, args ...any) {
		t.Helper()
		msg := fmt.Sprintf(format, args...)
		if os.Getenv("CI") != "" {
			t.Fatalf("%s (CI is set, so this is a failure; CI installs the Debian package nginx, see .ci/run)", msg)
		}
		t.Skipf("%s; install nginx (Debian/Ubuntu: apt-get install nginx) to run this test", msg)
	}
	bin, err := exec.LookPath("nginx")
	if err != nil {
		bin = "/usr/sbin/nginx" // not on a non-root PATH on Debian
		if _, err := os.Stat(bin); err != nil {
			missing("nginx not found in PATH nor at /usr/sbin/nginx")
		}
	}
	out, err := exec.Command(bin, "-V").CombinedOutput()
	if err != nil {
		missing("%s -V failed: %v: %s", bin, err, out)
	}
	if !bytes.Contains(out, []byte("http_auth_request_module")) {
		missing("%s lacks ngx_http_auth_request_module: %s", bin, out)
	}
	return bin
}

// mainConf is the test's nginx.conf around the doc's block: a foreground,
// single-process nginx that keeps every file it writes in dir, so it runs
// as any user without root-owned directories.
const mainConf = `# generated by gate/forwardauth's test
master_process off;
worker_processes 1;
pid "{dir}/nginx.pid";
lock_file "{dir}/nginx.lock";
error_log "{dir}/error.log" notice;

events {
    worker_connections 256;
}

http {
    access_log "{dir}/access.log";
    client_body_temp_path "{dir}/client_body";
    proxy_temp_path "{dir}/proxy";
    fastcgi_temp_path "{dir}/fastcgi";
    uwsgi_temp_path "{dir}/uwsgi";
    scgi_temp_path "{dir}/scgi";

    # ---- docs/forward-auth.md ----
{doc}
}
`

// docConfig returns the nginx block of docs/forward-auth.md with the
// sidecar, app and listen addresses replaced.
func docConfig(t *testing.T, sidecarAddr, appAddr, listenAddr string) string {
	t.Helper()
	doc, err := os.ReadFile(docPath)
	require.NoError(t, err)
	_, rest, ok := strings.Cut(string(doc), docBegin)
	require.True(t, ok, "%s: no %q", docPath, docBegin)
	block, _, ok := strings.Cut(rest, docEnd)
	require.True(t, ok, "%s: no %q", docPath, docEnd)
	block = strings.TrimSpace(block)
	require.True(t, strings.HasPrefix(block, "```nginx\n") && strings.HasSuffix(block, "\n```"),
		"%s: the block between the markers must be one ```nginx fence", docPath)
	block = strings.TrimSuffix(strings.TrimPrefix(block, "```nginx\n"), "\n```")
	for _, rep := range [][2]string{
		{"server anteroom:8080;", "server " + sidecarAddr + ";"},
		{"server app:3000;", "server " + appAddr + ";"},
		{"listen 80;", "listen " + listenAddr + ";"},
	} {
		require.Equal(t, 1, strings.Count(block, rep[0]), "%s: the nginx block must contain %q exactly once", docPath, rep[0])
		block = strings.Replace(block, rep[0], rep[1], 1)
	}
	return block
}

// startNginx runs nginx with the doc's config in front of the sidecar and
// the app, waits until it serves, and returns its base URL. It retries on
// another port when the free port it picked was taken meanwhile.
func startNginx(t *testing.T, bin, sidecarAddr, appAddr string) string {
	t.Helper()
	var lastErr error
	for range 5 {
		site, err := tryNginx(t, bin, sidecarAddr, appAddr)
		if err == nil {
			return site
		}
		if !errors.Is(err, errAddrInUse) {
			t.Fatal(err)
		}
		lastErr = err
	}
	t.Fatalf("nginx: no free port after 5 tries: %v", lastErr)
	return ""
}

var errAddrInUse = errors.New("address already in use")

func tryNginx(t *testing.T, bin, sidecarAddr, appAddr string) (string, error) {
	t.Helper()
	listen := freeAddr(t)
	dir := t.TempDir()
	conf := strings.NewReplacer("{doc}", docConfig(t, sidecarAddr, appAddr, listen), "{dir}", dir).Replace(mainConf)
	confPath := filepath.Join(dir, "nginx.conf")
	require.NoError(t, os.WriteFile(confPath, []byte(conf), 0o600))
	errorLog := filepath.Join(dir, "error.log")

	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "-c", confPath, "-p", dir+"/", "-e", errorLog, "-g", "daemon off;")
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) } // fast shutdown
	cmd.WaitDelay = 3 * time.Second                                          // then SIGKILL
	var output bytes.Buffer
	cmd.Stdout, cmd.Stderr = &output, &output
	if err := cmd.Start(); err != nil {
		cancel()
		return "", fmt.Errorf("starting %s: %w", bin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stop := func() {
		cancel()
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			t.Errorf("nginx (pid %d) did not exit", cmd.Process.Pid)
		}
	}
	logs := func() string {
		b, _ := os.ReadFile(errorLog)
		return fmt.Sprintf("output:\n%s\nerror.log:\n%s\nnginx.conf:\n%s", output.String(), b, conf)
	}

	site := "http://" + listen
	probe := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(5 * time.Second)
	for {
		select {
		case err := <-exited:
			cancel()
			if strings.Contains(logs(), "Address already in use") {
				return "", fmt.Errorf("%w: %s", errAddrInUse, listen)
			}
			return "", fmt.Errorf("nginx exited at start: %v\n%s", err, logs())
		default:
		}
		// The snippet through nginx: proves nginx (not whoever else may hold
		// the port) serves, and that it reaches the sidecar.
		if resp, err := probe.Get(site + base + "/anteroom.js"); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK && strings.HasPrefix(resp.Header.Get("Server"), "nginx") {
				t.Cleanup(func() {
					stop()
					if t.Failed() {
						t.Logf("nginx %s", logs())
					}
				})
				return site, nil
			}
		}
		if time.Now().After(deadline) {
			stop()
			return "", fmt.Errorf("nginx did not serve %s within 5s\n%s", site, logs())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// freeAddr returns a loopback address nobody listened on a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

// ---- clients -----------------------------------------------------------------

// newClient is a browser-like client with its own cookie jar.
func newClient(t *testing.T) *http.Client {
	t.Helper()
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	return &http.Client{Jar: jar, Timeout: 5 * time.Second}
}

type reply struct {
	status int
	header http.Header
	body   string
}

func get(t *testing.T, c *http.Client, target string) reply {
	t.Helper()
	return send(t, c, http.MethodGet, target, "", "")
}

// send makes a request; headers are name, value pairs.
func send(t *testing.T, c *http.Client, method, target, contentType, body string, headers ...string) reply {
	t.Helper()
	req, err := http.NewRequest(method, target, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Accept", "text/html,application/xhtml+xml,*/*;q=0.8")
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
	return reply{status: resp.StatusCode, header: resp.Header, body: string(raw)}
}

type joinView struct {
	Status  string `json:"status"`
	Session string `json:"session"`
	Token   string `json:"token"`
}

// join does what the waiting page's snippet does on load: POST
// {base}/api/join with the page's gate, through nginx.
func join(t *testing.T, c *http.Client, site, gateName string) joinView {
	t.Helper()
	r := send(t, c, http.MethodPost, site+base+"/api/join", "application/json", `{"gate":"`+gateName+`"}`)
	require.Equal(t, http.StatusOK, r.status, r.body)
	var v joinView
	require.NoError(t, json.Unmarshal([]byte(r.body), &v), r.body)
	var cookie bool
	for _, ck := range c.Jar.Cookies(mustURL(t, site+"/x")) {
		cookie = cookie || ck.Name == gate.CookieName
	}
	require.True(t, cookie, "the join through nginx set the %s cookie for the whole site", gate.CookieName)
	return v
}

// requireWaitingPage checks that a reply is the sidecar's waiting page (200,
// loading the snippet), not the app.
func requireWaitingPage(t *testing.T, r reply) {
	t.Helper()
	require.NotContains(t, r.body, appContent, "the app must not be reached")
	require.Equal(t, http.StatusOK, r.status, r.body)
	require.Contains(t, r.header.Get("Content-Type"), "text/html")
	require.Contains(t, r.body, `src="`+base+`/anteroom.js"`)
}

var dataGateRE = regexp.MustCompile(`data-gate="([^"]*)"`)

// dataGate returns the gate the waiting page hands to its snippet.
func dataGate(t *testing.T, page string) string {
	t.Helper()
	m := dataGateRE.FindStringSubmatch(page)
	require.NotNil(t, m, "no data-gate in the waiting page")
	return m[1]
}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	require.NoError(t, err)
	return u
}
