// Package forwardauth_test runs anteroom's forward-auth check behind a real
// nginx (auth_request), with the nginx configuration that docs/forward-auth.md
// documents: the test reads it from that file and runs it verbatim but for
// its port numbers, so the doc and what is tested cannot drift apart.
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
	// The loopback ports the doc's block names: the sidecar's default
	// listen address and the app's.
	docSidecarPort = "8080"
	docAppPort     = "3000"
	// appSocket is the path of the app's own websocket.
	appSocket = "/live"
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
	assert.Equal(t, appSaw(joined.Session, "default"), r.header.Get("X-App-Anteroom"), "the app gets the verified session and the gate")

	// The app gets the session the check verified, never one the visitor
	// sent (however often), and no X-Anteroom-Key.
	req, err := http.NewRequest(http.MethodGet, site+"/x", nil)
	require.NoError(t, err)
	for _, h := range [][2]string{
		{"X-Anteroom-Session", "someone-else"}, {"X-Anteroom-Session", waitingLooking},
		{"X-Anteroom-Gate", "open"}, {"X-Anteroom-Key", "not-the-key-at-all-000"},
	} {
		req.Header.Add(h[0], h[1])
	}
	r = do(t, first, req)
	require.Equal(t, appContent+"/x", r.body)
	assert.Equal(t, appSaw(joined.Session, "default"), r.header.Get("X-App-Anteroom"))

	// The app's own websocket works through nginx for an active visitor,
	// and the handshake went through the check.
	requireAppSocket(t, site, joined.Token, joined.Session)

	// (3) A second visitor joins while the limit is reached: it waits, and
	// sees the waiting page at the protected URL.
	second := newClient(t)
	requireWaitingPage(t, get(t, second, site+"/x"))
	waiting := join(t, second, site, gateName)
	require.Equal(t, "waiting", waiting.Status)
	requireWaitingPage(t, get(t, second, site+"/x"))
	requireNoAppSocket(t, site, waiting.Token)
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
	assert.EqualValues(t, 10, app.hits.Load(), "requests that reached the app")
}

// waitingLooking is a client-sent session header that looks like a real id.
const waitingLooking = "0123456789abcdef0123456789abcdef"

// appSaw is what the app reports of the X-Anteroom-* headers it received.
func appSaw(session, gate string) string {
	return fmt.Sprintf("session=%q gate=%q key=%q", []string{session}, []string{gate}, []string(nil))
}

// requireAppSocket opens the app's own websocket through nginx with tok as
// the cookie, and checks that it carries messages both ways and that the
// app saw the verified session id.
func requireAppSocket(t *testing.T, site, tok, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ws, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(site, "http")+appSocket, &websocket.DialOptions{
		HTTPHeader: http.Header{"Origin": {site}, "Cookie": {gate.CookieName + "=" + tok}, "X-Anteroom-Session": {"forged"}},
	})
	require.NoError(t, err, "the app's websocket through nginx")
	defer ws.CloseNow()
	assert.Equal(t, http.StatusSwitchingProtocols, resp.StatusCode)
	_, msg, err := ws.Read(ctx)
	require.NoError(t, err)
	assert.Equal(t, "hello "+id, string(msg), "the app saw the verified session on the handshake")
	require.NoError(t, ws.Write(ctx, websocket.MessageText, []byte("ping")))
	_, msg, err = ws.Read(ctx)
	require.NoError(t, err)
	assert.Equal(t, "echo ping", string(msg))
	require.NoError(t, ws.Close(websocket.StatusNormalClosure, ""))
}

// requireNoAppSocket checks that a visitor who is not active cannot open
// the app's websocket: the check answers, and nginx sends the waiting page.
func requireNoAppSocket(t *testing.T, site, tok string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ws, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(site, "http")+appSocket, &websocket.DialOptions{
		HTTPHeader: http.Header{"Origin": {site}, "Cookie": {gate.CookieName + "=" + tok}},
	})
	if ws != nil {
		ws.CloseNow()
	}
	require.Error(t, err, "a waiting visitor must not reach the app's websocket")
	require.NotNil(t, resp, "nginx answered: %v", err)
	assert.Equal(t, http.StatusOK, resp.StatusCode, "the waiting page, not an upgrade")
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

// startApp runs the protected app: "APP CONTENT for <path>", the method and
// body size it saw in X-App-Saw, and the X-Anteroom-* headers it got in
// X-App-Anteroom. At appSocket it serves a websocket (checking the Origin
// against the Host, as websocket libraries do) that says hello to the
// session named in X-Anteroom-Session, then echoes one message.
func startApp(t *testing.T) app {
	t.Helper()
	hits := new(atomic.Int64)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if r.URL.Path == appSocket {
			serveAppSocket(w, r)
			return
		}
		n, _ := io.Copy(io.Discard, r.Body)
		w.Header().Set("X-App-Saw", fmt.Sprintf("%s %d bytes", r.Method, n))
		w.Header().Set("X-App-Anteroom", fmt.Sprintf("session=%q gate=%q key=%q",
			r.Header.Values("X-Anteroom-Session"), r.Header.Values("X-Anteroom-Gate"), r.Header.Values("X-Anteroom-Key")))
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, appContent+r.URL.Path)
	}))
	t.Cleanup(ts.Close)
	return app{addr: ts.Listener.Addr().String(), hits: hits}
}

func serveAppSocket(w http.ResponseWriter, r *http.Request) {
	ws, err := websocket.Accept(w, r, nil)
	if err != nil {
		return // Accept answered
	}
	defer ws.CloseNow()
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	if ws.Write(ctx, websocket.MessageText, []byte("hello "+strings.Join(r.Header.Values("X-Anteroom-Session"), ","))) != nil {
		return
	}
	_, msg, err := ws.Read(ctx)
	if err != nil {
		return
	}
	if ws.Write(ctx, websocket.MessageText, append([]byte("echo "), msg...)) != nil {
		return
	}
	_, _, _ = ws.Read(ctx) // until the client closes
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

// debianDefault is the answer of the stand-in for Debian's default site.
const debianDefault = "Debian's default site"

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

    # A stand-in for Debian's sites-enabled/default on what is port 80 in
    # the doc's block: a block that listens there without winning the
    # request's Host loses every request to it.
    server {
        listen {port80} default_server;
        server_name _;
        return 404 "{debian}\n";
    }

    # ---- docs/forward-auth.md ----
{doc}
}
`

// docBlock returns the nginx block of docs/forward-auth.md, as it stands.
func docBlock(t *testing.T) string {
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
	return strings.TrimSuffix(strings.TrimPrefix(block, "```nginx\n"), "\n```")
}

var (
	loopbackRE = regexp.MustCompile(`127\.0\.0\.1:(\d+)`)
	listenRE   = regexp.MustCompile(`(?m)^(\s*listen\s+)(\d+)\b`)
)

// ports are where the test's sidecar, app and nginx listen, on 127.0.0.1.
type ports struct{ sidecar, app, site, port80 string }

// docConfig returns the doc's nginx block with nothing changed but its port
// numbers: the loopback ports of the sidecar and the app become the test's,
// the port it listens on becomes the test's free port for nginx. It also
// returns the port the block listens on, as the doc has it.
func docConfig(t *testing.T, p ports) (block, listens string) {
	t.Helper()
	block = docBlock(t)
	seen := map[string]int{}
	block = loopbackRE.ReplaceAllStringFunc(block, func(m string) string {
		port := loopbackRE.FindStringSubmatch(m)[1]
		seen[port]++
		switch port {
		case docSidecarPort:
			return "127.0.0.1:" + p.sidecar
		case docAppPort:
			return "127.0.0.1:" + p.app
		}
		t.Errorf("%s: the nginx block names 127.0.0.1:%s; the test knows the sidecar at :%s and the app at :%s", docPath, port, docSidecarPort, docAppPort)
		return m
	})
	assert.Positive(t, seen[docSidecarPort], "%s: the nginx block must reach the sidecar at 127.0.0.1:%s", docPath, docSidecarPort)
	assert.Positive(t, seen[docAppPort], "%s: the nginx block must reach the app at 127.0.0.1:%s", docPath, docAppPort)
	listen := listenRE.FindAllStringSubmatch(block, -1)
	require.Len(t, listen, 1, "%s: the nginx block must have one `listen <port>;`", docPath)
	listens = listen[0][2]
	block = listenRE.ReplaceAllString(block, "${1}"+p.site)
	return block, listens
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
	p := ports{sidecar: portOf(t, sidecarAddr), app: portOf(t, appAddr), site: portOf(t, freeAddr(t))}
	p.port80 = portOf(t, freeAddr(t))
	block, listens := docConfig(t, p)
	if listens == "80" {
		p.port80 = p.site // the block's port 80 is where Debian's default site is
	}
	listen := "127.0.0.1:" + p.site
	dir := t.TempDir()
	conf := strings.NewReplacer("{doc}", block, "{dir}", dir, "{port80}", p.port80, "{debian}", debianDefault).Replace(mainConf)
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
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
			_ = resp.Body.Close()
			if bytes.HasPrefix(body, []byte(debianDefault)) {
				stop()
				t.Fatalf("%s: the nginx block lost %s to Debian's default site (listen 80 without a server_name the request names)\n%s", docPath, site, logs())
			}
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

func portOf(t *testing.T, addr string) string {
	t.Helper()
	_, port, err := net.SplitHostPort(addr)
	require.NoError(t, err)
	return port
}

// TestNginxAcceptsTheDocBlockVerbatim runs `nginx -t` on the doc's block
// exactly as written (hosts that do not resolve, for instance, fail it),
// beside Debian's default site on port 80.
func TestNginxAcceptsTheDocBlockVerbatim(t *testing.T) {
	bin := nginxBinary(t)
	dir := t.TempDir()
	conf := strings.NewReplacer("{doc}", docBlock(t), "{dir}", dir, "{port80}", "80", "{debian}", debianDefault).Replace(mainConf)
	confPath := filepath.Join(dir, "nginx.conf")
	require.NoError(t, os.WriteFile(confPath, []byte(conf), 0o600))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "-t", "-q", "-c", confPath, "-p", dir+"/", "-e", filepath.Join(dir, "error.log")).CombinedOutput()
	require.NoError(t, err, "nginx -t on the block of %s as written:\n%s", docPath, out)
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
	return do(t, c, req)
}

// do sends req, as a browser asking for a page unless it says otherwise.
func do(t *testing.T, c *http.Client, req *http.Request) reply {
	t.Helper()
	if req.Header.Get("Accept") == "" {
		req.Header.Set("Accept", "text/html,application/xhtml+xml,*/*;q=0.8")
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
