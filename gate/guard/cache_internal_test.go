package guard

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestCacheExpiresAndStaysBounded(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := newCache(time.Second, 4, func() time.Time { return now })

	c.put("a", nil)
	c.put("b", ErrNoSession)
	err, ok := c.get("b")
	assert.True(t, ok)
	assert.ErrorIs(t, err, ErrNoSession)
	err, ok = c.get("a")
	assert.True(t, ok)
	assert.NoError(t, err)
	_, ok = c.get("missing")
	assert.False(t, ok)

	now = now.Add(time.Second)
	_, ok = c.get("a")
	assert.False(t, ok, "expired at the TTL")

	for i := range 100 {
		c.put(fmt.Sprint("k", i), nil)
		assert.LessOrEqual(t, c.len(), 4)
	}
	_, ok = c.get("k99")
	assert.True(t, ok, "the newest entry is kept")

}

// Credentials past maxCacheKey are keyed by their hash: a key never grows
// with them, and two sets that differ anywhere, even in their last cookie,
// still have two keys.
func TestLongCredentialsHaveShortDistinctKeys(t *testing.T) {
	cookies := func(last string) []string {
		out := make([]string, 63, 64)
		for i := range out {
			out[i] = strings.Repeat("x", 80)
		}
		return append(out, last)
	}
	a := cacheKey("default", credentials{cookies: cookies("visitor-a")})
	b := cacheKey("default", credentials{cookies: cookies("visitor-b")})
	assert.LessOrEqual(t, len(a), maxCacheKey)
	assert.NotEqual(t, a, b)
	assert.Equal(t, a, cacheKey("default", credentials{cookies: cookies("visitor-a")}))
	short := cacheKey("default", credentials{bearer: "t"})
	assert.NotEqual(t, short[0], a[0], "a hashed key and a plain one cannot meet")
}

func TestCacheKeyIsUnambiguous(t *testing.T) {
	a := cacheKey("g", credentials{bearer: "x", query: "y"})
	b := cacheKey("g", credentials{bearer: "xy"})
	c := cacheKey("g", credentials{query: "xy"})
	d := cacheKey("h", credentials{query: "xy"})
	assert.NotEqual(t, a, b)
	assert.NotEqual(t, b, c)
	assert.NotEqual(t, c, d)
	e := cacheKey("g", credentials{cookies: []string{"x", "y"}})
	f := cacheKey("g", credentials{cookies: []string{"xy"}})
	g := cacheKey("g", credentials{cookies: []string{"y", "x"}})
	assert.NotEqual(t, e, f)
	assert.NotEqual(t, e, g)
	assert.NotEqual(t, f, c)
}
