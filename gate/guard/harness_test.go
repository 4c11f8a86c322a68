package guard_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/gate/gatetest"
	"github.com/anteroomhq/anteroom/gate/token"
	"github.com/anteroomhq/anteroom/gate/wire"
	"github.com/anteroomhq/anteroom/session"
	"github.com/anteroomhq/anteroom/session/sessiontest"
	"github.com/anteroomhq/anteroom/session/sqlite"
)

const basePath = "/anteroom"

// env is a real Waitlist over SQLite in a temporary directory, with a fake
// clock, and a real sidecar over it on 127.0.0.1.
type env struct {
	store    *sqlite.Store
	waitlist *session.Waitlist
	clock    *sessiontest.Clock
	signer   *token.Signer
	// sidecarBase is the sidecar's base URL, for NewRemote.
	sidecarBase string
	// checks counts the sidecar's /check requests.
	checks atomic.Int64
	// failing makes the sidecar answer 500 to everything.
	failing atomic.Bool
}

func newEnv(t *testing.T, limit int64) *env {
	t.Helper()
	e := &env{}
	sc := gatetest.StartSidecar(t, gatetest.Options{
		Gates: []session.GateConfig{gatetest.Gate("default", limit), gatetest.Gate("vip", 1)},
		Wrap: func(sidecar http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == basePath+"/check" {
					e.checks.Add(1)
				}
				if e.failing.Load() {
					http.Error(w, "boom", http.StatusInternalServerError)
					return
				}
				sidecar.ServeHTTP(w, r)
			})
		},
	})
	e.store, e.waitlist, e.clock, e.signer = sc.Store, sc.Waitlist, sc.Clock, sc.Signer
	e.sidecarBase = sc.URL + basePath
	return e
}

// join puts session id in line at the default gate through the Waitlist and
// returns its token.
func (e *env) join(t *testing.T, id string) (string, session.Status) {
	t.Helper()
	view, err := e.waitlist.Join(context.Background(), "default", id)
	require.NoError(t, err)
	if view.Status == session.StatusActive {
		e.settle(t, id, true)
	}
	tok, err := e.signer.Sign(id)
	require.NoError(t, err)
	return tok, view.Status
}

// settle waits until the Waitlist's memory has id active (or not). The
// SQLite store answers its callers before it runs the commit listener (see
// the report), so for a moment after Join, Release or a promotion the memory
// may lag the store.
func (e *env) settle(t *testing.T, id string, active bool) {
	t.Helper()
	require.Eventually(t, func() bool {
		return (e.waitlist.ValidateSessionIsActive("default", id) == nil) == active
	}, 5*time.Second, time.Millisecond, "session %s active=%v in memory", id, active)
}

// app serves a protected handler behind mw on 127.0.0.1 and returns its URL
// and a counter of the requests that reached the handler.
func app(t *testing.T, mw func(http.Handler) http.Handler) (string, *atomic.Int64) {
	t.Helper()
	var reached atomic.Int64
	ts := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
		_, _ = io.WriteString(w, "secret")
	})))
	t.Cleanup(ts.Close)
	return ts.URL, &reached
}

type reply struct {
	status int
	header http.Header
	raw    string
	code   string // the JSON error code, if any
}

// how a test request carries its token.
type carrier int

const (
	viaCookie carrier = iota
	viaBearer
	viaQuery
)

func get(t *testing.T, url, tok string, via carrier, accept string) reply {
	t.Helper()
	if tok != "" && via == viaQuery {
		url += "?session=" + tok
	}
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	if tok != "" {
		switch via {
		case viaCookie:
			req.AddCookie(&http.Cookie{Name: "anteroom_session", Value: tok})
		case viaBearer:
			req.Header.Set("Authorization", "Bearer "+tok)
		}
	}
	return send(t, req)
}

func send(t *testing.T, req *http.Request) reply {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	r := reply{status: resp.StatusCode, header: resp.Header, raw: string(raw)}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		var body wire.ErrorBody
		require.NoError(t, json.Unmarshal(raw, &body), r.raw)
		assert.NotEmpty(t, body.Error.Message, r.raw)
		r.code = string(body.Error.Code)
	}
	return r
}

// requireJSONError checks the contract's error answer.
func requireJSONError(t *testing.T, r reply, status int, code string) {
	t.Helper()
	require.Equal(t, status, r.status, r.raw)
	require.Equal(t, "application/json", r.header.Get("Content-Type"), r.raw)
	assert.Equal(t, code, r.code, r.raw)
	assert.Equal(t, "no-store", r.header.Get("Cache-Control"))
}

// requireWaitingPage checks that r is the inline waiting page.
func requireWaitingPage(t *testing.T, r reply, status int) {
	t.Helper()
	require.Equal(t, status, r.status, r.raw)
	require.Equal(t, "text/html; charset=utf-8", r.header.Get("Content-Type"))
	assert.Contains(t, r.raw, `src="/anteroom/anteroom.js"`)
	assert.Contains(t, r.raw, `data-gate="default"`)
	assert.Contains(t, r.raw, `data-reload="true"`)
	assert.NotContains(t, r.raw, "secret")
	assert.Equal(t, "no-store", r.header.Get("Cache-Control"))
}
