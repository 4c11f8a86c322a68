package guard_test

import (
	"bytes"
	"context"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/gate/guard"
	"github.com/anteroomhq/anteroom/gate/token"
	"github.com/anteroomhq/anteroom/session"
	"github.com/anteroomhq/anteroom/session/sessiontest"
)

func bearer(tok string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "/x", nil)
	r.Header.Set("Authorization", "Bearer "+tok)
	return r
}

func TestRemoteSidecarDown(t *testing.T) {
	ts := httptest.NewServer(http.NotFoundHandler())
	base := ts.URL + basePath
	ts.Close() // nothing listens there any more

	rc, err := guard.NewRemote(base, guard.RemoteOptions{})
	require.NoError(t, err)
	start := time.Now()
	err = rc.ValidateSessionAndRefreshLastActive(bearer("alice.x"))
	require.ErrorIs(t, err, session.ErrUnavailable)
	assert.NotErrorIs(t, err, guard.ErrNoSession)
	assert.Less(t, time.Since(start), guard.DefaultRemoteTimeout)

	url, reached := app(t, guard.Middleware(rc, guard.MiddlewareOptions{}))
	for _, accept := range []string{acceptJSON, acceptBrowser} {
		r := get(t, url, "alice.x", viaCookie, accept)
		requireJSONError(t, r, http.StatusServiceUnavailable, "unavailable")
		assert.Equal(t, "5", r.header.Get("Retry-After"))
	}
	assert.Zero(t, reached.Load())
}

func TestRemoteSidecarHangs(t *testing.T) {
	release := make(chan struct{})
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(ts.Close)
	t.Cleanup(func() { close(release) })

	rc, err := guard.NewRemote(ts.URL+basePath, guard.RemoteOptions{Timeout: 100 * time.Millisecond})
	require.NoError(t, err)
	start := time.Now()
	err = rc.ValidateSessionIsActive(bearer("alice.x"))
	require.ErrorIs(t, err, session.ErrUnavailable)
	assert.Less(t, time.Since(start), 2*time.Second)
}

func TestRemoteSidecarFails(t *testing.T) {
	e := newEnv(t, 1)
	active, _ := e.join(t, "alice")
	rc, err := guard.NewRemote(e.sidecarBase, guard.RemoteOptions{})
	require.NoError(t, err)
	e.failing.Store(true)
	err = rc.ValidateSessionIsActive(bearer(active))
	require.ErrorIs(t, err, session.ErrUnavailable)

	url, _ := app(t, guard.Middleware(rc, guard.MiddlewareOptions{}))
	requireJSONError(t, get(t, url, active, viaBearer, ""), http.StatusServiceUnavailable, "unavailable")

	e.failing.Store(false)
	require.NoError(t, rc.ValidateSessionIsActive(bearer(active)))
}

func TestRemoteUnknownGate(t *testing.T) {
	e := newEnv(t, 1)
	active, _ := e.join(t, "alice")
	rc, err := guard.NewRemote(e.sidecarBase, guard.RemoteOptions{Gate: "nope"})
	require.NoError(t, err)
	err = rc.ValidateSessionIsActive(bearer(active))
	assert.ErrorIs(t, err, session.ErrUnavailable)
	assert.ErrorIs(t, err, session.ErrUnknownGate)
}

// TestRemoteForwardsOnlyTheToken: the sidecar sees the anteroom cookie, the
// bearer token and ?session=, not the app's other cookies, headers or query.
func TestRemoteForwardsOnlyTheToken(t *testing.T) {
	got := make(chan *http.Request, 1)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r
	}))
	t.Cleanup(ts.Close)
	rc, err := guard.NewRemote(ts.URL+"/anteroom/", guard.RemoteOptions{Gate: "vip"})
	require.NoError(t, err)

	r := httptest.NewRequest(http.MethodGet, "/x?session=q.tok&gate=default&other=1", nil)
	r.Header.Set("Authorization", "Bearer b.tok")
	r.Header.Set("X-Anteroom-Gate", "default")
	r.AddCookie(&http.Cookie{Name: "app_session", Value: "private"})
	r.AddCookie(&http.Cookie{Name: "anteroom_session", Value: "c.tok"})
	require.NoError(t, rc.ValidateSessionIsActive(r))
	sr := <-got
	assert.Equal(t, "/anteroom/check", sr.URL.Path)
	assert.Equal(t, "vip", sr.URL.Query().Get("gate"))
	assert.Equal(t, "q.tok", sr.URL.Query().Get("session"))
	assert.Empty(t, sr.URL.Query().Get("other"))
	assert.Equal(t, "Bearer b.tok", sr.Header.Get("Authorization"))
	assert.Empty(t, sr.Header.Get("X-Anteroom-Gate"))
	ck, err := sr.Cookie("anteroom_session")
	require.NoError(t, err)
	assert.Equal(t, "c.tok", ck.Value)
	_, err = sr.Cookie("app_session")
	assert.ErrorIs(t, err, http.ErrNoCookie)

	// Without any token, the sidecar is not asked.
	err = rc.ValidateSessionIsActive(httptest.NewRequest(http.MethodGet, "/", nil))
	assert.ErrorIs(t, err, guard.ErrNoSession)
	assert.Empty(t, got)
}

// Every anteroom_session cookie that could be a token goes to the sidecar,
// in order (it picks the first that verifies); values no token can have are
// not forwarded, so they neither reach the sidecar nor make net/http log
// a line per request.
func TestRemoteForwardsEveryCookieThatCouldBeAToken(t *testing.T) {
	got := make(chan *http.Request, 1)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r
	}))
	t.Cleanup(ts.Close)
	rc, err := guard.NewRemote(ts.URL+"/anteroom", guard.RemoteOptions{})
	require.NoError(t, err)
	var logged bytes.Buffer
	log.SetOutput(&logged)
	t.Cleanup(func() { log.SetOutput(os.Stderr) })

	r := httptest.NewRequest(http.MethodGet, "/x", nil)
	r.Header.Set("Cookie", "anteroom_session=sibling.tok; anteroom_session=a\\b; anteroom_session=caf\xc3\xa9; "+
		"anteroom_session=; anteroom_session="+strings.Repeat("x", token.MaxLength+1)+"; anteroom_session=host.tok")
	require.NoError(t, rc.ValidateSessionIsActive(r))
	sr := <-got
	var values []string
	for _, c := range sr.Cookies() {
		values = append(values, c.Name+"="+c.Value)
	}
	assert.Equal(t, []string{"anteroom_session=sibling.tok", "anteroom_session=host.tok"}, values)
	assert.Empty(t, logged.String())

	// Only values that cannot be tokens: no session, and no call.
	r.Header.Set("Cookie", "anteroom_session=a\\b; anteroom_session=\"\"")
	assert.ErrorIs(t, rc.ValidateSessionIsActive(r), guard.ErrNoSession)
	assert.Empty(t, got)
	assert.Empty(t, logged.String())
}

func TestNewRemoteOptions(t *testing.T) {
	for _, base := range []string{"", "anteroom", "/anteroom", "ftp://h/anteroom", "http:///anteroom", "http://h/a?x=1", "http://u:p@h/a", "http://h/a#f", "http://h/%zz"} {
		_, err := guard.NewRemote(base, guard.RemoteOptions{})
		assert.ErrorIs(t, err, session.ErrInvalidArgument, base)
	}
	for _, opts := range []guard.RemoteOptions{
		{CacheTTL: 2 * time.Second},
		{CacheTTL: guard.MaxCacheTTL + 1},
		{CacheTTL: -time.Millisecond},
		{CacheSize: -1},
		{Timeout: -1},
		{Gate: "no spaces"},
	} {
		_, err := guard.NewRemote("http://127.0.0.1:1/anteroom", opts)
		assert.ErrorIs(t, err, session.ErrInvalidArgument, "%+v", opts)
	}
	rc, err := guard.NewRemote("https://wait.example.com", guard.RemoteOptions{CacheTTL: guard.MaxCacheTTL})
	require.NoError(t, err)
	assert.Equal(t, "default", rc.Gate())
}

// TestRemoteCache: answers are cached for at most the TTL, positive and
// negative alike; a released session is not let in TTL after its release,
// and "unavailable" is never cached.
func TestRemoteCache(t *testing.T) {
	e := newEnv(t, 1)
	alice, _ := e.join(t, "alice")
	bob, st := e.join(t, "bob")
	require.Equal(t, session.StatusWaiting, st)
	const ttl = 200 * time.Millisecond
	now := sessiontest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	rc, err := guard.NewRemote(e.sidecarBase, guard.RemoteOptions{CacheTTL: ttl, Now: now.Now})
	require.NoError(t, err)

	require.NoError(t, rc.ValidateSessionAndRefreshLastActive(bearer(alice)))
	require.ErrorIs(t, rc.ValidateSessionAndRefreshLastActive(bearer(bob)), session.ErrNotActive)
	require.Equal(t, int64(2), e.checks.Load())

	// Alice leaves for good; Bob takes her slot at once.
	require.NoError(t, e.waitlist.Release(context.Background(), "default", "alice"))
	e.settle(t, "alice", false)
	e.settle(t, "bob", true)

	// Within the TTL the cached answers stand, without asking the sidecar.
	now.Advance(ttl - time.Millisecond)
	require.NoError(t, rc.ValidateSessionAndRefreshLastActive(bearer(alice)))
	require.ErrorIs(t, rc.ValidateSessionAndRefreshLastActive(bearer(bob)), session.ErrNotActive)
	require.Equal(t, int64(2), e.checks.Load())

	// From the TTL on, the sidecar decides again.
	now.Advance(time.Millisecond)
	require.ErrorIs(t, rc.ValidateSessionAndRefreshLastActive(bearer(alice)), guard.ErrNoSession)
	require.NoError(t, rc.ValidateSessionAndRefreshLastActive(bearer(bob)))
	require.Equal(t, int64(4), e.checks.Load())

	// The same token by cookie is another key: asked again.
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.AddCookie(&http.Cookie{Name: "anteroom_session", Value: bob})
	require.NoError(t, rc.ValidateSessionIsActive(r))
	require.Equal(t, int64(5), e.checks.Load())

	// "Unavailable" is not cached.
	now.Advance(ttl)
	e.failing.Store(true)
	require.ErrorIs(t, rc.ValidateSessionIsActive(bearer(bob)), session.ErrUnavailable)
	e.failing.Store(false)
	require.NoError(t, rc.ValidateSessionIsActive(bearer(bob)))
	require.Equal(t, int64(7), e.checks.Load())
}

// TestRemoteNoCacheByDefault: every check asks the sidecar.
func TestRemoteNoCacheByDefault(t *testing.T) {
	e := newEnv(t, 1)
	alice, _ := e.join(t, "alice")
	rc, err := guard.NewRemote(e.sidecarBase, guard.RemoteOptions{})
	require.NoError(t, err)
	require.NoError(t, rc.ValidateSessionIsActive(bearer(alice)))
	require.NoError(t, e.waitlist.Release(context.Background(), "default", "alice"))
	e.settle(t, "alice", false)
	require.ErrorIs(t, rc.ValidateSessionIsActive(bearer(alice)), guard.ErrNoSession)
	assert.Equal(t, int64(2), e.checks.Load())
}

// TestRemoteRefreshes: /check refreshes last_active, whichever method.
func TestRemoteRefreshes(t *testing.T) {
	e := newEnv(t, 1)
	alice, _ := e.join(t, "alice")
	rc, err := guard.NewRemote(e.sidecarBase, guard.RemoteOptions{})
	require.NoError(t, err)
	now := e.clock.Advance(time.Minute)
	require.NoError(t, rc.ValidateSessionIsActive(bearer(alice)))
	require.NoError(t, e.waitlist.FlushTouches(context.Background()))
	s, err := e.store.Get(context.Background(), "default", "alice")
	require.NoError(t, err)
	assert.True(t, s.LastActive.Equal(now), "last active %v, want %v", s.LastActive, now)
}

// A visitor behind many foreign cookies (a sibling subdomain's, on a deep
// path) is cached like any other: one check within the TTL, and another
// set of cookies is asked about again.
func TestRemoteCachesAVisitorBehindManyCookies(t *testing.T) {
	e := newEnv(t, 1)
	alice, _ := e.join(t, "alice")
	foreign := forge(t, "mallory")
	now := sessiontest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	rc, err := guard.NewRemote(e.sidecarBase, guard.RemoteOptions{CacheTTL: time.Second, Now: now.Now})
	require.NoError(t, err)
	for _, ahead := range []int{1, 12, 13, 63, 100} {
		request := func(last string) *http.Request {
			r := httptest.NewRequest(http.MethodGet, "/a/b/c/page", nil)
			r.Header.Set("Cookie", strings.Repeat("anteroom_session="+foreign+"; ", ahead)+"anteroom_session="+last)
			return r
		}
		now.Advance(time.Second) // the previous case's answers expire (past 64, the same cookies are read)
		before := e.checks.Load()
		for range 3 {
			require.NoError(t, rc.ValidateSessionIsActive(request(alice)), "%d foreign cookies ahead", ahead)
		}
		assert.Equal(t, before+1, e.checks.Load(), "%d foreign cookies ahead: asked more than once within the TTL", ahead)
		require.ErrorIs(t, rc.ValidateSessionIsActive(request(foreign)), guard.ErrNoSession)
		assert.Equal(t, before+2, e.checks.Load(), "%d foreign cookies ahead: another set of cookies is another key", ahead)
	}
}
