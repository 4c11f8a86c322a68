package gate_test

import (
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

// What browsers send when they open a link.
const (
	acceptChrome  = "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,image/apng,*/*;q=0.8,application/signed-exchange;v=b3;q=0.7"
	acceptFirefox = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"
)

// refusedSidecar is notifySidecar with more options (configure may be nil)
// and a logger.
func refusedSidecar(t *testing.T, logger *slog.Logger, configure func(*gate.Options)) *gatetest.Sidecar {
	t.Helper()
	cfg := gatetest.Gate("default", 1)
	cfg.NotifyClaimTimeout = 15 * time.Minute
	var sc *gatetest.Sidecar
	signer, err := token.NewSignerWithOptions([]byte(strings.Repeat("s", token.MinSecretLength)), token.Options{Now: func() time.Time { return sc.Clock.Now() }})
	require.NoError(t, err)
	sc = gatetest.StartSidecar(t, gatetest.Options{
		Gates:  []session.GateConfig{cfg, gatetest.Gate("other", 1)},
		Logger: logger,
		Gate: func(o *gate.Options) {
			o.Signer = signer
			if configure != nil {
				configure(o)
			}
		},
	})
	sc.Signer = signer
	return sc
}

// refusedLinks are claim links that fail at their GET, with their status
// and code, and the sentence a browser's page says. ticket is the ticket
// the link carries (that the page must not repeat).
type refusedLink struct {
	name, url, ticket string
	status            int
	code, title, text string
	gate              string // the gate of the page's link to the waiting page
}

func refusedLinks(t *testing.T, sc *gatetest.Sidecar) []refusedLink {
	t.Helper()
	claim := sc.URL + gatetest.BasePath + "/claim"
	now := sc.Clock.Now()
	// Issued by the sidecar's own secret an hour ago, for a deadline a
	// minute ago: genuine, and too late.
	past, err := token.NewSignerWithOptions([]byte(strings.Repeat("s", token.MinSecretLength)), token.Options{Now: func() time.Time { return now.Add(-time.Hour) }})
	require.NoError(t, err)
	expired, err := past.ClaimTicket("default", "b", now.Add(-time.Minute))
	require.NoError(t, err)
	valid, err := sc.Signer.ClaimTicket("default", "b", now.Add(15*time.Minute))
	require.NoError(t, err)
	other, err := token.NewSignerWithOptions([]byte(strings.Repeat("o", token.MinSecretLength)), token.Options{Now: func() time.Time { return now.Add(-time.Hour) }})
	require.NoError(t, err)
	foreignExpired, err := other.ClaimTicket("default", "b", now.Add(-time.Minute))
	require.NoError(t, err)
	const (
		expiredTitle, expiredText = "This link has expired", "The time to use it has run out"
		invalidTitle, invalidText = "This link is not valid", "cut short or changed"
	)
	link := func(gate, ticket string) string {
		return claim + "?" + url.Values{"gate": {gate}, "ticket": {ticket}}.Encode()
	}
	script := `"><script>alert(1)</script>`
	return []refusedLink{
		{"expired", link("default", expired), expired, 401, "invalid_ticket", expiredTitle, expiredText, "default"},
		{"expired, of another secret", link("default", foreignExpired), foreignExpired, 401, "invalid_ticket", invalidTitle, invalidText, "default"},
		{"cut short by a mail client", link("default", valid[:len(valid)-10]), valid[:len(valid)-10], 401, "invalid_ticket", invalidTitle, invalidText, "default"},
		{"wrapped by a mail client", claim + "?gate=default&ticket=" + valid[:20] + "%0D%0A" + valid[20:], valid[20:], 401, "invalid_ticket", invalidTitle, invalidText, "default"},
		{"quoted-printable damage", claim + "?gate=default&ticket=3D" + valid, valid, 401, "invalid_ticket", invalidTitle, invalidText, "default"},
		{"no ticket", claim + "?gate=default", "", 401, "invalid_ticket", invalidTitle, invalidText, "default"},
		{"no query at all", claim, "", 401, "invalid_ticket", invalidTitle, invalidText, "default"},
		{"another gate's", link("other", valid), valid, 401, "invalid_ticket", invalidTitle, invalidText, "other"},
		{"an unknown gate", link("nope", valid), valid, 404, "unknown_gate", invalidTitle, invalidText, "default"},
		{"script in the gate", link(script, valid), valid, 404, "unknown_gate", invalidTitle, invalidText, "default"},
		{"script in the ticket", link("default", script), script, 401, "invalid_ticket", invalidTitle, invalidText, "default"},
	}
}

// withNext is link with &next=next.
func withNext(link, next string) string {
	sep := "&"
	if !strings.Contains(link, "?") {
		sep = "?"
	}
	return link + sep + "next=" + url.QueryEscape(next)
}

// pageOf checks that an answer is the page of a claim link refused, with
// every header of the claim page's, and returns its body.
func pageOf(t *testing.T, status int, body string, hdr http.Header, wantStatus int) string {
	t.Helper()
	assert.Equal(t, wantStatus, status, body)
	assert.Equal(t, "text/html; charset=utf-8", hdr.Get("Content-Type"))
	assert.Equal(t, "no-store", hdr.Get("Cache-Control"))
	assert.Equal(t, "no-referrer", hdr.Get("Referrer-Policy"), "the link's URL holds the ticket")
	assert.Equal(t, "nosniff", hdr.Get("X-Content-Type-Options"))
	assert.Equal(t, "SAMEORIGIN", hdr.Get("X-Frame-Options"))
	csp := hdr.Get("Content-Security-Policy")
	for _, want := range []string{"default-src 'self'", "frame-ancestors 'self'", "base-uri 'none'", "form-action 'self'"} {
		assert.Contains(t, csp, want)
	}
	assert.Empty(t, hdr.Values("Set-Cookie"))
	assert.Empty(t, hdr.Get("Location"))
	nonce := regexp.MustCompile(`'nonce-([^']+)'`).FindStringSubmatch(csp)
	require.Len(t, nonce, 2, csp)
	if body != "" {
		assert.Contains(t, body, `<style nonce="`+nonce[1]+`">`, "the style under the CSP's nonce")
	}
	return body
}

// A browser that opens a claim link that is refused gets a page under the
// same status as the JSON: the sentence of what happened, a way on to the
// waiting page, the claim page's headers, and never the ticket.
func TestClaimLinkRefusedIsAPageForBrowsers(t *testing.T) {
	sc := refusedSidecar(t, nil, nil)
	for _, l := range refusedLinks(t, sc) {
		t.Run(l.name, func(t *testing.T) {
			for _, accept := range []string{acceptChrome, acceptFirefox, "text/html", "text/html;q=0.5, application/json;q=0.4"} {
				status, body, hdr := send(t, noRedirects, "GET", l.url, "", "Accept", accept)
				body = pageOf(t, status, body, hdr, l.status)
				assert.True(t, strings.HasPrefix(body, "<!doctype html>"), body)
				assert.Contains(t, body, `<h1 id="claim-title">`+l.title+`</h1>`)
				assert.Regexp(t, `<p id="claim-text">[^<]*`+regexp.QuoteMeta(l.text), body)
				assert.Contains(t, body, `<a class="button" id="claim-next" href="/anteroom/?gate=`+l.gate+`" rel="noreferrer">Join the line again</a>`)
				assert.Equal(t, 1, strings.Count(body, "href="), "one link")
				assert.NotContains(t, body, "<script")
				assert.NotContains(t, body, "<form")
				assert.NotContains(t, body, `"error"`)
				if l.ticket != "" {
					assert.NotContains(t, body, l.ticket, "the ticket is not on the page")
					assert.NotContains(t, body, url.QueryEscape(l.ticket))
					if i := strings.LastIndexByte(l.ticket, '.'); i >= 0 && len(l.ticket)-i > 8 {
						assert.NotContains(t, body, l.ticket[i+1:], "nor its MAC")
					}
				}
			}
		})
	}
}

// An API client, curl or fetch() gets the JSON error of today, byte for
// byte, headers and all: whatever does not rank text/html above
// application/json, however it tries.
func TestClaimLinkRefusedIsJSONForAPIClients(t *testing.T) {
	sc := refusedSidecar(t, nil, nil)
	message := map[string]string{"invalid_ticket": "claim link invalid or expired", "unknown_gate": ""}
	for _, l := range refusedLinks(t, sc) {
		t.Run(l.name, func(t *testing.T) {
			status, want, wantHdr := send(t, noRedirects, "GET", l.url, "")
			require.Equal(t, l.status, status, want)
			assert.Equal(t, "application/json", wantHdr.Get("Content-Type"))
			assert.True(t, strings.HasPrefix(want, `{"error":{"code":"`+l.code+`","message":"`), want)
			if m := message[l.code]; m != "" && l.ticket != "" {
				assert.Equal(t, `{"error":{"code":"`+l.code+`","message":"`+m+`"}}`+"\n", want, "the JSON of the wire contract")
			}
			wantHdr.Del("Date")
			for _, accept := range []string{
				"*/*",
				"application/json",
				"application/json, */*;q=0.5",
				"text/html;q=0",
				"application/json, text/html;q=0.1",
				"text/html, application/json",
				"text/html;q=0, */*",
				"text/html;q=2",
				"text/html;q=abc",
				"*/html",
				"text/html," + strings.Repeat("x/y;q=0.1,", 200),
				strings.Repeat("a", 64<<10) + ",text/html",
				`<script>alert(1)</script>`,
			} {
				status, body, hdr := send(t, noRedirects, "GET", l.url, "", "Accept", accept)
				assert.Equal(t, l.status, status, "Accept: %.40q", accept)
				assert.Equal(t, want, body, "Accept: %.40q", accept)
				hdr.Del("Date")
				assert.Equal(t, wantHdr, hdr, "Accept: %.40q", accept)
			}
		})
	}
}

// A HEAD from a browser is answered as its GET: the same status and
// headers (the page's length among them), no body.
func TestClaimLinkRefusedHead(t *testing.T) {
	sc := refusedSidecar(t, nil, nil)
	for _, l := range refusedLinks(t, sc)[:3] {
		status, body, hdr := send(t, noRedirects, "GET", l.url, "", "Accept", acceptChrome)
		pageOf(t, status, body, hdr, l.status)
		hstatus, hbody, hhdr := send(t, noRedirects, "HEAD", l.url, "", "Accept", acceptChrome)
		pageOf(t, hstatus, hbody, hhdr, l.status)
		assert.Empty(t, hbody)
		assert.Equal(t, hdr.Get("Content-Length"), hhdr.Get("Content-Length"), l.name)
		assert.NotEmpty(t, hhdr.Get("Content-Length"))
	}
}

// The page's link goes to the link's next only when it is a local path
// (the same check as every next of the sidecar's) of at most 2 KiB form-encoded, never
// off-site, and never to a URL that holds the ticket; whatever it repeats
// is escaped. One rule for the link's GET and for its form's POST (the
// page posted without script), whose next is the form's. The JSON answer
// does not depend on next: byte for byte, headers and all, the answer
// without one.
func TestClaimLinkRefusedNext(t *testing.T) {
	sc := refusedSidecar(t, nil, nil)
	l := refusedLinks(t, sc)[0] // expired
	require.Equal(t, "expired", l.name)
	waiting := `href="/anteroom/?gate=default"`
	long := "/" + strings.Repeat("a", 2<<10-3) // 2 KiB form-encoded: "/" is "%2F"
	methods := map[string]func(next string, header ...string) (int, string, http.Header){
		"GET": func(next string, header ...string) (int, string, http.Header) {
			link := l.url
			if next != "" {
				link = withNext(link, next)
			}
			return send(t, noRedirects, "GET", link, "", header...)
		},
		"POST": func(next string, header ...string) (int, string, http.Header) {
			return postClaim(t, sc, "default", ticketForm(l.ticket, next), append([]string{"Origin", sc.URL}, header...)...)
		},
	}
	for _, tc := range []struct {
		name, next, href string
	}{
		{"a local path", "/welcome?x=1&y=2", `href="/welcome?x=1&amp;y=2"`},
		{"2 KiB", long, `href="` + long + `"`},
		{"encoded slashes stay in the path", "/%2F%2Fsite.test/x", `href="/%2F%2Fsite.test/x"`},
		{"a fullwidth solidus stays in the path", "/\uff0fsite.test", `href="/%ef%bc%8fsite.test"`},
		{"protocol-relative", "//evil.example/x", waiting},
		{"backslash", `/\evil.example/x`, waiting},
		{"two backslashes", `\\evil.example/x`, waiting},
		{"absolute", "https://evil.example/", waiting},
		{"javascript", "javascript:alert(1)", waiting},
		{"data", "data:text/html,<script>alert(1)</script>", waiting},
		{"a tab that browsers drop", "/\t/evil.example", waiting},
		{"a line break", "/\n/evil.example", waiting},
		{"CR LF", "/\r\n//evil.example", waiting},
		{"NUL", "/\x00/evil.example", waiting},
		{"DEL", "/\x7f/evil.example", waiting},
		{"a leading space that browsers strip", " //evil.example/x", waiting},
		{"a leading NUL", "\x00//evil.example/x", waiting},
		{"percent-encoded", "%2F%2Fevil.example/x", waiting},
		{"percent-encoded backslash", "%5C%5Cevil.example/x", waiting},
		{"double-encoded", "%252F%252Fevil.example/x", waiting},
		{"over 2 KiB", long + "a", waiting},
		{"very long", "/" + strings.Repeat("evil.example/", 230), waiting},
		{"relative", "welcome", waiting},
		{"empty", "", waiting},
		{"script", `/a"><script>alert(1)</script>`, `href="/a%22%3e%3cscript%3ealert%281%29%3c/script%3e"`},
		{"the ticket in next", "/x?t=" + l.ticket, waiting},
		{"the ticket, query-escaped, in next", "/x?t=" + url.QueryEscape(l.ticket), waiting},
	} {
		for _, method := range []string{"GET", "POST"} {
			t.Run(method+" "+tc.name, func(t *testing.T) {
				do := methods[method]
				status, body, hdr := do(tc.next, "Accept", acceptChrome)
				body = pageOf(t, status, body, hdr, http.StatusUnauthorized)
				assert.Contains(t, body, `<h1 id="claim-title">This link has expired</h1>`)
				assert.Contains(t, body, `<a class="button" id="claim-next" `+tc.href+` rel="noreferrer">`)
				assert.Equal(t, 1, strings.Count(body, "href="), "one link")
				assert.NotContains(t, body, "evil.example")
				assert.NotContains(t, body, "<script")
				assert.NotContains(t, body, l.ticket)
				if tc.href == waiting {
					assert.Contains(t, body, ">Join the line again</a>")
				} else {
					assert.Contains(t, body, ">Continue to the site</a>")
				}

				wantStatus, want, wantHdr := do("", "Accept", "*/*")
				require.Equal(t, http.StatusUnauthorized, wantStatus)
				require.Equal(t, `{"error":{"code":"invalid_ticket","message":"claim link invalid or expired"}}`+"\n", want)
				wantHdr.Del("Date")
				for _, accept := range []string{"*/*", "application/json", "text/html, application/json"} {
					status, body, hdr := do(tc.next, "Accept", accept)
					assert.Equal(t, wantStatus, status, accept)
					assert.Equal(t, want, body, "%s: the JSON byte for byte", accept)
					hdr.Del("Date")
					assert.Equal(t, wantHdr, hdr, accept)
				}
			})
		}
	}
}

// A posted form's page leads to the form's next by that rule whatever the
// refusal, once the form was read: a link used already, of an unknown
// gate, invalid. The POST's URL is not the link (it names the gate only):
// a next there is not followed. A POST refused before its form is read
// (from another site, a body that is not a form) leads to the waiting page.
func TestClaimPostRefusedNext(t *testing.T) {
	sc := refusedSidecar(t, nil, nil)
	used := calledBack(t, sc, "used")
	status, body, _ := claimPost(t, noRedirects, used, "Origin", sc.URL)
	require.Equal(t, http.StatusSeeOther, status, body)
	u, err := url.Parse(used)
	require.NoError(t, err)
	usedTicket := u.Query().Get("ticket")
	waiting := `href="/anteroom/?gate=default"`
	next := `href="/welcome?x=1&amp;y=2"`
	action := sc.URL + gatetest.BasePath + gate.ClaimPath
	for _, tc := range []struct {
		name, url, form, origin string
		status                  int
		title, href             string
	}{
		{"used", action + "?gate=default", ticketForm(usedTicket, "/welcome?x=1&y=2"), sc.URL, http.StatusConflict, "This link was used already", next},
		{"used, next off-site", action + "?gate=default", ticketForm(usedTicket, "//evil.example/x"), sc.URL, http.StatusConflict, "This link was used already", waiting},
		{"an unknown gate", action + "?gate=nope", ticketForm(usedTicket, "/welcome?x=1&y=2"), sc.URL, http.StatusNotFound, "This link is not valid", next},
		{"no ticket", action + "?gate=default", "next=%2Fwelcome%3Fx%3D1%26y%3D2", sc.URL, http.StatusUnauthorized, "This link is not valid", next},
		{"the first next of two", action + "?gate=default", ticketForm(usedTicket, "/welcome?x=1&y=2") + "&next=%2F%2Fevil.example", sc.URL, http.StatusConflict, "This link was used already", next},
		{"a next in the URL, none in the form", action + "?gate=default&next=%2Fwelcome", ticketForm(usedTicket, ""), sc.URL, http.StatusConflict, "This link was used already", waiting},
		{"a next in the URL and an off-site one in the form", action + "?gate=default&next=%2Fwelcome", ticketForm(usedTicket, "https://evil.example/"), sc.URL, http.StatusConflict, "This link was used already", waiting},
		{"from another site", action + "?gate=default", ticketForm(usedTicket, "/welcome?x=1&y=2"), "https://evil.example", http.StatusForbidden, "This link is not valid", waiting},
		{"not a form", action + "?gate=default", "next=%2Fwelcome&ticket=%zz", sc.URL, http.StatusBadRequest, "This link is not valid", waiting},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body, hdr := send(t, noRedirects, "POST", tc.url, tc.form,
				"Content-Type", "application/x-www-form-urlencoded", "Origin", tc.origin, "Accept", acceptFirefox)
			body = pageOf(t, status, body, hdr, tc.status)
			assert.Contains(t, body, `<h1 id="claim-title">`+tc.title+`</h1>`)
			assert.Contains(t, body, `<a class="button" id="claim-next" `+tc.href+` rel="noreferrer">`)
			assert.NotContains(t, body, "evil.example")
			assert.NotContains(t, body, usedTicket)
		})
	}
}

// A rate-limited browser is told to try again in a moment, with the
// limiter's Retry-After and no link away (the link itself, reloaded, is
// the way on); an API client gets the 429 JSON.
func TestClaimLinkRefusedRateLimited(t *testing.T) {
	sc := refusedSidecar(t, nil, func(o *gate.Options) {
		o.RateLimit = gate.RateLimitOptions{PerSecond: 0.001, Burst: 1}
	})
	l := refusedLinks(t, sc)[0]
	status, _, _ := send(t, noRedirects, "GET", l.url, "", "Accept", acceptChrome)
	require.Equal(t, http.StatusUnauthorized, status, "the first one passes the limit")
	status, body, hdr := send(t, noRedirects, "GET", l.url, "", "Accept", acceptChrome)
	body = pageOf(t, status, body, hdr, http.StatusTooManyRequests)
	assert.NotEmpty(t, hdr.Get("Retry-After"))
	assert.Contains(t, body, `<h1 id="claim-title">Please try again</h1>`)
	assert.Contains(t, body, "Reload this page in a moment")
	assert.NotContains(t, body, "href=")
	assert.NotContains(t, body, l.ticket)
	// The form posted without script: a reload would post it again.
	status, body, hdr = claimPost(t, noRedirects, l.url, "Origin", sc.URL, "Accept", acceptChrome)
	body = pageOf(t, status, body, hdr, http.StatusTooManyRequests)
	assert.Contains(t, body, "Go back and press the button again in a moment")
	assert.NotContains(t, body, "Reload")
	status, body, hdr = send(t, noRedirects, "GET", l.url, "", "Accept", "*/*")
	assert.Equal(t, http.StatusTooManyRequests, status)
	assert.Equal(t, `{"error":{"code":"rate_limited","message":"too many requests from this address: slow down"}}`+"\n", body)
	assert.Equal(t, "application/json", hdr.Get("Content-Type"))
}

// The access log line of a refused link's page names the path and the
// status, never the ticket.
func TestClaimLinkRefusedNotLogged(t *testing.T) {
	logs := &sessiontest.LogBuffer{}
	sc := refusedSidecar(t, slog.New(slog.NewTextHandler(logs, nil)), func(o *gate.Options) {
		o.AccessLog = true
		o.AccessLogKey = []byte("a key for the access log hashes")
	})
	links := refusedLinks(t, sc)
	for _, l := range links {
		status, _, _ := send(t, noRedirects, "GET", withNext(l.url, "/x?t="+l.ticket), "", "Accept", acceptChrome)
		require.Equal(t, l.status, status, l.name)
	}
	require.Eventually(t, func() bool { return strings.Count(logs.String(), "path=/anteroom/claim") >= len(links) }, 5*time.Second, 5*time.Millisecond)
	out := logs.String()
	assert.Contains(t, out, "status=401")
	assert.Contains(t, out, "status=404")
	assert.NotContains(t, out, "ticket=")
	for _, l := range links {
		if len(l.ticket) > 8 {
			assert.NotContains(t, out, l.ticket, l.name)
		}
	}
}

// A browser without script posts the claim page's form itself: a refusal
// of that POST (the link used already, expired, from another site) is the
// page too, under the same status; fetch() and API clients keep the JSON.
func TestClaimPostRefusedIsAPageForBrowsers(t *testing.T) {
	sc := notifySidecar(t)
	deadline := promoteCalledBack(t, sc)
	link := claimURL(t, sc, "default", "b", deadline)
	status, body, _ := claimPost(t, noRedirects, link, "Origin", sc.URL, "Accept", acceptFirefox)
	require.Equal(t, http.StatusSeeOther, status, body)

	for _, tc := range []struct {
		name, origin string
		status       int
		title, code  string
	}{
		{"used already", sc.URL, http.StatusConflict, "This link was used already", "already_claimed"},
		{"posted from another site", "https://evil.example", http.StatusForbidden, "This link is not valid", "cross_origin"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body, hdr := claimPost(t, noRedirects, link, "Origin", tc.origin, "Accept", acceptChrome)
			body = pageOf(t, status, body, hdr, tc.status)
			assert.Contains(t, body, `<h1 id="claim-title">`+tc.title+`</h1>`)
			assert.NotContains(t, body, `"error"`)
			ticket, err := url.Parse(link)
			require.NoError(t, err)
			assert.NotContains(t, body, ticket.Query().Get("ticket"), "the ticket is not on the page")

			status, body, hdr = claimPost(t, noRedirects, link, "Origin", tc.origin)
			assert.Equal(t, tc.status, status, body)
			assert.Equal(t, "application/json", hdr.Get("Content-Type"))
			assert.Contains(t, body, `"code":"`+tc.code+`"`)
		})
	}
}
