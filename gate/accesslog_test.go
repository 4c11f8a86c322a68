package gate_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/gate"
	"github.com/anteroomhq/anteroom/gate/gatetest"
	"github.com/anteroomhq/anteroom/session"
	"github.com/anteroomhq/anteroom/session/sessiontest"
)

// The access log has one line per request with method, path, status,
// latency, gate and a keyed hash of the session, and never a token, a
// session id or a query string, whichever way the session was carried.
func TestAccessLogNamesNoTokenNorSession(t *testing.T) {
	logs := &sessiontest.LogBuffer{}
	log := slog.New(slog.NewTextHandler(logs, nil))
	sc := gatetest.StartSidecar(t, gatetest.Options{
		Gates:  []session.GateConfig{gatetest.Gate("default", 1), gatetest.Gate("other", 1)},
		Logger: log,
		Gate: func(o *gate.Options) {
			o.AccessLog = true
			o.AccessLogKey = []byte("a key for the access log hashes")
		},
	})
	do := func(method, path, auth string) int {
		req, err := http.NewRequest(method, sc.URL+path, nil)
		require.NoError(t, err)
		if auth != "" {
			req.Header.Set("Authorization", "Bearer "+auth)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}

	// A join mints a session: its line names it by hash.
	resp, err := http.Post(sc.URL+"/anteroom/api/join", "application/json", strings.NewReader(`{"gate":"other"}`))
	require.NoError(t, err)
	var v struct{ Session, Token string }
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&v))
	resp.Body.Close()
	require.NotEmpty(t, v.Token)
	id, tok := v.Session, v.Token

	assert.Equal(t, http.StatusOK, do(http.MethodGet, "/anteroom/api/status?gate=other&session="+tok, ""))
	assert.Equal(t, http.StatusOK, do(http.MethodGet, "/anteroom/check?gate=other", tok))
	assert.Equal(t, http.StatusNotFound, do(http.MethodGet, "/anteroom/api/status?gate=nope&session="+tok, ""))
	assert.Equal(t, http.StatusNotFound, do(http.MethodGet, "/anteroom/no/such/route?session="+tok, ""))
	assert.Equal(t, http.StatusOK, do(http.MethodGet, "/healthz", ""))
	// A hostile path cannot forge a line nor flood one.
	assert.Equal(t, http.StatusNotFound, do(http.MethodGet, "/anteroom/x%0Atime=0%20level=ERROR%20msg=forged", ""))
	assert.Equal(t, http.StatusNotFound, do(http.MethodGet, "/anteroom/"+strings.Repeat("y", 4000), ""))
	c, _, err := websocket.Dial(context.Background(), "ws"+strings.TrimPrefix(sc.URL, "http")+"/anteroom/ws?gate=other&session="+tok, nil)
	require.NoError(t, err)
	c.Close(websocket.StatusNormalClosure, "")
	require.Eventually(t, func() bool { return strings.Count(logs.String(), "anteroom: request") >= 9 }, 5*time.Second, time.Millisecond)

	out := logs.String()
	assert.NotContains(t, out, tok)
	assert.NotContains(t, out, id)
	assert.NotContains(t, out, "?", "no query string")
	assert.NotContains(t, out, "\ntime=0", "a newline in the path is escaped")
	assert.NotContains(t, out, strings.Repeat("y", 300), "a path is cut")

	lines := map[string]string{} // path → line
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if !strings.Contains(l, "anteroom: request") {
			continue
		}
		p := regexp.MustCompile(`path=(\S+)`).FindStringSubmatch(l)
		require.NotNil(t, p, l)
		if _, seen := lines[p[1]]; !seen {
			lines[p[1]] = l
		}
		assert.Regexp(t, `method=[A-Z]+ path=("(?:[^"\\]|\\.)*"|\S+) status=\d{3} latency=[0-9.e-]+ gate=\S+ session=([0-9a-f]{16}|"")$`, l)
	}
	hash := regexp.MustCompile(`session=([0-9a-f]{16})`).FindStringSubmatch(lines["/anteroom/api/join"])
	require.NotNil(t, hash, "the join's line names its new session")
	for _, p := range []string{"/anteroom/api/status", "/anteroom/check", "/anteroom/ws"} {
		assert.Contains(t, lines[p], "gate=other session="+hash[1], "%s: the same session, the same hash", p)
	}
	assert.Contains(t, lines["/anteroom/api/join"], "status=200")
	assert.Contains(t, lines["/anteroom/check"], "method=GET")
	assert.Contains(t, lines["/anteroom/ws"], "status=101")
	assert.Contains(t, lines["/anteroom/no/such/route"], "status=404")
	assert.Contains(t, lines["/healthz"], "status=200 ")
	assert.Regexp(t, `gate="" session=""$`, lines["/healthz"])
	assert.Contains(t, out, `path=/anteroom/api/status status=404 latency=`)
	assert.Regexp(t, `status=404 latency=\S+ gate="" session=`, out, "an unknown gate is not logged")
}

// Off by default: nothing is logged per request.
func TestAccessLogOffByDefault(t *testing.T) {
	logs := &sessiontest.LogBuffer{}
	sc := gatetest.StartSidecar(t, gatetest.Options{
		Gates:  []session.GateConfig{gatetest.Gate("default", 1)},
		Logger: slog.New(slog.NewTextHandler(logs, nil)),
	})
	resp, err := http.Post(sc.URL+"/anteroom/api/join", "application/json", nil)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.NotContains(t, logs.String(), "anteroom: request")
}
