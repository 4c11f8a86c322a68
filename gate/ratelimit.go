package gate

import (
	"math"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"golang.org/x/time/rate"
)

// RateLimitOptions bound how fast one client IP may call the client API
// (join, leave, release, status, global, the websocket). Over the limit a
// request gets 429 with Retry-After. The forward-auth check is never
// limited: behind a proxy every check comes from the proxy's address.
type RateLimitOptions struct {
	// PerSecond is the sustained rate per IP; 0 turns limiting off.
	PerSecond float64
	// Burst is how many requests an IP may make at once. Default: 2 × PerSecond, at least 1.
	Burst int
}

// clientIP tells who a request comes from: the peer address, or, when the
// peer is one of the trusted proxies, the nearest untrusted address of
// X-Forwarded-For.
func clientIP(trusted []*net.IPNet) echo.IPExtractor {
	if len(trusted) == 0 {
		return echo.ExtractIPDirect()
	}
	// echo trusts loopback, link-local and private ranges unless told not
	// to: trust exactly what was configured.
	opts := []echo.TrustOption{echo.TrustLoopback(false), echo.TrustLinkLocal(false), echo.TrustPrivateNet(false)}
	for _, n := range trusted {
		opts = append(opts, echo.TrustIPRange(n))
	}
	return echo.ExtractIPFromXFFHeader(opts...)
}

// rateLimit returns the per-IP limiter middleware, or nil when off.
func rateLimit(o RateLimitOptions) echo.MiddlewareFunc {
	if o.PerSecond <= 0 {
		return nil
	}
	burst := o.Burst
	if burst <= 0 {
		burst = max(1, int(2*o.PerSecond))
	}
	retryAfter := strconv.Itoa(int(math.Ceil(max(1, 1/o.PerSecond))))
	return middleware.RateLimiterWithConfig(middleware.RateLimiterConfig{
		Store: middleware.NewRateLimiterMemoryStoreWithConfig(middleware.RateLimiterMemoryStoreConfig{
			Rate:      rate.Limit(o.PerSecond),
			Burst:     burst,
			ExpiresIn: 3 * time.Minute,
		}),
		IdentifierExtractor: func(c echo.Context) (string, error) { return c.RealIP(), nil },
		DenyHandler: func(c echo.Context, _ string, _ error) error {
			c.Response().Header().Set("Retry-After", retryAfter)
			return apiError(codeRateLimited, "too many requests from this address: slow down")
		},
		ErrorHandler: func(c echo.Context, err error) error {
			return echo.NewHTTPError(http.StatusInternalServerError, err.Error())
		},
	})
}
