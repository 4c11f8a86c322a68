package gate_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/gate"
	"github.com/anteroomhq/anteroom/gate/gatetest"
	"github.com/anteroomhq/anteroom/gate/wire"
	"github.com/anteroomhq/anteroom/session"
)

// varyAccepts are the Accept headers of the Vary tests: two browsers, which
// get the page of a refused link, and four clients that get the JSON.
var varyAccepts = []varyAccept{
	{"Chrome", acceptChrome, true},
	{"Firefox", acceptFirefox, true},
	{"no Accept", "", false},
	{"*/*", "*/*", false},
	{"JSON", "application/json", false},
	{"a tie", "text/html, application/json", false},
}

type varyAccept struct {
	name, accept string
	html         bool // the client gets the page of a refused link
}

// header is the request header of a: Accept, or nothing for "".
func (a varyAccept) header() []string {
	if a.accept == "" {
		return nil
	}
	return []string{"Accept", a.accept}
}

// varyOf returns how many times Accept is named in hdr's Vary, over all
// its lines and their comma-separated lists.
func varyOf(hdr http.Header) int {
	n := 0
	for _, line := range hdr.Values("Vary") {
		for v := range strings.SplitSeq(line, ",") {
			if strings.EqualFold(strings.TrimSpace(v), "Accept") {
				n++
			}
		}
	}
	return n
}

// errorJSON is the wire contract's JSON error of code and message, as the
// sidecar writes it.
func errorJSON(t *testing.T, code session.Code, message string) string {
	t.Helper()
	b, err := json.Marshal(wire.NewErrorBody(code, message))
	require.NoError(t, err)
	return string(b) + "\n"
}

// calledBack makes id a called-back session promoted behind a session that
// leaves (the gate's one slot free before) and returns its claim link.
func calledBack(t *testing.T, sc *gatetest.Sidecar, id string) string {
	t.Helper()
	ctx := context.Background()
	for _, s := range []string{id + "-ahead", id} {
		_, err := sc.Waitlist.Join(ctx, "default", s)
		require.NoError(t, err)
	}
	_, err := sc.Waitlist.SetNotify(ctx, "default", id, true)
	require.NoError(t, err)
	require.NoError(t, sc.Waitlist.Release(ctx, "default", id+"-ahead"))
	s, err := sc.Store.Get(ctx, "default", id)
	require.NoError(t, err)
	require.False(t, s.ClaimDeadline.IsZero(), "promoted, unclaimed")
	return claimURL(t, sc, "default", id, s.ClaimDeadline)
}

// postClaim posts form (already encoded) to {base}/claim?gate=<gate> as
// the claim page's form does.
func postClaim(t *testing.T, sc *gatetest.Sidecar, gateName, form string, header ...string) (int, string, http.Header) {
	t.Helper()
	action := sc.URL + gatetest.BasePath + gate.ClaimPath + "?" + url.Values{"gate": {gateName}}.Encode()
	return send(t, noRedirects, "POST", action, form, append([]string{"Content-Type", "application/x-www-form-urlencoded"}, header...)...)
}

// ticketForm is the claim page's form of ticket and next.
func ticketForm(ticket, next string) string {
	f := url.Values{"ticket": {ticket}}
	if next != "" {
		f.Set("next", next)
	}
	return f.Encode()
}

// nonces matches the CSP nonce wherever an answer repeats it.
var nonces = regexp.MustCompile(`nonce-[A-Za-z0-9_-]+|nonce="[^"]*"`)

// Every answer of {base}/claim whose form Accept chooses (its errors: a
// page for a browser, the JSON for anyone else) carries Vary: Accept once,
// in both forms, so that no shared cache gives one client's form to the
// other; the answers that are the same for every Accept (the claim page,
// the claim's redirect) carry none. The forms themselves are unchanged:
// the JSON of the wire contract byte for byte, the page under the JSON's
// status.
func TestClaimAnswersVaryOnAccept(t *testing.T) {
	sc := refusedSidecar(t, nil, nil)
	links := map[string]refusedLink{}
	for _, l := range refusedLinks(t, sc) {
		links[l.name] = l
	}
	used := calledBack(t, sc, "used")
	status, body, _ := claimPost(t, noRedirects, used, "Origin", sc.URL)
	require.Equal(t, http.StatusSeeOther, status, body)
	require.NoError(t, sc.Waitlist.Release(context.Background(), "default", "used"))
	ticketOf := func(link string) string {
		u, err := url.Parse(link)
		require.NoError(t, err)
		return u.Query().Get("ticket")
	}
	// The rate-limited sidecar refuses all but its first request.
	busy := refusedSidecar(t, nil, func(o *gate.Options) {
		o.RateLimit = gate.RateLimitOptions{PerSecond: 0.001, Burst: 1}
	})
	busyLink := refusedLinks(t, busy)[0].url
	status, _, _ = send(t, noRedirects, "GET", busyLink, "")
	require.Equal(t, http.StatusUnauthorized, status, "the first one passes the limit")

	type answer = func(t *testing.T, method string, header ...string) (int, string, http.Header)
	get := func(link string) answer {
		return func(t *testing.T, method string, header ...string) (int, string, http.Header) {
			return send(t, noRedirects, method, link, "", header...)
		}
	}
	post := func(s *gatetest.Sidecar, gateName, origin string, form func(t *testing.T) string) answer {
		return func(t *testing.T, _ string, header ...string) (int, string, http.Header) {
			return postClaim(t, s, gateName, form(t), append([]string{"Origin", origin}, header...)...)
		}
	}
	formOf := func(l refusedLink) func(*testing.T) string {
		return func(*testing.T) string { return ticketForm(l.ticket, "") }
	}
	claims := 0
	fresh := func(t *testing.T) string { // a link of its own to each claim, the last one's slot freed
		if claims > 0 {
			require.NoError(t, sc.Waitlist.Release(context.Background(), "default", "claim"+strconv.Itoa(claims)))
		}
		claims++
		return ticketForm(ticketOf(calledBack(t, sc, "claim"+strconv.Itoa(claims))), "/welcome")
	}
	const (
		invalidTicket = "claim link invalid or expired"
		expired       = "This link has expired"
		invalid       = "This link is not valid"
	)
	for _, tc := range []struct {
		name    string
		methods []string
		do      answer
		status  int
		code    session.Code // "" for an answer that is no error
		message string
		title   string // the page's, for a browser
	}{
		{"expired", []string{"GET", "HEAD"}, get(links["expired"].url), 401, "invalid_ticket", invalidTicket, expired},
		{"invalid", []string{"GET", "HEAD"}, get(links["expired, of another secret"].url), 401, "invalid_ticket", invalidTicket, invalid},
		{"cut short", []string{"GET", "HEAD"}, get(links["cut short by a mail client"].url), 401, "invalid_ticket", invalidTicket, invalid},
		{"no ticket", []string{"GET", "HEAD"}, get(links["no ticket"].url), 401, "invalid_ticket", "claim link without a ticket", invalid},
		{"unknown gate", []string{"GET", "HEAD"}, get(links["an unknown gate"].url), 404, "unknown_gate", `unknown gate "nope"`, invalid},
		{"busy", []string{"GET", "HEAD"}, get(busyLink), 429, "rate_limited", "too many requests from this address: slow down", "Please try again"},
		{"the claim page", []string{"GET", "HEAD"}, get(calledBack(t, refusedSidecar(t, nil, nil), "page")), 200, "", "", ""},

		{"expired", []string{"POST"}, post(sc, "default", sc.URL, formOf(links["expired"])), 401, "invalid_ticket", invalidTicket, expired},
		{"invalid", []string{"POST"}, post(sc, "default", sc.URL, formOf(links["expired, of another secret"])), 401, "invalid_ticket", invalidTicket, invalid},
		{"cut short", []string{"POST"}, post(sc, "default", sc.URL, formOf(links["cut short by a mail client"])), 401, "invalid_ticket", invalidTicket, invalid},
		{"no ticket", []string{"POST"}, post(sc, "default", sc.URL, func(*testing.T) string { return "next=%2Fwelcome" }), 401, "invalid_ticket", "claim link without a ticket", invalid},
		{"unknown gate", []string{"POST"}, post(sc, "nope", sc.URL, formOf(links["expired"])), 404, "unknown_gate", `unknown gate "nope"`, invalid},
		{"used", []string{"POST"}, post(sc, "default", sc.URL, func(t *testing.T) string { return ticketForm(ticketOf(used), "") }), 409, "already_claimed", "this link was used already, or its slot is gone", "This link was used already"},
		{"from another site", []string{"POST"}, post(sc, "default", "https://evil.example", formOf(links["expired"])), 403, "cross_origin", "requests from this origin are not allowed (allowed_origins)", invalid},
		{"not a form", []string{"POST"}, post(sc, "default", sc.URL, func(*testing.T) string { return "ticket=%zz" }), 400, "invalid_argument", "the claim's body must be a form: ticket=...&next=...", invalid},
		{"too large", []string{"POST"}, post(sc, "default", sc.URL, func(*testing.T) string { return "ticket=" + strings.Repeat("x", 5<<10) }), 413, "body_too_large", "request body larger than 4096 bytes", invalid},
		{"busy", []string{"POST"}, post(busy, "default", busy.URL, formOf(links["expired"])), 429, "rate_limited", "too many requests from this address: slow down", "Please try again"},
		{"the claim", []string{"POST"}, post(sc, "default", sc.URL, fresh), 303, "", "", ""},
	} {
		for _, method := range tc.methods {
			t.Run(method+" "+tc.name, func(t *testing.T) {
				var success []string // the bodies of an answer that is no error, without their nonces
				for _, a := range varyAccepts {
					status, body, hdr := tc.do(t, method, a.header()...)
					require.Equal(t, tc.status, status, "%s: %s", a.name, body)
					if method == "HEAD" {
						assert.Empty(t, body, a.name)
					}
					switch {
					case tc.code == "":
						assert.Zero(t, varyOf(hdr), "%s: the same answer for every Accept", a.name)
						if method == "POST" {
							assert.Equal(t, "/welcome", hdr.Get("Location"), a.name)
							assert.NotEmpty(t, hdr.Values("Set-Cookie"), a.name)
						} else {
							assert.True(t, strings.EqualFold("text/html; charset=utf-8", hdr.Get("Content-Type")), "%s: %s", a.name, hdr.Get("Content-Type"))
						}
						success = append(success, nonces.ReplaceAllString(body, "nonce"))
					case a.html:
						assert.Equal(t, 1, varyOf(hdr), "%s: Vary: Accept, once (Vary %q)", a.name, hdr.Values("Vary"))
						pageOf(t, status, body, hdr, tc.status)
						if method != "HEAD" {
							assert.Contains(t, body, `<h1 id="claim-title">`+tc.title+`</h1>`, a.name)
						}
					default:
						assert.Equal(t, 1, varyOf(hdr), "%s: Vary: Accept, once (Vary %q)", a.name, hdr.Values("Vary"))
						want := errorJSON(t, tc.code, tc.message)
						assert.Equal(t, "application/json", hdr.Get("Content-Type"), a.name)
						assert.Equal(t, "no-store", hdr.Get("Cache-Control"), a.name)
						if method == "HEAD" {
							assert.Equal(t, strconv.Itoa(len(want)), hdr.Get("Content-Length"), a.name)
						} else {
							assert.Equal(t, want, body, "%s: the JSON of the wire contract, byte for byte", a.name)
						}
					}
				}
				for _, b := range success {
					assert.Equal(t, success[0], b, "the same answer for every Accept")
				}
			})
		}
	}
}

// Routes whose answers do not depend on Accept say nothing about it: the
// client API's errors are JSON, and the waiting page a page, for every
// client.
func TestOnlyClaimAnswersVaryOnAccept(t *testing.T) {
	sc := refusedSidecar(t, nil, nil)
	base := sc.URL + gatetest.BasePath
	for _, tc := range []struct {
		name, method, url string
		status            int
	}{
		{"status without a session", "GET", base + "/api/status", http.StatusNotFound},
		{"join of an unknown gate", "POST", base + "/api/join?gate=nope", http.StatusNotFound},
		{"the waiting page", "GET", base + "/", http.StatusOK},
		{"the waiting page of an unknown gate", "GET", base + "/?gate=nope", http.StatusNotFound},
		{"an unknown route", "GET", base + "/nope", http.StatusNotFound},
		{"a claim link's other methods", "PUT", base + gate.ClaimPath, http.StatusMethodNotAllowed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, a := range varyAccepts {
				status, body, hdr := send(t, noRedirects, tc.method, tc.url, "", append(a.header(), "Origin", sc.URL)...)
				assert.Equal(t, tc.status, status, "%s: %s", a.name, body)
				assert.Zero(t, varyOf(hdr), "%s: Vary %q", a.name, hdr.Values("Vary"))
			}
		})
	}
}
