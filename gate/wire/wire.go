// Package wire is the one home of anteroom's HTTP wire contract, as clients,
// the snippet, host apps and tests see it: the names of the cookie, headers
// and query parameters that carry a session, the error body and the error
// codes of the HTTP layer, the one mapping from error codes to HTTP statuses,
// the websocket messages, and the small parsers every side shares (Bearer
// tokens, cookies, local paths).
//
// The sidecar (package gate), the host apps' middleware (gate/guard) and the
// websocket hub (broadcast) all import it, so that none of them writes the
// contract out again. It imports the standard library and package session
// (for session.Code and the views) only, and stays that way: gate/guard,
// which host apps import, depends on it.
package wire

import (
	"encoding/json"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/anteroomhq/anteroom/session"
)

// The names that carry a session, a gate or a key on a request.
const (
	// CookieName is the cookie that carries the session token.
	CookieName = "anteroom_session"
	// SessionParam is the query parameter that carries the session token
	// where neither the cookie nor a header can (websocket, beacon).
	SessionParam = "session"
	// GateParam is the query parameter that names the gate.
	GateParam = "gate"
	// SessionHeader names the verified session: on a 200 answer of the
	// forward-auth check, and on requests the proxy passes to the app.
	SessionHeader = "X-Anteroom-Session"
	// GateHeader names the gate when ?gate= cannot (forward-auth requests),
	// and the gate of a request the proxy passes to the app.
	GateHeader = "X-Anteroom-Gate"
	// APIKeyHeader carries a backend's API key (Authorization: Bearer works
	// too).
	APIKeyHeader = "X-Anteroom-Key"
)

// The error codes of the HTTP layer, beyond those of package session.
const (
	CodeInvalidJSON      session.Code = "invalid_json"
	CodeBodyTooLarge     session.Code = "body_too_large"
	CodeNoSession        session.Code = "no_session"
	CodeRouteNotFound    session.Code = "not_found"
	CodeMethodNotAllowed session.Code = "method_not_allowed"
	CodeRateLimited      session.Code = "rate_limited"
	CodeBadGateway       session.Code = "bad_gateway"
	CodeUpstreamTimeout  session.Code = "upstream_timeout"
	CodeRequestTimeout   session.Code = "request_timeout"
	CodeInvalidPath      session.Code = "invalid_path"
	CodeAPIKeyRequired   session.Code = "api_key_required"
	CodeCrossOrigin      session.Code = "cross_origin"
	CodeInvalidTicket    session.Code = "invalid_ticket"
	// CodeAdminTokenRequired: an admin API request without the admin token
	// (Authorization: Bearer <admin_token>) or with a wrong one.
	CodeAdminTokenRequired session.Code = "admin_token_required"
	// CodeAlreadyClaimed: a claim link whose slot was claimed already, or
	// is no longer waiting to be claimed (409).
	CodeAlreadyClaimed session.Code = "already_claimed"
)

// Status is the one place where error codes become HTTP statuses. A code it
// does not know, session.CodeInternal among them, is a 500. It never fails.
func Status(code session.Code) int {
	switch code {
	case session.CodeInvalidArgument, CodeInvalidJSON, CodeInvalidPath, session.CodeInvalidAdmission:
		return http.StatusBadRequest
	case CodeNoSession, CodeAPIKeyRequired, CodeInvalidTicket, CodeAdminTokenRequired:
		return http.StatusUnauthorized
	case session.CodeNotActive, CodeCrossOrigin:
		return http.StatusForbidden
	case session.CodeUnknownGate, session.CodeNotFound, CodeRouteNotFound, session.CodeEventNotFound, session.CodeAdmissionNotFound, session.CodeCodeUnknown:
		return http.StatusNotFound
	case CodeMethodNotAllowed:
		return http.StatusMethodNotAllowed
	case session.CodeGateExists, session.CodeGateInUse, session.CodePrequeueOpen, session.CodeEventExists, session.CodeEventLocked, session.CodeAlreadyRedeemed, CodeAlreadyClaimed, session.CodeCodeUsed, session.CodeCodeExists:
		return http.StatusConflict
	case CodeBodyTooLarge:
		return http.StatusRequestEntityTooLarge
	case CodeRateLimited:
		return http.StatusTooManyRequests
	case session.CodeUnavailable, session.CodeGateClosed:
		return http.StatusServiceUnavailable
	case CodeBadGateway:
		return http.StatusBadGateway
	case CodeUpstreamTimeout:
		return http.StatusGatewayTimeout
	case CodeRequestTimeout:
		return http.StatusRequestTimeout
	default:
		return http.StatusInternalServerError
	}
}

// ErrorBody is the JSON body of every error answer:
// {"error":{"code":"snake_case","message":"..."}}.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail is the inside of an ErrorBody.
type ErrorDetail struct {
	Code    session.Code `json:"code"`
	Message string       `json:"message"`
}

// NewErrorBody returns the error body of code and message. It never fails.
func NewErrorBody(code session.Code, message string) ErrorBody {
	return ErrorBody{ErrorDetail{Code: code, Message: message}}
}

// WriteError answers r with the error body of code and message, under the
// code's Status, as application/json with a Content-Length and nosniff (the
// body is left out for HEAD). Headers already set on w, such as Retry-After
// or Cache-Control, are kept. It never fails: a write error means the client
// is gone.
func WriteError(w http.ResponseWriter, r *http.Request, code session.Code, message string) {
	b, _ := json.Marshal(NewErrorBody(code, message)) // cannot fail: two strings
	b = append(b, '\n')
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(Status(code))
	if r == nil || r.Method != http.MethodHead {
		_, _ = w.Write(b)
	}
}

// The types of the websocket's server → client messages.
const (
	MessageGlobal  = "global"
	MessageSession = "session"
)

// GlobalMessage is the websocket message {"type":"global", ...GlobalView}.
type GlobalMessage struct {
	Type string `json:"type"`
	session.GlobalView
}

// SessionMessage is the websocket message {"type":"session", ...SessionView}.
type SessionMessage struct {
	Type string `json:"type"`
	session.SessionView
}

// BearerToken returns the token of h's "Authorization: Bearer <token>"
// (the scheme in any case, the token trimmed), or "" when there is none. It
// never fails.
func BearerToken(h http.Header) string {
	a := h.Get("Authorization")
	if len(a) > 7 && strings.EqualFold(a[:7], "bearer ") {
		return strings.TrimSpace(a[7:])
	}
	return ""
}

// MaxCookies is how many values of one cookie name Cookies yields at most:
// the first MaxCookies/2 and the last MaxCookies/2 sent. A browser sends
// one per matching domain and path, longest path first, so a sibling
// subdomain that sets the name for the parent domain on every prefix of a
// deep URL's path sends many ahead of the visitor's own (Path=/, among the
// last: only a handful of domain levels can hold a Path=/ cookie of the
// name); more than MaxCookies are forged, and must not make the server
// verify thousands (each costs one HMAC). This keeps cookies that do not
// verify from pushing the visitor's out; a sibling's own token, one that
// verifies, sent first still names the session (a host-only __Host- name
// would be needed against that).
const MaxCookies = 64

// Cookies yields the values of the cookies called name in h's Cookie
// headers, in the order sent: all of them up to MaxCookies, else the first
// and the last MaxCookies/2 (so that no number of cookies sent ahead of
// the visitor's own, deep paths first, pushes it out). It does not parse
// the other cookies (http.Request.Cookie builds every cookie of the
// header, and the check runs on every request of the app). Like net/http
// it drops the quotes around a quoted value. Two cookies of one name are
// common: one set for this host and one by a sibling subdomain for the
// parent domain; the caller picks the first that verifies. It never fails
// and does not allocate.
func Cookies(h http.Header, name string) iter.Seq[string] {
	return func(yield func(string) bool) {
		// The first half as they come (the usual caller stops at the
		// first); the rest only once more than that were sent: counted,
		// then the last ones, or every one when they fit.
		const half = MaxCookies / 2
		i, done := 0, false
		eachCookie(h, name, func(v string) bool {
			if i == half {
				return false
			}
			i++
			done = !yield(v)
			return !done
		})
		if done || i < half {
			return
		}
		total := 0
		eachCookie(h, name, func(string) bool { total++; return true })
		from := max(half, total-half) // the values before it were yielded, or are skipped
		i = 0
		eachCookie(h, name, func(v string) bool {
			i++
			return i <= from || yield(v)
		})
	}
}

// eachCookie calls f with the value of each cookie called name in h's
// Cookie headers, in the order sent, until f returns false. It skips to
// the next occurrence of name rather than cut every cookie: a header of a
// million semicolons costs one scan, not a million cuts.
func eachCookie(h http.Header, name string, f func(string) bool) {
	for _, line := range h["Cookie"] {
		for line != "" {
			i := strings.Index(line, name)
			if i < 0 {
				break
			}
			// The cookie holding the match starts after the last ';'
			// before it; none before that holds the name.
			var part string
			part, line, _ = strings.Cut(line[strings.LastIndexByte(line[:i], ';')+1:], ";")
			k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
			if !ok || strings.TrimSpace(k) != name {
				continue
			}
			if len(v) > 1 && v[0] == '"' && v[len(v)-1] == '"' {
				v = v[1 : len(v)-1]
			}
			if !f(v) {
				return
			}
		}
	}
}

// MaxQueryParams is net/url's default bound on a query's parameters
// (GODEBUG urlmaxqueryparams): url.ParseQuery parses no query with more
// (and httputil.ReverseProxy forwards none of it).
const MaxQueryParams = 10000

// EscapeAt reports whether s holds a percent-escape at i: '%' and two hex
// digits, what url.QueryUnescape and url.ParseQuery take as one.
func EscapeAt(s string, i int) bool {
	return i+2 < len(s) && s[i] == '%' && isHex(s[i+1]) && isHex(s[i+2])
}

// Query returns the first value of the query parameter name in the raw
// query, and whether there is one: what url.ParseQuery(raw) and then
// Values.Get and Has answer (under net/url's default bound on the number
// of parameters, past which it reads none), without parsing the rest. Keys
// and values are unescaped as url.QueryUnescape does; a parameter holding
// ';', or whose key or value does not unescape, is skipped. Parsing the
// whole query cost about 2 ms and 9,000 allocations for 9,000 parameters,
// on every request that read one of them; this costs a scan of the query
// and does not allocate unless the value is escaped.
func Query(raw, name string) (string, bool) {
	if raw == "" || name == "" || strings.Count(raw, "&") >= MaxQueryParams {
		return "", false
	}
	for raw != "" {
		var part string
		part, raw, _ = strings.Cut(raw, "&")
		// A key that unescapes to name starts with its first byte or an
		// escape: most parameters are passed over on their first byte.
		if part == "" || (part[0] != name[0] && part[0] != '%' && part[0] != '+') {
			continue
		}
		k, v, _ := strings.Cut(part, "=")
		if !queryKeyIs(k, name) || strings.IndexByte(part, ';') >= 0 {
			continue
		}
		if val, err := url.QueryUnescape(v); err == nil {
			return val, true
		}
	}
	return "", false
}

// queryKeyIs reports whether the raw key k unescapes (url.QueryUnescape)
// without error to name, decoding as it compares: no copy of k is made.
func queryKeyIs(k, name string) bool {
	// An escape is three bytes for one, '+' one for one.
	if len(k) < len(name) || len(k) > 3*len(name) {
		return false
	}
	j := 0
	for i := 0; i < len(k); i++ {
		c := k[i]
		switch c {
		case '%':
			if !EscapeAt(k, i) {
				return false // QueryUnescape fails: ParseQuery skips the parameter
			}
			c = unhex(k[i+1])<<4 | unhex(k[i+2])
			i += 2
		case '+':
			c = ' '
		}
		if j >= len(name) || name[j] != c {
			return false
		}
		j++
	}
	return j == len(name)
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c <= 'F':
		return c - 'A' + 10
	}
	return c - 'a' + 10
}

// LocalPath reports whether p is a path on this origin, safe to send a
// browser to as ?next=: it starts with one "/", not "//host" or "/\\host"
// (browsers read a backslash as a slash), and holds no control character
// (browsers drop tabs and line breaks from URLs, so "/\t/host" would be
// "//host"). It never fails.
func LocalPath(p string) bool {
	if !strings.HasPrefix(p, "/") || strings.HasPrefix(p, "//") || strings.HasPrefix(p, "/\\") {
		return false
	}
	for i := 0; i < len(p); i++ {
		if p[i] < 0x20 || p[i] == 0x7f {
			return false
		}
	}
	return true
}
