package wire

import (
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// referenceCookies is the plain reading eachCookie must agree with: cut
// every cookie of every line, keep the values of those called name.
func referenceCookies(h http.Header, name string) []string {
	var out []string
	for _, line := range h["Cookie"] {
		for _, part := range strings.Split(line, ";") {
			k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
			if !ok || strings.TrimSpace(k) != name {
				continue
			}
			if len(v) > 1 && v[0] == '"' && v[len(v)-1] == '"' {
				v = v[1 : len(v)-1]
			}
			out = append(out, v)
		}
	}
	return out
}

// Random headers, the name also inside other cookies' names and values,
// quoted, spaced and bare: eachCookie (which skips to each occurrence of
// the name) reads what the plain reading does, and Cookies yields all of
// it, or its first and last MaxCookies/2, also when stopped early.
func TestCookiesAgreesWithThePlainReading(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 14))
	pieces := []string{
		"anteroom_session=v", " anteroom_session =q", `anteroom_session="x"`, `anteroom_session="`,
		"anteroom_session=", "anteroom_session", "xanteroom_session=no", "anteroom_sessionx=no",
		"other=anteroom_session", "a=anteroom_session=b", "=anteroom_session=z", "anteroom_session==e",
		"other=1", "", " ", ";", "Anteroom_session=no",
	}
	for range 20_000 {
		var lines []string
		for range 1 + r.IntN(3) {
			var parts []string
			for range r.IntN(80) {
				parts = append(parts, pieces[r.IntN(len(pieces))]+string(rune('a'+r.IntN(26))))
			}
			lines = append(lines, strings.Join(parts, ";"))
		}
		h := http.Header{"Cookie": lines}
		all := referenceCookies(h, CookieName)
		var read []string
		eachCookie(h, CookieName, func(v string) bool { read = append(read, v); return true })
		if !slices.Equal(all, read) {
			t.Fatalf("lines %q: read %q, want %q", lines, read, all)
		}
		want := all
		if len(all) > MaxCookies {
			want = append(slices.Clone(all[:MaxCookies/2]), all[len(all)-MaxCookies/2:]...)
		}
		if got := slices.Collect(Cookies(h, CookieName)); !slices.Equal(want, got) {
			t.Fatalf("lines %q: yielded %q, want %q", lines, got, want)
		}
		stop := r.IntN(MaxCookies + 2)
		var first []string
		for v := range Cookies(h, CookieName) {
			if len(first) == stop {
				break
			}
			first = append(first, v)
		}
		if !slices.Equal(want[:min(stop, len(want))], first) {
			t.Fatalf("lines %q, stopped after %d: %q", lines, stop, first)
		}
	}
}

// A header of nothing but separators is one scan for the name, whatever its
// length (it was a cut per separator: about 22 ms a call at net/http's
// default 1 MB limit, for a host app's check).
func BenchmarkCookiesSeparators(b *testing.B) {
	h := http.Header{"Cookie": {strings.Repeat(";", 1<<20)}}
	for b.Loop() {
		for range Cookies(h, CookieName) {
		}
	}
}
