package guardecho_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/broadcast"
	"github.com/anteroomhq/anteroom/gate"
	"github.com/anteroomhq/anteroom/gate/guard"
	"github.com/anteroomhq/anteroom/gate/guardecho"
	"github.com/anteroomhq/anteroom/gate/token"
	"github.com/anteroomhq/anteroom/gate/wire"
	"github.com/anteroomhq/anteroom/session"
	"github.com/anteroomhq/anteroom/session/sessiontest"
	"github.com/anteroomhq/anteroom/session/sqlite"
)

type env struct {
	waitlist *session.Waitlist
	signer   *token.Signer
	checkers map[string]guard.Checker
}

// newEnv builds a real Waitlist over SQLite (one active slot), a real
// sidecar over it, and the two checkers.
func newEnv(t *testing.T) *env {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	store, err := sqlite.Open(filepath.Join(t.TempDir(), "anteroom.db"), sqlite.Options{Logger: log})
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Close() })
	hub := broadcast.New(broadcast.Options{Logger: log})
	t.Cleanup(func() { _ = hub.Close() })
	clock := sessiontest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	gates := []session.GateConfig{{Name: "default", ActiveLimit: 1, ActiveTimeout: 5 * time.Minute, WaitingTimeout: time.Minute}}
	wl, err := session.New(context.Background(), store, gates, session.Options{Clock: clock, Publisher: hub, Logger: log, TouchInterval: -1})
	require.NoError(t, err)
	t.Cleanup(func() { _ = wl.Close() })
	signer, err := token.NewSigner([]byte(strings.Repeat("k", 32)))
	require.NoError(t, err)
	srv, err := gate.New(gate.Options{BasePath: "/anteroom", Waitlist: wl, Signer: signer, Hub: hub, Logger: log})
	require.NoError(t, err)
	sidecar := httptest.NewServer(srv)
	t.Cleanup(sidecar.Close)

	in, err := guard.NewInProcess(wl, signer, guard.InProcessOptions{})
	require.NoError(t, err)
	rc, err := guard.NewRemote(sidecar.URL+"/anteroom", guard.RemoteOptions{})
	require.NoError(t, err)
	return &env{waitlist: wl, signer: signer, checkers: map[string]guard.Checker{"in-process": in, "remote": rc}}
}

func (e *env) join(t *testing.T, id string) string {
	t.Helper()
	view, err := e.waitlist.Join(context.Background(), "default", id)
	require.NoError(t, err)
	if view.Status == session.StatusActive {
		// The SQLite store may run its commit listener just after answering
		// Join: wait until the Waitlist's memory has the session.
		require.Eventually(t, func() bool { return e.waitlist.ValidateSessionIsActive("default", id) == nil },
			5*time.Second, time.Millisecond)
	}
	tok, err := e.signer.Sign(id)
	require.NoError(t, err)
	return tok
}

// echoApp serves GET /app (and /teapot, whose handler fails) behind mw.
func echoApp(t *testing.T, mw echo.MiddlewareFunc) string {
	t.Helper()
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	g := e.Group("", mw)
	g.GET("/app", func(c echo.Context) error { return c.String(http.StatusOK, "secret") })
	g.GET("/teapot", func(c echo.Context) error { return echo.NewHTTPError(http.StatusTeapot, "short and stout") })
	ts := httptest.NewServer(e)
	t.Cleanup(ts.Close)
	return ts.URL
}

type reply struct {
	status int
	header http.Header
	raw    string
	code   string
}

func get(t *testing.T, url, tok, accept string) reply {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	if tok != "" {
		req.AddCookie(&http.Cookie{Name: guard.CookieName, Value: tok})
	}
	c := &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	r := reply{status: resp.StatusCode, header: resp.Header, raw: string(raw)}
	if resp.Header.Get("Content-Type") == "application/json" {
		var body wire.ErrorBody
		require.NoError(t, json.Unmarshal(raw, &body), r.raw)
		r.code = string(body.Error.Code)
	}
	return r
}

const browser = "text/html,application/xhtml+xml,*/*;q=0.8"

func TestMiddleware(t *testing.T) {
	e := newEnv(t)
	active := e.join(t, "alice")
	waiting := e.join(t, "bob")
	for name, c := range e.checkers {
		t.Run(name, func(t *testing.T) {
			url := echoApp(t, guardecho.Middleware(c, guard.MiddlewareOptions{}))

			r := get(t, url+"/app", active, "application/json")
			require.Equal(t, http.StatusOK, r.status, r.raw)
			assert.Equal(t, "secret", r.raw)

			r = get(t, url+"/app", waiting, "application/json")
			require.Equal(t, http.StatusForbidden, r.status, r.raw)
			assert.Equal(t, "session_not_active", r.code)
			assert.Equal(t, "5", r.header.Get("Retry-After"))

			r = get(t, url+"/app", waiting, browser)
			require.Equal(t, http.StatusForbidden, r.status, r.raw)
			assert.Contains(t, r.raw, `src="/anteroom/anteroom.js"`)
			assert.NotContains(t, r.raw, "secret")

			r = get(t, url+"/app", "", "")
			require.Equal(t, http.StatusUnauthorized, r.status, r.raw)
			assert.Equal(t, "no_session", r.code)

			r = get(t, url+"/app", "", browser)
			require.Equal(t, http.StatusUnauthorized, r.status, r.raw)
			assert.Contains(t, r.raw, `data-gate="default"`)

			// The next handler's error goes to echo's error handler.
			r = get(t, url+"/teapot", active, "")
			assert.Equal(t, http.StatusTeapot, r.status, r.raw)
		})
	}
}

func TestMiddlewareOnDenied(t *testing.T) {
	e := newEnv(t)
	e.join(t, "alice")
	waiting := e.join(t, "bob")
	for name, c := range e.checkers {
		t.Run(name, func(t *testing.T) {
			got := make(chan error, 1)
			url := echoApp(t, guardecho.Middleware(c, guard.MiddlewareOptions{
				OnDenied: func(w http.ResponseWriter, r *http.Request, err error) {
					got <- err
					http.Redirect(w, r, "/queue", http.StatusSeeOther)
				},
			}))
			r := get(t, url+"/app", waiting, "")
			assert.Equal(t, http.StatusSeeOther, r.status)
			assert.ErrorIs(t, <-got, session.ErrNotActive)
		})
	}
}

func TestImportsNoSQLiteNorWebsocket(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("go is not on PATH in CI: %v", err)
		}
		t.Skipf("go is not on PATH: %v", err)
	}
	out, err := exec.Command(goBin, "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", "github.com/anteroomhq/anteroom/gate/guardecho").CombinedOutput()
	require.NoError(t, err, "%s", out)
	deps := strings.Fields(string(out))
	require.Contains(t, deps, "github.com/anteroomhq/anteroom/gate/guard")
	for _, d := range deps {
		assert.False(t, strings.HasPrefix(d, "modernc.org/") || strings.HasPrefix(d, "github.com/coder/"), "gate/guardecho must not depend on %s", d)
		assert.NotEqual(t, "github.com/anteroomhq/anteroom/gate", d, "gate/guardecho must not import the sidecar")
	}
}
