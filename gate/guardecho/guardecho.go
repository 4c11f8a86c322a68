// Package guardecho adapts package guard to echo v4: the same decision and
// the same answers as guard.Middleware, as an echo.MiddlewareFunc.
package guardecho

import (
	"github.com/labstack/echo/v4"

	"github.com/anteroomhq/anteroom/gate/guard"
)

// Middleware returns echo middleware that lets a request through when
// checker finds its session active and otherwise answers it exactly as
// guard.Middleware does (401 no_session, 403 session_not_active with
// Retry-After, the waiting page for browser navigations, 503 when the
// checker is unavailable, or opts.OnDenied). A denied request is answered
// here and the middleware returns nil, so echo's error handler is not
// involved; the next handler's error is returned as is. It panics when
// checker is nil.
func Middleware(checker guard.Checker, opts guard.MiddlewareOptions) echo.MiddlewareFunc {
	g := guard.New(checker, opts)
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if err := g.Check(c.Request()); err != nil {
				g.Deny(c.Response(), c.Request(), err)
				return nil
			}
			return next(c)
		}
	}
}
