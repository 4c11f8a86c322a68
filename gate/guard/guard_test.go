package guard_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/gate/guard"
	"github.com/anteroomhq/anteroom/gate/token"
	"github.com/anteroomhq/anteroom/session"
)

const (
	acceptJSON    = "application/json"
	acceptBrowser = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"
)

// forge returns a well-formed token for id signed with another key.
func forge(t *testing.T, id string) string {
	t.Helper()
	other, err := token.NewSigner([]byte(strings.Repeat("x", 32)))
	require.NoError(t, err)
	tok, err := other.Sign(id)
	require.NoError(t, err)
	return tok
}

// checkers returns, for e, the in-process checker and a remote one against
// e's sidecar, so that every case runs over both.
func checkers(t *testing.T, e *env) map[string]guard.Checker {
	t.Helper()
	in, err := guard.NewInProcess(e.waitlist, e.signer, guard.InProcessOptions{})
	require.NoError(t, err)
	rc, err := guard.NewRemote(e.sidecarBase, guard.RemoteOptions{})
	require.NoError(t, err)
	return map[string]guard.Checker{"in-process": in, "remote": rc}
}

func TestMiddleware(t *testing.T) {
	e := newEnv(t, 1)
	active, st := e.join(t, "alice")
	require.Equal(t, session.StatusActive, st)
	waiting, st := e.join(t, "bob")
	require.Equal(t, session.StatusWaiting, st)
	gone, _ := e.join(t, "carol")
	require.NoError(t, e.waitlist.Release(context.Background(), "default", "carol"))
	forged := forge(t, "alice")

	for name, c := range checkers(t, e) {
		t.Run(name, func(t *testing.T) {
			url, reached := app(t, guard.Middleware(c, guard.MiddlewareOptions{}))

			t.Run("active passes, by cookie, bearer or query", func(t *testing.T) {
				for _, via := range []carrier{viaCookie, viaBearer, viaQuery} {
					before := reached.Load()
					r := get(t, url, active, via, acceptJSON)
					require.Equal(t, http.StatusOK, r.status, r.raw)
					assert.Equal(t, "secret", r.raw)
					assert.Equal(t, before+1, reached.Load())
				}
			})
			t.Run("waiting API client gets 403 JSON with Retry-After", func(t *testing.T) {
				before := reached.Load()
				for _, accept := range []string{acceptJSON, ""} {
					r := get(t, url, waiting, viaCookie, accept)
					requireJSONError(t, r, http.StatusForbidden, "session_not_active")
					s, err := strconv.Atoi(r.header.Get("Retry-After"))
					require.NoError(t, err, r.header.Get("Retry-After"))
					assert.GreaterOrEqual(t, s, 2)
					assert.LessOrEqual(t, s, 30)
				}
				assert.Equal(t, before, reached.Load())
			})
			t.Run("waiting browser gets the waiting page", func(t *testing.T) {
				r := get(t, url, waiting, viaCookie, acceptBrowser)
				requireWaitingPage(t, r, http.StatusForbidden)
				assert.NotEmpty(t, r.header.Get("Retry-After"))
			})
			t.Run("no, forged or released session gets 401 JSON", func(t *testing.T) {
				before := reached.Load()
				for _, tok := range []string{"", forged, gone, "garbage"} {
					r := get(t, url, tok, viaCookie, acceptJSON)
					requireJSONError(t, r, http.StatusUnauthorized, "no_session")
				}
				r := get(t, url, forged, viaBearer, acceptJSON)
				requireJSONError(t, r, http.StatusUnauthorized, "no_session")
				assert.Equal(t, before, reached.Load())
			})
			t.Run("no session in a browser gets the waiting page", func(t *testing.T) {
				requireWaitingPage(t, get(t, url, "", viaCookie, acceptBrowser), http.StatusUnauthorized)
				requireWaitingPage(t, get(t, url, forged, viaCookie, acceptBrowser), http.StatusUnauthorized)
			})
			t.Run("a POST from a browser gets JSON", func(t *testing.T) {
				req, err := http.NewRequest(http.MethodPost, url, strings.NewReader("x"))
				require.NoError(t, err)
				req.Header.Set("Accept", acceptBrowser)
				req.AddCookie(&http.Cookie{Name: "anteroom_session", Value: waiting})
				requireJSONError(t, send(t, req), http.StatusForbidden, "session_not_active")
			})
			t.Run("a HEAD gets no body", func(t *testing.T) {
				req, err := http.NewRequest(http.MethodHead, url, nil)
				require.NoError(t, err)
				req.Header.Set("Accept", acceptBrowser)
				r := send(t, req)
				assert.Equal(t, http.StatusUnauthorized, r.status)
				assert.Empty(t, r.raw)
			})
			t.Run("a valid token wins over an invalid one", func(t *testing.T) {
				req, err := http.NewRequest(http.MethodGet, url, nil)
				require.NoError(t, err)
				req.Header.Set("Authorization", "Bearer "+forged)
				req.AddCookie(&http.Cookie{Name: "anteroom_session", Value: active})
				assert.Equal(t, http.StatusOK, send(t, req).status)
			})
		})
	}
}

func TestMiddlewareOnDenied(t *testing.T) {
	e := newEnv(t, 1)
	active, _ := e.join(t, "alice")
	waiting, _ := e.join(t, "bob")
	for name, c := range checkers(t, e) {
		t.Run(name, func(t *testing.T) {
			denied := make(chan error, 3)
			url, reached := app(t, guard.Middleware(c, guard.MiddlewareOptions{
				OnDenied: func(w http.ResponseWriter, r *http.Request, err error) {
					denied <- err
					http.Redirect(w, r, "/queue", http.StatusSeeOther)
				},
			}))
			c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
			for _, tok := range []string{active, waiting, ""} {
				req, err := http.NewRequest(http.MethodGet, url, nil)
				require.NoError(t, err)
				if tok != "" {
					req.AddCookie(&http.Cookie{Name: "anteroom_session", Value: tok})
				}
				resp, err := c.Do(req)
				require.NoError(t, err)
				resp.Body.Close()
				if tok == active {
					assert.Equal(t, http.StatusOK, resp.StatusCode)
				} else {
					assert.Equal(t, http.StatusSeeOther, resp.StatusCode)
					assert.Equal(t, "/queue", resp.Header.Get("Location"))
				}
			}
			assert.Equal(t, int64(1), reached.Load())
			require.Len(t, denied, 2)
			assert.ErrorIs(t, <-denied, session.ErrNotActive)
			assert.ErrorIs(t, <-denied, guard.ErrNoSession)
		})
	}
}

func TestCheckerErrors(t *testing.T) {
	e := newEnv(t, 1)
	active, _ := e.join(t, "alice")
	waiting, _ := e.join(t, "bob")
	for name, c := range checkers(t, e) {
		t.Run(name, func(t *testing.T) {
			req := func(tok string) *http.Request {
				r := httptest.NewRequest(http.MethodGet, "/x", nil)
				if tok != "" {
					r.Header.Set("Authorization", "Bearer "+tok)
				}
				return r
			}
			for _, check := range []func(*http.Request) error{c.ValidateSessionIsActive, c.ValidateSessionAndRefreshLastActive} {
				require.NoError(t, check(req(active)))

				err := check(req(waiting))
				require.ErrorIs(t, err, session.ErrNotActive)
				assert.NotErrorIs(t, err, guard.ErrNoSession)
				var na *guard.NotActiveError
				require.ErrorAs(t, err, &na)
				assert.Equal(t, "default", na.Gate)
				assert.Equal(t, 5*time.Second, na.RetryAfter) // nobody admitted lately

				err = check(req(""))
				require.ErrorIs(t, err, guard.ErrNoSession)
				for _, s := range []error{session.ErrNotActive, session.ErrNotFound, session.ErrUnavailable, session.ErrInternal, session.ErrInvalidArgument, session.ErrUnknownGate} {
					assert.NotErrorIs(t, err, s)
				}
			}
			assert.Equal(t, "default", c.Gate())
		})
	}
}

// TestRefresh: by default an allowed request refreshes last_active (so an
// active user does not time out); SkipRefresh does not.
func TestRefresh(t *testing.T) {
	e := newEnv(t, 2)
	tok, _ := e.join(t, "alice")
	joined := e.clock.Now()
	c, err := guard.NewInProcess(e.waitlist, e.signer, guard.InProcessOptions{})
	require.NoError(t, err)
	lastActive := func() time.Time {
		require.NoError(t, e.waitlist.FlushTouches(context.Background()))
		s, err := e.store.Get(context.Background(), "default", "alice")
		require.NoError(t, err)
		return s.LastActive
	}

	skipURL, _ := app(t, guard.Middleware(c, guard.MiddlewareOptions{SkipRefresh: true}))
	e.clock.Advance(time.Minute)
	require.Equal(t, http.StatusOK, get(t, skipURL, tok, viaCookie, "").status)
	assert.True(t, lastActive().Equal(joined), "SkipRefresh must not refresh")

	url, _ := app(t, guard.Middleware(c, guard.MiddlewareOptions{}))
	now := e.clock.Advance(time.Minute)
	require.Equal(t, http.StatusOK, get(t, url, tok, viaCookie, "").status)
	assert.True(t, lastActive().Equal(now), "an allowed request must refresh")
}

func TestInProcessGateIsFixed(t *testing.T) {
	e := newEnv(t, 1)
	_, _ = e.join(t, "alice")
	waiting, _ := e.join(t, "bob")
	vip, err := guard.NewInProcess(e.waitlist, e.signer, guard.InProcessOptions{Gate: "vip"})
	require.NoError(t, err)
	assert.Equal(t, "vip", vip.Gate())
	def, err := guard.NewInProcess(e.waitlist, e.signer, guard.InProcessOptions{})
	require.NoError(t, err)
	url, _ := app(t, guard.Middleware(def, guard.MiddlewareOptions{}))
	// ?gate= or the gate header of the request do not pick another line.
	req, err := http.NewRequest(http.MethodGet, url+"?gate=vip", nil)
	require.NoError(t, err)
	req.Header.Set("X-Anteroom-Gate", "vip")
	req.Header.Set("Authorization", "Bearer "+waiting)
	requireJSONError(t, send(t, req), http.StatusForbidden, "session_not_active")
	// bob never joined vip: there, he has no session.
	err = vip.ValidateSessionIsActive(func() *http.Request {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.Header.Set("Authorization", "Bearer "+waiting)
		return r
	}())
	assert.ErrorIs(t, err, guard.ErrNoSession)
}

func TestNewInProcessErrors(t *testing.T) {
	e := newEnv(t, 1)
	_, err := guard.NewInProcess(nil, e.signer, guard.InProcessOptions{})
	assert.ErrorIs(t, err, session.ErrInvalidArgument)
	_, err = guard.NewInProcess(e.waitlist, nil, guard.InProcessOptions{})
	assert.ErrorIs(t, err, session.ErrInvalidArgument)
	_, err = guard.NewInProcess(e.waitlist, e.signer, guard.InProcessOptions{Gate: "nope"})
	assert.ErrorIs(t, err, session.ErrUnknownGate)
}

// TestInProcessUnavailable: once the Waitlist is closed, active sessions are
// still let in from memory and others get 503.
func TestInProcessUnavailable(t *testing.T) {
	e := newEnv(t, 1)
	active, _ := e.join(t, "alice")
	waiting, _ := e.join(t, "bob")
	c, err := guard.NewInProcess(e.waitlist, e.signer, guard.InProcessOptions{})
	require.NoError(t, err)
	url, _ := app(t, guard.Middleware(c, guard.MiddlewareOptions{}))
	require.NoError(t, e.waitlist.Close())
	assert.Equal(t, http.StatusOK, get(t, url, active, viaCookie, "").status)
	r := get(t, url, waiting, viaCookie, acceptBrowser)
	requireJSONError(t, r, http.StatusServiceUnavailable, "unavailable")
	assert.Equal(t, "5", r.header.Get("Retry-After"))
}

func TestWantsPage(t *testing.T) {
	for _, tc := range []struct {
		method, accept, fetchMode string
		want                      bool
	}{
		{http.MethodGet, acceptBrowser, "", true},
		{http.MethodHead, "text/html", "", true},
		{http.MethodGet, "", "navigate", true},
		{http.MethodGet, "application/json, text/html", "", false},
		{http.MethodGet, "*/*", "", false},
		{http.MethodGet, "", "", false},
		{http.MethodPost, acceptBrowser, "navigate", false},
	} {
		r := httptest.NewRequest(tc.method, "/", nil)
		if tc.accept != "" {
			r.Header.Set("Accept", tc.accept)
		}
		if tc.fetchMode != "" {
			r.Header.Set("Sec-Fetch-Mode", tc.fetchMode)
		}
		assert.Equal(t, tc.want, guard.WantsPage(r), "%+v", tc)
	}
}

func TestRetryAfter(t *testing.T) {
	// Without the exact place (an older sidecar): from the bounds.
	old := session.SessionView{Status: session.StatusWaiting, Position: 10}
	old.FirstWaitingPosition, old.LastWaitingPosition, old.Waiting, old.AdmittedPerMinute = 1, 20, 10, 6
	assert.Equal(t, 13*time.Second, guard.RetryAfter(old), "9 ahead, half of them gone: (4.5+1) at 6/min, asked 4 times")

	v := session.SessionView{Status: session.StatusWaiting, Position: 10, Place: 10}
	v.FirstWaitingPosition, v.LastWaitingPosition, v.Waiting = 1, 20, 20
	assert.Equal(t, 5*time.Second, guard.RetryAfter(v))
	v.AdmittedPerMinute = 60 // 10 ahead at 1/s: 10 s, asked 4 times: 2.5 s
	assert.Equal(t, 2*time.Second, guard.RetryAfter(v))
	v.AdmittedPerMinute = 1
	assert.Equal(t, 30*time.Second, guard.RetryAfter(v))
	v.AdmittedPerMinute = 6 // 100 s / 4 = 25 s
	assert.Equal(t, 25*time.Second, guard.RetryAfter(v))
}

func TestErrNoSessionMatchesNoSessionError(t *testing.T) {
	for _, s := range []error{session.ErrNotActive, session.ErrNotFound, session.ErrUnavailable, session.ErrInternal} {
		assert.False(t, errors.Is(guard.ErrNoSession, s))
		assert.False(t, errors.Is(s, guard.ErrNoSession))
	}
}

// TestMiddlewareRedirectToWaitingPage: browsers are sent to the sidecar's
// waiting page, which comes back to where they were going; API clients
// still get JSON.
func TestMiddlewareRedirectToWaitingPage(t *testing.T) {
	e := newEnv(t, 1)
	e.join(t, "alice")
	waiting, _ := e.join(t, "bob")
	sidecarOrigin := strings.TrimSuffix(e.sidecarBase, basePath)
	for name, c := range checkers(t, e) {
		t.Run(name, func(t *testing.T) {
			url, reached := app(t, guard.Middleware(c, guard.MiddlewareOptions{RedirectToWaitingPage: true}))
			for _, tok := range []string{waiting, ""} {
				r := get(t, url+"/app?x=1", tok, viaCookie, acceptBrowser)
				require.Equal(t, http.StatusSeeOther, r.status, r.raw)
				loc := r.header.Get("Location")
				assert.Equal(t, "/anteroom/?gate=default&next=%2Fapp%3Fx%3D1", loc)
				page := get(t, sidecarOrigin+loc, "", viaCookie, acceptBrowser)
				require.Equal(t, http.StatusOK, page.status, page.raw)
				assert.Contains(t, page.raw, `data-redirect-url="/app?x=1"`)
			}
			requireJSONError(t, get(t, url, waiting, viaCookie, acceptJSON), http.StatusForbidden, "session_not_active")
			assert.Zero(t, reached.Load())
		})
	}
}

// A sibling subdomain may set its own anteroom_session cookie for the parent
// domain: the first cookie that verifies names the session, for both
// checkers (the remote one forwards every cookie of that name).
func TestTwoSessionCookiesTheFirstThatVerifiesWins(t *testing.T) {
	e := newEnv(t, 1)
	active, st := e.join(t, "alice")
	require.Equal(t, session.StatusActive, st)
	forged := forge(t, "alice")

	for name, c := range checkers(t, e) {
		t.Run(name, func(t *testing.T) {
			url, reached := app(t, guard.Middleware(c, guard.MiddlewareOptions{}))
			for _, cookie := range []string{
				guard.CookieName + "=" + forged + "; " + guard.CookieName + "=" + active,
				guard.CookieName + "=garbage; other=1; " + guard.CookieName + "=" + active,
				guard.CookieName + "=" + active + "; " + guard.CookieName + "=" + forged,
			} {
				req, err := http.NewRequest(http.MethodGet, url, nil)
				require.NoError(t, err)
				req.Header.Set("Cookie", cookie)
				req.Header.Set("Accept", acceptJSON)
				before := reached.Load()
				r := send(t, req)
				require.Equal(t, http.StatusOK, r.status, "Cookie: %s: %s", cookie, r.raw)
				assert.Equal(t, before+1, reached.Load())
			}
			req, err := http.NewRequest(http.MethodGet, url, nil)
			require.NoError(t, err)
			req.Header.Set("Cookie", guard.CookieName+"="+forged+"; "+guard.CookieName+"=garbage")
			req.Header.Set("Accept", acceptJSON)
			requireJSONError(t, send(t, req), http.StatusUnauthorized, "no_session")
		})
	}
}

// SessionID runs on every request of the app: finding the token in the
// cookies (the second, behind a forged one) allocates nothing beyond what
// verifying the two tokens does.
func TestSessionIDAllocatesNothingBeyondVerifying(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts vary under the race detector (sync.Pool drops items at random); run without -race")
	}
	signer, err := token.NewSigner([]byte(strings.Repeat("k", 32)))
	require.NoError(t, err)
	tok, err := signer.Sign("alice")
	require.NoError(t, err)
	forged := forge(t, "alice")
	verifying := testing.AllocsPerRun(100, func() { signer.Verify(forged); signer.Verify(tok) })

	r := httptest.NewRequest(http.MethodGet, "/app", nil)
	r.Header.Set("Cookie", "a=1; "+guard.CookieName+"="+forged+"; b=2; "+guard.CookieName+"="+tok)
	var id string
	allocs := testing.AllocsPerRun(100, func() { id, _ = guard.SessionID(r, signer) })
	assert.Equal(t, "alice", id)
	assert.Equal(t, verifying, allocs)
}
