package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session/sessiontest"
)

// While the store opens and the waitlist loads, the listener already
// answers: /healthz 200, /readyz 503 starting, everything else 503 with
// Retry-After. Once loaded, the full sidecar serves, /metrics behind the
// admin token.
func TestStartupServesHealthWhileLoading(t *testing.T) {
	const admin = "an-operator-token-that-is-long-enough"
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addrCh := make(chan string, 1)
	loading := make(chan struct{})
	release := make(chan struct{})
	ctx = withStartHooks(ctx, startHooks{
		listening: func(addr string) { addrCh <- addr },
		loading:   func() { close(loading); <-release },
	})
	readyCh := make(chan string, 1)
	done := make(chan error, 1)
	logs := &sessiontest.LogBuffer{}
	env := []string{"ANTEROOM_LISTEN=127.0.0.1:0", "ANTEROOM_DATABASE=" + filepath.Join(t.TempDir(), "a.db"),
		"ANTEROOM_ADMIN_TOKEN=" + admin, "ANTEROOM_ACCESS_LOG=true"}
	go func() { done <- run(ctx, nil, env, io.Discard, logs, func(addr string) { readyCh <- addr }) }()
	var addr string
	select {
	case addr = <-addrCh:
	case err := <-done:
		t.Fatalf("run ended: %v\n%s", err, logs.String())
	case <-time.After(30 * time.Second):
		t.Fatal("not listening within 30s")
	}
	<-loading // held until release: the store is not open yet
	base := "http://" + addr

	get := func(method, path, auth string) (*http.Response, map[string]any) {
		req, err := http.NewRequest(method, base+path, nil)
		require.NoError(t, err)
		if auth != "" {
			req.Header.Set("Authorization", "Bearer "+auth)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		var body map[string]any
		if method != http.MethodHead {
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
		}
		return resp, body
	}
	errCode := func(body map[string]any) string {
		e, _ := body["error"].(map[string]any)
		s, _ := e["code"].(string)
		return s
	}

	resp, body := get(http.MethodGet, "/healthz", "")
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "ok", body["status"])
	resp, _ = get(http.MethodHead, "/healthz", "")
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	resp, body = get(http.MethodGet, "/readyz", "")
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	assert.Equal(t, "unavailable", errCode(body))
	assert.Contains(t, body["error"].(map[string]any)["message"], "starting")
	for _, r := range []struct{ method, path string }{
		{http.MethodPost, "/anteroom/api/join"},
		{http.MethodGet, "/anteroom/api/global"},
		{http.MethodGet, "/anteroom/check"},
		{http.MethodGet, "/anteroom/metrics"},
		{http.MethodGet, "/"},
	} {
		resp, body = get(r.method, r.path, admin)
		assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, r.path)
		assert.Equal(t, "unavailable", errCode(body), r.path)
		assert.Equal(t, "2", resp.Header.Get("Retry-After"), r.path)
	}
	select {
	case <-readyCh:
		t.Fatal("ready before the store loaded")
	default:
	}

	close(release)
	select {
	case got := <-readyCh:
		require.Equal(t, addr, got)
	case err := <-done:
		t.Fatalf("run ended: %v\n%s", err, logs.String())
	case <-time.After(30 * time.Second):
		t.Fatal("not ready within 30s")
	}
	resp, body = get(http.MethodGet, "/readyz", "")
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "ready", body["status"])
	resp, body = get(http.MethodPost, "/anteroom/api/join", "")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	tok, _ := body["token"].(string)
	id, _ := body["session"].(string)
	require.NotEmpty(t, tok)

	// /metrics wants the admin token, and counts the join.
	resp, _ = get(http.MethodGet, "/anteroom/metrics", "")
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	req, err := http.NewRequest(http.MethodGet, base+"/anteroom/metrics", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+admin)
	mresp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	text, err := io.ReadAll(mresp.Body)
	mresp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, mresp.StatusCode)
	assert.Contains(t, string(text), `anteroom_joins_total{gate="default"} 1`)
	assert.Contains(t, string(text), `anteroom_active_sessions{gate="default"} 1`)
	assert.Contains(t, string(text), `anteroom_active_limit{gate="default"} 100`)

	cancel()
	require.NoError(t, <-done)
	out := logs.String()
	assert.Contains(t, out, "anteroom: listening, starting")
	assert.Contains(t, out, "path=/anteroom/api/join status=200")
	assert.NotContains(t, out, tok, "the access log names no token")
	assert.NotContains(t, out, id, "the access log names no session id")
	assert.NotContains(t, out, admin, "nor the admin token")
	assert.Equal(t, 1, strings.Count(out, "anteroom: ready"))
}

// A config's admin_token shorter than 32 characters is refused, naming the
// key; access_log takes true or false.
func TestAdminTokenAndAccessLogConfig(t *testing.T) {
	cases := []struct {
		env     string
		wantErr string
	}{
		{"ANTEROOM_ADMIN_TOKEN=short", "admin_token"},
		{"ANTEROOM_ADMIN_TOKEN=" + strings.Repeat("a", 31), "admin_token"},
		{"ANTEROOM_ADMIN_TOKEN=" + strings.Repeat("a", 32), ""},
		{"ANTEROOM_ACCESS_LOG=maybe", "ANTEROOM_ACCESS_LOG"},
		{"ANTEROOM_ACCESS_LOG=true", ""},
	}
	for _, tc := range cases {
		t.Run(tc.env, func(t *testing.T) {
			cfg, _, err := LoadConfig("", []string{tc.env})
			if tc.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.wantErr)
				assert.NotContains(t, err.Error(), strings.Repeat("a", 31), "the error does not repeat the token")
				return
			}
			require.NoError(t, err)
			assert.True(t, cfg.AdminToken != "" || cfg.AccessLog)
		})
	}
	cfg, err := ParseConfig([]byte("admin_token: \"" + strings.Repeat("t", 40) + "\"\naccess_log: true\n"))
	require.NoError(t, err)
	assert.Equal(t, strings.Repeat("t", 40), cfg.AdminToken)
	assert.True(t, cfg.AccessLog)
	_, err = ParseConfig([]byte("access_log: sometimes\n"))
	assert.ErrorContains(t, err, "access_log")
}
