package gate

import (
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"
)

// entries counts the clients remembered, one shard lock at a time.
func (l *ipLimiter) entries() int {
	n := 0
	for i := range l.shards {
		s := &l.shards[i]
		s.mu.Lock()
		n += len(s.m)
		s.mu.Unlock()
	}
	return n
}

func (l *ipLimiter) has(key netip.Addr) bool {
	s, _ := l.place(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[key] != nil
}

// v4 is the i-th address of 10.0.0.0/8; v6 the i-th /64 of 2001:db8::/32.
func v4(i int) netip.Addr {
	return netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
}

func v6(i int) netip.Addr {
	return rateKey(fmt.Sprintf("2001:db8:%x:%x::%x", i>>16, i&0xffff, i%7+1))
}

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestRateKeyGroupsAnIPv6Slash64AndUnmapsIPv4(t *testing.T) {
	tests := []struct {
		name       string
		a, b       string
		sameClient bool
	}{
		{"two hosts of one /64", "2001:db8:1:2::1", "2001:db8:1:2:ffff:ffff:ffff:fffe", true},
		{"neighbouring /64s", "2001:db8:1:2::1", "2001:db8:1:3::1", false},
		{"IPv4-mapped IPv6 is its IPv4", "::ffff:192.0.2.1", "192.0.2.1", true},
		{"two IPv4 addresses", "192.0.2.1", "192.0.2.2", false},
		{"a zone does not make a new client", "fe80::1%eth0", "fe80::2%eth1", true},
		{"IPv4 is not the /64 of its mapped form", "192.0.2.1", "::ffff:192.0.3.1", false},
		{"garbage is one client", "not-an-ip", "also garbage", true},
		{"garbage is not the empty /64", "", "::1", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.sameClient, rateKey(tt.a) == rateKey(tt.b), "%s vs %s: %v vs %v", tt.a, tt.b, rateKey(tt.a), rateKey(tt.b))
		})
	}
}

func TestLimiterEntriesStayBoundedWithFarMoreClientsThanItsCapacity(t *testing.T) {
	for _, tt := range []struct {
		name string
		addr func(int) netip.Addr
	}{{"IPv4", v4}, {"IPv6 /64s", v6}} {
		t.Run(tt.name, func(t *testing.T) {
			const capacity = 256
			l := newIPLimiter(1, 5, capacity, 8, 2)
			now := t0
			for i := range 100_000 { // 390 × the capacity, spread over 100 s
				l.allow(tt.addr(i), now)
				now = now.Add(time.Millisecond)
			}
			assert.LessOrEqual(t, l.entries(), capacity)
			assert.Greater(t, l.entries(), capacity/2, "the table is used, not bypassed")
		})
	}
}

func TestAFullTableGivesNewClientsNoFreshBucketsAndEvictsNoOne(t *testing.T) {
	const (
		capacity = 64
		shards   = 4
		overflow = 2
		burst    = 3
	)
	l := newIPLimiter(rate.Limit(0.001), burst, capacity, shards, overflow)
	// Fill the table with clients that are being limited (they spent their burst).
	var tracked []netip.Addr
	for i := 0; l.entries() < capacity; i++ {
		require.Less(t, i, 100*capacity, "the table never filled")
		for range burst {
			l.allow(v4(i), t0)
		}
		if l.has(v4(i)) {
			tracked = append(tracked, v4(i))
		}
	}
	// A flood of spoofed addresses, one request each, all at once.
	allowed := 0
	for i := 1_000_000; i < 1_010_000; i++ {
		if l.allow(v4(i), t0) {
			allowed++
		}
	}
	assert.LessOrEqual(t, allowed, shards*overflow*burst, "new clients share the overflow buckets")
	assert.Equal(t, capacity, l.entries())
	for _, a := range tracked {
		assert.True(t, l.has(a), "%v was pushed out by the flood", a)
		assert.False(t, l.allow(a, t0), "%v got a fresh bucket", a)
	}
}

func TestIdleClientsAreForgottenAndTheirPlaceReused(t *testing.T) {
	const capacity = 64
	l := newIPLimiter(1, 2, capacity, 4, 1)
	for i := range 10 * capacity {
		l.allow(v4(i), t0)
	}
	require.Equal(t, capacity, l.entries())
	// Two seconds later every bucket has refilled: new clients each get a
	// bucket of their own, which a shared overflow bucket would not give.
	later := t0.Add(2 * time.Second)
	for i := range capacity / 4 {
		c := v4(50_000 + i)
		assert.True(t, l.allow(c, later))
		assert.True(t, l.allow(c, later))
		assert.False(t, l.allow(c, later), "%v over its burst", c)
		assert.True(t, l.has(c), "%v is tracked", c)
	}
	assert.LessOrEqual(t, l.entries(), capacity)
}

func TestTwoAddressesOfOneSlash64ShareABucket(t *testing.T) {
	l := newIPLimiter(rate.Limit(0.001), 2, 1024, 8, 2)
	a, b, other := rateKey("2001:db8:5:6::1"), rateKey("2001:db8:5:6:a:b:c:d"), rateKey("2001:db8:5:7::1")
	assert.True(t, l.allow(a, t0))
	assert.True(t, l.allow(b, t0))
	assert.False(t, l.allow(a, t0))
	assert.False(t, l.allow(b, t0), "the second host of the /64 is the same client")
	assert.True(t, l.allow(other, t0), "the next /64 is another client")
}

func TestALockedShardDoesNotBlockClientsOfOtherShards(t *testing.T) {
	l := newIPLimiter(1, 5, 1024, 8, 2)
	for i := range 1000 {
		l.allow(v4(i), t0)
	}
	held, _ := l.place(v4(0))
	var others []netip.Addr
	for i := 1; len(others) < 3; i++ {
		if s, _ := l.place(v4(i)); s != held {
			others = append(others, v4(i))
		}
	}
	// Whatever a shard does under its lock (forgetting idle entries
	// included), it holds only that shard's lock: the others go on.
	held.mu.Lock()
	defer held.mu.Unlock()
	done := make(chan bool, len(others))
	for _, a := range others {
		go func() { done <- l.allow(a, t0.Add(time.Hour)) }()
	}
	deadline := time.After(10 * time.Second) // a guard against a hang, not a timing
	for range others {
		select {
		case ok := <-done:
			assert.True(t, ok)
		case <-deadline:
			t.Fatal("allow for a client of another shard waited for the held shard")
		}
	}
}

func TestAHotClientStaysLimitedWhileTheTableChurns(t *testing.T) {
	const (
		perSecond = 2
		burst     = 5
		seconds   = 60
	)
	l := newIPLimiter(perSecond, burst, 64, 4, 2)
	hot := rateKey("203.0.113.9")
	allowed, next := 0, 0
	now := t0
	for range seconds * 100 { // every 10 ms: the hot client asks, 100 new addresses arrive (more than a shard holds)
		if l.allow(hot, now) {
			allowed++
		}
		for range 100 {
			l.allow(v4(next), now)
			next++
		}
		now = now.Add(10 * time.Millisecond)
	}
	assert.LessOrEqual(t, allowed, burst+seconds*perSecond+1)
	assert.GreaterOrEqual(t, allowed, seconds*perSecond, "the hot client keeps its own bucket")
	assert.LessOrEqual(t, l.entries(), 64)
}

func TestConcurrentClientsKeepTheTableConsistent(t *testing.T) {
	l := newIPLimiter(100, 10, 128, 8, 2)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 5000 {
				l.allow(v4(w*100_000+i%300), t0.Add(time.Duration(i)*time.Millisecond))
			}
		})
	}
	wg.Wait()
	assert.LessOrEqual(t, l.entries(), 128)
	for i := range l.shards {
		s := &l.shards[i]
		n := 0
		for e := s.lru.next; e != &s.lru; e = e.next {
			require.Same(t, e, s.m[e.key])
			n++
		}
		assert.Equal(t, len(s.m), n, "shard %d: list and map agree", i)
	}
}
