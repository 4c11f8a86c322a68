package gate_test

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/gate"
	"github.com/anteroomhq/anteroom/gate/gatetest"
	"github.com/anteroomhq/anteroom/gate/token"
	"github.com/anteroomhq/anteroom/session"
)

const notifyKey = "notify-test-api-key-0123"

// notifySidecar starts a sidecar whose signer (Sidecar.Signer, the gate's)
// runs on the fake clock, as the claim deadlines its links carry do.
func notifySidecar(t *testing.T) *gatetest.Sidecar {
	cfg := gatetest.Gate("default", 1)
	cfg.ClaimTimeout = time.Minute
	cfg.NotifyClaimTimeout = 15 * time.Minute
	var sc *gatetest.Sidecar
	signer, err := token.NewSignerWithOptions([]byte(strings.Repeat("s", token.MinSecretLength)), token.Options{Now: func() time.Time { return sc.Clock.Now() }})
	require.NoError(t, err)
	sc = gatetest.StartSidecar(t, gatetest.Options{
		Gates: []session.GateConfig{cfg, gatetest.Gate("other", 1)},
		Gate: func(o *gate.Options) {
			o.APIKeys = []string{notifyKey}
			o.Signer = signer
		},
	})
	sc.Signer = signer
	return sc
}

// claimURL is the claim link of id at gate for its claim deadline.
func claimURL(t *testing.T, sc *gatetest.Sidecar, gateName, id string, deadline time.Time) string {
	t.Helper()
	u, err := gate.BuildClaimURL(sc.Signer, sc.URL, gatetest.BasePath, gateName, id, deadline)
	require.NoError(t, err)
	return u
}

// ticketOf returns the ticket a claim link carries.
func ticketOf(t *testing.T, link string) string {
	t.Helper()
	u, err := url.Parse(link)
	require.NoError(t, err)
	return u.Query().Get("ticket")
}

func send(t *testing.T, c *http.Client, method, url, body string, header ...string) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	require.NoError(t, err)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := c.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

// claimPost does what the claim page of link does in a browser: it posts
// the link's ticket (and next) as a form to {base}/claim?gate=<gate>.
func claimPost(t *testing.T, c *http.Client, link string, header ...string) (int, string, http.Header) {
	t.Helper()
	u, err := url.Parse(link)
	require.NoError(t, err)
	q := u.Query()
	form := url.Values{"ticket": {q.Get("ticket")}}
	if n := q.Get("next"); n != "" {
		form.Set("next", n)
	}
	action := u.Scheme + "://" + u.Host + u.Path + "?" + url.Values{"gate": {q.Get("gate")}}.Encode()
	return send(t, c, "POST", action, form.Encode(), append([]string{"Content-Type", "application/x-www-form-urlencoded"}, header...)...)
}

var noRedirects = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// POST /api/notify is for backends holding an API key; every malformed
// call is refused and changes nothing.
func TestNotifyEndpoint(t *testing.T) {
	sc := notifySidecar(t)
	ctx := context.Background()
	_, err := sc.Waitlist.Join(ctx, "default", "in")
	require.NoError(t, err)
	_, err = sc.Waitlist.Join(ctx, "default", "w")
	require.NoError(t, err)
	url := sc.URL + gatetest.BasePath + "/api/notify"
	key := []string{"X-Anteroom-Key", notifyKey}
	for _, tc := range []struct {
		name, body string
		header     []string
		status     int
		code       string
	}{
		{"no key", `{"sessionId":"w","notify":true}`, nil, 401, "api_key_required"},
		{"wrong key", `{"sessionId":"w","notify":true}`, []string{"X-Anteroom-Key", "not-the-key-at-all"}, 401, "api_key_required"},
		{"a session token is no key", `{"sessionId":"w","notify":true}`, []string{"Authorization", "Bearer " + sc.Token(t, "w")}, 401, "api_key_required"},
		{"no notify", `{"sessionId":"w"}`, key, 400, "invalid_argument"},
		{"no session", `{"notify":true}`, key, 400, "invalid_argument"},
		{"notify not a bool", `{"sessionId":"w","notify":"yes"}`, key, 400, "invalid_json"},
		{"unknown field", `{"sessionId":"w","notify":true,"admin":true}`, key, 400, "invalid_json"},
		{"two objects", `{"sessionId":"w","notify":true}{}`, key, 400, "invalid_json"},
		{"bad id", `{"sessionId":"a b","notify":true}`, key, 400, "invalid_argument"},
		{"token as id", `{"sessionId":"w.1.x","notify":true}`, key, 400, "invalid_argument"},
		{"unknown gate", `{"sessionId":"w","notify":true,"gate":"nope"}`, key, 404, "unknown_gate"},
		{"unknown session", `{"sessionId":"ghost","notify":true}`, key, 404, "session_not_found"},
		{"other gate's session", `{"sessionId":"w","notify":true,"gate":"other"}`, key, 404, "session_not_found"},
		{"too large", `{"sessionId":"w","notify":true,"gate":"` + strings.Repeat("x", 8<<10) + `"}`, key, 413, "body_too_large"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body, _ := send(t, http.DefaultClient, "POST", url, tc.body, tc.header...)
			assert.Equal(t, tc.status, status, body)
			assert.Contains(t, body, `"code":"`+tc.code+`"`)
			if tc.code == "session_not_found" {
				assert.Contains(t, body, `"message":"session \"`, "the store's own message, as clients read it")
				assert.NotContains(t, body, "sqlite", "no store's name reaches a client")
			}
			s, err := sc.Store.Get(ctx, "default", "w")
			require.NoError(t, err)
			assert.False(t, s.Notify, "unchanged")
		})
	}
	status, body, _ := send(t, http.DefaultClient, "POST", url, `{"sessionId":"w","notify":true}`, key...)
	require.Equal(t, 200, status, body)
	assert.Contains(t, body, `"notify":true`)
	assert.Contains(t, body, `"status":"waiting"`)
	s, err := sc.Store.Get(ctx, "default", "w")
	require.NoError(t, err)
	assert.True(t, s.Notify)
	status, body, _ = send(t, http.DefaultClient, "POST", url, `{"sessionId":"w","notify":false}`, key...)
	require.Equal(t, 200, status, body)
	assert.NotContains(t, body, `"notify"`)
}

// The claim link: only a claim ticket of that session and gate, unexpired,
// while its slot waits to be claimed; the first of many concurrent visits
// wins; the redirect stays on this origin.
func TestClaimLink(t *testing.T) {
	sc := notifySidecar(t)
	ctx := context.Background()
	for _, id := range []string{"in", "b", "c"} {
		_, err := sc.Waitlist.Join(ctx, "default", id)
		require.NoError(t, err)
	}
	_, err := sc.Waitlist.SetNotify(ctx, "default", "b", true)
	require.NoError(t, err)
	// The deadline b's promotion will have.
	deadline := sc.Clock.Now().Add(15 * time.Minute)
	link := func(gateName, id string) string { return claimURL(t, sc, gateName, id, deadline) }
	claim := sc.URL + gatetest.BasePath + "/claim"

	// Before the promotion: nothing to claim.
	status, body, _ := claimPost(t, noRedirects, link("default", "b"))
	assert.Equal(t, 409, status, body)
	assert.Contains(t, body, "already_claimed")

	require.NoError(t, sc.Waitlist.Release(ctx, "default", "in"))
	v, err := sc.Waitlist.Status(ctx, "default", "c")
	require.NoError(t, err)
	require.Equal(t, session.StatusWaiting, v.Status)
	s, err := sc.Store.Get(ctx, "default", "b")
	require.NoError(t, err)
	require.Equal(t, session.StatusActive, s.Status)
	assert.Equal(t, sc.Clock.Now().Add(15*time.Minute), s.ClaimDeadline, "the notify claim window")

	wsTicket, err := sc.Signer.Ticket(token.PurposeWS, "default", "b")
	require.NoError(t, err)
	past, err := token.NewSignerWithOptions([]byte(strings.Repeat("s", token.MinSecretLength)), token.Options{Now: func() time.Time { return sc.Clock.Now().Add(-time.Hour) }})
	require.NoError(t, err)
	expired, err := past.ClaimTicket("default", "b", sc.Clock.Now().Add(-time.Minute))
	require.NoError(t, err)
	other, err := token.NewSignerWithOptions([]byte(strings.Repeat("o", token.MinSecretLength)), token.Options{Now: sc.Clock.Now})
	require.NoError(t, err)
	foreign, err := other.ClaimTicket("default", "b", deadline)
	require.NoError(t, err)
	// The claim ticket of the old format (whole seconds, the tickets' MAC).
	legacy, err := sc.Signer.Ticket(token.PurposeLeave, "default", "b")
	require.NoError(t, err)
	for _, tc := range []struct {
		name, url string
		status    int // of the POST; a GET shows the page (200) for a ticket that verifies
	}{
		{"no ticket", claim + "?gate=default", 401},
		{"a websocket ticket", claim + "?gate=default&ticket=" + wsTicket, 401},
		{"the session token", claim + "?gate=default&ticket=" + sc.Token(t, "b"), 401},
		{"another gate", strings.Replace(link("default", "b"), "gate=default", "gate=other", 1), 401},
		{"unknown gate", strings.Replace(link("default", "b"), "gate=default", "gate=nope", 1), 404},
		{"expired", claim + "?gate=default&ticket=" + expired, 401},
		{"another key", claim + "?gate=default&ticket=" + foreign, 401},
		{"tampered id", strings.Replace(link("default", "b"), ".b.", ".c.", 1), 401},
		{"tampered deadline", claim + "?gate=default&ticket=" + strings.Replace(strings.TrimPrefix(link("default", "b"), claim+"?gate=default&ticket="), "000.", "001.", 1), 401},
		{"a leave ticket", claim + "?gate=default&ticket=" + legacy, 401},
		{"a link of another deadline", claimURL(t, sc, "default", "b", deadline.Add(time.Nanosecond)), 409},
		{"someone else's waiting session", link("default", "c"), 409},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body, hdr := claimPost(t, noRedirects, tc.url)
			assert.Equal(t, tc.status, status, body)
			assert.Empty(t, hdr.Values("Set-Cookie"))
			assert.Equal(t, "no-referrer", hdr.Get("Referrer-Policy"))
			want := tc.status
			if want == http.StatusConflict {
				want = http.StatusOK
			}
			status, body, hdr = send(t, noRedirects, "GET", tc.url, "")
			assert.Equal(t, want, status, body)
			assert.Empty(t, hdr.Values("Set-Cookie"))
			if want != http.StatusOK {
				assert.Contains(t, hdr.Get("Content-Type"), "application/json", "the errors of today")
				assert.NotContains(t, body, "<form")
			}
			assert.Error(t, sc.Waitlist.ClaimLink(ctx, "default", "c", deadline), "nothing claimed by the way")
		})
	}
	st, err := sc.Store.Get(ctx, "default", "b")
	require.NoError(t, err)
	require.False(t, st.ClaimDeadline.IsZero(), "still unclaimed")
	status, _, hdr := send(t, noRedirects, "HEAD", link("default", "b"), "")
	assert.Equal(t, http.StatusOK, status, "a HEAD is answered as the page")
	assert.Empty(t, hdr.Values("Set-Cookie"))
	st, err = sc.Store.Get(ctx, "default", "b")
	require.NoError(t, err)
	require.False(t, st.ClaimDeadline.IsZero(), "a HEAD does not claim")

	// Many visits at once: one wins.
	u := link("default", "b") + "&next=//evil.example/x"
	var wins, conflicts atomic.Int32
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			status, _, hdr := claimPost(t, noRedirects, u)
			switch status {
			case http.StatusSeeOther:
				wins.Add(1)
				assert.Equal(t, "/", hdr.Get("Location"), "no open redirect")
				assert.Contains(t, hdr.Get("Set-Cookie"), "anteroom_session=")
				assert.Contains(t, hdr.Get("Set-Cookie"), "HttpOnly")
			case http.StatusConflict:
				conflicts.Add(1)
			}
		}()
	}
	wg.Wait()
	assert.Equal(t, int32(1), wins.Load())
	assert.Equal(t, int32(19), conflicts.Load())
	st, err = sc.Store.Get(ctx, "default", "b")
	require.NoError(t, err)
	assert.True(t, st.ClaimDeadline.IsZero(), "claimed in the store at once")
	require.NoError(t, sc.Waitlist.ValidateSessionIsActive("default", "b"))
}

// TestClaimRedirectNext: the claim's 303 goes to the form's next by the
// rule of the claim page (claimNext): a local path of at most 2 KiB that
// does not hold the ticket; anything else goes to the site's root, and the
// claim is made either way.
func TestClaimRedirectNext(t *testing.T) {
	long := "/" + strings.Repeat("a", 2<<10)
	for _, tc := range []struct {
		name string
		next func(ticket string) string
		want string
	}{
		{"a local path", func(string) string { return "/welcome?x=1" }, "/welcome?x=1"},
		{"none", func(string) string { return "" }, "/"},
		{"off the site", func(string) string { return "https://evil.example/" }, "/"},
		{"protocol-relative", func(string) string { return "//evil.example/x" }, "/"},
		{"the ticket in it", func(ticket string) string { return "/back?t=" + ticket }, "/"},
		{"at 2 KiB form-encoded", func(string) string { return long[:2<<10-2] }, long[:2<<10-2]},
		{"under 2 KiB of bytes, more form-encoded", func(string) string { return "/" + strings.Repeat("a/", 600) }, "/"},
		{"past 2 KiB", func(string) string { return long }, "/"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc := notifySidecar(t)
			deadline := promoteCalledBack(t, sc)
			link := claimURL(t, sc, "default", "b", deadline)
			ticket := ticketOf(t, link)
			if n := tc.next(ticket); n != "" {
				link += "&next=" + url.QueryEscape(n)
			}
			status, body, hdr := claimPost(t, noRedirects, link)
			require.Equal(t, http.StatusSeeOther, status, body)
			assert.Equal(t, tc.want, hdr.Get("Location"))
			assert.NotContains(t, hdr.Get("Location"), ticket)
			assert.Contains(t, hdr.Get("Set-Cookie"), "anteroom_session=")
			require.NoError(t, sc.Waitlist.ValidateSessionIsActive("default", "b"))
		})
	}
}

// TestClaimLinkBoundToPromotion: the unexpired claim link of a called-back
// session's first promotion does not claim its next one (released,
// re-joined by name, promoted again within the same second): 409
// already_claimed, no cookie, the slot left to its own link, which claims
// it (303 and the cookie), once.
func TestClaimLinkBoundToPromotion(t *testing.T) {
	sc := notifySidecar(t)
	ctx := context.Background()
	promote := func(holder string) time.Time {
		t.Helper()
		for _, id := range []string{holder, "b"} {
			_, err := sc.Waitlist.Join(ctx, "default", id)
			require.NoError(t, err)
		}
		_, err := sc.Waitlist.SetNotify(ctx, "default", "b", true)
		require.NoError(t, err)
		sc.Clock.Advance(time.Millisecond)
		require.NoError(t, sc.Waitlist.Release(ctx, "default", holder))
		s, err := sc.Store.Get(ctx, "default", "b")
		require.NoError(t, err)
		require.Equal(t, session.StatusActive, s.Status)
		require.False(t, s.ClaimDeadline.IsZero(), "promoted, unclaimed")
		return s.ClaimDeadline
	}
	first := promote("in")
	oldLink := claimURL(t, sc, "default", "b", first)
	require.NoError(t, sc.Waitlist.Release(ctx, "default", "b"))
	second := promote("in2")
	newLink := claimURL(t, sc, "default", "b", second)
	require.Equal(t, first.Unix(), second.Unix(), "both deadlines in the same second")
	require.NotEqual(t, oldLink, newLink)

	for range 2 { // the stale link does not use up the slot's link either
		status, body, hdr := claimPost(t, noRedirects, oldLink)
		assert.Equal(t, http.StatusConflict, status, body)
		assert.Contains(t, body, "already_claimed")
		assert.Empty(t, hdr.Values("Set-Cookie"))
		s, err := sc.Store.Get(ctx, "default", "b")
		require.NoError(t, err)
		assert.Equal(t, second, s.ClaimDeadline, "still unclaimed")
	}

	status, body, hdr := claimPost(t, noRedirects, newLink)
	require.Equal(t, http.StatusSeeOther, status, body)
	assert.Contains(t, hdr.Get("Set-Cookie"), "anteroom_session=")
	s, err := sc.Store.Get(ctx, "default", "b")
	require.NoError(t, err)
	assert.True(t, s.ClaimDeadline.IsZero(), "claimed")
	status, body, _ = claimPost(t, noRedirects, newLink)
	assert.Equal(t, http.StatusConflict, status, "the link claims once")
	assert.Contains(t, body, "already_claimed")
}
