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
	"github.com/anteroomhq/anteroom/gate/wire"
	"github.com/anteroomhq/anteroom/session"
)

// ProxyOptions configure reverse-proxy mode: anteroom listens in front of the
// app and lets only active sessions through to it.
type ProxyOptions struct {
	// Upstream is the app, such as http://127.0.0.1:3000.
	Upstream *url.URL
	// Gate is the gate proxied requests join. Default: Options.DefaultGate.
	Gate string
	// Protect lists the path prefixes only active sessions may reach.
	// Default: "/" (everything).
	Protect []string
	// Bypass lists path prefixes that go to the upstream without a session
	// (static assets, health checks). Bypass wins over Protect.
	Bypass []string
	// Transport is the upstream transport. Default: a clone of
	// http.DefaultTransport with a 5 s dial timeout.
	Transport http.RoundTripper
}

// proxy is the reverse-proxy mode's handler state.
type proxy struct {
	opts    ProxyOptions
	reverse *httputil.ReverseProxy
}

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
	if p.Transport == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.DialContext = (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext
		t.ResponseHeaderTimeout = 0 // streaming responses may take their time
		p.Transport = t
	}
	upstream := p.Upstream
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(upstream)
			pr.SetXForwarded()
			pr.Out.Host = pr.In.Host
		},
		Transport:     p.Transport,
		FlushInterval: -1, // stream: server-sent events and long polls pass through at once
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			s.log.Warn("anteroom: upstream failed", "upstream", upstream.Redacted(), "path", r.URL.Path, "err", err)
			wire.WriteError(w, r, codeBadGateway, "the app behind anteroom is not answering")
		},
	}
	return &proxy{opts: p, reverse: rp}, nil
}

func (p *proxy) protects(path string) bool {
	for _, b := range p.opts.Bypass {
		if strings.HasPrefix(path, b) {
			return false
		}
	}
	for _, pr := range p.opts.Protect {
		if strings.HasPrefix(path, pr) {
			return true
		}
	}
	return false
}

// serveProxy lets an active session through to the upstream (refreshing its
// last activity), joins a newcomer on its first request, and shows a waiter
// the waiting page (browsers) or 503 with its SessionView (API clients).
func (s *Server) serveProxy(c echo.Context) error {
	p := s.proxy
	r := c.Request()
	w := c.Response()
	if !p.protects(r.URL.Path) {
		p.reverse.ServeHTTP(w, r)
		return nil
	}
	gate := p.opts.Gate
	id, ok := s.sessionID(r)
	if ok && s.opts.Waitlist.ValidateSessionAndRefreshLastActive(gate, id) == nil {
		p.reverse.ServeHTTP(w, r)
		return nil
	}
	view, err := s.admit(r.Context(), gate, id, ok)
	if errors.Is(err, session.ErrGateClosed) && guard.WantsPage(r) {
		return s.renderClosedPage(c, gate)
	}
	if err != nil {
		return err
	}
	if !ok {
		tok, err := s.opts.Signer.Sign(view.Session)
		if err != nil {
			return err
		}
		s.setCookie(c, tok)
	}
	if view.Status == session.StatusActive {
		p.reverse.ServeHTTP(w, r)
		return nil
	}
	setRetryAfter(c, view)
	// The same rule as the Go middleware tells a browser from an API client.
	if guard.WantsPage(r) {
		return s.renderWaitingPage(c, gate, "")
	}
	w.Header().Set("Cache-Control", "no-store")
	return c.JSON(http.StatusServiceUnavailable, view)
}

// admit returns the view of the request's session: a newcomer (or a session
// purged since) joins; a known one is looked up.
func (s *Server) admit(ctx context.Context, gate, id string, known bool) (session.SessionView, error) {
	if known {
		view, err := s.opts.Waitlist.Status(ctx, gate, id)
		if err == nil {
			return view, nil
		}
		if !errors.Is(err, session.ErrNotFound) {
			return session.SessionView{}, err
		}
	} else {
		id = token.NewID()
	}
	return s.opts.Waitlist.Join(ctx, gate, id)
}
