// Package guard is what a Go host app imports to keep a route behind an
// anteroom gate: a [Checker] that answers "is this request's session
// active?", and net/http middleware ([Middleware]) that lets active sessions
// through and answers everyone else.
//
// Two checkers exist:
//
//   - [NewInProcess], for an app that embeds anteroom: it reads the
//     *session.Waitlist directly (from memory, no I/O for active sessions)
//     and verifies tokens with the *token.Signer.
//   - [NewRemote], for an app beside a sidecar: it asks the sidecar's
//     {base}/check over HTTP, with a short timeout and an optional cache of
//     at most one second.
//
// Both read the session token from a request the way the sidecar does:
// Authorization: Bearer <token>, then ?session=<token>, then the cookie
// [CookieName]; the first that verifies names the session.
//
// Errors, for errors.Is: [ErrNoSession] when the request carries no valid
// session (missing, forged, expired or released); session.ErrNotActive, as a
// *[NotActiveError] with a Retry-After hint, while the session waits in line;
// session.ErrUnavailable when the answer cannot be had (sidecar down, 5xx,
// timeout, waitlist closed).
//
// The package imports the standard library and anteroom's session, gate/wire,
// gate/token and static (itself standard library only): no SQLite, echo or
// websocket module. The echo adapter is package guardecho.
package guard

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"time"

	"github.com/anteroomhq/anteroom/gate/token"
	"github.com/anteroomhq/anteroom/gate/wire"
	"github.com/anteroomhq/anteroom/session"
)

// CookieName is the cookie that carries the session token; the same as the
// sidecar's (wire.CookieName).
const CookieName = wire.CookieName

// DefaultGate is the gate a checker guards when its options name none.
const DefaultGate = "default"

// CodeNoSession is the error code of a request without a valid session, as
// the sidecar writes it in {"error":{"code":"no_session"}} with status 401
// (wire.CodeNoSession).
const CodeNoSession = wire.CodeNoSession

// ErrNoSession is returned (possibly wrapped) when a request carries no
// session token that verifies, or when the session it names no longer exists
// (purged or released: the client must join again). It matches none of the
// session package's errors.
var ErrNoSession = errors.New("no_session: no valid session")

// NotActiveError is the error returned while the request's session waits in
// line. errors.Is(err, session.ErrNotActive) holds for it.
type NotActiveError struct {
	// Gate is the gate the session waits at.
	Gate string
	// RetryAfter is when the client may ask again; 0 when unknown.
	RetryAfter time.Duration
}

// Error implements error.
func (e *NotActiveError) Error() string {
	return fmt.Sprintf("%s: waiting in line at gate %q", session.CodeNotActive, e.Gate)
}

// Unwrap returns session.ErrNotActive.
func (e *NotActiveError) Unwrap() error { return session.ErrNotActive }

// Checker answers whether a request's session is active at the checker's
// gate. Implementations are safe for concurrent use.
//
// Both methods return nil when the session is active; an error matching
// ErrNoSession when the request has no valid session; a *NotActiveError
// (matching session.ErrNotActive) while it waits; an error matching
// session.ErrUnavailable when the answer cannot be had. Anything else is a
// configuration or internal error (for instance session.ErrUnknownGate).
type Checker interface {
	// Gate returns the name of the gate checked. It never fails.
	Gate() string
	// ValidateSessionIsActive checks the session without refreshing its
	// last activity where the implementation can (see Remote: it always
	// refreshes). It claims a promoted, unclaimed slot: an allowed
	// request is the person arriving.
	ValidateSessionIsActive(r *http.Request) error
	// ValidateSessionAndRefreshLastActive checks the session and records
	// the request as activity, which keeps an active session from timing
	// out.
	ValidateSessionAndRefreshLastActive(r *http.Request) error
}

// SessionID returns the id of the session r carries: from the
// Authorization: Bearer header, ?session=, or a CookieName cookie (of which a
// request may carry several, one set by a sibling subdomain), the first
// whose token verifies under signer, exactly as the sidecar reads it. It
// returns false when none verifies. It never fails otherwise, and allocates
// nothing unless the request has a query.
func SessionID(r *http.Request, signer *token.Signer) (string, bool) {
	c, ok := SessionClaims(r, signer)
	return c.ID, ok
}

// SessionClaims is SessionID returning the verified token's claims (expiry,
// whether it should be re-issued). It returns false when no token verifies.
func SessionClaims(r *http.Request, signer *token.Signer) (token.Claims, bool) {
	if tok := wire.BearerToken(r.Header); tok != "" {
		if claims, ok := signer.Check(tok); ok {
			return claims, true
		}
	}
	if tok := queryToken(r); tok != "" {
		if claims, ok := signer.Check(tok); ok {
			return claims, true
		}
	}
	for tok := range wire.Cookies(r.Header, CookieName) {
		if claims, ok := signer.Check(tok); ok {
			return claims, true
		}
	}
	return token.Claims{}, false
}

// queryToken is the request's ?session=, read without parsing the rest of
// the query (wire.Query): a host app's request, or the sidecar's, may
// carry thousands of parameters.
func queryToken(r *http.Request) string {
	if r.URL == nil {
		return ""
	}
	v, _ := wire.Query(r.URL.RawQuery, wire.SessionParam)
	return v
}

// credentials are the places a token may be, unverified.
type credentials struct {
	bearer, query string
	cookies       []string
}

func (c credentials) empty() bool { return c.bearer == "" && c.query == "" && len(c.cookies) == 0 }

func credentialsOf(r *http.Request) credentials {
	c := credentials{bearer: wire.BearerToken(r.Header), query: queryToken(r)}
	for v := range wire.Cookies(r.Header, CookieName) {
		if cookieToken(v) {
			c.cookies = append(c.cookies, v)
		}
	}
	return c
}

// cookieToken reports whether a cookie value could be a token, and so is
// worth forwarding: not empty, not longer than token.MaxLength, and only
// bytes a cookie value carries unquoted (net/http would log and drop the
// others, one log line per request an attacker sends).
func cookieToken(v string) bool {
	if v == "" || len(v) > token.MaxLength {
		return false
	}
	for i := 0; i < len(v); i++ {
		if b := v[i]; b <= ' ' || b >= 0x7f || b == '"' || b == ';' || b == '\\' {
			return false
		}
	}
	return true
}

// RetryAfter returns when a session should ask again, from its view: for a
// waiter, sooner when the line moves fast, never less than 2 s nor more than
// 30 s, 5 s when nobody was admitted lately; never more than ClaimCap of the
// view's claim window (a waiter polling as told shows a sign of life
// several times within the window it gets once promoted), nor, for a
// promoted session not yet claimed, of the time left before its claim
// deadline, read at time.Now(). It is the sidecar's rule, in whole seconds,
// at least 1 s. It never fails.
func RetryAfter(v session.SessionView) time.Duration {
	return RetryAfterAt(v, time.Now())
}

// RetryAfterAt is RetryAfter with the view's claim deadline read at now
// (the clock of the Waitlist that made the view). It never fails.
func RetryAfterAt(v session.SessionView, now time.Time) time.Duration {
	seconds := 5.0
	ahead := float64(v.Place - 1)
	if v.Place == 0 && v.Status == session.StatusWaiting {
		// A view without the exact place: Convex's estimate from the bounds.
		if inLine := v.LastWaitingPosition - v.FirstWaitingPosition + 1; inLine > 0 {
			ahead = float64(v.Position-v.FirstWaitingPosition) * float64(v.Waiting) / float64(inLine)
		}
	}
	if v.AdmittedPerMinute > 0 && ahead >= 0 {
		seconds = (ahead + 1) / v.AdmittedPerMinute * 60 / 4 // ask a few times before the turn comes
	}
	seconds = min(max(seconds, 2), 30)
	d := time.Duration(math.Trunc(seconds)) * time.Second
	// A view from the wire may carry anything: only a positive, finite
	// window under a day caps (the advice is 30 s at most anyway).
	if w := v.ClaimWindow; w > 0 && w < 86400 {
		d = min(d, ClaimCap(time.Duration(w*float64(time.Second))))
	}
	if v.ClaimDeadline != nil && !v.ClaimDeadline.IsZero() {
		d = min(d, ClaimCap(v.ClaimDeadline.Sub(now)))
	}
	return d
}

// RetryAfterWithin is RetryAfterAt also capped by ClaimCap of the gate's
// waiting timeout (0: off, no cap), so that a waiter polling as told shows
// a sign of life a few times within it and keeps its place: the rule of
// the sidecar's Retry-After and of the in-process checker. It never fails.
func RetryAfterWithin(v session.SessionView, now time.Time, waitingTimeout time.Duration) time.Duration {
	d := RetryAfterAt(v, now)
	if waitingTimeout > 0 {
		d = min(d, ClaimCap(waitingTimeout))
	}
	return d
}

// ClaimCap is the longest Retry-After that leaves a client polling as told
// time to show a sign of life within window: a quarter of it in whole
// seconds, at least 1 s (Retry-After counts whole seconds; a window under
// 4 s is kept by an open socket, not by polling). It never fails.
func ClaimCap(window time.Duration) time.Duration {
	return max(time.Second, (window / 4).Truncate(time.Second))
}
