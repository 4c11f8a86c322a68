package gate

import (
	"math/rand/v2"
	"net/url"
	"path"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// looseReading is how the loosest servers read a path, all at once:
// backslashes as slashes, percent-decoding twice, ";parameters" dropped from
// every segment, dot segments and repeated slashes resolved, any case.
func looseReading(p string) string {
	for range 2 {
		p = strings.ReplaceAll(p, `\`, "/")
		if d, err := url.PathUnescape(p); err == nil {
			p = d
		}
	}
	segs := strings.Split(p, "/")
	for i, s := range segs {
		segs[i], _, _ = strings.Cut(s, ";")
	}
	return strings.ToLower(path.Clean("/" + strings.Join(segs, "/")))
}

// FuzzCanonicalPath: whatever a client sends, an accepted path is forwarded
// in a form every server reads alike (the loosest reading of it is itself,
// but for case and a trailing slash), the path matched is the one forwarded,
// and cleaning is idempotent.
func FuzzCanonicalPath(f *testing.F) {
	for _, s := range []string{"/", "/app/x", "/static/../app/x", "//app", "/./app", "/a%2fb", "/a%252e%252e/b",
		"/app;x=1/y", `/a\b`, "/%00", "/a/b/", "/a%20b", "/%c0%ae%c0%ae/", "/..%2F", "/a/./../.."} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, target string) {
		u, err := url.ParseRequestURI(target)
		if err != nil {
			return
		}
		clean, err := canonicalPath(u)
		if err != nil {
			return
		}
		forwarded := (&url.URL{Path: clean}).EscapedPath()
		if got, want := looseReading(forwarded), strings.ToLower(strings.TrimSuffix(clean, "/")); got != want && !(clean == "/" && got == "/") {
			t.Fatalf("%q is forwarded as %q, which a loose server reads as %q, not %q", target, forwarded, got, want)
		}
		again, err := url.ParseRequestURI(forwarded)
		if err != nil {
			t.Fatalf("%q: forwarded %q does not parse: %v", target, forwarded, err)
		}
		if c2, err := canonicalPath(again); err != nil || c2 != clean {
			t.Fatalf("%q: cleaning %q again gives %q, %v", target, forwarded, c2, err)
		}
	})
}

// Checking a path's escapes costs a look at each, not an allocation: the
// check lowered each escape's two hex digits into a new string, so a path
// of 18,000 escapes with a capital letter (54 KB, "%4A" for "J", which a
// proxied request reaches before any session or rate limit) cost 18,000
// allocations, about 30 times forwarding it.
func TestCanonicalPathAllocatesNothingPerEscape(t *testing.T) {
	for _, esc := range []string{"%4A", "%4a", "%7E", "%C3%A9"} {
		u, err := url.Parse("/assets/" + strings.Repeat(esc, 1000))
		require.NoError(t, err)
		clean, err := canonicalPath(u)
		require.NoError(t, err)
		require.Equal(t, u.Path, clean)
		assert.Zero(t, testing.AllocsPerRun(10, func() { _, _ = canonicalPath(u) }), "allocations for 1,000 of %s", esc)
	}
	for _, esc := range []string{"%2E", "%2e", "%2F", "%5C", "%5c", "%3B", "%00"} {
		u, err := url.Parse("/assets/" + strings.Repeat("%4A", 100) + esc)
		require.NoError(t, err)
		_, err = canonicalPath(u)
		assert.Error(t, err, "%s is still refused", esc)
	}
}

// forwardQuery gives the app the values the reverse proxy's re-encoding
// gave it, in a query the reverse proxy passes on unchanged, on random
// and hostile queries; one it would not re-encode is left byte for byte.
func TestForwardQueryParsesAsTheReencodedQuery(t *testing.T) {
	pieces := []string{"a", "b", "=", "&", "&&", ";", "%", "%2", "%zz", "%41", "%3B", "%26", "+", "x=1", "k=v", "é", "%c3%a9", "session=t"}
	rng := rand.New(rand.NewPCG(5, 6))
	for i := 0; i < 50000; i++ {
		var b strings.Builder
		for n := rng.IntN(10); n >= 0; n-- {
			b.WriteString(pieces[rng.IntN(len(pieces))])
		}
		raw := b.String()
		out := forwardQuery(raw)
		parsed, _ := url.ParseQuery(raw)
		reencodedValues, _ := url.ParseQuery(parsed.Encode())
		got, err := url.ParseQuery(out)
		if !assert.NoError(t, err, "%q from %q", out, raw) ||
			!assert.Equal(t, reencodedValues, got, "%q from %q", out, raw) ||
			!assert.False(t, reencoded(out), "%q from %q is passed on unchanged", out, raw) {
			return
		}
		if !reencoded(raw) && !assert.Equal(t, raw, out) {
			return
		}
	}
	assert.Equal(t, "", forwardQuery(strings.Repeat("a=1&", 10000)+"b;"), "past net/url's bound, no query")
}
