package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session/sessiontest"
)

type running struct {
	addr string
	log  *sessiontest.LogBuffer
	stop func() error
}

// start runs the program on loopback with the given environment and waits
// until it listens.
func start(t *testing.T, environ []string) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	addrCh := make(chan string, 1)
	done := make(chan error, 1)
	log := &sessiontest.LogBuffer{}
	env := append([]string{"ANTEROOM_LISTEN=127.0.0.1:0"}, environ...)
	go func() {
		done <- run(ctx, nil, env, io.Discard, log, func(addr string) { addrCh <- addr })
	}()
	select {
	case addr := <-addrCh:
		r := &running{addr: addr, log: log}
		var once sync.Once
		var stopErr error
		r.stop = func() error {
			once.Do(func() { cancel(); stopErr = <-done })
			return stopErr
		}
		t.Cleanup(func() { _ = r.stop() })
		return r
	case err := <-done:
		cancel()
		t.Fatalf("anteroom did not start: %v\n%s", err, log.String())
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatalf("anteroom did not start within 30s\n%s", log.String())
	}
	return nil
}

// postJoin joins the default gate at addr with cookie (none when empty)
// and returns the answer and the cookie it sets ("" for none).
func postJoin(t *testing.T, addr, cookie string) (map[string]any, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://"+addr+"/anteroom/api/join", nil)
	require.NoError(t, err)
	if cookie != "" {
		req.Header.Set("Cookie", cookie)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var v map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&v))
	set := ""
	if c := resp.Cookies(); len(c) == 1 {
		set = c[0].Name + "=" + c[0].Value
	}
	return v, set
}

func getJSON(t *testing.T, url string) (int, map[string]any) {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	var body map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
	return resp.StatusCode, body
}

func TestRunServesHealthAndShutsDownCleanly(t *testing.T) {
	db := filepath.Join(t.TempDir(), "anteroom.db")
	r := start(t, []string{"ANTEROOM_DATABASE=" + db})

	status, body := getJSON(t, "http://"+r.addr+"/healthz")
	assert.Equal(t, http.StatusOK, status)
	assert.Equal(t, "ok", body["status"])
	status, body = getJSON(t, "http://"+r.addr+"/readyz")
	assert.Equal(t, http.StatusOK, status)
	assert.Equal(t, "ready", body["status"])
	status, body = getJSON(t, "http://"+r.addr+"/anteroom/api/global")
	assert.Equal(t, http.StatusOK, status)
	assert.Equal(t, "default", body["gate"])
	assert.EqualValues(t, 100, body["limit"])

	// A second sidecar on the same database refuses to start, saying why.
	err := run(context.Background(), nil, []string{"ANTEROOM_LISTEN=127.0.0.1:0", "ANTEROOM_DATABASE=" + db}, io.Discard, io.Discard, nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "in use by another process")

	require.NoError(t, r.stop())
	assert.Contains(t, r.log.String(), "anteroom: shutting down")

	// The lock went with the process: the same file opens again.
	r2 := start(t, []string{"ANTEROOM_DATABASE=" + db})
	status, _ = getJSON(t, "http://"+r2.addr+"/healthz")
	assert.Equal(t, http.StatusOK, status)
}

func TestRunKeepsSessionsAcrossRestarts(t *testing.T) {
	db := filepath.Join(t.TempDir(), "anteroom.db")
	env := []string{"ANTEROOM_DATABASE=" + db, "ANTEROOM_GATES_DEFAULT_ACTIVE_LIMIT=1"}
	r := start(t, env)
	join := func(addr, cookie string) (map[string]any, string) {
		v, set := postJoin(t, addr, cookie)
		require.NotEmpty(t, set, "the session cookie")
		return v, set
	}
	first, firstCookie := join(r.addr, "")
	second, secondCookie := join(r.addr, "")
	assert.Equal(t, "active", first["status"])
	assert.Equal(t, "waiting", second["status"])
	require.NoError(t, r.stop())

	// The generated secret and the sessions survive the restart: both cookies
	// still name their sessions, with the same positions.
	r2 := start(t, env)
	again, _ := join(r2.addr, firstCookie)
	assert.Equal(t, first["position"], again["position"])
	assert.Equal(t, "active", again["status"])
	again, _ = join(r2.addr, secondCookie)
	assert.Equal(t, second["position"], again["position"])
	assert.Equal(t, "waiting", again["status"])
}

func TestVersionFlag(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), []string{"-version"}, nil, &out, io.Discard, nil))
	assert.Regexp(t, `^anteroom \S+\n$`, out.String())
}

func TestBadFlagsAndConfigFailToStart(t *testing.T) {
	err := run(context.Background(), []string{"-config", filepath.Join(t.TempDir(), "missing.yaml")}, nil, io.Discard, io.Discard, nil)
	assert.ErrorContains(t, err, "no such file")
	err = run(context.Background(), []string{"stray"}, nil, io.Discard, io.Discard, nil)
	assert.ErrorContains(t, err, "unexpected arguments")
	err = run(context.Background(), nil, []string{"ANTEROOM_UPSTREAM=localhost:3000"}, io.Discard, io.Discard, nil)
	assert.ErrorContains(t, err, "upstream")
}

func TestRunInReverseProxyMode(t *testing.T) {
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "the app at %s", r.URL.Path)
	}))
	defer app.Close()
	r := start(t, []string{
		"ANTEROOM_DATABASE=" + filepath.Join(t.TempDir(), "anteroom.db"),
		"ANTEROOM_UPSTREAM=" + app.URL,
		"ANTEROOM_BYPASS=/public/",
		"ANTEROOM_GATES_DEFAULT_ACTIVE_LIMIT=1",
	})
	get := func(c *http.Client, path string) string { // as a browser navigates
		req, err := http.NewRequest(http.MethodGet, "http://"+r.addr+path, nil)
		require.NoError(t, err)
		req.Header.Set("Accept", "text/html,application/xhtml+xml,*/*;q=0.8")
		resp, err := c.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return string(b)
	}
	jar1, _ := cookiejar.New(nil)
	jar2, _ := cookiejar.New(nil)
	assert.Equal(t, "the app at /orders", get(&http.Client{Jar: jar1}, "/orders"))
	assert.Contains(t, get(&http.Client{Jar: jar2}, "/orders"), "/anteroom/anteroom.js", "the second visitor waits")
	assert.Equal(t, "the app at /public/logo.svg", get(&http.Client{Jar: jar2}, "/public/logo.svg"))
}

// -h is a request, not an error: it exits 0, and points to where every key
// is explained, listing each with its variable.
func TestHelpFlag(t *testing.T) {
	for _, flag := range []string{"-h", "-help", "--help"} {
		var out, errOut bytes.Buffer
		require.NoError(t, run(context.Background(), []string{flag}, nil, &out, &errOut, nil), flag)
		assert.Empty(t, errOut.String())
		help := out.String()
		assert.Contains(t, help, "Usage: anteroom")
		assert.Contains(t, help, "-config")
		assert.Contains(t, help, "config.example.yaml")
		assert.Contains(t, help, "README")
		for _, s := range settings {
			assert.Regexp(t, `(?m)^  `+regexp.QuoteMeta(s.key)+` +`+regexp.QuoteMeta(s.env)+` `, help)
		}
	}
	// A wrong flag still fails, and says where to look.
	err := run(context.Background(), []string{"-confg", "x.yaml"}, nil, io.Discard, io.Discard, nil)
	assert.ErrorContains(t, err, "flag provided but not defined: -confg")
	assert.ErrorContains(t, err, "anteroom -h")
}

func TestHelpExitsZero(t *testing.T) {
	if os.Getenv("ANTEROOM_TEST_MAIN") == "1" {
		os.Args = []string{"anteroom", "-h"}
		main()
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelpExitsZero$")
	cmd.Env = append(os.Environ(), "ANTEROOM_TEST_MAIN=1")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "exit status of anteroom -h:\n%s", out)
	assert.Contains(t, string(out), "config.example.yaml")
}

// A sidecar in a Kubernetes pod beside a Service named anteroom starts,
// warning about the variables it does not know, without repeating their
// values.
func TestRunStartsWithUnknownVariables(t *testing.T) {
	r := start(t, []string{
		"ANTEROOM_DATABASE=" + filepath.Join(t.TempDir(), "anteroom.db"),
		"ANTEROOM_PORT=tcp://10.0.0.1:8080",
		"ANTEROOM_PORT_8080_TCP=tcp://10.0.0.1:8080",
		"ANTEROOM_SECRT=do-not-log-this-value-0123456789abcdef",
	})
	status, _ := getJSON(t, "http://"+r.addr+"/healthz")
	assert.Equal(t, http.StatusOK, status)
	log := r.log.String()
	assert.Contains(t, log, `msg="anteroom: ignoring unknown environment variable" var=ANTEROOM_PORT nearest_known=`)
	assert.Contains(t, log, "var=ANTEROOM_PORT_8080_TCP")
	assert.Contains(t, log, "var=ANTEROOM_SECRT nearest_known=ANTEROOM_SECRET")
	assert.Contains(t, log, "enableServiceLinks")
	assert.NotContains(t, log, "do-not-log-this-value")
	assert.NotContains(t, log, "10.0.0.1")
}

// demo: false leaves "/" to 404; by default the demo is there.
func TestRunDemoSwitch(t *testing.T) {
	for _, tt := range []struct {
		env                []string
		wantRoot, wantDemo int
	}{
		{env: nil, wantRoot: http.StatusOK, wantDemo: http.StatusUnauthorized},
		{env: []string{"ANTEROOM_DEMO=false"}, wantRoot: http.StatusNotFound, wantDemo: http.StatusNotFound},
	} {
		r := start(t, append([]string{"ANTEROOM_DATABASE=" + filepath.Join(t.TempDir(), "anteroom.db")}, tt.env...))
		for path, want := range map[string]int{"/": tt.wantRoot, "/demo/api/secret": tt.wantDemo} {
			resp, err := http.Get("http://" + r.addr + path)
			require.NoError(t, err)
			resp.Body.Close()
			assert.Equal(t, want, resp.StatusCode, "%v %s", tt.env, path)
		}
		// The sidecar itself is there either way.
		resp, err := http.Get("http://" + r.addr + "/anteroom/anteroom.js")
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, http.StatusOK, resp.StatusCode)
		require.NoError(t, r.stop())
	}
}

// The README's "lower the limit" recipe on a database that already holds
// sessions: the limit from the environment applies at the restart, nobody
// active is turned out, nobody new is admitted until fewer than the limit
// are active, and then the first waiter gets the slot at once.
func TestLoweredLimitAppliesToAnExistingDatabase(t *testing.T) {
	db := filepath.Join(t.TempDir(), "anteroom.db")
	call := func(addr, method, path, cookie string) (int, map[string]any, string) {
		t.Helper()
		req, err := http.NewRequest(method, "http://"+addr+"/anteroom"+path, nil)
		require.NoError(t, err)
		if cookie != "" {
			req.Header.Set("Cookie", cookie)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		var v map[string]any
		if resp.StatusCode == http.StatusOK {
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&v))
		}
		for _, c := range resp.Cookies() {
			cookie = c.Name + "=" + c.Value
		}
		return resp.StatusCode, v, cookie
	}

	// Before: the default limit; three visitors are in.
	r := start(t, []string{"ANTEROOM_DATABASE=" + db})
	var earlier []string
	for range 3 {
		_, v, cookie := call(r.addr, http.MethodPost, "/api/join", "")
		require.Equal(t, "active", v["status"])
		earlier = append(earlier, cookie)
	}
	require.NoError(t, r.stop())

	// The recipe: ANTEROOM_GATES_DEFAULT_ACTIVE_LIMIT=1 on the same file.
	r = start(t, []string{"ANTEROOM_DATABASE=" + db, "ANTEROOM_GATES_DEFAULT_ACTIVE_LIMIT=1"})
	_, global, _ := call(r.addr, http.MethodGet, "/api/global", "")
	assert.EqualValues(t, 1, global["limit"], "the environment's limit, not the one the database last ran with")
	assert.EqualValues(t, 3, global["active"], "nobody active is turned out")

	_, first, firstCookie := call(r.addr, http.MethodPost, "/api/join", "")
	_, second, secondCookie := call(r.addr, http.MethodPost, "/api/join", "")
	assert.Equal(t, "waiting", first["status"], "3 active of 1: a newcomer waits")
	assert.Equal(t, "waiting", second["status"])

	// Two of the three leave for good: one is still active, the limit is
	// reached, nobody is let in.
	for _, c := range earlier[:2] {
		status, _, _ := call(r.addr, http.MethodPost, "/api/release", c)
		require.Equal(t, http.StatusNoContent, status)
	}
	_, v, _ := call(r.addr, http.MethodGet, "/api/status", firstCookie)
	assert.Equal(t, "waiting", v["status"], "1 active of 1")
	assert.EqualValues(t, 1, v["active"])

	// The last one leaves: the first waiter, and only they, is let in at once.
	status, _, _ := call(r.addr, http.MethodPost, "/api/release", earlier[2])
	require.Equal(t, http.StatusNoContent, status)
	_, v, _ = call(r.addr, http.MethodGet, "/api/status", firstCookie)
	assert.Equal(t, "active", v["status"])
	_, v, _ = call(r.addr, http.MethodGet, "/api/status", secondCookie)
	assert.Equal(t, "waiting", v["status"])
	assert.EqualValues(t, 1, v["active"])
}

// /readyz asks the store: it answers 503 while the database cannot be
// written to (here: its file was moved away, so every write would be lost
// at the next start), and 200 again once it can. The reason, which names
// the file's path, goes to the log, once, not to whoever asks.
func TestReadyzReportsAStoreThatCannotWrite(t *testing.T) {
	db := filepath.Join(t.TempDir(), "anteroom.db")
	r := start(t, []string{"ANTEROOM_DATABASE=" + db})
	status, _ := getJSON(t, "http://"+r.addr+"/readyz")
	require.Equal(t, http.StatusOK, status)

	require.NoError(t, os.Rename(db, db+".moved"))
	for range 3 { // polled, as a load balancer does
		status, body := getJSON(t, "http://"+r.addr+"/readyz")
		assert.Equal(t, http.StatusServiceUnavailable, status)
		assert.Equal(t, "unavailable", body["error"].(map[string]any)["code"])
		assert.NotContains(t, fmt.Sprint(body), db, "the database's path answered to anyone")
	}
	assert.Equal(t, 1, strings.Count(r.log.String(), "removed or replaced"), "the reason logged once:\n%s", r.log.String())

	require.NoError(t, os.Rename(db+".moved", db))
	status, _ = getJSON(t, "http://"+r.addr+"/readyz")
	assert.Equal(t, http.StatusOK, status)
	assert.Contains(t, r.log.String(), "ready again")
}
