package gate

import (
	"math/rand/v2"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/assert"
)

func trustedNets(t *testing.T, cidrs ...string) []*net.IPNet {
	t.Helper()
	var out []*net.IPNet
	for _, c := range cidrs {
		_, n, err := net.ParseCIDR(c)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, n)
	}
	return out
}

// echoXFF is the extractor clientIP replaced: echo's, trusting exactly
// the configured networks.
func echoXFF(trusted []*net.IPNet) echo.IPExtractor {
	opts := []echo.TrustOption{echo.TrustLoopback(false), echo.TrustLinkLocal(false), echo.TrustPrivateNet(false)}
	for _, n := range trusted {
		opts = append(opts, echo.TrustIPRange(n))
	}
	return echo.ExtractIPFromXFFHeader(opts...)
}

// The client behind trusted proxies is whom echo's X-Forwarded-For
// extractor named, on every header: the nearest untrusted address from
// the right, the peer when an entry does not parse, the leftmost when all
// are trusted; several header lines read as one list.
func TestClientIPIsEchosForwardedFor(t *testing.T) {
	trusted := trustedNets(t, "10.0.0.0/8", "192.0.2.0/24", "2001:db8::/32")
	ours, theirs := clientIP(trusted), echoXFF(trusted)
	entries := []string{
		"", " ", "10.1.2.3", " 10.1.2.3 ", "192.0.2.9", "203.0.113.7", " 203.0.113.7",
		"2001:db8::1", "[2001:db8::1]", "[2001:db8::2", "2001:db8::3]", "2001:dead::1", "[2001:dead::1]",
		"::ffff:10.0.0.1", "::ffff:203.0.113.8", "fe80::1%eth0", "garbage", "[]", "[ 10.0.0.1 ]",
		"10.0.0.1:80", "unknown", "\t10.2.2.2\t", "010.0.0.1", "1.2.3.4.5",
	}
	peers := []string{"10.9.9.9:1234", "192.0.2.1:80", "203.0.113.1:5555", "[2001:db8::9]:443", "[2001:dead::9]:443",
		"[::ffff:10.0.0.7]:1", "not-an-address", "10.0.0.1", ""}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 20000; i++ {
		r := &http.Request{Header: http.Header{}, RemoteAddr: peers[rng.IntN(len(peers))]}
		for l := rng.IntN(4); l > 0; l-- {
			var parts []string
			for n := rng.IntN(5); n >= 0; n-- {
				// mostly trusted entries, so that the walk goes far
				if rng.IntN(3) > 0 {
					parts = append(parts, entries[rng.IntN(5)])
				} else {
					parts = append(parts, entries[rng.IntN(len(entries))])
				}
			}
			r.Header.Add("X-Forwarded-For", strings.Join(parts, ","))
		}
		if !assert.Equal(t, theirs(r), ours(r), "peer %q, X-Forwarded-For %q", r.RemoteAddr, r.Header.Values("X-Forwarded-For")) {
			return
		}
	}
	// No X-Forwarded-For, and no trusted proxies at all: the peer.
	r := &http.Request{Header: http.Header{}, RemoteAddr: "203.0.113.1:5555"}
	assert.Equal(t, theirs(r), ours(r))
	assert.Equal(t, "203.0.113.1", clientIP(nil)(r))
}

// Finding the client in a long X-Forwarded-For costs what the entries it
// reads cost, not a copy of the whole list: echo's extractor split the
// header into a slice of every entry before reading the last one, about
// 2 MB for a 60 KB header of commas, on every request the rate limit
// counts (429s included) and from any peer, trusted or not.
func TestClientIPDoesNotCopyALongForwardedFor(t *testing.T) {
	trusted := trustedNets(t, "192.0.2.0/24")
	extract := clientIP(trusted)
	for name, tc := range map[string]struct {
		peer, xff string
		want      string
	}{
		"commas from an untrusted peer":                      {"203.0.113.1:1", strings.Repeat(",", 60<<10), "203.0.113.1"},
		"addresses from an untrusted peer":                   {"203.0.113.1:1", strings.Repeat("192.0.2.7,", 6<<10), "203.0.113.1"},
		"a trusted proxy, the client last":                   {"192.0.2.1:1", strings.Repeat("198.51.100.1,", 4<<10) + "203.0.113.9", "203.0.113.9"},
		"a trusted proxy, an entry that does not parse last": {"192.0.2.1:1", strings.Repeat(",", 60<<10) + "x", "192.0.2.1"},
	} {
		t.Run(name, func(t *testing.T) {
			r := &http.Request{Header: http.Header{"X-Forwarded-For": {tc.xff}}, RemoteAddr: tc.peer}
			assert.Equal(t, tc.want, extract(r))
			const runs = 10
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			for i := 0; i < runs; i++ {
				_ = extract(r)
			}
			runtime.ReadMemStats(&after)
			perCall := (after.TotalAlloc - before.TotalAlloc) / runs
			assert.Less(t, perCall, uint64(1<<10), "bytes allocated per call, for %d bytes of X-Forwarded-For", len(tc.xff))
		})
	}
}
