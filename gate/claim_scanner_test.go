package gate_test

import (
	"context"
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
	"github.com/anteroomhq/anteroom/gate/token"
	"github.com/anteroomhq/anteroom/session"
	"github.com/anteroomhq/anteroom/session/sessiontest"
)

// promoteCalledBack makes b a called-back session promoted behind "in" and
// returns its claim deadline (the slot unclaimed).
func promoteCalledBack(t *testing.T, sc *gatetest.Sidecar) time.Time {
	t.Helper()
	ctx := context.Background()
	for _, id := range []string{"in", "b"} {
		_, err := sc.Waitlist.Join(ctx, "default", id)
		require.NoError(t, err)
	}
	_, err := sc.Waitlist.SetNotify(ctx, "default", "b", true)
	require.NoError(t, err)
	require.NoError(t, sc.Waitlist.Release(ctx, "default", "in"))
	s, err := sc.Store.Get(ctx, "default", "b")
	require.NoError(t, err)
	require.Equal(t, session.StatusActive, s.Status)
	require.False(t, s.ClaimDeadline.IsZero(), "promoted, unclaimed")
	return s.ClaimDeadline
}

// TestClaimLinkScannersDoNotClaim: mail and chat link scanners (Safe
// Links, unfurlers, antivirus gateways) GET or HEAD every link of a
// message before the person clicks. Their visits show the claim page and
// claim nothing, so the person's click later claims the slot (303 and the
// cookie), once. The page posts the ticket from a form under the pages'
// CSP, without third-party assets, and keeps the ticket out of Referer.
func TestClaimLinkScannersDoNotClaim(t *testing.T) {
	sc := notifySidecar(t)
	ctx := context.Background()
	deadline := promoteCalledBack(t, sc)
	link := claimURL(t, sc, "default", "b", deadline) + "&next=" + url.QueryEscape("/welcome?x=1")
	ticket := func() string { u, _ := url.Parse(link); return u.Query().Get("ticket") }()

	for _, tc := range []struct {
		name, method string
		header       []string
	}{
		{"a plain GET", "GET", nil},
		{"a HEAD", "HEAD", nil},
		{"Safe Links", "GET", []string{"User-Agent", "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0 Safari/537.36 Microsoft Office/16.0 (Safe Links)"}},
		{"Slack unfurler", "GET", []string{"User-Agent", "Slackbot-LinkExpanding 1.0 (+https://api.slack.com/robots)"}},
		{"a browser-like scanner", "GET", []string{"User-Agent", "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0 Safari/537.36", "Accept", "text/html", "Sec-Fetch-Mode", "navigate", "Sec-Fetch-Dest", "document"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for range 2 {
				status, body, hdr := send(t, noRedirects, tc.method, link, "", tc.header...)
				require.Equal(t, http.StatusOK, status, body)
				assert.Empty(t, hdr.Values("Set-Cookie"), "no cookie for a visit that claims nothing")
				assert.Empty(t, hdr.Get("Location"))
				assert.Equal(t, "no-store", hdr.Get("Cache-Control"))
				assert.Equal(t, "strict-origin", hdr.Get("Referrer-Policy"), "the ticket in the page's URL never leaves as Referer")
				assert.Contains(t, hdr.Get("Content-Type"), "text/html")
				csp := hdr.Get("Content-Security-Policy")
				assert.Contains(t, csp, "default-src 'self'")
				assert.Contains(t, csp, "form-action 'self'")
				if tc.method == "GET" {
					nonce := regexp.MustCompile(`'nonce-([^']+)'`).FindStringSubmatch(csp)
					require.Len(t, nonce, 2, csp)
					assert.Contains(t, body, `<script nonce="`+nonce[1]+`">`)
					assert.Contains(t, body, `<form id="claim-form" method="post" action="/anteroom/claim?gate=default">`)
					assert.Contains(t, body, `name="ticket" value="`+ticket+`"`)
					assert.Contains(t, body, `name="next" value="/welcome?x=1"`)
					assert.Contains(t, body, `<button type="submit"`, "a way in without script")
					assert.NotRegexp(t, `(src|href)=`, body, "no assets at all")
				}
				s, err := sc.Store.Get(ctx, "default", "b")
				require.NoError(t, err)
				require.Equal(t, deadline, s.ClaimDeadline, "still unclaimed")
			}
		})
	}

	// A page of another site cannot post the link (a forced claim on the
	// visitor's browser, with the attacker's own ticket, would swap their
	// session).
	status, body, hdr := claimPost(t, noRedirects, link, "Origin", "https://evil.example")
	assert.Equal(t, http.StatusForbidden, status, body)
	assert.Contains(t, body, "cross_origin")
	assert.Empty(t, hdr.Values("Set-Cookie"))
	status, _, _ = claimPost(t, noRedirects, link, "Sec-Fetch-Site", "cross-site")
	assert.Equal(t, http.StatusForbidden, status)
	status, _, _ = claimPost(t, noRedirects, link, "Origin", "null")
	assert.Equal(t, http.StatusForbidden, status)
	status, body, _ = send(t, noRedirects, "POST", sc.URL+gatetest.BasePath+"/claim?gate=default", "ticket=%zz", "Content-Type", "application/x-www-form-urlencoded")
	assert.Equal(t, http.StatusBadRequest, status, body)
	// The ticket counts only in the body: a POST to the link's own URL
	// (the ticket in the query, where logs and proxies keep it) claims
	// nothing, whatever its Origin.
	status, body, _ = send(t, noRedirects, "POST", link, "", "Origin", sc.URL, "Content-Type", "application/x-www-form-urlencoded")
	assert.Equal(t, http.StatusUnauthorized, status, body)
	assert.Contains(t, body, "invalid_ticket")
	s, err := sc.Store.Get(ctx, "default", "b")
	require.NoError(t, err)
	require.Equal(t, deadline, s.ClaimDeadline, "still unclaimed")

	// The person's click: the page's POST (from the sidecar's origin)
	// claims, sets the cookie and goes where the link leads.
	status, body, hdr = claimPost(t, noRedirects, link, "Origin", sc.URL, "Sec-Fetch-Site", "same-origin")
	require.Equal(t, http.StatusSeeOther, status, body)
	assert.Equal(t, "/welcome?x=1", hdr.Get("Location"))
	assert.Equal(t, "no-referrer", hdr.Get("Referrer-Policy"), "the page the link leads to gets no Referer")
	assert.Contains(t, hdr.Get("Set-Cookie"), "anteroom_session=")
	s, err = sc.Store.Get(ctx, "default", "b")
	require.NoError(t, err)
	assert.True(t, s.ClaimDeadline.IsZero(), "claimed")
	require.NoError(t, sc.Waitlist.ValidateSessionIsActive("default", "b"))

	// The second POST is refused; a scanner's GET after the claim still
	// claims nothing and hands out nothing.
	status, body, hdr = claimPost(t, noRedirects, link, "Origin", sc.URL)
	assert.Equal(t, http.StatusConflict, status, body)
	assert.Contains(t, body, "already_claimed")
	assert.Empty(t, hdr.Values("Set-Cookie"))
	status, _, hdr = send(t, noRedirects, "GET", link, "")
	assert.Equal(t, http.StatusOK, status)
	assert.Empty(t, hdr.Values("Set-Cookie"))
}

// TestClaimPageEscapes: the page repeats the link's next only when it is a
// local path of at most 2 KiB without the ticket (claimNext, the rule of
// the claim's redirect and of the page of a refusal too), and escapes what
// it repeats.
func TestClaimPageEscapes(t *testing.T) {
	sc := notifySidecar(t)
	deadline := promoteCalledBack(t, sc)
	link := claimURL(t, sc, "default", "b", deadline)
	ticket := ticketOf(t, link)
	long := "/" + strings.Repeat("a", 2<<10)
	for _, tc := range []struct{ next, want, not string }{
		{"//evil.example/x", "", "evil.example"},
		{"https://evil.example/", "", "evil.example"},
		{`/a"><script>alert(1)</script>`, `/a&#34;&gt;&lt;script&gt;`, "<script>alert"},
		{"/back?t=" + ticket, "", "/back?t="},
		{long, "", long[:64]},
		{long[:2<<10-2], long[:2<<10-2], "evil.example"}, // 2 KiB form-encoded
	} {
		status, body, _ := send(t, noRedirects, "GET", link+"&next="+url.QueryEscape(tc.next), "")
		require.Equal(t, http.StatusOK, status, body)
		assert.NotContains(t, body, tc.not)
		if tc.want == "" {
			assert.NotContains(t, body, `name="next"`)
		} else {
			assert.Contains(t, body, tc.want)
		}
	}
	// The gate is escaped in the form's action too (an unknown gate is 404).
	status, body, _ := send(t, noRedirects, "GET", strings.Replace(link, "gate=default", "gate=%3Cx%3E", 1), "")
	assert.Equal(t, http.StatusNotFound, status, body)
}

// TestClaimLinkTicketNotLogged: the access log lines of the claim page and
// of its POST name the path, never the ticket (in the link's query, and in
// the POST's body).
func TestClaimLinkTicketNotLogged(t *testing.T) {
	logs := &sessiontest.LogBuffer{}
	cfg := gatetest.Gate("default", 1)
	cfg.NotifyClaimTimeout = 15 * time.Minute
	var sc *gatetest.Sidecar
	signer, err := token.NewSignerWithOptions([]byte(strings.Repeat("s", token.MinSecretLength)), token.Options{Now: func() time.Time { return sc.Clock.Now() }})
	require.NoError(t, err)
	sc = gatetest.StartSidecar(t, gatetest.Options{
		Gates:  []session.GateConfig{cfg},
		Logger: slog.New(slog.NewTextHandler(logs, nil)),
		Gate: func(o *gate.Options) {
			o.Signer = signer
			o.AccessLog = true
			o.AccessLogKey = []byte("a key for the access log hashes")
		},
	})
	sc.Signer = signer
	deadline := promoteCalledBack(t, sc)
	link := claimURL(t, sc, "default", "b", deadline)
	u, err := url.Parse(link)
	require.NoError(t, err)
	ticket := u.Query().Get("ticket")
	require.NotEmpty(t, ticket)

	status, _, _ := send(t, noRedirects, "GET", link, "")
	require.Equal(t, http.StatusOK, status)
	status, _, _ = claimPost(t, noRedirects, link)
	require.Equal(t, http.StatusSeeOther, status)
	require.Eventually(t, func() bool { return strings.Count(logs.String(), "/anteroom/claim") >= 2 }, 5*time.Second, 5*time.Millisecond)
	out := logs.String()
	assert.NotContains(t, out, ticket)
	assert.NotContains(t, out, "ticket=")
	mac := ticket[strings.LastIndex(ticket, ".")+1:]
	assert.NotContains(t, out, mac)
}
