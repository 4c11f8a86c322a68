package main

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/gate/webhook"
	"github.com/anteroomhq/anteroom/session"
)

const (
	hookSecret = "receiver-secret-0123456789"
	hookAPIKey = "backend-api-key-0123456789"
)

// hookReceiver is a webhook endpoint: it records every delivery it
// verified, and answers with status (settable).
type hookReceiver struct {
	t      *testing.T
	mu     sync.Mutex
	status int
	got    []webhook.Delivery
	oks    map[string]int // idempotency key -> acknowledged deliveries
}

func (h *hookReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	// The signature, checked here by hand: t=<unix>,v1=<hex HMAC(t.body)>.
	sig := r.Header.Get("X-Anteroom-Signature")
	ts, mac, _ := strings.Cut(sig, ",")
	ts, _ = strings.CutPrefix(ts, "t=")
	mac, _ = strings.CutPrefix(mac, "v1=")
	m := hmac.New(sha256.New, []byte(hookSecret))
	m.Write([]byte(ts + "." + string(body)))
	if hex.EncodeToString(m.Sum(nil)) != mac {
		h.t.Errorf("bad signature %q on %s", sig, body)
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	var d webhook.Delivery
	if err := json.Unmarshal(body, &d); err != nil {
		h.t.Errorf("undecodable delivery %q: %v", body, err)
	}
	if d.ID != r.Header.Get("Idempotency-Key") {
		h.t.Errorf("delivery id %q, Idempotency-Key %q", d.ID, r.Header.Get("Idempotency-Key"))
	}
	h.mu.Lock()
	status := h.status
	h.got = append(h.got, d)
	if status == http.StatusOK {
		h.oks[d.ID]++
	}
	h.mu.Unlock()
	w.WriteHeader(status)
}

func (h *hookReceiver) setStatus(s int) {
	h.mu.Lock()
	h.status = s
	h.mu.Unlock()
}

// acked returns the acknowledged deliveries, first of each id.
func (h *hookReceiver) acked() map[string]webhook.Delivery {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string]webhook.Delivery{}
	for _, d := range h.got {
		if h.oks[d.ID] > 0 {
			if _, ok := out[d.ID]; !ok {
				out[d.ID] = d
			}
		}
	}
	return out
}

func (h *hookReceiver) attempts() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.got)
}

// waitFor polls cond every 20ms for at most 30s.
func waitHook(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for range 1500 {
		if cond() {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}

// buildBinary builds ./cmd/anteroom into dir.
func buildBinary(t *testing.T, dir string) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("this test builds the binary and needs go on PATH: %v", err)
		}
		t.Skipf("go not on PATH, cannot build the binary: %v", err)
	}
	bin := filepath.Join(dir, "anteroom")
	if out, err := exec.Command(goBin, "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// startWithEnv runs the binary on addr with the test's environment.
func startWithEnv(t *testing.T, bin, addr string, env []string) *crashProc {
	t.Helper()
	p := &crashProc{base: "http://" + addr, log: &crashLog{}, exited: make(chan struct{})}
	p.cmd = exec.Command(bin)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ANTEROOM_") {
			p.cmd.Env = append(p.cmd.Env, kv)
		}
	}
	p.cmd.Env = append(p.cmd.Env, "ANTEROOM_LISTEN="+addr)
	p.cmd.Env = append(p.cmd.Env, env...)
	p.cmd.Stdout = io.Discard
	p.cmd.Stderr = p.log
	require.NoError(t, p.cmd.Start())
	go func() { p.err = p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.exited
	})
	if !crashWaitReady(p, 30*time.Second) {
		t.Fatalf("the server did not become ready (exit: %v):\n%s", p.err, crashTail(p.log.String()))
	}
	return p
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

func hookEnv(db, receiverURL, events string) []string {
	return []string{
		"ANTEROOM_DATABASE=" + db,
		"ANTEROOM_RATE_LIMIT_PER_SECOND=0",
		"ANTEROOM_LOG_LEVEL=warn",
		"ANTEROOM_API_KEYS=" + hookAPIKey,
		"ANTEROOM_GATES_DEFAULT_ACTIVE_LIMIT=1",
		fmt.Sprintf(`ANTEROOM_WEBHOOKS=[{"url":%q,"events":%s,"secret":%q}]`, receiverURL, events, hookSecret),
	}
}

func apiCall(t *testing.T, c *http.Client, method, url, body string, header ...string) crashReply {
	t.Helper()
	r, err := crashDo(c, method, url, body, header...)
	require.NoError(t, err, "%s %s", method, url)
	return r
}

// A webhook committed but not delivered when the process is killed with
// SIGKILL is delivered after the restart: the rows are in the database,
// written in the transaction of the change.
func TestWebhooksSurviveKill(t *testing.T) {
	dir := t.TempDir()
	bin := buildBinary(t, dir)
	rc := &hookReceiver{t: t, status: http.StatusServiceUnavailable, oks: map[string]int{}}
	srv := httptest.NewServer(rc)
	defer srv.Close()
	db := filepath.Join(dir, "anteroom.db")
	env := hookEnv(db, srv.URL+"/hooks", `["promoted","released"]`)
	addr := freeAddr(t)
	p := startWithEnv(t, bin, addr, env)
	c := &http.Client{Timeout: 5 * time.Second}
	key := []string{"X-Anteroom-Key", hookAPIKey}
	require.Equal(t, 200, apiCall(t, c, "POST", p.base+"/anteroom/api/join", `{"sessionId":"a"}`, key...).status)
	require.Equal(t, 200, apiCall(t, c, "POST", p.base+"/anteroom/api/join", `{"sessionId":"b"}`, key...).status)
	require.Equal(t, 204, apiCall(t, c, "POST", p.base+"/anteroom/api/release", `{"sessionId":"a"}`, key...).status)
	// The release's answer came after its commit, rows included. Kill it
	// (it may or may not have tried a delivery; none was acknowledged; one
	// in flight holds its rows' lease, Timeout+10s, which the restarted
	// process waits out).
	require.NoError(t, p.cmd.Process.Kill())
	<-p.exited
	assert.Empty(t, rc.acked(), "nothing acknowledged before the kill")

	rc.setStatus(http.StatusOK)
	p = startWithEnv(t, bin, addr, env)
	waitHook(t, "both webhooks acknowledged after the restart", func() bool { return len(rc.acked()) >= 2 })
	var events []string
	for _, d := range rc.acked() {
		var data session.OutboxData
		require.NoError(t, json.Unmarshal(d.Data, &data))
		events = append(events, d.Event+":"+data.Session)
	}
	assert.ElementsMatch(t, []string{"released:a", "promoted:b"}, events)
	_ = p
}

// "Leave, we'll call you", end to end over HTTP on the real binary: a
// backend marks a waiter notify; the waiter shows no sign of life and keeps
// its place while a plain waiter is purged; promoted, the promoted webhook
// carries a claim link, whose page (a GET claims nothing) posts the
// ticket: that claims the slot and gives the browser the session; a
// second claim is refused.
func TestNotifyCallBack(t *testing.T) {
	dir := t.TempDir()
	bin := buildBinary(t, dir)
	rc := &hookReceiver{t: t, status: http.StatusOK, oks: map[string]int{}}
	srv := httptest.NewServer(rc)
	defer srv.Close()
	addr := freeAddr(t)
	env := append(hookEnv(filepath.Join(dir, "anteroom.db"), srv.URL, `["promoted","claimed","purged"]`),
		"ANTEROOM_PUBLIC_URL=http://"+addr,
		"ANTEROOM_UPDATE_INTERVAL=1s",
		"ANTEROOM_GATES_DEFAULT_WAITING_TIMEOUT=1s",
		"ANTEROOM_GATES_DEFAULT_NOTIFY_CLAIM_TIMEOUT=20m",
	)
	p := startWithEnv(t, bin, addr, env)
	c := &http.Client{Timeout: 5 * time.Second}
	key := []string{"X-Anteroom-Key", hookAPIKey}
	base := p.base + "/anteroom"

	// a is in; b (a browser) and c wait.
	require.Equal(t, 200, apiCall(t, c, "POST", base+"/api/join", `{"sessionId":"a"}`, key...).status)
	b := apiCall(t, c, "POST", base+"/api/join", ``)
	require.Equal(t, 200, b.status)
	require.Equal(t, string(session.StatusWaiting), b.view.Status)
	bID := b.view.Session
	require.Equal(t, 200, apiCall(t, c, "POST", base+"/api/join", `{"sessionId":"c"}`, key...).status)

	// The backend marks b; without the key it may not.
	assert.Equal(t, 401, apiCall(t, c, "POST", base+"/api/notify", fmt.Sprintf(`{"sessionId":%q,"notify":true}`, bID)).status)
	assert.Equal(t, 400, apiCall(t, c, "POST", base+"/api/notify", fmt.Sprintf(`{"sessionId":%q}`, bID), key...).status)
	assert.Equal(t, 404, apiCall(t, c, "POST", base+"/api/notify", `{"sessionId":"nobody","notify":true}`, key...).status)
	n := apiCall(t, c, "POST", base+"/api/notify", fmt.Sprintf(`{"sessionId":%q,"notify":true}`, bID), key...)
	require.Equal(t, 200, n.status, "%s", n.raw)
	assert.Contains(t, string(n.raw), `"notify":true`)

	// b closes its tab: no sign of life. c does the same and is purged for
	// it; b keeps its place.
	waitHook(t, "c purged for absence", func() bool {
		for _, d := range rc.acked() {
			if d.Event == "purged" && strings.Contains(string(d.Data), `"session":"c"`) {
				return true
			}
		}
		return false
	})
	g := apiCall(t, c, "GET", base+"/api/global?gate=default", "")
	assert.Equal(t, int64(1), g.view.Waiting, "b still waits")

	// a leaves for good: b is promoted and called back.
	require.Equal(t, 204, apiCall(t, c, "POST", base+"/api/release", `{"sessionId":"a"}`, key...).status)
	var promoted webhook.Delivery
	waitHook(t, "the promoted webhook", func() bool {
		for _, d := range rc.acked() {
			if d.Event == "promoted" {
				promoted = d
				return true
			}
		}
		return false
	})
	var data session.OutboxData
	require.NoError(t, json.Unmarshal(promoted.Data, &data))
	assert.Equal(t, bID, data.Session)
	assert.Equal(t, "default", data.Gate)
	assert.True(t, data.Notify)
	require.NotNil(t, data.ClaimDeadline)
	assert.Greater(t, time.Until(*data.ClaimDeadline), 15*time.Minute, "the notify claim window, not claim_timeout")
	require.True(t, strings.HasPrefix(promoted.ClaimURL, "http://"+addr+"/anteroom/claim?"), promoted.ClaimURL)
	require.NotEmpty(t, b.view.Token)
	assert.NotContains(t, promoted.ClaimURL, b.view.Token, "the link carries no session token")

	// Forged or misdirected links are refused and claim nothing.
	noRedirect := &http.Client{Timeout: 5 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	assert.Equal(t, 401, apiCall(t, noRedirect, "GET", strings.Replace(promoted.ClaimURL, "ticket=", "ticket=1", 1), "").status)
	assert.Equal(t, 200, apiCall(t, noRedirect, "HEAD", promoted.ClaimURL, "").status, "a HEAD (a link preview) does not claim")
	// A GET (a mail scanner, or the person) shows the claim page, which
	// claims nothing: its form posts the ticket.
	page := apiCall(t, noRedirect, "GET", promoted.ClaimURL+"&next=/welcome", "")
	require.Equal(t, 200, page.status)
	assert.Contains(t, string(page.raw), `action="/anteroom/claim?gate=default"`)

	// The page's POST claims and hands over the session.
	linkURL, err := url.Parse(promoted.ClaimURL)
	require.NoError(t, err)
	form := url.Values{"ticket": {linkURL.Query().Get("ticket")}, "next": {"/welcome"}}
	resp, err := noRedirect.Post(base+"/claim?gate=default", "application/x-www-form-urlencoded", strings.NewReader(form.Encode()))
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	assert.Equal(t, "/welcome", resp.Header.Get("Location"))
	var cookie *http.Cookie
	for _, ck := range resp.Cookies() {
		if ck.Name == "anteroom_session" {
			cookie = ck
		}
	}
	require.NotNil(t, cookie, "the visit gets the session's cookie")
	st := apiCall(t, c, "GET", base+"/api/status", "", "Cookie", "anteroom_session="+cookie.Value)
	require.Equal(t, 200, st.status)
	assert.Equal(t, string(session.StatusActive), st.view.Status)
	assert.Equal(t, bID, st.view.Session)
	assert.NotContains(t, string(st.raw), "claimDeadline", "claimed")
	assert.Equal(t, 200, apiCall(t, c, "GET", base+"/check", "", "Cookie", "anteroom_session="+cookie.Value).status)

	// The second claim is refused; the claim went out as a webhook.
	again := apiCall(t, noRedirect, "POST", base+"/claim?gate=default", form.Encode(), "Content-Type", "application/x-www-form-urlencoded")
	assert.Equal(t, http.StatusConflict, again.status)
	assert.Contains(t, string(again.raw), "already_claimed")
	waitHook(t, "the claimed webhook", func() bool {
		for _, d := range rc.acked() {
			if d.Event == "claimed" && strings.Contains(string(d.Data), bID) {
				return true
			}
		}
		return false
	})
	assert.Positive(t, rc.attempts())
}

// The webhook keys: from the file and from the environment (a JSON list),
// each bad value refused with its key named; the notify claim window's
// variable is not mistaken for claim_timeout's (same suffix).
func TestWebhookConfig(t *testing.T) {
	good := `[{"url":"https://app.example/hooks","events":["promoted","event.started"],"secret":"0123456789abcdef"}]`
	cfg, _, err := LoadConfig("", []string{"ANTEROOM_WEBHOOKS=" + good, "ANTEROOM_PUBLIC_URL=https://shop.example.com",
		"ANTEROOM_GATES_DEFAULT_NOTIFY_CLAIM_TIMEOUT=20m", "ANTEROOM_GATES_DEFAULT_CLAIM_TIMEOUT=30s"})
	require.NoError(t, err)
	require.Len(t, cfg.Webhooks, 1)
	assert.Equal(t, WebhookConfig{URL: "https://app.example/hooks", Events: []string{"promoted", "event.started"}, Secret: "0123456789abcdef"}, cfg.Webhooks[0])
	assert.Equal(t, "https://shop.example.com", cfg.PublicURL)
	require.Len(t, cfg.Gates, 1, "no gate named default_notify was made up")
	gates := cfg.SessionGates()
	assert.Equal(t, 20*time.Minute, gates[0].NotifyClaimTimeout)
	assert.Equal(t, 30*time.Second, gates[0].ClaimTimeout)

	path := writeConfig(t, `
public_url: "https://shop.example.com/"
webhooks:
  - url: "http://127.0.0.1:9000/h"
    events: ["claimed"]
    secret: "0123456789abcdef"
gates:
  default:
    notify_claim_timeout: "1h"
`)
	cfg, _, err = LoadConfig(path, nil)
	require.NoError(t, err)
	assert.Equal(t, "http://127.0.0.1:9000/h", cfg.Webhooks[0].URL)
	assert.Equal(t, time.Hour, cfg.SessionGates()[0].NotifyClaimTimeout)

	for _, tc := range []struct {
		env, want string
	}{
		{`ANTEROOM_WEBHOOKS=[{"url":"ftp://x/","events":["promoted"],"secret":"0123456789abcdef"}]`, "webhooks[0].url"},
		{`ANTEROOM_WEBHOOKS=[{"url":"file:///etc/passwd","events":["promoted"],"secret":"0123456789abcdef"}]`, "webhooks[0].url"},
		{`ANTEROOM_WEBHOOKS=[{"url":"https://a/","events":["joined"],"secret":"0123456789abcdef"}]`, "webhooks[0].events"},
		{`ANTEROOM_WEBHOOKS=[{"url":"https://a/","events":[],"secret":"0123456789abcdef"}]`, "webhooks[0].events"},
		{`ANTEROOM_WEBHOOKS=[{"url":"https://a/","events":["promoted"],"secret":"short"}]`, "webhooks[0].secret"},
		{`ANTEROOM_WEBHOOKS=[{"url":"https://a/","events":["promoted"],"secret":"0123456789abcdef","extra":1}]`, "ANTEROOM_WEBHOOKS"},
		{`ANTEROOM_WEBHOOKS=https://a/`, "ANTEROOM_WEBHOOKS"},
		{`ANTEROOM_WEBHOOKS=[{"url":"https://a/","events":["promoted"],"secret":"0123456789abcdef"},{"url":"https://a/","events":["claimed"],"secret":"0123456789abcdef"}]`, "webhooks[1].url"},
		{`ANTEROOM_PUBLIC_URL=shop.example.com`, "public_url"},
		{`ANTEROOM_PUBLIC_URL=https://shop.example.com/app`, "public_url"},
		{`ANTEROOM_PUBLIC_URL=javascript:alert(1)`, "public_url"},
		{`ANTEROOM_GATES_DEFAULT_NOTIFY_CLAIM_TIMEOUT=-1m`, "notify_claim_timeout"},
	} {
		t.Run(tc.env, func(t *testing.T) {
			_, _, err := LoadConfig("", []string{tc.env})
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	_, err = ParseConfig([]byte("webhooks:\n  - url: 5\n    evnts: []\n"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "evnts")
}
