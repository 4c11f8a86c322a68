package guard

import (
	"crypto/sha256"
	"strconv"
	"strings"
	"sync"
	"time"
)

// maxCacheKey is the longest key kept as the credentials themselves: a
// gate and a dozen tokens of the usual length fit. Longer credentials (a
// visitor behind a sibling subdomain's cookies, up to wire.MaxCookies of
// them) are keyed by their SHA-256 instead (cacheKey), so that such a
// visitor is cached like any other without an entry growing with them.
const maxCacheKey = 1024

// cache remembers the remote checker's answers for a short TTL. Entries
// expire TTL after they were stored; when the cache is full, expired entries
// are swept and, if that frees too little, everything is dropped (the cache
// only saves round trips, and lives at most a second).
type cache struct {
	ttl time.Duration
	max int
	now func() time.Time

	mu sync.Mutex
	m  map[string]cacheEntry
}

type cacheEntry struct {
	err     error
	expires time.Time
}

func newCache(ttl time.Duration, max int, now func() time.Time) *cache {
	return &cache{ttl: ttl, max: max, now: now, m: make(map[string]cacheEntry)}
}

// cacheKey names the credentials a request carries at a gate, each part
// prefixed with its length so that no two different sets share a key; past
// maxCacheKey bytes, "#" and the SHA-256 of that (a plain key starts with a
// digit, so the two kinds never meet).
func cacheKey(gate string, c credentials) string {
	var b strings.Builder
	for _, part := range append([]string{gate, c.bearer, c.query}, c.cookies...) {
		b.WriteString(strconv.Itoa(len(part)))
		b.WriteByte(':')
		b.WriteString(part)
	}
	if b.Len() <= maxCacheKey {
		return b.String()
	}
	sum := sha256.Sum256([]byte(b.String()))
	return "#" + string(sum[:])
}

// get returns the cached answer for key, if it has not expired.
func (c *cache) get(key string) (error, bool) {
	now := c.now()
	c.mu.Lock()
	e, ok := c.m[key]
	if ok && !now.Before(e.expires) {
		delete(c.m, key)
		ok = false
	}
	c.mu.Unlock()
	return e.err, ok
}

// put stores the answer err for key until TTL from now.
func (c *cache) put(key string, err error) {
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[key]; !ok && len(c.m) >= c.max {
		for k, e := range c.m {
			if !now.Before(e.expires) {
				delete(c.m, k)
			}
		}
		if len(c.m) > c.max*3/4 {
			clear(c.m)
		}
	}
	c.m[key] = cacheEntry{err: err, expires: now.Add(c.ttl)}
}

// len returns the number of entries, expired or not.
func (c *cache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}
