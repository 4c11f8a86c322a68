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
// The package imports the standard library and anteroom's session,
// gate/token and static (itself standard library only): no SQLite, echo or
// websocket module. The echo adapter is package guardecho.
package guard

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/anteroomhq/anteroom/gate/token"
	"github.com/anteroomhq/anteroom/session"
)

// CookieName is the cookie that carries the session token; the same as the
// sidecar's.
const CookieName = "anteroom_session"

// DefaultGate is the gate a checker guards when its options name none.
const DefaultGate = "default"

// CodeNoSession is the error code of a request without a valid session, as
// the sidecar writes it in {"error":{"code":"no_session"}} with status 401.
const CodeNoSession session.Code = "no_session"

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
	// refreshes).
	ValidateSessionIsActive(r *http.Request) error
	// ValidateSessionAndRefreshLastActive checks the session and records
	// the request as activity, which keeps an active session from timing
	// out.
	ValidateSessionAndRefreshLastActive(r *http.Request) error
}

// SessionID returns the id of the session r carries: from the
// Authorization: Bearer header, ?session=, or the CookieName cookie, the
// first whose token verifies under signer, exactly as the sidecar reads it.
// It returns false when none verifies. It never fails otherwise.
func SessionID(r *http.Request, signer *token.Signer) (string, bool) {
	c := credentialsOf(r)
	for _, tok := range [...]string{c.bearer, c.query, c.cookie} {
		if tok == "" {
			continue
		}
		if id, ok := signer.Verify(tok); ok {
			return id, true
		}
	}
	return "", false
}

// credentials are the three places a token may be, unverified.
type credentials struct {
	bearer, query, cookie string
}

func (c credentials) empty() bool { return c.bearer == "" && c.query == "" && c.cookie == "" }

func credentialsOf(r *http.Request) credentials {
	var c credentials
	if h := r.Header.Get("Authorization"); len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
		c.bearer = strings.TrimSpace(h[7:])
	}
	if r.URL != nil && r.URL.RawQuery != "" {
		c.query = r.URL.Query().Get("session")
	}
	c.cookie = cookieValue(r.Header, CookieName)
	return c
}

// cookieValue finds one cookie by name without parsing the others
// (http.Request.Cookie builds every cookie of the header): the check runs on
// every request of the app. Like net/http it takes the first of that name
// and drops the quotes around a quoted value.
func cookieValue(h http.Header, name string) string {
	for _, line := range h["Cookie"] {
		for line != "" {
			var part string
			part, line, _ = strings.Cut(line, ";")
			k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
			if !ok || strings.TrimSpace(k) != name {
				continue
			}
			if len(v) > 1 && v[0] == '"' && v[len(v)-1] == '"' {
				v = v[1 : len(v)-1]
			}
			return v
		}
	}
	return ""
}

// RetryAfter returns when a waiting session should ask again, from its view:
// sooner when the line moves fast, never less than 2 s nor more than 30 s;
// 5 s when nobody was admitted lately. It is the sidecar's rule, in whole
// seconds. It never fails.
func RetryAfter(v session.SessionView) time.Duration {
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
	return time.Duration(math.Trunc(seconds)) * time.Second
}
