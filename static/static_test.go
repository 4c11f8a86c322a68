package static_test

import (
	"bytes"
	"errors"
	"io/fs"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/static"
)

func TestFilesAreEmbedded(t *testing.T) {
	for _, name := range []string{static.SnippetFile, static.WaitingFile, static.DemoFile} {
		b, err := fs.ReadFile(static.FS, name)
		require.NoError(t, err, name)
		assert.NotEmpty(t, b, name)
	}
	assert.Equal(t, mustReadFS(t, static.SnippetFile), static.Snippet())
}

func TestSnippetETag(t *testing.T) {
	etag := static.SnippetETag()
	assert.Regexp(t, `^"[0-9a-f]{24}"$`, etag)
	assert.Equal(t, etag, static.SnippetETag(), "stable")
}

func TestSnippetIsPlainJSAndFollowsTheContract(t *testing.T) {
	js := string(static.Snippet())

	// Plain script: no module syntax, one IIFE, one global.
	assert.NotRegexp(t, `(?m)^\s*(import|export)\s`, js)
	assert.Contains(t, js, "(() => {")
	assert.Contains(t, js, "window.anteroom = ")
	assert.Less(t, len(js), 37*1024, "keep the snippet small") // 28 KiB before priority lanes, 30 before scheduled events

	for _, want := range []string{
		"/api/join", "/api/leave", "/api/release", "/api/status", "/ws",
		"'Retry-After'", "sendBeacon", "?gate=", "&ticket=", "/api/ticket", "'Bearer '", "keepalive: true", ".inert = true",
		"firstWaitingPosition", "lastWaitingPosition", "admittedPerMinute",
		"'global'", "'session'", "'waiting'", "'active'",
		"anteroom-overlay", "anteroom-waiting", "anteroom-place", "anteroom-style",
		"'anteroom:' + name", "aria-live", "prefers-reduced-motion",
		"pagehide", "visibilitychange", "pageshow", "'online'", "claimDeadline", "buckets", "estimatePlace",
		"data-", "currentScript",
		"Your place: {place} of {total}", "You are in line", "You're in!",
		// A scheduled event's pre-queue: a countdown, and no place before a draw.
		"/api/events?positions=0&gate=", "prequeueAt", "startsAt", "firstPosition", "shuffle", "'prequeue'", "e.seed",
		// The join and status answers say at once whether the place is drawn.
		"view.draw === 'pending'", "view.draw === 'drawn'", "onView(v, 1)",
		"anteroom-countdown", "'timer'", "The line opens in {time}", "drawn at random", "emit('event', ev)",
	} {
		assert.Contains(t, js, want)
	}
	// Hiding the tab is no departure: nothing but pagehide sends a leave
	// (beforeunload fires for prompts that may be cancelled).
	assert.NotContains(t, js, "beforeunload")
	assert.Contains(t, js, "addEventListener('pagehide', depart)")
	assert.Equal(t, 1, strings.Count(js, "depart)"), "depart is called from pagehide only")
	// The session token never goes into a URL (access logs): only the
	// Authorization header carries it.
	assert.NotContains(t, js, "session=")
}

func TestRenderWaitingPage(t *testing.T) {
	var buf bytes.Buffer
	require.NoError(t, static.RenderWaitingPage(&buf, static.WaitingPageData{BasePath: "/anteroom/", Gate: "checkout"}))
	html := buf.String()
	assert.Contains(t, html, `<script src="/anteroom/anteroom.js" data-base="/anteroom" data-gate="checkout" data-target="#waiting" data-reload="true"></script>`)
	assert.Contains(t, html, "This site is busy.")
	assert.Contains(t, html, "keep this tab open")
	assert.NotContains(t, html, "data-redirect-url")
	assert.Contains(t, html, `<a href="/">`)

	buf.Reset()
	require.NoError(t, static.RenderWaitingPage(&buf, static.WaitingPageData{BasePath: "/q", RedirectURL: "/shop?x=1"}))
	html = buf.String()
	assert.Contains(t, html, `data-gate="default"`, "empty gate means default")
	assert.Contains(t, html, `data-redirect-url="/shop?x=1"`)
	assert.Contains(t, html, `<a href="/shop?x=1">`)
}

func TestRenderWaitingPageEscapes(t *testing.T) {
	var buf bytes.Buffer
	require.NoError(t, static.RenderWaitingPage(&buf, static.WaitingPageData{
		BasePath:    `/a"><script>alert(1)</script>`,
		Gate:        `g"<>'&`,
		RedirectURL: "javascript:alert(1)",
	}))
	html := buf.String()
	assert.NotContains(t, html, `g"<>`)
	assert.NotContains(t, html, "<script>alert(1)")
	assert.NotContains(t, html, "javascript:alert")
	assert.Contains(t, html, `data-gate="g&#34;&lt;&gt;&#39;&amp;"`)
	assert.Equal(t, 2, strings.Count(html, "<script"), "no extra script element")
}

func TestRenderDemoPage(t *testing.T) {
	var buf bytes.Buffer
	require.NoError(t, static.RenderDemoPage(&buf, static.DemoPageData{BasePath: "/anteroom"}))
	html := buf.String()
	assert.Contains(t, html, "<title>anteroom demo</title>")
	assert.Contains(t, html, `<script src="/anteroom/anteroom.js" data-base="/anteroom" data-gate="default"></script>`)
	assert.Contains(t, html, `id="demo-content"`)
	assert.Contains(t, html, `id="demo-leave"`)
	assert.Contains(t, html, "/demo/api/secret")
	assert.Contains(t, html, "anteroom:active")
	assert.Contains(t, html, "base + '/api/release?gate='")
	assert.Contains(t, html, `var base = "/anteroom";`, "base path as a JS string")
}

func TestRenderDemoPageEscapes(t *testing.T) {
	var buf bytes.Buffer
	require.NoError(t, static.RenderDemoPage(&buf, static.DemoPageData{
		BasePath: `/x";alert(1);//</script><script>alert(2)</script>`,
		Gate:     `"<>`,
	}))
	html := buf.String()
	assert.NotContains(t, html, `"<>`)
	assert.Contains(t, html, `var base = "/x\";alert(1);//\u003c/script\u003e`, "a JS string, still")
	assert.NotContains(t, html, "<script>alert(2)")
	assert.Contains(t, html, `data-gate="&#34;&lt;&gt;"`)
	assert.Equal(t, 2, strings.Count(html, "<script"), "no extra script element")
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("boom") }

func TestRenderReturnsWriteError(t *testing.T) {
	require.EqualError(t, static.RenderWaitingPage(failingWriter{}, static.WaitingPageData{}), "boom")
	require.EqualError(t, static.RenderDemoPage(failingWriter{}, static.DemoPageData{}), "boom")
}

func mustReadFS(t *testing.T, name string) []byte {
	t.Helper()
	b, err := fs.ReadFile(static.FS, name)
	require.NoError(t, err)
	return b
}

func TestPagesCarryTheNonceOnEveryScriptAndStyle(t *testing.T) {
	var waiting, demo bytes.Buffer
	require.NoError(t, static.RenderWaitingPage(&waiting, static.WaitingPageData{BasePath: "/anteroom", Nonce: "n0nce"}))
	require.NoError(t, static.RenderDemoPage(&demo, static.DemoPageData{BasePath: "/anteroom", Nonce: "n0nce"}))
	for name, page := range map[string]string{"waiting": waiting.String(), "demo": demo.String()} {
		scripts := strings.Count(page, "<script")
		styles := strings.Count(page, "<style")
		require.Positive(t, scripts, name)
		assert.Equal(t, scripts+styles, strings.Count(page, `nonce="n0nce"`), "%s: every script and style element has the nonce", name)
	}
}

func TestRenderAdminPage(t *testing.T) {
	var buf bytes.Buffer
	require.NoError(t, static.RenderAdminPage(&buf, static.AdminPageData{BasePath: "/anteroom/", Nonce: "n0nce"}))
	html := buf.String()
	assert.Contains(t, html, "<title>anteroom dashboard</title>")
	assert.Contains(t, html, `data-base="/anteroom"`, "trailing slash removed")
	assert.Equal(t, 1, strings.Count(html, "<script"), "one inline script, no external one")
	assert.Equal(t, 2, strings.Count(html, `nonce="n0nce"`), "the script and the style carry the nonce")
	assert.False(t, regexp.MustCompile(`(?i)<[^>]*\son[a-z]+\s*=`).MatchString(html), "no inline event handler attributes")
	rest := strings.Replace(html, "'http://www.w3.org/2000/svg'", "", 1)
	assert.False(t, regexp.MustCompile(`https?://|//[a-z0-9.-]+\.[a-z]{2,}/`).MatchString(rest), "no external resource (but the SVG namespace)")
	assert.Contains(t, html, "sessionStorage")
}

func TestRenderAdminPageEscapes(t *testing.T) {
	var buf bytes.Buffer
	require.NoError(t, static.RenderAdminPage(&buf, static.AdminPageData{BasePath: `/x"><script>alert(1)</script>`, Nonce: `"><b>`}))
	html := buf.String()
	assert.NotContains(t, html, "<script>alert(1)")
	assert.NotContains(t, html, "<b>")
	assert.Contains(t, html, `data-base="/x&#34;&gt;&lt;script&gt;alert(1)&lt;/script&gt;"`)
	require.EqualError(t, static.RenderAdminPage(failingWriter{}, static.AdminPageData{}), "boom")
}
