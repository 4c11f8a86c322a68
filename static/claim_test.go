package static_test

import (
	"bytes"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/static"
)

func renderRefused(t *testing.T, data static.ClaimRefusedPageData) string {
	t.Helper()
	var buf bytes.Buffer
	require.NoError(t, static.RenderClaimRefusedPage(&buf, data))
	return buf.String()
}

// The page of a claim link refused says in a sentence what happened and
// what to do, and leads to the waiting page (or the caller's next); a busy
// sidecar's page leads nowhere but to a reload of the link itself.
func TestRenderClaimRefusedPage(t *testing.T) {
	for _, tc := range []struct {
		reason              static.ClaimRefusal
		next                string
		status, title, text string
		advice, href, label string
	}{
		{static.ClaimExpired, "", "expired", "This link has expired", "The time to use it has run out", "Join the line again", "/anteroom/?gate=checkout", "Join the line again"},
		{static.ClaimInvalid, "", "invalid", "This link is not valid", "cut short or changed", "Open it again from the message it came in, or join the line again.", "/anteroom/?gate=checkout", "Join the line again"},
		{static.ClaimUsed, "", "used", "This link was used already", "it has been used", "Join the line again to get a new place.", "/anteroom/?gate=checkout", "Join the line again"},
		{static.ClaimBusy, "", "busy", "Please try again", "busy", "Reload this page in a moment", "", ""},
		{static.ClaimExpired, "/shop?x=1&y=2", "expired", "This link has expired", "run out", "Continue to the site; if it does not let you in, join the line again there.", "/shop?x=1&amp;y=2", "Continue to the site"},
		{static.ClaimUsed, "/shop", "used", "This link was used already", "it has been used", "Continue to the site; if it does not let you in", "/shop", "Continue to the site"},
		{static.ClaimInvalid, "/shop", "invalid", "This link is not valid", "cut short", "Open it again from the message it came in, or continue to the site.", "/shop", "Continue to the site"},
		{"no such reason", "", "no such reason", "This link is not valid", "cut short", "Open it again", "/anteroom/?gate=checkout", "Join the line again"},
		{"", "", "", "This link is not valid", "cut short", "Open it again", "/anteroom/?gate=checkout", "Join the line again"},
	} {
		t.Run(string(tc.reason)+tc.next, func(t *testing.T) {
			html := renderRefused(t, static.ClaimRefusedPageData{BasePath: "/anteroom/", Gate: "checkout", Next: tc.next, Reason: tc.reason, Nonce: "n0nce"})
			assert.True(t, strings.HasPrefix(html, "<!doctype html>\n"), "the doctype first")
			assert.Contains(t, html, `<div class="card refused" id="claim-card" data-anteroom-gate="checkout" data-anteroom-status="`+tc.status+`">`)
			assert.Contains(t, html, `<h1 id="claim-title">`+tc.title+`</h1>`)
			assert.Regexp(t, `<p id="claim-text">[^<]*`+regexp.QuoteMeta(tc.text), html)
			assert.Regexp(t, `<p id="claim-advice">[^<]*`+regexp.QuoteMeta(tc.advice), html)
			assert.Equal(t, 1, strings.Count(html, "<h1"), "one heading")
			if tc.href == "" {
				assert.NotContains(t, html, "href=", "no way on but the link itself")
			} else {
				assert.Contains(t, html, `<a class="button" id="claim-next" href="`+tc.href+`" rel="noreferrer">`+tc.label+`</a>`)
				assert.Equal(t, 1, strings.Count(html, "href="), "one link, no assets")
			}
			assert.NotContains(t, html, "<script", "no script")
			assert.NotContains(t, html, "<form", "nothing to post")
			assert.NotRegexp(t, `src=`, html, "no assets")
			assert.Equal(t, 1, strings.Count(html, `<style nonce="n0nce">`), "the style carries the nonce")
			assert.Equal(t, 1, strings.Count(html, "<style"))
		})
	}
	html := renderRefused(t, static.ClaimRefusedPageData{})
	assert.Contains(t, html, `href="/?gate=default"`, "no base path, no gate: the root's default gate")
	assert.Contains(t, html, `<style>`, "no nonce, no attribute")
}

// One head for both pages of a claim link: the refused page looks like
// the claim page because it is the claim page's head, styles and all.
func TestClaimPagesShareTheirHead(t *testing.T) {
	var claim bytes.Buffer
	require.NoError(t, static.RenderClaimPage(&claim, static.ClaimPageData{BasePath: "/anteroom", Gate: "g", Ticket: "t", Nonce: "n0nce"}))
	refused := renderRefused(t, static.ClaimRefusedPageData{BasePath: "/anteroom", Gate: "g", Reason: static.ClaimExpired, Nonce: "n0nce"})
	head := func(page string) string {
		i := strings.Index(page, "</style>")
		require.Positive(t, i, "a style element")
		return page[:i]
	}
	assert.Equal(t, head(claim.String()), head(refused))
	assert.Contains(t, head(refused), "a.button", "the link styled as the claim page's button")
	assert.Contains(t, refused, "</style>\n<title>Link expired</title>\n</head>")
	assert.Contains(t, claim.String(), "</style>\n<title>Your turn</title>\n</head>")
	for name, want := range map[string]int{static.ClaimFile: 1, static.ClaimRefusedFile: 0} {
		b, err := os.ReadFile(name)
		require.NoError(t, err)
		for _, s := range []string{"<!doctype", "<head>", "<style", `<meta name="viewport"`} {
			assert.Equal(t, want, strings.Count(string(b), s), "%s: %s is in the claim page's template alone", name, s)
		}
	}
}

// Everything the page repeats is escaped: a hostile gate, next or base
// path yields text, never markup, script or another link's scheme.
func TestRenderClaimRefusedPageEscapes(t *testing.T) {
	for _, tc := range []struct {
		name string
		data static.ClaimRefusedPageData
		not  []string
		want string
	}{
		{"gate", static.ClaimRefusedPageData{BasePath: "/q", Gate: `g"><script>alert(1)</script>`}, []string{"<script>", `g">`},
			`data-anteroom-gate="g&#34;&gt;&lt;script&gt;alert(1)&lt;/script&gt;"`},
		{"gate in the link", static.ClaimRefusedPageData{BasePath: "/q", Gate: `a&b=<c>`}, []string{"b=<c>", "a&b"},
			`href="/q/?gate=a%26b%3d%3cc%3e"`},
		{"next", static.ClaimRefusedPageData{BasePath: "/q", Next: `/a"><script>alert(1)</script>`}, []string{"<script>", `/a">`},
			`href="/a%22%3e%3cscript%3ealert%281%29%3c/script%3e"`},
		{"a javascript: next", static.ClaimRefusedPageData{BasePath: "/q", Next: "javascript:alert(1)"}, []string{"javascript:"},
			`href="#ZgotmplZ"`},
		{"base path", static.ClaimRefusedPageData{BasePath: `/x"><img src=x onerror=alert(1)>`}, []string{"<img", `x">`}, `href="/x%22%3e%3cimg%20src=x%20onerror=alert%281%29%3e/?gate=default"`},
		{"nonce", static.ClaimRefusedPageData{Nonce: `"><b>`}, []string{"<b>"}, `<style nonce="&#34;&gt;&lt;b&gt;">`},
		{"reason", static.ClaimRefusedPageData{Reason: `"><script>alert(1)</script>`}, []string{"<script>"}, `data-anteroom-status="&#34;&gt;&lt;script&gt;alert(1)&lt;/script&gt;"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			html := renderRefused(t, tc.data)
			for _, s := range tc.not {
				assert.NotContains(t, html, s)
			}
			assert.Contains(t, html, tc.want)
			assert.NotContains(t, html, "<script")
		})
	}
	require.EqualError(t, static.RenderClaimRefusedPage(failingWriter{}, static.ClaimRefusedPageData{}), "boom")
}

// The busy page of the claim page's posted form says to go back and press
// its button again: a reload would post the form again, behind a warning.
func TestRenderClaimRefusedPagePosted(t *testing.T) {
	for _, tc := range []struct {
		posted      bool
		advice, not string
	}{
		{false, "Reload this page in a moment.", "Go back"},
		{true, "Go back and press the button again in a moment.", "Reload"},
	} {
		html := renderRefused(t, static.ClaimRefusedPageData{BasePath: "/anteroom", Gate: "g", Reason: static.ClaimBusy, Posted: tc.posted, Nonce: "n"})
		assert.Contains(t, html, `<p id="claim-advice">`+tc.advice+`</p>`)
		assert.NotContains(t, html, tc.not)
	}
}
