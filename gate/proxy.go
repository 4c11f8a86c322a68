package gate

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/anteroomhq/anteroom/gate/guard"
	"github.com/anteroomhq/anteroom/gate/token"
	"github.com/anteroomhq/anteroom/session"
)

// ProxyOptions configure reverse-proxy mode: anteroom listens in front of the
// app and lets only active sessions through to it.
type ProxyOptions struct {
	// Upstream is the app, such as http://127.0.0.1:3000.
	Upstream *url.URL
	// Gate is the gate proxied requests join. Default: Options.DefaultGate.
	Gate string
	// Protect lists the path prefixes only active sessions may reach,
	// matched in any letter case. Default: "/" (everything).
	Protect []string
	// Bypass lists path prefixes that go to the upstream without a session
	// (static assets, health checks), matched exactly. Bypass wins over
	// Protect. Both are matched against the cleaned path, which is also the
	// path the upstream receives (see canonicalPath).
	Bypass []string
	// Transport is the upstream transport. Default: a clone of
	// http.DefaultTransport with a 5 s dial timeout and
	// ResponseHeaderTimeout.
	Transport http.RoundTripper
	// ResponseHeaderTimeout bounds the wait for the upstream's response
	// headers once the request is sent (then 504 upstream_timeout); the
	// response body may stream for as long as it likes. Used only with the
	// default Transport. Default 30 s.
	ResponseHeaderTimeout time.Duration
	// BodyIdleTimeout cuts off a request body that sends nothing for this
	// long (408); a body that keeps arriving may take as long as it needs.
	// Default 30 s; negative: no bound.
	BodyIdleTimeout time.Duration
}

// DefaultUpstreamTimeout is ProxyOptions.ResponseHeaderTimeout's default.
const DefaultUpstreamTimeout = 30 * time.Second

const defaultBodyIdleTimeout = 30 * time.Second

// proxy is the reverse-proxy mode's handler state.
type proxy struct {
	opts    ProxyOptions
	reverse *httputil.ReverseProxy
}

// proxyState travels with a proxied request (in its context) to the
// Rewrite and ErrorHandler of the reverse proxy.
type proxyState struct {
	gate, session string        // set for an admitted request
	body          *progressBody // nil without a body
	// cookie: the answer hands out a session's cookie (a newcomer let in at
	// once), so the app's answer must not be stored by a shared cache,
	// whatever caching it asks for.
	cookie bool
}

type proxyStateKey struct{}

func (s *Server) newProxy(p ProxyOptions) (*proxy, error) {
	if p.Upstream == nil || (p.Upstream.Scheme != "http" && p.Upstream.Scheme != "https") || p.Upstream.Host == "" {
		return nil, errors.New("gate: ProxyOptions.Upstream must be an absolute http or https URL")
	}
	if p.Gate == "" {
		p.Gate = s.opts.DefaultGate
	}
	if _, err := s.opts.Waitlist.GateConfig(p.Gate); err != nil {
		return nil, err
	}
	if len(p.Protect) == 0 {
		p.Protect = []string{"/"}
	}
	if p.ResponseHeaderTimeout <= 0 {
		p.ResponseHeaderTimeout = DefaultUpstreamTimeout
	}
	if p.BodyIdleTimeout == 0 {
		p.BodyIdleTimeout = defaultBodyIdleTimeout
	}
	if p.Transport == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.DialContext = (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext
		// Bounds the headers only: streaming responses may take their time.
		t.ResponseHeaderTimeout = p.ResponseHeaderTimeout
		p.Transport = t
	}
	upstream := p.Upstream
	signer := s.opts.Signer
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(upstream)
			pr.SetXForwarded()
			pr.Out.Host = pr.In.Host
			scrubForUpstream(pr.Out, signer)
			if st, _ := pr.In.Context().Value(proxyStateKey{}).(*proxyState); st != nil && st.session != "" {
				pr.Out.Header[SessionHeader] = []string{st.session}
				pr.Out.Header[GateHeader] = []string{st.gate}
			}
		},
		ModifyResponse: func(res *http.Response) error {
			if st, _ := res.Request.Context().Value(proxyStateKey{}).(*proxyState); st != nil && st.cookie {
				res.Header.Set("Cache-Control", "private, no-store")
				res.Header.Del("Expires")
			}
			return nil
		},
		Transport:     p.Transport,
		FlushInterval: -1, // stream: server-sent events and long polls pass through at once
		ErrorHandler:  s.upstreamFailed,
	}
	return &proxy{opts: p, reverse: rp}, nil
}

// protects reports whether a cleaned path needs an active session: bypass
// prefixes match exactly (a looser match would let more through), protect
// prefixes in any case (an app on a case-insensitive file system serves
// /App/x as /app/x).
func (p *proxy) protects(path string) bool {
	for _, b := range p.opts.Bypass {
		if hasPathPrefix(path, b, false) {
			return false
		}
	}
	for _, pr := range p.opts.Protect {
		if hasPathPrefix(path, pr, true) {
			return true
		}
	}
	return false
}

// forward sends the request to the upstream; id names the admitted session
// ("" on a bypassed path).
func (s *Server) forward(c echo.Context, gate, id string) {
	w, r := c.Response(), c.Request()
	r.URL.RawQuery = forwardQuery(r.URL.RawQuery)
	st := &proxyState{gate: gate, session: id, cookie: len(w.Header().Values("Set-Cookie")) > 0}
	st.body = withBodyDeadline(w, r, s.proxy.opts.BodyIdleTimeout)
	// The app's answer may stream for as long as the client keeps taking
	// it (answer_deadline.go).
	s.proxy.reverse.ServeHTTP(newTakenWriter(w, s.opts.WriteTimeout), r.WithContext(context.WithValue(r.Context(), proxyStateKey{}, st)))
}

// serveProxy lets an active session through to the upstream (refreshing its
// last activity), shows a waiter the waiting page (browsers) or 503 with its
// SessionView (API clients), and joins a newcomer, but only on a browser
// navigation (isNavigation) and within the per-IP rate limit; any other
// request without a session gets 401 no_session and creates nothing.
func (s *Server) serveProxy(c echo.Context) error {
	p := s.proxy
	r := c.Request()
	clean, err := canonicalPath(r.URL)
	if err != nil {
		return err
	}
	// The sidecar's own paths are never the app's: another spelling of one
	// ("/anteroom//admin/api", "/x/../anteroom/api/join") reaches this
	// catch-all instead of its route and must not be forwarded cleaned.
	if hasPathPrefix(clean, s.opts.BasePath+"/", true) { // {base} itself or under it, in any letter case
		return apiError(codeRouteNotFound, "not found")
	}
	r.URL.Path, r.URL.RawPath = clean, ""
	if !p.protects(clean) {
		s.forward(c, "", "")
		return nil
	}
	gate := p.opts.Gate
	id, ok := s.sessionID(r)
	if ok && s.opts.Waitlist.ValidateSessionAndRefreshLastActive(gate, id) == nil {
		s.forward(c, gate, id)
		return nil
	}
	var view session.SessionView
	if ok {
		view, err = s.opts.Waitlist.Status(r.Context(), gate, id)
		if errors.Is(err, session.ErrNotFound) {
			err = s.joinFromPage(c, gate, &id, &view, false)
		}
	} else {
		err = s.joinFromPage(c, gate, &id, &view, true)
	}
	if errors.Is(err, session.ErrGateClosed) && guard.WantsPage(r) {
		return s.renderClosedPage(c, gate)
	}
	if err != nil {
		return err
	}
	if view.Status == session.StatusActive {
		s.forward(c, gate, id)
		return nil
	}
	s.setRetryAfter(c, view)
	// The same rule as the Go middleware tells a browser from an API client.
	if guard.WantsPage(r) {
		return s.renderWaitingPage(c, gate, "")
	}
	c.Response().Header().Set("Cache-Control", "no-store")
	return writeJSON(c, http.StatusServiceUnavailable, view)
}

// joinFromPage joins the request's session (a new one when fresh, then
// setting the cookie; the purged one it names otherwise), only for a
// browser navigation and within the per-IP rate limit.
func (s *Server) joinFromPage(c echo.Context, gate string, id *string, view *session.SessionView, fresh bool) error {
	r := c.Request()
	if !isNavigation(r) {
		c.Response().Header().Set("Cache-Control", "no-store")
		return apiError(codeNoSession, "no valid session: open a page of this site in a browser to join the line")
	}
	if err := s.allowJoin(c); err != nil {
		return err
	}
	if fresh {
		*id = token.NewID()
	}
	v, err := s.opts.Waitlist.Join(r.Context(), gate, *id)
	if err != nil {
		return err
	}
	if fresh {
		tok, err := s.opts.Signer.Sign(*id)
		if err != nil {
			return err
		}
		s.setCookie(c, tok)
	}
	*view = v
	return nil
}

// isNavigation reports whether r may create a session: a browser loading a
// page (a GET that guard.WantsPage takes for one) into a window, not a
// prefetch or preview (Sec-Purpose, Purpose, X-Purpose or X-Moz naming
// prefetch, prerender or preview) nor a frame or other fetch destination.
func isNavigation(r *http.Request) bool {
	if r.Method != http.MethodGet || !guard.WantsPage(r) {
		return false
	}
	if d := r.Header.Get("Sec-Fetch-Dest"); d != "" && d != "document" {
		return false
	}
	for _, h := range [...]string{"Sec-Purpose", "Purpose", "X-Purpose", "X-Moz"} {
		for _, v := range r.Header.Values(h) {
			v = strings.ToLower(v)
			if strings.Contains(v, "prefetch") || strings.Contains(v, "prerender") || strings.Contains(v, "preview") {
				return false
			}
		}
	}
	return true
}
