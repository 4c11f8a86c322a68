package guard

import (
	"bytes"
	"errors"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/anteroomhq/anteroom/gate/wire"
	"github.com/anteroomhq/anteroom/session"
	"github.com/anteroomhq/anteroom/static"
)

// DefaultBasePath is where browsers reach the sidecar when
// MiddlewareOptions.BasePath is empty.
const DefaultBasePath = "/anteroom"

// unavailableRetryAfter is the Retry-After of a 503, in seconds.
const unavailableRetryAfter = "5"

// MiddlewareOptions configure Middleware and Guard. The zero value of each
// field picks its default.
type MiddlewareOptions struct {
	// BasePath is where browsers reach the sidecar's client API and
	// snippet, on the app's own origin (the sidecar mounted or proxied
	// there), such as "/anteroom". The waiting page loads
	// BasePath+"/anteroom.js" and joins through BasePath+"/api/join".
	// Default DefaultBasePath.
	BasePath string
	// SkipRefresh makes allowed requests use ValidateSessionIsActive instead
	// of ValidateSessionAndRefreshLastActive. Default false: every allowed
	// request counts as activity, so an active user is not timed out.
	SkipRefresh bool
	// RedirectToWaitingPage sends browser navigations a 303 to the
	// sidecar's own waiting page, BasePath+"/?gate=<gate>&next=<path>",
	// instead of the inline page; once admitted, the page goes back to
	// <path>, the request's path and query. Default false: the inline page.
	RedirectToWaitingPage bool
	// WantsPage tells a browser navigation, which gets the waiting page, from
	// an API call, which gets JSON. Default: the package's WantsPage.
	WantsPage func(r *http.Request) bool
	// OnDenied, when set, answers every denied request instead of the
	// default answers, with the checker's error (see Checker).
	OnDenied func(w http.ResponseWriter, r *http.Request, err error)
}

// Guard is the decision behind Middleware, for adapters to other routers
// (package guardecho): Check a request, Deny it when that fails.
type Guard struct {
	checker Checker
	opts    MiddlewareOptions
	page    []byte // the rendered waiting page; nil if rendering failed
}

// New returns the Guard of checker with opts. It panics when checker is
// nil, a programming error.
func New(checker Checker, opts MiddlewareOptions) *Guard {
	if checker == nil {
		panic("guard: New: nil Checker")
	}
	if opts.BasePath == "" {
		opts.BasePath = DefaultBasePath
	}
	if opts.WantsPage == nil {
		opts.WantsPage = WantsPage
	}
	g := &Guard{checker: checker, opts: opts}
	var buf bytes.Buffer
	if err := static.RenderWaitingPage(&buf, static.WaitingPageData{BasePath: opts.BasePath, Gate: checker.Gate()}); err == nil {
		g.page = buf.Bytes()
	}
	return g
}

// Middleware returns net/http middleware that lets a request through when
// checker finds its session active, and otherwise answers it without calling
// the next handler:
//
//   - OnDenied, when set, answers every denial.
//   - No valid session (ErrNoSession): 401; waiting (*NotActiveError): 403
//     with Retry-After. A browser navigation (WantsPage) gets the waiting
//     page inline, at the URL it asked for: the page joins the line through
//     BasePath and reloads itself once admitted, which then passes (or,
//     with RedirectToWaitingPage, a 303 to the sidecar's waiting page). Anything
//     else gets the sidecar's JSON error body
//     {"error":{"code":"no_session"|"session_not_active","message":...}}.
//   - session.ErrUnavailable: 503 JSON with code "unavailable" and
//     Retry-After; any other error: 500 JSON with code "internal".
//
// Every denial is sent with Cache-Control: no-store.
//
// By default the waiting page is served inline, so the URL stays the one the
// user asked for and no extra round trip is made; RedirectToWaitingPage
// redirects to the sidecar's page instead (303, with ?next= to come back).
func Middleware(checker Checker, opts MiddlewareOptions) func(http.Handler) http.Handler {
	return New(checker, opts).Handler
}

// Handler wraps next as Middleware describes.
func (g *Guard) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := g.Check(r); err != nil {
			g.Deny(w, r, err)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// Check returns the checker's answer for r: ValidateSessionAndRefreshLastActive,
// or ValidateSessionIsActive with SkipRefresh. It returns the checker's
// errors (see Checker).
func (g *Guard) Check(r *http.Request) error {
	if g.opts.SkipRefresh {
		return g.checker.ValidateSessionIsActive(r)
	}
	return g.checker.ValidateSessionAndRefreshLastActive(r)
}

// Deny answers a request that Check refused with err, as Middleware
// describes (OnDenied when set). It writes the answer and never fails.
func (g *Guard) Deny(w http.ResponseWriter, r *http.Request, err error) {
	if g.opts.OnDenied != nil {
		g.opts.OnDenied(w, r, err)
		return
	}
	h := w.Header()
	h.Set("Cache-Control", "no-store")
	h.Add("Vary", "Accept")
	var notActive *NotActiveError
	switch {
	case errors.Is(err, ErrNoSession):
		g.answer(w, r, CodeNoSession, "no valid session: join the line first")
	case errors.As(err, &notActive):
		h.Set("Retry-After", retryAfterSeconds(notActive))
		g.answer(w, r, session.CodeNotActive, "waiting in line")
	case errors.Is(err, session.ErrNotActive):
		h.Set("Retry-After", retryAfterSeconds(nil))
		g.answer(w, r, session.CodeNotActive, "waiting in line")
	case errors.Is(err, session.ErrUnavailable):
		h.Set("Retry-After", unavailableRetryAfter)
		wire.WriteError(w, r, session.CodeUnavailable, "the waiting line cannot be checked now: try again shortly")
	default:
		wire.WriteError(w, r, session.CodeInternal, "internal error")
	}
}

// answer sends the waiting page to browsers and the JSON error to the rest,
// under the code's status.
func (g *Guard) answer(w http.ResponseWriter, r *http.Request, code session.Code, msg string) {
	if g.page == nil || !g.opts.WantsPage(r) {
		wire.WriteError(w, r, code, msg)
		return
	}
	h := w.Header()
	if g.opts.RedirectToWaitingPage {
		q := url.Values{"gate": {g.checker.Gate()}}
		if next := r.URL.RequestURI(); wire.LocalPath(next) {
			q.Set("next", next)
		}
		h.Set("Location", g.opts.BasePath+"/?"+q.Encode())
		w.WriteHeader(http.StatusSeeOther)
		return
	}
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Length", strconv.Itoa(len(g.page)))
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(wire.Status(code))
	if r.Method != http.MethodHead {
		_, _ = w.Write(g.page)
	}
}

// WantsPage reports whether r looks like a browser navigation, which gets the
// waiting page: a GET or HEAD whose Accept names text/html (or whose
// Sec-Fetch-Mode is "navigate") and does not name application/json. Requests
// of scripts and API clients get JSON.
func WantsPage(r *http.Request) bool {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return false
	}
	accept := strings.Join(r.Header.Values("Accept"), ",")
	if strings.Contains(accept, "application/json") {
		return false
	}
	return strings.Contains(accept, "text/html") || r.Header.Get("Sec-Fetch-Mode") == "navigate"
}

// retryAfterSeconds renders a waiting session's Retry-After: its hint
// rounded up to whole seconds, or 5 s when there is none.
func retryAfterSeconds(e *NotActiveError) string {
	if e == nil || e.RetryAfter <= 0 {
		return "5"
	}
	return strconv.Itoa(int(math.Ceil(e.RetryAfter.Seconds())))
}
