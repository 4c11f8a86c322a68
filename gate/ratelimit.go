package gate

import (
	"hash/maphash"
	"math"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"golang.org/x/time/rate"
)

// RateLimitOptions bound how fast one client may call the client API
// (join, leave, release, status, global, the websocket). A client is an
// IPv4 address, or an IPv6 /64 (one host usually holds a whole /64); an
// IPv4-mapped IPv6 address counts as its IPv4 address. Over the limit a
// request gets 429 with Retry-After. The forward-auth check is never
// limited: behind a proxy every check comes from the proxy's address. Nor
// is the snippet's GET /api/events?positions=0, a read of memory that
// every visitor behind one NAT makes at an event's start (the full answer,
// with a started event's whole pre-queue, is limited).
type RateLimitOptions struct {
	// PerSecond is the sustained rate per client; 0 turns limiting off.
	PerSecond float64
	// Burst is how many requests a client may make at once. Default: 2 × PerSecond, at least 1.
	Burst int
	// Clients is how many clients the limiter remembers at most, which
	// bounds its memory (about 200 bytes each). Default: 65,536. A client
	// is forgotten only once its bucket has refilled, which loses nothing;
	// while every remembered client is still being limited, new clients
	// share a fixed set of buckets instead of pushing anyone out.
	Clients int
}

const (
	defaultRateClients = 1 << 16
	rateShards         = 64 // independent locks; a client's shard is a keyed hash of its address
	rateOverflow       = 16 // shared buckets per shard for clients that do not fit
	rateTrimPerCall    = 2  // idle entries a call may forget, so the table shrinks as it churns
)

// clientIP tells who a request comes from: the peer address, or, when the
// peer is one of the trusted proxies, the nearest untrusted address of
// X-Forwarded-For.
func clientIP(trusted []*net.IPNet) echo.IPExtractor {
	if len(trusted) == 0 {
		return echo.ExtractIPDirect()
	}
	direct := echo.ExtractIPDirect()
	return func(r *http.Request) string { return forwardedClient(r, direct(r), trusted) }
}

// forwardedClient is echo.ExtractIPFromXFFHeader trusting exactly the
// trusted networks (not loopback, link-local or private ones unless
// listed), answer for answer, without its copy of the header: echo split
// the whole list into a slice before reading its last entry, about 2 MB
// for 60 KB of commas, on every request the rate limit counts, from any
// peer. This reads the entries from the right, the peer's address first,
// and stops at the first it does not trust: the peer's own when the peer
// is not a trusted proxy. Several header lines are one list. An entry
// that does not parse answers the peer's address (direct); an untrusted
// one, itself as net.IP prints it; when all are trusted, the leftmost.
func forwardedClient(r *http.Request, direct string, trusted []*net.IPNet) string {
	lines := r.Header[echo.HeaderXForwardedFor]
	if len(lines) == 0 {
		return direct
	}
	// entry reports the client an entry names, if it ends the walk.
	entry := func(s string) (string, bool) {
		s = strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(s), "["), "]")
		ip := net.ParseIP(s)
		if ip == nil {
			return direct, true
		}
		for _, n := range trusted {
			if n.Contains(ip) {
				return s, false
			}
		}
		return ip.String(), true
	}
	last, done := entry(direct)
	if done {
		return last
	}
	for i := len(lines) - 1; i >= 0; i-- {
		line := lines[i]
		for {
			j := strings.LastIndexByte(line, ',')
			if last, done = entry(line[j+1:]); done {
				return last
			}
			if j < 0 {
				break
			}
			line = line[:j]
		}
	}
	return strings.TrimSpace(last) // every entry trusted: the leftmost
}

// rateKey is the client an address belongs to: an IPv4 address, or the
// /64 of an IPv6 one, without zone. What does not parse is one client,
// the zero Addr, so that garbage cannot mint fresh buckets.
func rateKey(ip string) netip.Addr {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return netip.Addr{}
	}
	a = a.Unmap().WithZone("")
	if a.Is6() {
		p, _ := a.Prefix(64) // cannot fail for a 128-bit address
		return p.Addr()
	}
	return a
}

// rateLimit returns the per-client limiter middleware, or nil when off.
func rateLimit(o RateLimitOptions) echo.MiddlewareFunc {
	if o.PerSecond <= 0 {
		return nil
	}
	burst := o.Burst
	if burst <= 0 {
		burst = max(1, int(2*o.PerSecond))
	}
	clients := o.Clients
	if clients <= 0 {
		clients = defaultRateClients
	}
	l := newIPLimiter(rate.Limit(o.PerSecond), burst, clients, rateShards, rateOverflow)
	retryAfter := strconv.Itoa(int(math.Ceil(max(1, 1/o.PerSecond))))
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if !l.allow(rateKey(c.RealIP()), time.Now()) {
				c.Response().Header().Set("Retry-After", retryAfter)
				return apiError(codeRateLimited, "too many requests from this address: slow down")
			}
			return next(c)
		}
	}
}

// ipLimiter is a token bucket per client in a table of fixed capacity,
// split into shards that each have their own lock, map and
// least-recently-used list. Nothing ever walks the whole table: each call
// forgets at most a few idle entries of its own shard.
//
// At capacity a new client is not given a fresh bucket (that would make a
// flood of spoofed addresses unlimited) and does not push out a client
// still being limited (that would let a flood reset everyone's buckets):
// it is charged to one of a few overflow buckets of its shard, chosen by
// hash. Entries are forgotten only when their bucket is full again, which
// is exactly the state of a client never seen.
type ipLimiter struct {
	limit    rate.Limit
	burst    int
	perShard int
	seed     maphash.Seed
	shards   []rateShard
}

type rateShard struct {
	mu       sync.Mutex
	m        map[netip.Addr]*rateEntry
	lru      rateEntry // sentinel: lru.next is the most recent, lru.prev the least
	overflow []*rate.Limiter
}

type rateEntry struct {
	key        netip.Addr
	lim        *rate.Limiter
	prev, next *rateEntry
}

func newIPLimiter(limit rate.Limit, burst, capacity, shards, overflow int) *ipLimiter {
	l := &ipLimiter{
		limit: limit, burst: burst,
		perShard: max(1, (capacity+shards-1)/shards),
		seed:     maphash.MakeSeed(),
		shards:   make([]rateShard, shards),
	}
	for i := range l.shards {
		s := &l.shards[i]
		s.m = make(map[netip.Addr]*rateEntry)
		s.lru.next, s.lru.prev = &s.lru, &s.lru
		s.overflow = make([]*rate.Limiter, overflow)
		for j := range s.overflow {
			s.overflow[j] = rate.NewLimiter(limit, burst)
		}
	}
	return l
}

// place gives the shard of a key and, for when it does not fit, its
// overflow bucket.
func (l *ipLimiter) place(key netip.Addr) (*rateShard, int) {
	h := maphash.Comparable(l.seed, key)
	s := &l.shards[h%uint64(len(l.shards))]
	return s, int((h >> 32) % uint64(len(s.overflow)))
}

// allow tells whether key may make one request at now, and spends it.
func (l *ipLimiter) allow(key netip.Addr, now time.Time) bool {
	s, o := l.place(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.m[key]; e != nil {
		ok := e.lim.AllowN(now, 1) // first: a bucket just spent from is not full, so trim keeps it
		s.unlink(e)
		s.pushFront(e)
		s.trim(now, rateTrimPerCall, float64(l.burst))
		return ok
	}
	s.trim(now, rateTrimPerCall, float64(l.burst))
	if len(s.m) >= l.perShard {
		return s.overflow[o].AllowN(now, 1)
	}
	e := &rateEntry{key: key, lim: rate.NewLimiter(l.limit, l.burst)}
	s.m[key] = e
	s.pushFront(e)
	return e.lim.AllowN(now, 1)
}

// trim forgets up to n least recently used entries whose bucket is full
// at now, stopping at the first one that is not.
func (s *rateShard) trim(now time.Time, n int, burst float64) {
	for ; n > 0; n-- {
		e := s.lru.prev
		if e == &s.lru || e.lim.TokensAt(now) < burst {
			return
		}
		s.unlink(e)
		delete(s.m, e.key)
	}
}

func (s *rateShard) unlink(e *rateEntry) {
	e.prev.next, e.next.prev = e.next, e.prev
	e.prev, e.next = nil, nil
}

func (s *rateShard) pushFront(e *rateEntry) {
	e.prev, e.next = &s.lru, s.lru.next
	s.lru.next.prev = e
	s.lru.next = e
}
