package gate_test

import (
	"net"
	"net/http"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/gate"
)

func TestAFloodingClientGets429WhileOthersAreServed(t *testing.T) {
	_, loopback, err := net.ParseCIDR("127.0.0.0/8")
	require.NoError(t, err)
	h := newHarnessWith(t, 100, func(o *gate.Options) {
		o.RateLimit = gate.RateLimitOptions{PerSecond: 0.01, Burst: 3} // refills far slower than the test runs
		o.TrustedProxies = []*net.IPNet{loopback}
	})
	join := func(xff string) reply {
		return do(t, newClient(t), http.MethodPost, h.url+base+"/api/join", "", "", "X-Forwarded-For", xff)
	}
	// The flood: 3 pass, then every further join is refused.
	for i := range 3 {
		assert.Equal(t, http.StatusOK, join("203.0.113.7").status, "request %d within the burst", i)
	}
	var wg sync.WaitGroup
	refused := make([]reply, 20)
	for i := range refused {
		wg.Add(1)
		go func() { defer wg.Done(); refused[i] = join("203.0.113.7") }()
	}
	wg.Wait()
	for _, r := range refused {
		requireError(t, r, http.StatusTooManyRequests, "rate_limited")
		assert.Equal(t, "100", r.header.Get("Retry-After"))
	}
	// Everyone else is still served, and forward-auth is never limited.
	assert.Equal(t, http.StatusOK, join("198.51.100.1").status)
	assert.Equal(t, http.StatusOK, join("198.51.100.2").status)
	for range 10 {
		assert.Equal(t, http.StatusUnauthorized, do(t, newClient(t), http.MethodGet, h.url+base+"/check", "", "", "X-Forwarded-For", "203.0.113.7").status)
	}
	global, _ := h.waitlist.Global("default")
	assert.EqualValues(t, 5, global.Active, "refused joins changed nothing")
}

func TestForwardedForIsIgnoredFromUntrustedPeers(t *testing.T) {
	h := newHarnessWith(t, 100, func(o *gate.Options) {
		o.RateLimit = gate.RateLimitOptions{PerSecond: 0.01, Burst: 2}
	})
	// A client cannot dodge the limit by inventing X-Forwarded-For.
	codes := []int{}
	for _, xff := range []string{"192.0.2.1", "192.0.2.2", "192.0.2.3"} {
		codes = append(codes, do(t, newClient(t), http.MethodPost, h.url+base+"/api/join", "", "", "X-Forwarded-For", xff).status)
	}
	assert.Equal(t, []int{http.StatusOK, http.StatusOK, http.StatusTooManyRequests}, codes)
}

func TestAnIPv6ClientIsLimitedByItsSlash64(t *testing.T) {
	_, loopback, err := net.ParseCIDR("127.0.0.0/8")
	require.NoError(t, err)
	h := newHarnessWith(t, 100, func(o *gate.Options) {
		o.RateLimit = gate.RateLimitOptions{PerSecond: 0.01, Burst: 2}
		o.TrustedProxies = []*net.IPNet{loopback}
	})
	join := func(xff string) int {
		return do(t, newClient(t), http.MethodPost, h.url+base+"/api/join", "", "", "X-Forwarded-For", xff).status
	}
	// One host rotating through the addresses of its /64 is one client.
	codes := []int{}
	for _, xff := range []string{"2001:db8:7:8::1", "2001:db8:7:8::2", "2001:db8:7:8:dead:beef:0:3", "2001:db8:7:8:ffff::4"} {
		codes = append(codes, join(xff))
	}
	assert.Equal(t, []int{http.StatusOK, http.StatusOK, http.StatusTooManyRequests, http.StatusTooManyRequests}, codes)
	assert.Equal(t, http.StatusOK, join("2001:db8:7:9::1"), "the next /64 is someone else")
	// An IPv4-mapped address is its IPv4 address.
	assert.Equal(t, http.StatusOK, join("192.0.2.50"))
	assert.Equal(t, http.StatusOK, join("::ffff:192.0.2.50"))
	assert.Equal(t, http.StatusTooManyRequests, join("192.0.2.50"))
}
