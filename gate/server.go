// Package gate is the sidecar's HTTP face, on echo v4: the client API, the
// websocket route, the forward-auth check, the snippet, the waiting page and
// the demo app. It translates HTTP to calls of the session service and back;
// the rules live in package session.
package gate

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

	"github.com/anteroomhq/anteroom/broadcast"
	"github.com/anteroomhq/anteroom/gate/guard"
	"github.com/anteroomhq/anteroom/gate/token"
	"github.com/anteroomhq/anteroom/gate/wire"
	"github.com/anteroomhq/anteroom/session"
)

// CookieName is the cookie that carries the session token (wire.CookieName).
const CookieName = wire.CookieName

// SessionHeader names the session on a 200 answer of the forward-auth check,
// so that a proxy can hand the session id to the app (wire.SessionHeader).
const SessionHeader = wire.SessionHeader

// GateHeader names the gate in forward-auth requests when ?gate= cannot
// (wire.GateHeader).
const GateHeader = wire.GateHeader

const (
	defaultMaxBodyBytes = 4 << 10
)

// Options configure a Server. Waitlist, Signer and Sockets are required.
type Options struct {
	// BasePath is the prefix of everything the sidecar serves, such as
	// "/anteroom" (no trailing slash).
	BasePath string
	// DefaultGate is the gate of requests that name none. Default "default".
	DefaultGate string
	Waitlist    *session.Waitlist
	Signer      *token.Signer
	// Hub serves the websocket route.
	Hub *broadcast.Hub
	// Demo serves the demo app at "/" and its protected route at
	// /demo/api/secret.
	Demo bool
	// Proxy, when its Upstream is set, turns on reverse-proxy mode: every
	// path outside BasePath goes to the upstream for active sessions. Demo
	// is ignored then.
	Proxy ProxyOptions
	// APIKeys let trusted backends join with their own session ids
	// ({"sessionId":"user:42"}), sent as X-Anteroom-Key or Bearer.
	APIKeys []string
	// RateLimit bounds the client API per client IP.
	RateLimit RateLimitOptions
	// CodeRateLimit bounds the joins that give a priority code, per client
	// IP, whatever RateLimit says. Default: 10 a minute, bursts of 5.
	CodeRateLimit RateLimitOptions
	// AllowedOrigins are the origins besides the sidecar's own whose pages
	// may call the state-changing API (join, leave, release, ticket): host
	// patterns as for the websocket (path.Match; "scheme://host" patterns
	// when they contain "://"). Others get 403 cross_origin.
	AllowedOrigins []string
	// TrustedProxies are the networks whose X-Forwarded-For names the
	// client (for the rate limit). Empty: the peer address is the client.
	TrustedProxies []*net.IPNet
	// Ready reports whether the sidecar can serve (for /readyz). Default:
	// always ready.
	Ready func() error
	// MaxBodyBytes bounds request bodies; larger ones get 413. Default 4 KiB.
	MaxBodyBytes int64
	// WriteTimeout bounds how long a client may take to take an answer
	// (answer_deadline.go): the sidecar's own within it of the request's
	// start (the full events answer and the admin history's pages within
	// it of each 16 KB piece), a
	// proxied one within it of each write. A client that stops reading is
	// cut off. Sockets are not bounded by it. Default 30 s; negative: no
	// bound.
	WriteTimeout time.Duration
	// Metrics, when set, is served at {base}/metrics (the Prometheus
	// handler of package gate/metrics). Nil: that route answers 404.
	Metrics http.Handler
	// AdminToken turns on the admin API under {base}/admin/api/ (admin.go),
	// authorised by "Authorization: Bearer <AdminToken>"; at least
	// MinAdminTokenLength characters. It also protects {base}/metrics. Empty:
	// every admin path answers 404 and /metrics is open.
	AdminToken string
	// AdminRateLimit bounds admin requests per client, checked before the
	// token. Default: 10 a second, bursts of 30.
	AdminRateLimit RateLimitOptions
	// AccessLog logs one line per request to Logger at info level: method,
	// path (never the query string, which may carry a token), status,
	// latency, gate and an anonymised session (see AccessLogKey).
	AccessLog bool
	// AccessLogKey keys the hash that names a session in the access log:
	// the first 8 bytes of HMAC-SHA256(key, session id), in hex, so that one
	// session's requests can be followed without its id or token appearing.
	// Default: a random key per Server.
	AccessLogKey []byte
	// Admissions, when set, issues admission tokens in SessionView.admission
	// at the gates it has a TTL for, and serves {base}/.well-known/jwks.json
	// and POST {base}/api/redeem (admission.go).
	Admissions *Admissions
	Logger     *slog.Logger
}

// Server is the sidecar's http.Handler.
type Server struct {
	opts    Options
	echo    *echo.Echo
	log     *slog.Logger
	unready unreadyLog // what /readyz last logged
	proxy   *proxy
	apiKeys [][sha256.Size]byte
	origins originPolicy
	// limit is the per-IP rate limit of the client API (nil when off); a
	// proxied page that creates a session spends from it too (allowJoin).
	limit echo.MiddlewareFunc
	// adminLimit is the admin API's per-IP limit, spent before the admin
	// token is compared: also by /metrics, which the same token guards.
	// Nil without an admin token.
	adminLimit echo.MiddlewareFunc
	// codeLimit is the per-IP limit of joins with a priority code.
	codeLimit echo.MiddlewareFunc
	// adminToken is the digest of Options.AdminToken; nil when off.
	adminToken *[sha256.Size]byte
	// feed is the dashboard's live feed (adminfeed.go); nil when off.
	feed *adminFeed
	// eventsAnswers caches the snippet's answer to GET /api/events
	// (events_answer.go), fullEventsAnswers the full one.
	eventsAnswers, fullEventsAnswers eventsAnswers
}

// New builds the Server and its routes. It returns an error when a required
// option is missing or BasePath is malformed.
func New(opts Options) (*Server, error) {
	switch {
	case opts.Waitlist == nil:
		return nil, errors.New("gate: Options.Waitlist is required")
	case opts.Signer == nil:
		return nil, errors.New("gate: Options.Signer is required")
	case opts.Hub == nil:
		return nil, errors.New("gate: Options.Hub is required")
	case !strings.HasPrefix(opts.BasePath, "/") || strings.HasSuffix(opts.BasePath, "/"):
		return nil, errors.New("gate: Options.BasePath must start with '/' and not end with it")
	}
	if opts.DefaultGate == "" {
		opts.DefaultGate = "default"
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = defaultMaxBodyBytes
	}
	if opts.WriteTimeout == 0 {
		opts.WriteTimeout = defaultWriteTimeout
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Ready == nil {
		opts.Ready = func() error { return nil }
	}
	s := &Server{opts: opts, log: opts.Logger, origins: originPolicy{patterns: opts.AllowedOrigins}}
	s.fullEventsAnswers.full = true
	s.eventsAnswers.writeTimeout, s.fullEventsAnswers.writeTimeout = opts.WriteTimeout, opts.WriteTimeout
	e := echo.New()
	e.HideBanner = true
	e.HidePort = true
	e.HTTPErrorHandler = s.handleError
	e.IPExtractor = clientIP(opts.TrustedProxies)
	if opts.AccessLog {
		mw, err := s.accessLog(opts.AccessLogKey)
		if err != nil {
			return nil, err
		}
		e.Use(mw)
	}
	e.Use(middleware.Recover())
	e.Use(securityHeaders(opts.BasePath + "/check"))
	s.echo = e

	// What a GET reads, a HEAD reads too: the same answer, and net/http
	// drops the body.
	getHead := []string{http.MethodGet, http.MethodHead}
	e.Match(getHead, "/healthz", s.healthz)
	e.Match(getHead, "/readyz", s.readyz)

	// Route middleware, not group middleware: echo gives a group with
	// middleware catch-all routes, which would turn 405s into 404s.
	b := opts.BasePath
	limited := []echo.MiddlewareFunc{noStore}
	if s.limit = rateLimit(opts.RateLimit); s.limit != nil {
		limited = append(limited, s.limit)
	}
	e.POST(b+"/api/join", s.join, limited...)
	s.codeLimit = rateLimit(cmpOr(opts.CodeRateLimit, defaultCodeRateLimit))
	e.POST(b+"/api/codes", s.issueCode, noStore)
	e.POST(b+"/api/leave", s.leave, limited...)
	e.POST(b+"/api/release", s.release, limited...)
	e.POST(b+"/api/ticket", s.ticket, limited...)
	e.GET(b+"/api/status", s.status, limited...)
	e.GET(b+"/api/global", s.global, limited...)
	e.GET(b+"/api/events", s.events, noStore) // limited inside: only the answer that grows with the line
	e.GET(b+"/ws", s.socket, limited[1:]...)
	s.notifyRoutes(e, b, limited) // notify.go
	e.Match(getHead, b+"/check", s.check)
	e.Match(getHead, b+"/anteroom.js", s.snippet)
	e.Match(getHead, b+"/", s.waitingPage)
	e.Match(getHead, b, s.waitingPage)

	s.admissionRoutes(e)
	if err := s.adminRoutes(e); err != nil {
		return nil, err
	}
	if opts.Metrics != nil {
		// With an admin token, a guess here spends from the admin API's
		// per-IP limit like a guess there.
		mw := []echo.MiddlewareFunc{noStore}
		if s.adminLimit != nil {
			mw = append(mw, s.adminLimit)
		}
		e.Match(getHead, b+"/metrics", s.metrics, mw...)
	}
	for _, k := range opts.APIKeys {
		if len(k) < minAPIKeyLength {
			return nil, fmt.Errorf("gate: API keys must be at least %d characters", minAPIKeyLength)
		}
		s.apiKeys = append(s.apiKeys, sha256.Sum256([]byte(k)))
	}
	switch {
	case opts.Proxy.Upstream != nil:
		p, err := s.newProxy(opts.Proxy)
		if err != nil {
			return nil, err
		}
		s.proxy = p
		e.Any("/*", s.serveProxy)
		e.Any("/", s.serveProxy)
	case opts.Demo:
		e.Match(getHead, "/", s.demoPage)
		e.GET("/demo/api/secret", s.demoSecret, noStore)
	}
	return s, nil
}

// ServeHTTP implements http.Handler. Every answer is to be taken within
// WriteTimeout of now (answer_deadline.go).
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if d := s.opts.WriteTimeout; d > 0 {
		setWriteDeadline(w, time.Now().Add(d))
	}
	s.echo.ServeHTTP(w, r)
}

// closedRetryAfter is the Retry-After of a gate_closed answer, in seconds.
const closedRetryAfter = "60"

func (s *Server) handleError(err error, c echo.Context) {
	if c.Response().Committed {
		return
	}
	d := errorDetail(err)
	s.errorAnswered(c, err, d)
	wire.WriteError(c.Response(), c.Request(), d.Code, d.Message)
}

// errorAnswered does what comes with answering err (of detail d), in
// whatever form: a failure of the server (5xx) is logged, and a closed
// gate's answer gets its Retry-After.
func (s *Server) errorAnswered(c echo.Context, err error, d wire.ErrorDetail) {
	switch {
	case d.Code == session.CodeGateClosed:
		// An answer, not a failure: a closed gate refuses every newcomer,
		// and must not flood the log. Clients come back later.
		if c.Response().Header().Get("Retry-After") == "" {
			c.Response().Header().Set("Retry-After", closedRetryAfter)
		}
	case wire.Status(d.Code) >= 500:
		s.log.Error("anteroom: request failed", "method", c.Request().Method, "path", c.Request().URL.Path, "err", err)
	}
}

// Constant header values, shared: assigning them to the header map costs no
// allocation (net/http copies the map before writing and never changes it).
var (
	valueNosniff    = []string{"nosniff"}
	valueSameOrigin = []string{"same-origin"}
	valueNoStore    = []string{"no-store"}
)

// securityHeaders sets what every browser-facing answer carries. The
// forward-auth check is exempt: a proxy reads it, its 200 has no body, and it
// runs on every request of the app.
func securityHeaders(checkPath string) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if c.Path() != checkPath {
				h := c.Response().Header()
				h["X-Content-Type-Options"] = valueNosniff
				h["Referrer-Policy"] = valueSameOrigin
			}
			return next(c)
		}
	}
}

func noStore(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		c.Response().Header()["Cache-Control"] = valueNoStore
		return next(c)
	}
}

// sessionID returns the id of the session a request carries, read exactly as
// host apps read it (guard.SessionID): Bearer, ?session=, then the cookie; a
// token that does not verify is no session.
func (s *Server) sessionID(r *http.Request) (string, bool) {
	return guard.SessionID(r, s.opts.Signer)
}

// gateOf names the request's gate: ?gate=, then the X-Anteroom-Gate header,
// then fromBody, then the default.
func (s *Server) gateOf(c echo.Context, fromBody string) string {
	r := c.Request()
	if g := query(c, wire.GateParam); g != "" {
		return g
	}
	if g := r.Header.Get(GateHeader); g != "" {
		return g
	}
	if fromBody != "" {
		return fromBody
	}
	return s.opts.DefaultGate
}

// query returns the first value of the request's query parameter name
// (wire.Query): a route reads the parameters it needs without parsing the
// rest of the query, which a client may pad with thousands.
func query(c echo.Context, name string) string {
	v, _ := wire.Query(c.Request().URL.RawQuery, name)
	return v
}

// pretty reports whether an answer is to be indented: ?pretty (or echo's
// debug mode), as c.JSON decides, without its parse of the whole query.
func pretty(c echo.Context) bool {
	_, ok := wire.Query(c.Request().URL.RawQuery, "pretty")
	return ok || c.Echo().Debug
}

// writeJSON is c.JSON, the same bytes, without its parse of the whole
// query for ?pretty (pretty).
func writeJSON(c echo.Context, code int, v any) error {
	indent := ""
	if pretty(c) {
		indent = "  " // echo's
	}
	return c.JSONPretty(code, v, indent)
}

// readBody reads the request body up to the limit; a larger body is a 413.
func (s *Server) readBody(r *http.Request) ([]byte, error) {
	if r.ContentLength > s.opts.MaxBodyBytes {
		return nil, apiError(codeBodyTooLarge, "request body larger than "+strconv.FormatInt(s.opts.MaxBodyBytes, 10)+" bytes")
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, s.opts.MaxBodyBytes+1))
	if err != nil {
		return nil, apiError(session.CodeInvalidArgument, "reading the request body failed")
	}
	if int64(len(body)) > s.opts.MaxBodyBytes {
		return nil, apiError(codeBodyTooLarge, "request body larger than "+strconv.FormatInt(s.opts.MaxBodyBytes, 10)+" bytes")
	}
	return body, nil
}

// joinRequest is the optional JSON body of POST {base}/api/join (and of leave
// and release). SessionID names the session itself, which only a request with
// a valid API key may do.
type joinRequest struct {
	Gate      string `json:"gate"`
	SessionID string `json:"sessionId"`
	// Code is a priority code (join only; see priority.go).
	Code string `json:"code"`
}

// APIKeyHeader carries an API key (Authorization: Bearer works too;
// wire.APIKeyHeader).
const APIKeyHeader = wire.APIKeyHeader

const minAPIKeyLength = 16

// trusted reports whether the request carries one of the configured API keys.
func (s *Server) trusted(r *http.Request) bool {
	if len(s.apiKeys) == 0 {
		return false
	}
	key := r.Header.Get(APIKeyHeader)
	if key == "" {
		key = wire.BearerToken(r.Header)
	}
	if key == "" {
		return false
	}
	sum := sha256.Sum256([]byte(key))
	match := 0
	for _, k := range s.apiKeys {
		match |= subtle.ConstantTimeCompare(sum[:], k[:])
	}
	return match == 1
}

// namedSession returns the session id a trusted request names in its body.
// It returns ok=false when the body names none, and an error when it names
// one without a valid API key or names a malformed id.
func (s *Server) namedSession(r *http.Request, req joinRequest) (string, bool, error) {
	if req.SessionID == "" {
		return "", false, nil
	}
	if !s.trusted(r) {
		return "", false, apiError(codeAPIKeyRequired, "sessionId may only be set with a valid API key")
	}
	if !session.ValidID(req.SessionID) {
		return "", false, apiError(session.CodeInvalidArgument, "sessionId: want 1-128 printable ASCII characters without spaces or '.'")
	}
	return req.SessionID, true, nil
}

// decodeOne decodes body as exactly one JSON object into v, refusing
// unknown fields and trailing data, with an invalid_json error that says
// what was wanted.
func decodeOne(body []byte, v any, want string) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return apiError(codeInvalidJSON, "body must be "+want+": "+err.Error())
	}
	// Only the end of the body may follow: Decoder.More alone lets a stray
	// '}' or ']' through.
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return apiError(codeInvalidJSON, "body must hold one JSON object and nothing after it")
	}
	return nil
}

// readStateChange checks a state-changing call's origin (checkOrigin), then
// reads its body, which may be empty, as one JSON object into v (decodeOne).
func (s *Server) readStateChange(r *http.Request, v any, want string) error {
	if err := s.checkOrigin(r); err != nil {
		return err
	}
	body, err := s.readBody(r)
	if err != nil {
		return err
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return nil
	}
	return decodeOne(body, v, want)
}

// joinResponse is a SessionView plus the session's token, for clients that
// cannot use the cookie (they send it as Bearer).
type joinResponse struct {
	session.SessionView
	Token string `json:"token"`
}

func (s *Server) join(c echo.Context) error {
	r := c.Request()
	var req joinRequest
	if err := s.readJoinRequest(r, &req, `JSON such as {"gate":"default"}`); err != nil {
		return err
	}
	gate := s.gateOf(c, req.Gate)
	if _, err := s.opts.Waitlist.GateConfig(gate); err != nil {
		return err
	}
	id, named, err := s.namedSession(r, req)
	if err != nil {
		return err
	}
	if !named {
		var ok bool
		if id, ok = s.sessionID(r); !ok {
			id = token.NewID()
		}
	}
	s.note(c, gate, id)
	if req.Code != "" {
		if err := s.spendCodeAttempt(c); err != nil {
			return err
		}
	}
	view, codeErr, err := s.opts.Waitlist.JoinWithCode(r.Context(), gate, id, req.Code)
	if err != nil {
		return err
	}
	tok, err := s.opts.Signer.Sign(id)
	if err != nil {
		return err
	}
	if !named { // a backend joining for a user must not get the user's cookie
		s.setCookie(c, tok)
	}
	if view.Status == session.StatusWaiting {
		s.setRetryAfter(c, view)
		view.Draw = s.opts.Waitlist.Draw(view)
	}
	s.withAdmission(r.Context(), &view)
	if codeErr != nil {
		return s.answerJoin(c, joinResponse{SessionView: view, Token: tok}, codeErr)
	}
	return s.writeJoin(c, &view, tok)
}

// allowJoin spends one request of the client's per-IP rate limit, the one
// POST {base}/api/join spends from, so that no path creates sessions faster.
// Over the limit the 429 has been answered and it returns errAnswered.
func (s *Server) allowJoin(c echo.Context) error {
	if s.limit == nil {
		return nil
	}
	allowed := false
	if err := s.limit(func(echo.Context) error { allowed = true; return nil })(c); err != nil {
		return err
	}
	if !allowed {
		return errAnswered
	}
	return nil
}

// errAnswered stops a handler whose answer has been written already.
var errAnswered = errors.New("gate: answered")

func (s *Server) setCookie(c echo.Context, tok string) {
	r := c.Request()
	secure := r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")
	if v, ok := sessionCookie(tok, int(s.opts.Signer.TTL()/time.Second), secure); ok {
		c.Response().Header().Add("Set-Cookie", v)
		return
	}
	c.SetCookie(&http.Cookie{
		Name:     CookieName,
		Value:    tok,
		Path:     "/",
		MaxAge:   int(s.opts.Signer.TTL() / time.Second),
		HttpOnly: true,
		SameSite: http.SameSiteLaxMode,
		Secure:   r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https"),
	})
}

// leaveOrRelease reads the gate from ?gate= or a JSON body when there is one
// (sendBeacon sends text/plain or nothing) and calls op for the session, if
// the request carries one. It always answers 204 for a known gate.
func (s *Server) leaveOrRelease(c echo.Context, purpose string, op func(ctx context.Context, gate, id string) error) error {
	r := c.Request()
	if err := s.checkOrigin(r); err != nil {
		return err
	}
	body, err := s.readBody(r)
	if err != nil {
		return err
	}
	var req joinRequest
	_ = json.Unmarshal(body, &req) // any body is accepted: beacons send what they send
	gate := s.gateOf(c, req.Gate)
	if _, err := s.opts.Waitlist.GateConfig(gate); err != nil {
		return err
	}
	id, ok, err := s.namedSession(r, req)
	if err != nil {
		return err
	}
	if !ok && purpose != "" {
		if id, ok, err = s.ticketSession(r, purpose, gate); err != nil {
			return err
		}
	}
	if !ok {
		id, ok = s.sessionID(r)
	}
	if ok {
		s.note(c, gate, id)
		if err := op(r.Context(), gate, id); err != nil {
			return err
		}
	}
	return c.NoContent(http.StatusNoContent)
}

func (s *Server) leave(c echo.Context) error {
	return s.leaveOrRelease(c, token.PurposeLeave, s.opts.Waitlist.Leave)
}

func (s *Server) release(c echo.Context) error {
	return s.leaveOrRelease(c, "", s.opts.Waitlist.Release)
}

func (s *Server) status(c echo.Context) error {
	r := c.Request()
	gate := s.gateOf(c, "")
	if _, err := s.opts.Waitlist.GateConfig(gate); err != nil {
		return err
	}
	claims, ok := guard.SessionClaims(r, s.opts.Signer)
	s.note(c, gate, claims.ID)
	if !ok {
		return apiError(session.CodeNotFound, "no session: join first")
	}
	view, err := s.opts.Waitlist.Status(r.Context(), gate, claims.ID)
	if err != nil {
		return err
	}
	if view.Status == session.StatusWaiting {
		s.setRetryAfter(c, view)
		view.Draw = s.opts.Waitlist.Draw(view)
	}
	s.withAdmission(r.Context(), &view)
	if claims.Renew { // sliding expiry, key rotation, first-format tokens
		tok, err := s.opts.Signer.Sign(claims.ID)
		if err != nil {
			return err
		}
		s.setCookie(c, tok)
		return writeJSON(c, http.StatusOK, joinResponse{SessionView: view, Token: tok})
	}
	return writeJSON(c, http.StatusOK, view)
}

func (s *Server) global(c echo.Context) error {
	view, err := s.opts.Waitlist.Global(s.gateOf(c, ""))
	if err != nil {
		return err
	}
	return writeGlobal(c, &view)
}

// check is the forward-auth endpoint: 200 for an active session (refreshing
// its last activity), 401 without a valid session, 403 while waiting.
func (s *Server) check(c echo.Context) error {
	r := c.Request()
	gate := s.gateOf(c, "")
	id, ok := s.sessionID(r)
	s.note(c, gate, id)
	if !ok {
		if _, err := s.opts.Waitlist.GateConfig(gate); err != nil {
			return err
		}
		return apiError(codeNoSession, "no valid session")
	}
	err := s.opts.Waitlist.ValidateSessionAndRefreshLastActive(gate, id)
	if err == nil {
		return admitted(c, id)
	}
	if !errors.Is(err, session.ErrNotActive) {
		return err
	}
	view, err := s.opts.Waitlist.Status(r.Context(), gate, id)
	switch {
	case errors.Is(err, session.ErrNotFound):
		return apiError(codeNoSession, "session expired: join again")
	case err != nil:
		return err
	case view.Status == session.StatusActive: // promoted between the two reads
		return admitted(c, id)
	}
	s.setRetryAfter(c, view)
	return apiError(session.CodeNotActive, "waiting in line")
}

// admitted answers the check's 200, naming the session for the proxy to pass
// on to the app (Traefik authResponseHeaders, Caddy copy_headers).
func admitted(c echo.Context, id string) error {
	c.Response().Header()[SessionHeader] = []string{id}
	return c.NoContent(http.StatusOK)
}

// setRetryAfter tells a waiting client when to ask again:
// guard.RetryAfterWithin the gate's waiting timeout (a client that polls as
// told keeps its place and its claim).
func (s *Server) setRetryAfter(c echo.Context, v session.SessionView) {
	var waitingTimeout time.Duration
	if cfg, err := s.opts.Waitlist.GateConfig(v.Gate); err == nil {
		waitingTimeout = cfg.WaitingTimeout
	}
	d := guard.RetryAfterWithin(v, s.opts.Waitlist.Now(), waitingTimeout)
	c.Response().Header().Set("Retry-After", strconv.Itoa(int(d/time.Second)))
}

func (s *Server) socket(c echo.Context) error {
	r := c.Request()
	gate := s.gateOf(c, "")
	global, err := s.opts.Waitlist.Global(gate)
	if err != nil {
		return err
	}
	sub := broadcast.Subscription{Gate: gate, Global: global, Client: socketClient(c.RealIP())}
	id, ok, err := s.ticketSession(r, token.PurposeWS, gate)
	if err != nil {
		return err
	}
	if !ok {
		id, ok = s.sessionID(r)
	}
	if s.opts.Hub.RefuseHandshake(c.Response(), r) {
		return nil // answered: nothing is noted or connected for a refused handshake
	}
	if ok {
		s.note(c, gate, id)
		sub.SessionID = id
		// An open socket is the session's sign of life until it closes.
		disconnect, err := s.opts.Waitlist.Connect(gate, id)
		if err != nil {
			return err
		}
		sub.Closed = disconnect
		// Read the session after the socket is registered, so that a
		// promotion committed in between is not missed.
		// The closure must not hold the request: the hub may keep it as long
		// as the socket lives, and the request's headers and contexts would
		// stay reachable with it.
		wl := s.opts.Waitlist
		sub.CurrentSession = func() *session.SessionView {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			view, err := wl.Status(ctx, gate, id)
			if err != nil {
				return nil
			}
			view.Draw = wl.Draw(view)
			return &view
		}
	}
	if err := s.opts.Hub.Handoff(c.Response(), r, sub); err != nil {
		s.log.Debug("anteroom: websocket ended", "gate", gate, "err", err)
	}
	return nil
}

// socketClient is who opened a socket, for the hub's cap per client: the
// address, an IPv6 one by its /64 as the rate limit counts it (one host
// holds a whole /64).
func socketClient(ip string) string {
	if k := rateKey(ip); k.IsValid() {
		return k.String()
	}
	return ip
}

// metrics serves Options.Metrics to the holder of the admin token, when
// one is set.
func (s *Server) metrics(c echo.Context) error {
	if !s.admin(c.Request()) {
		c.Response().Header().Set("WWW-Authenticate", `Bearer realm="anteroom"`)
		return apiError(wire.CodeAdminTokenRequired, "want Authorization: Bearer <admin_token>")
	}
	s.opts.Metrics.ServeHTTP(c.Response(), c.Request())
	return nil
}

// admin reports whether r may use the operator routes: no admin token is
// set, or r carries it as Bearer (compared in constant time, as hashes so
// that the length leaks nothing either).
func (s *Server) admin(r *http.Request) bool {
	if s.adminToken == nil {
		return true
	}
	got := wire.BearerToken(r.Header)
	if got == "" {
		return false
	}
	sum := sha256.Sum256([]byte(got))
	return subtle.ConstantTimeCompare(sum[:], s.adminToken[:]) == 1
}

func (s *Server) healthz(c echo.Context) error {
	return writeJSON(c, http.StatusOK, map[string]string{"status": "ok"})
}

// readyz answers 200 while the sidecar can serve, else 503 unavailable.
// The reason goes to the log (once each time it changes), not into the
// answer: it names the database file's path, or the shared store's
// address, database and user, and /readyz answers anyone.
func (s *Server) readyz(c echo.Context) error {
	err := s.opts.Ready()
	s.unready.note(s.log, err)
	if err != nil {
		return apiError(session.CodeUnavailable, "not ready: the reason is in the sidecar's log")
	}
	return writeJSON(c, http.StatusOK, map[string]string{"status": "ready"})
}

// unreadyLog logs why the sidecar is not ready when the reason changes,
// and once when it is ready again: /readyz is polled every few seconds.
type unreadyLog struct {
	mu   sync.Mutex
	last string
}

func (u *unreadyLog) note(log *slog.Logger, err error) {
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	u.mu.Lock()
	changed := msg != u.last
	u.last = msg
	u.mu.Unlock()
	switch {
	case !changed:
	case err != nil:
		log.Warn("anteroom: not ready", "err", err)
	default:
		log.Info("anteroom: ready again")
	}
}
