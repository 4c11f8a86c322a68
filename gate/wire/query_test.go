package wire_test

import (
	"math/rand/v2"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/anteroomhq/anteroom/gate/wire"
)

// Query answers what url.ParseQuery and then Get and Has answer, on random
// and hostile queries: escaped and repeated keys, '+', ';', bad escapes,
// empty parts and values, and more parameters than net/url parses.
func TestQueryIsParseQuerysGet(t *testing.T) {
	names := []string{"gate", "session", "pretty", "positions", "next", "ticket", "g", "a b"}
	pieces := []string{
		"gate", "session", "pretty", "positions", "next", "ticket", "g", "a b", "a+b", "a%20b",
		"%67ate", "%67%61%74%65", "gat%65", "GATE", "%47ate", "ga%zte", "gate%", "gate%2", "%", "+", "gate+",
		"sess%69on", "se%73sion", "%73%65%73%73%69%6f%6e", "pr%65tty", "x", "",
		"=", "==", "=v", "default", "v%41", "%zz", "a;b", ";", "&", "&&", "%3B", "%26", "%3D", "\x00", "é", "%c3%a9",
	}
	rng := rand.New(rand.NewPCG(3, 4))
	check := func(raw string) bool {
		want, _ := url.ParseQuery(raw)
		for _, name := range names {
			v, ok := wire.Query(raw, name)
			if !assert.Equal(t, want.Has(name), ok, "Has(%q) of %q", name, raw) ||
				!assert.Equal(t, want.Get(name), v, "Get(%q) of %q", name, raw) {
				return false
			}
		}
		return true
	}
	for i := 0; i < 50000; i++ {
		var b strings.Builder
		for n := rng.IntN(8); n >= 0; n-- {
			b.WriteString(pieces[rng.IntN(len(pieces))])
		}
		if !check(b.String()) {
			return
		}
	}
	for _, raw := range []string{
		"", "gate=a&gate=b", "gate&gate=b", "gate=&gate=b", "gate=%zz&gate=b", "gate=a;b&gate=c", "%67ate=x",
		"gate=a+b%20c", "g=1;&g=2", ";gate=1&gate=2", "gate=1&" + strings.Repeat("&", 9997), "gate=1&" + strings.Repeat("&", 9998),
		strings.Repeat("k=&", 9999) + "gate=last", strings.Repeat("k=&", 10000) + "gate=last",
	} {
		if !check(raw) {
			return
		}
	}
}

// Query allocates nothing for a value without escapes, whatever the
// length of the query.
func TestQueryDoesNotAllocate(t *testing.T) {
	var b strings.Builder
	for i := 0; i < 9000; i++ {
		b.WriteString("k%41=v&")
	}
	raw := b.String() + "gate=default"
	assert.Zero(t, testing.AllocsPerRun(10, func() {
		if v, ok := wire.Query(raw, "gate"); v != "default" || !ok {
			t.Fatal(v, ok)
		}
	}))
}

// EscapeAt is the one percent-escape check of the query reader and of
// proxy mode's query and path checks: as url.QueryUnescape takes an escape.
func TestEscapeAt(t *testing.T) {
	for _, tc := range []struct {
		s    string
		i    int
		want bool
	}{
		{"%41", 0, true},
		{"a%2fb", 1, true},
		{"%aF", 0, true},
		{"%4", 0, false},   // cut short
		{"%", 0, false},    // at the end
		{"%g1", 0, false},  // no hex digit
		{"%1g", 0, false},  // no hex digit
		{"a41", 0, false},  // no '%'
		{"x%41", 0, false}, // the escape is elsewhere
		{"%41", 3, false},  // past the end
	} {
		assert.Equal(t, tc.want, wire.EscapeAt(tc.s, tc.i), "%q at %d", tc.s, tc.i)
		if tc.want {
			_, err := url.QueryUnescape(tc.s[tc.i : tc.i+3])
			assert.NoError(t, err, "%q at %d", tc.s, tc.i)
		}
	}
}
