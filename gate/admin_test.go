package gate_test

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/gate"
	"github.com/anteroomhq/anteroom/gate/gatetest"
	"github.com/anteroomhq/anteroom/session"
	"github.com/anteroomhq/anteroom/session/sessiontest"
)

const adminToken = "admin-token-0123456789abcdefghijklmnop" // 38 characters

type adminHarness struct {
	t  *testing.T
	sc *gatetest.Sidecar
}

func newAdminHarness(t *testing.T, token string, configure func(*gate.Options)) *adminHarness {
	t.Helper()
	sc := gatetest.StartSidecar(t, gatetest.Options{
		Gates: []session.GateConfig{gatetest.Gate("default", 1), gatetest.Gate("vip", 2)},
		Gate: func(o *gate.Options) {
			o.AdminToken = token
			if configure != nil {
				configure(o)
			}
		},
	})
	return &adminHarness{t: t, sc: sc}
}

// do sends an admin request with the given bearer token ("" for none) and
// returns the status and body.
func (h *adminHarness) do(method, path, bearer, body string) (int, string, http.Header) {
	h.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, h.sc.URL+base+"/admin/api/"+path, rd)
	require.NoError(h.t, err)
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(h.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(h.t, err)
	return resp.StatusCode, string(b), resp.Header
}

func (h *adminHarness) gate(path string) gate.AdminGate {
	h.t.Helper()
	code, body, _ := h.do(http.MethodGet, "gates/"+path, adminToken, "")
	require.Equal(h.t, http.StatusOK, code, body)
	var g gate.AdminGate
	require.NoError(h.t, json.Unmarshal([]byte(body), &g))
	return g
}

func errorCode(t *testing.T, body string) session.Code {
	t.Helper()
	var e gate.ErrorBody
	require.NoError(t, json.Unmarshal([]byte(body), &e), body)
	return e.Error.Code
}

func (h *adminHarness) join(gateName, id string) session.SessionView {
	h.t.Helper()
	v, err := h.sc.Waitlist.Join(h.t.Context(), gateName, id)
	require.NoError(h.t, err)
	return v
}

func TestAdminOffWithoutToken(t *testing.T) {
	h := newAdminHarness(t, "", nil)
	for _, p := range []string{"gates", "gates/default", "", "anything/else"} {
		code, body, _ := h.do(http.MethodGet, p, adminToken, "")
		assert.Equal(t, http.StatusNotFound, code, p)
		assert.Equal(t, session.Code("not_found"), errorCode(t, body))
	}
	code, _, _ := h.do(http.MethodPatch, "gates/default", adminToken, `{"activeLimit":5}`)
	assert.Equal(t, http.StatusNotFound, code)
	cfg, _ := h.sc.Waitlist.GateConfig("default")
	assert.Equal(t, int64(1), cfg.ActiveLimit)
}

func TestAdminShortTokenRefused(t *testing.T) {
	sc := gatetest.StartSidecar(t, gatetest.Options{Gates: []session.GateConfig{gatetest.Gate("default", 1)}})
	_, err := gate.New(gate.Options{BasePath: base, Waitlist: sc.Waitlist, Signer: sc.Signer, Hub: sc.Hub, AdminToken: strings.Repeat("x", 31)})
	assert.ErrorContains(t, err, "at least 32")
}

func TestAdminAuth(t *testing.T) {
	h := newAdminHarness(t, adminToken, func(o *gate.Options) {
		o.AdminRateLimit = gate.RateLimitOptions{PerSecond: 1000, Burst: 1000}
	})
	cases := []struct {
		name   string
		header string
	}{
		{"no token", ""},
		{"wrong token", "Bearer " + strings.Repeat("x", len(adminToken))},
		{"prefix of the token", "Bearer " + adminToken[:len(adminToken)-1]},
		{"token plus a byte", "Bearer " + adminToken + "x"},
		{"other scheme", "Basic " + adminToken},
		{"token without scheme", adminToken},
		{"empty bearer", "Bearer "},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, m := range []string{http.MethodGet, http.MethodPatch, http.MethodDelete} {
				req, err := http.NewRequest(m, h.sc.URL+base+"/admin/api/gates/default", strings.NewReader(`{"activeLimit":9}`))
				require.NoError(t, err)
				if tc.header != "" {
					req.Header.Set("Authorization", tc.header)
				}
				resp, err := http.DefaultClient.Do(req)
				require.NoError(t, err)
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, m)
				assert.Equal(t, session.Code("admin_token_required"), errorCode(t, string(b)))
				assert.Empty(t, resp.Header.Values("Set-Cookie"), "no cookies")
			}
		})
	}
	// A cookie or a query parameter carrying the token is no token.
	req, _ := http.NewRequest(http.MethodGet, h.sc.URL+base+"/admin/api/gates?token="+adminToken, nil)
	req.AddCookie(&http.Cookie{Name: "anteroom_session", Value: adminToken})
	req.AddCookie(&http.Cookie{Name: "admin_token", Value: adminToken})
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	// Unknown admin routes are not revealed without the token.
	code, _, _ := h.do(http.MethodGet, "secret/route", "", "")
	assert.Equal(t, http.StatusUnauthorized, code)
	code, _, _ = h.do(http.MethodGet, "secret/route", adminToken, "")
	assert.Equal(t, http.StatusNotFound, code)

	cfg, _ := h.sc.Waitlist.GateConfig("default")
	assert.Equal(t, int64(1), cfg.ActiveLimit, "no unauthorised request changed anything")
	code, _, hdr := h.do(http.MethodGet, "gates", adminToken, "")
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, "no-store", hdr.Get("Cache-Control"))
}

func TestAdminRateLimited(t *testing.T) {
	h := newAdminHarness(t, adminToken, func(o *gate.Options) {
		o.AdminRateLimit = gate.RateLimitOptions{PerSecond: 0.001, Burst: 5}
	})
	for i := 0; i < 5; i++ {
		code, _, _ := h.do(http.MethodGet, "gates", "wrong", "")
		require.Equal(t, http.StatusUnauthorized, code)
	}
	// The limit is checked before the token: a guesser gets nowhere, even
	// with the right token.
	code, body, hdr := h.do(http.MethodGet, "gates", adminToken, "")
	assert.Equal(t, http.StatusTooManyRequests, code)
	assert.Equal(t, session.Code("rate_limited"), errorCode(t, body))
	assert.NotEmpty(t, hdr.Get("Retry-After"))
}

func TestAdminListAndGet(t *testing.T) {
	h := newAdminHarness(t, adminToken, nil)
	h.join("default", "a")
	h.join("default", "b")
	code, body, hdr := h.do(http.MethodGet, "gates", adminToken, "")
	require.Equal(t, http.StatusOK, code)
	assert.Equal(t, "application/json", strings.Split(hdr.Get("Content-Type"), ";")[0])
	var list gate.AdminGates
	require.NoError(t, json.Unmarshal([]byte(body), &list))
	require.Len(t, list.Gates, 2)
	g := list.Gates[0]
	assert.Equal(t, "default", g.Name)
	assert.Equal(t, gate.AdminSettings{ActiveLimit: 1, ActiveTimeout: "5m0s", WaitingTimeout: "1m0s", ClaimTimeout: "0s", ReleaseOnDisconnect: "0s", Mode: session.ModeOpen, NotifyClaimTimeout: "15m0s", AdmissionTokenTTL: "0s"}, g.Settings)
	assert.Equal(t, [3]int64{1, 1, 1}, [3]int64{g.Active, g.Waiting, g.Limit})
	assert.Equal(t, "file", g.SettingsSource)
	assert.Equal(t, session.ModeOpen, g.Mode)
	assert.Equal(t, "vip", list.Gates[1].Name)
	assert.Equal(t, "vip", h.gate("vip").Name)
	code, body, _ = h.do(http.MethodGet, "gates/nope", adminToken, "")
	assert.Equal(t, http.StatusNotFound, code)
	assert.Equal(t, session.CodeUnknownGate, errorCode(t, body))
}

func TestAdminPatch(t *testing.T) {
	logs := &sessiontest.LogBuffer{}
	h := newAdminHarness(t, adminToken, func(o *gate.Options) { o.Logger = slog.New(slog.NewTextHandler(logs, nil)) })
	h.join("default", "a")
	h.join("default", "b")
	h.join("default", "c")

	// A raised limit promotes at once.
	code, body, _ := h.do(http.MethodPatch, "gates/default", adminToken, `{"activeLimit":2,"activeTimeout":"10m","waitingTimeout":"90s","claimTimeout":"30s","newUsersPerMinute":600}`)
	require.Equal(t, http.StatusOK, code, body)
	var g gate.AdminGate
	require.NoError(t, json.Unmarshal([]byte(body), &g))
	assert.Equal(t, gate.AdminSettings{ActiveLimit: 2, ActiveTimeout: "10m0s", WaitingTimeout: "1m30s", ClaimTimeout: "30s", ReleaseOnDisconnect: "0s", NewUsersPerMinute: 600, Mode: session.ModeOpen, NotifyClaimTimeout: "15m0s", AdmissionTokenTTL: "0s"}, g.Settings)
	assert.Equal(t, "runtime", g.SettingsSource)
	assert.Equal(t, [2]int64{2, 1}, [2]int64{g.Active, g.Waiting}, "b was promoted at once")
	v, err := h.sc.Waitlist.Status(t.Context(), "default", "b")
	require.NoError(t, err)
	assert.Equal(t, session.StatusActive, v.Status)

	// A lowered limit: nobody new gets in, the answer says it is over.
	code, body, _ = h.do(http.MethodPatch, "gates/default", adminToken, `{"activeLimit":1}`)
	require.Equal(t, http.StatusOK, code, body)
	require.NoError(t, json.Unmarshal([]byte(body), &g))
	assert.True(t, g.OverLimit)
	assert.Equal(t, "10m0s", g.Settings.ActiveTimeout, "fields not sent are unchanged")

	// queue_all: a newcomer waits; an existing session goes on.
	code, _, _ = h.do(http.MethodPatch, "gates/vip", adminToken, `{"mode":"queue_all"}`)
	require.Equal(t, http.StatusOK, code)
	assert.Equal(t, session.StatusWaiting, h.join("vip", "n").Status)

	// reject: a new join over HTTP gets 503 gate_closed.
	code, _, _ = h.do(http.MethodPatch, "gates/vip", adminToken, `{"mode":"reject"}`)
	require.Equal(t, http.StatusOK, code)
	resp, err := http.Post(h.sc.URL+base+"/api/join?gate=vip", "application/json", nil)
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	assert.Equal(t, session.CodeGateClosed, errorCode(t, string(b)))
	assert.Equal(t, "60", resp.Header.Get("Retry-After"), "come back later")
	assert.NotContains(t, logs.String(), "request failed", "a refusal is no failure to log")
	assert.Equal(t, session.StatusWaiting, h.join("vip", "n").Status, "a waiter keeps its place")

	// Reopened: the waiter is promoted at once.
	code, body, _ = h.do(http.MethodPatch, "gates/vip", adminToken, `{"mode":"open"}`)
	require.Equal(t, http.StatusOK, code)
	require.NoError(t, json.Unmarshal([]byte(body), &g))
	assert.Equal(t, [2]int64{1, 0}, [2]int64{g.Active, g.Waiting})

	// Reset: back to the file's settings.
	code, body, _ = h.do(http.MethodDelete, "gates/default/settings", adminToken, "")
	require.Equal(t, http.StatusOK, code, body)
	require.NoError(t, json.Unmarshal([]byte(body), &g))
	assert.Equal(t, "file", g.SettingsSource)
	assert.Equal(t, "5m0s", g.Settings.ActiveTimeout)
}

func TestAdminPatchHostileBodies(t *testing.T) {
	h := newAdminHarness(t, adminToken, nil)
	cases := []struct {
		name, body string
		status     int
		code       session.Code
		field      string
	}{
		{"negative limit", `{"activeLimit":-1}`, 400, "invalid_argument", "activeLimit"},
		{"limit as a string", `{"activeLimit":"5"}`, 400, "invalid_json", "activeLimit"},
		{"limit overflowing int64", `{"activeLimit":99999999999999999999}`, 400, "invalid_json", "activeLimit"},
		{"fractional limit", `{"activeLimit":1.5}`, 400, "invalid_json", "activeLimit"},
		{"duration without unit", `{"activeTimeout":"300"}`, 400, "invalid_argument", "activeTimeout"},
		{"duration as a number", `{"waitingTimeout":300}`, 400, "invalid_json", "waitingTimeout"},
		{"zero active timeout", `{"activeTimeout":"0s"}`, 400, "invalid_argument", "activeTimeout"},
		{"negative waiting timeout", `{"waitingTimeout":"-1m"}`, 400, "invalid_argument", "waitingTimeout"},
		{"negative claim timeout", `{"claimTimeout":"-1s"}`, 400, "invalid_argument", "claimTimeout"},
		{"huge duration", `{"claimTimeout":"100000h"}`, 400, "invalid_argument", "claimTimeout"},
		{"negative pace", `{"newUsersPerMinute":-5}`, 400, "invalid_argument", "newUsersPerMinute"},
		{"absurd pace", `{"newUsersPerMinute":9223372036854775807}`, 400, "invalid_argument", "newUsersPerMinute"},
		{"unknown mode", `{"mode":"closed"}`, 400, "invalid_argument", "mode"},
		{"empty mode", `{"mode":""}`, 400, "invalid_argument", "mode"},
		{"unknown field", `{"activeLimit":5,"admin":true}`, 400, "invalid_json", "admin"},
		{"rename", `{"name":"other"}`, 400, "invalid_argument", "name"},
		{"two objects", `{"activeLimit":5}{"activeLimit":6}`, 400, "invalid_json", ""},
		{"not an object", `[1,2]`, 400, "invalid_json", ""},
		{"null", `null`, 200, "", ""},
		{"huge body", `{"mode":"` + strings.Repeat("a", 1<<20) + `"}`, 413, "body_too_large", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, body, _ := h.do(http.MethodPatch, "gates/default", adminToken, tc.body)
			require.Equal(t, tc.status, code, body)
			if tc.code != "" {
				assert.Equal(t, tc.code, errorCode(t, body))
			}
			assert.Contains(t, body, tc.field)
		})
	}
	cfg, _ := h.sc.Waitlist.GateConfig("default")
	assert.Equal(t, gatetest.Gate("default", 1), cfg, "no hostile body changed anything")
}

func TestAdminPathTricks(t *testing.T) {
	h := newAdminHarness(t, adminToken, nil)
	h.join("default", "a")
	for _, p := range []string{
		"gates/..%2Fdefault",
		"gates/default%2F..",
		"gates/%2e%2e",
		"gates/de%00fault",
		"gates/" + strings.Repeat("g", 65),
		"gates/default%20",
		"gates/%64efault%2Fsessions%2Fa",
	} {
		code, _, _ := h.do(http.MethodPatch, p, adminToken, `{"activeLimit":50}`)
		assert.Contains(t, []int{400, 404, 405}, code, p)
		code, _, _ = h.do(http.MethodDelete, p, adminToken, "")
		assert.Contains(t, []int{400, 404, 405}, code, p)
	}
	for _, p := range []string{
		"gates/default/sessions/a%2F..",
		"gates/default/sessions/" + strings.Repeat("x", 200),
		"gates/default/sessions/a%20b",
		"gates/default/sessions/a.b",
	} {
		code, body, _ := h.do(http.MethodDelete, p, adminToken, "")
		assert.Equal(t, http.StatusBadRequest, code, p+": "+body)
	}
	cfg, _ := h.sc.Waitlist.GateConfig("default")
	assert.Equal(t, int64(1), cfg.ActiveLimit)
	assert.NoError(t, h.sc.Waitlist.ValidateSessionIsActive("default", "a"), "no trick ended a")
	assert.Equal(t, []string{"default", "vip"}, h.sc.Waitlist.Gates())
}

func TestAdminEndSession(t *testing.T) {
	h := newAdminHarness(t, adminToken, nil)
	h.join("default", "a")
	h.join("default", "b")
	code, body, _ := h.do(http.MethodDelete, "gates/default/sessions/a", adminToken, "")
	require.Equal(t, http.StatusNoContent, code, body)
	assert.ErrorIs(t, h.sc.Waitlist.ValidateSessionIsActive("default", "a"), session.ErrNotActive)
	assert.NoError(t, h.sc.Waitlist.ValidateSessionIsActive("default", "b"), "its slot went to b at once")
	code, _, _ = h.do(http.MethodDelete, "gates/default/sessions/a", adminToken, "")
	assert.Equal(t, http.StatusNoContent, code, "ending it again is no error")
	code, body, _ = h.do(http.MethodDelete, "gates/nope/sessions/a", adminToken, "")
	assert.Equal(t, http.StatusNotFound, code)
	assert.Equal(t, session.CodeUnknownGate, errorCode(t, body))
}

func TestAdminAddAndRemoveGate(t *testing.T) {
	h := newAdminHarness(t, adminToken, nil)
	code, body, _ := h.do(http.MethodPost, "gates", adminToken, `{"name":"launch","activeLimit":1,"mode":"queue_all"}`)
	require.Equal(t, http.StatusCreated, code, body)
	var g gate.AdminGate
	require.NoError(t, json.Unmarshal([]byte(body), &g))
	assert.Equal(t, "launch", g.Name)
	assert.Equal(t, session.ModeQueueAll, g.Mode)
	assert.Equal(t, "5m0s", g.Settings.ActiveTimeout, "omitted settings are the default gate's")

	// The new gate works over HTTP at once.
	resp, err := http.Post(h.sc.URL+base+"/api/join?gate=launch", "application/json", nil)
	require.NoError(t, err)
	var v session.SessionView
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&v))
	resp.Body.Close()
	assert.Equal(t, session.StatusWaiting, v.Status, "queue_all")

	for _, tc := range []struct{ body, code string }{
		{`{"name":"launch"}`, "gate_exists"},
		{`{}`, "invalid_argument"},
		{`{"name":".."}`, "invalid_argument"},
		{`{"name":"a/b"}`, "invalid_argument"},
		{`{"name":"x","activeLimit":-3}`, "invalid_argument"},
	} {
		code, body, _ := h.do(http.MethodPost, "gates", adminToken, tc.body)
		assert.Equal(t, session.Code(tc.code), errorCode(t, body), tc.body)
		assert.GreaterOrEqual(t, code, 400)
	}

	// A gate with a waiter cannot go unless it is closed.
	code, body, _ = h.do(http.MethodDelete, "gates/launch", adminToken, "")
	assert.Equal(t, http.StatusConflict, code)
	assert.Equal(t, session.CodeGateInUse, errorCode(t, body))
	code, _, _ = h.do(http.MethodPatch, "gates/launch", adminToken, `{"mode":"reject"}`)
	require.Equal(t, http.StatusOK, code)
	code, _, _ = h.do(http.MethodDelete, "gates/launch", adminToken, "")
	assert.Equal(t, http.StatusNoContent, code)
	code, _, _ = h.do(http.MethodGet, "gates/launch", adminToken, "")
	assert.Equal(t, http.StatusNotFound, code)
	resp, err = http.Post(h.sc.URL+base+"/api/join?gate=launch", "application/json", nil)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusNotFound, resp.StatusCode, "a removed gate is unknown")
	// An empty gate may go in any mode.
	code, _, _ = h.do(http.MethodDelete, "gates/vip", adminToken, "")
	assert.Equal(t, http.StatusNoContent, code)
	assert.Equal(t, []string{"default"}, h.sc.Waitlist.Gates())
}

func TestAdminPacingOverHTTP(t *testing.T) {
	h := newAdminHarness(t, adminToken, nil)
	code, _, _ := h.do(http.MethodPatch, "gates/vip", adminToken, `{"activeLimit":100,"newUsersPerMinute":60}`)
	require.Equal(t, http.StatusOK, code)
	assert.Equal(t, session.StatusActive, h.join("vip", "a").Status, "the burst")
	assert.Equal(t, session.StatusWaiting, h.join("vip", "b").Status, "paced despite 99 free slots")
	h.sc.Clock.Advance(time.Second)
	require.NoError(t, h.sc.Waitlist.Sweep(t.Context()))
	assert.NoError(t, h.sc.Waitlist.ValidateSessionIsActive("vip", "b"), "promoted as the token came back")
}

func TestClosedGatePages(t *testing.T) {
	h := newAdminHarness(t, adminToken, nil)
	waiter := newClient(t)
	r := do(t, waiter, http.MethodPost, h.sc.URL+base+"/api/join?gate=vip", "", "")
	require.Equal(t, http.StatusOK, r.status)
	code, _, _ := h.do(http.MethodPatch, "gates/vip", adminToken, `{"mode":"reject"}`)
	require.Equal(t, http.StatusOK, code)

	// A newcomer navigating to the waiting page sees the closed page.
	req, _ := http.NewRequest(http.MethodGet, h.sc.URL+base+"/?gate=vip", nil)
	req.Header.Set("Accept", "text/html")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	assert.Contains(t, string(b), `data-anteroom-status="gate_closed"`)
	assert.Contains(t, resp.Header.Get("Content-Security-Policy"), "nonce-")
	assert.Equal(t, "no-store", resp.Header.Get("Cache-Control"))

	// A session the gate holds keeps its waiting page.
	r = do(t, waiter, http.MethodGet, h.sc.URL+base+"/?gate=vip", "", "")
	assert.Equal(t, http.StatusOK, r.status)
	assert.NotContains(t, r.raw, "gate_closed")
	// The open gate's page is unaffected.
	resp, err = http.Get(h.sc.URL + base + "/?gate=default")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
}

func TestClosedGateProxy(t *testing.T) {
	app := upstreamApp(t, nil)
	u, err := url.Parse(app.URL)
	require.NoError(t, err)
	h := newAdminHarness(t, "", func(o *gate.Options) {
		o.Proxy = gate.ProxyOptions{Upstream: u}
	})
	// Without a token the admin API is 404, never the app's.
	code, body, _ := h.do(http.MethodGet, "gates", adminToken, "")
	assert.Equal(t, http.StatusNotFound, code)
	assert.NotContains(t, body, "app:")

	_, err = h.sc.Waitlist.SetGateConfig(t.Context(), func() session.GateConfig {
		c, _ := h.sc.Waitlist.GateConfig("default")
		c.Mode = session.ModeReject
		return c
	}())
	require.NoError(t, err)
	req, _ := http.NewRequest(http.MethodGet, h.sc.URL+"/dashboard", nil)
	req.Header.Set("Accept", "text/html")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	assert.Contains(t, string(b), `data-anteroom-status="gate_closed"`)
	assert.NotContains(t, string(b), "app:")

	req, _ = http.NewRequest(http.MethodGet, h.sc.URL+"/api/data", nil)
	req.Header.Set("Accept", "application/json")
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, "an API request creates no session, closed gate or not")
	assert.Equal(t, session.Code("no_session"), errorCode(t, string(b)))
}

// A gate added at runtime is served by the hub like the others: its
// websocket gets the view, then the changes, and a promotion notice.
func TestAdminAddedGateBroadcasts(t *testing.T) {
	h := newAdminHarness(t, adminToken, nil)
	code, body, _ := h.do(http.MethodPost, "gates", adminToken, `{"name":"launch","activeLimit":0}`)
	require.Equal(t, http.StatusCreated, code, body)
	v := h.join("launch", "w")
	require.Equal(t, session.StatusWaiting, v.Status)

	conn := dial(t, &harness{url: h.sc.URL}, "?gate=launch&session="+h.sc.Token(t, "w"))
	first := read(t, conn)
	assert.Equal(t, int64(1), first.Waiting)
	code, _, _ = h.do(http.MethodPatch, "gates/launch", adminToken, `{"activeLimit":1}`)
	require.Equal(t, http.StatusOK, code)
	sawPromotion := false
	for i := 0; i < 5 && !sawPromotion; i++ {
		m := read(t, conn)
		sawPromotion = m.Type == "session" && m.Status == "active"
	}
	assert.True(t, sawPromotion, "the raised limit promoted w and told its socket")
}

func TestAdminPage(t *testing.T) {
	get := func(t *testing.T, url string) (*http.Response, string) {
		t.Helper()
		client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		resp, err := client.Get(url)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp, string(b)
	}
	t.Run("off without a token", func(t *testing.T) {
		for _, configure := range []func(*gate.Options){nil, func(o *gate.Options) { o.Demo = true }} {
			h := newAdminHarness(t, "", configure)
			for _, p := range []string{"/admin/", "/admin"} {
				resp, body := get(t, h.sc.URL+base+p)
				assert.Equal(t, http.StatusNotFound, resp.StatusCode, p)
				assert.Equal(t, session.Code("not_found"), errorCode(t, body), p)
				assert.NotContains(t, body, "dashboard")
			}
		}
	})
	t.Run("on with a token", func(t *testing.T) {
		h := newAdminHarness(t, adminToken, nil)
		resp, body := get(t, h.sc.URL+base+"/admin/")
		require.Equal(t, http.StatusOK, resp.StatusCode)
		assert.Contains(t, body, "<title>anteroom dashboard</title>")
		assert.NotContains(t, body, adminToken, "the page holds no secret")
		assert.Equal(t, "no-store", resp.Header.Get("Cache-Control"))
		assert.Equal(t, "no-referrer", resp.Header.Get("Referrer-Policy"))
		csp := resp.Header.Get("Content-Security-Policy")
		m := regexp.MustCompile(`script-src 'self' 'nonce-([A-Za-z0-9_-]+)'`).FindStringSubmatch(csp)
		require.NotNil(t, m, csp)
		assert.Contains(t, csp, "style-src 'self' 'nonce-"+m[1]+"'")
		assert.Contains(t, csp, "frame-ancestors 'self'")
		assert.Equal(t, 2, strings.Count(body, `nonce="`+m[1]+`"`), "script and style carry the response's nonce")
		resp2, body2 := get(t, h.sc.URL+base+"/admin/")
		assert.NotEqual(t, resp2.Header.Get("Content-Security-Policy"), csp, "a fresh nonce per response")
		assert.NotContains(t, body2, `nonce="`+m[1]+`"`)
		resp, _ = get(t, h.sc.URL+base+"/admin")
		assert.Equal(t, http.StatusFound, resp.StatusCode)
		assert.Equal(t, base+"/admin/", resp.Header.Get("Location"))
	})
}
