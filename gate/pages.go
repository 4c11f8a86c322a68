package gate

import (
	"bytes"
	"errors"
	"html/template"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/anteroomhq/anteroom/gate/token"
	"github.com/anteroomhq/anteroom/gate/wire"
	"github.com/anteroomhq/anteroom/session"
	"github.com/anteroomhq/anteroom/static"
)

func (s *Server) snippet(c echo.Context) error {
	h := c.Response().Header()
	etag := static.SnippetETag()
	h.Set("ETag", etag)
	h.Set("Cache-Control", "public, max-age=300")
	if c.Request().Header.Get("If-None-Match") == etag {
		return c.NoContent(http.StatusNotModified)
	}
	return c.Blob(http.StatusOK, "text/javascript; charset=utf-8", static.Snippet())
}

// waitingPage serves the waiting page for ?gate= (or the default gate). A
// gate in reject mode shows the closed page (503) to everyone but its
// existing sessions, which keep their place.
func (s *Server) waitingPage(c echo.Context) error {
	r := c.Request()
	gate := s.gateOf(c, "")
	cfg, err := s.opts.Waitlist.GateConfig(gate)
	if err != nil {
		return err
	}
	if cfg.Mode == session.ModeReject && !s.hasSession(r, gate) {
		return s.renderClosedPage(c, gate)
	}
	next := query(c, "next")
	if !wire.LocalPath(next) {
		next = ""
	}
	return s.renderWaitingPage(c, gate, next)
}

// renderWaitingPage answers 200 with the waiting page of gate (under a fresh
// CSP nonce, not cached); once admitted the page goes to next, or reloads
// itself when next is empty.
func (s *Server) renderWaitingPage(c echo.Context, gate, next string) error {
	data := static.WaitingPageData{BasePath: s.opts.BasePath, Gate: gate, RedirectURL: next, Nonce: contentSecurityPolicy(c)}
	var buf bytes.Buffer
	if err := static.RenderWaitingPage(&buf, data); err != nil {
		return err
	}
	return htmlPage(c, buf.Bytes())
}

// hasSession reports whether the request carries a session the gate holds.
func (s *Server) hasSession(r *http.Request, gate string) bool {
	id, ok := s.sessionID(r)
	if !ok {
		return false
	}
	_, err := s.opts.Waitlist.Status(r.Context(), gate, id)
	return err == nil
}

// closedTmpl is the page of a gate in reject mode.
var closedTmpl = template.Must(template.New("closed").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>Closed</title>
<style nonce="{{.Nonce}}">body{font:16px/1.5 system-ui,sans-serif;display:grid;place-items:center;min-height:90vh;margin:0;color:#222}main{max-width:28rem;padding:2rem;text-align:center}</style>
</head><body><main data-anteroom-gate="{{.Gate}}" data-anteroom-status="gate_closed">
<h1>This page is closed for now</h1>
<p>Nobody new can get in at the moment. Please come back later.</p>
</main></body></html>
`))

// renderClosedPage answers 503 gate_closed as a page: the gate is in reject
// mode.
func (s *Server) renderClosedPage(c echo.Context, gate string) error {
	var buf bytes.Buffer
	nonce := contentSecurityPolicy(c)
	if err := closedTmpl.Execute(&buf, struct{ Gate, Nonce string }{gate, nonce}); err != nil {
		return err
	}
	h := c.Response().Header()
	h.Set("Cache-Control", "no-store")
	h.Set("Retry-After", closedRetryAfter)
	return c.HTMLBlob(http.StatusServiceUnavailable, buf.Bytes())
}

func (s *Server) demoPage(c echo.Context) error {
	var buf bytes.Buffer
	data := static.DemoPageData{BasePath: s.opts.BasePath, Gate: s.opts.DefaultGate, Nonce: contentSecurityPolicy(c)}
	if err := static.RenderDemoPage(&buf, data); err != nil {
		return err
	}
	return htmlPage(c, buf.Bytes())
}

// contentSecurityPolicy sets a strict policy on a page of ours: only our own
// origin, and inline scripts and styles only with the returned nonce, which
// is fresh for every response. It also forbids framing by other origins.
func contentSecurityPolicy(c echo.Context) string {
	nonce := token.NewID()
	src := "'self' 'nonce-" + nonce + "'"
	c.Response().Header().Set("Content-Security-Policy", "default-src 'self'; script-src "+src+"; style-src "+src+
		"; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'self'; frame-ancestors 'self'")
	c.Response().Header().Set("X-Frame-Options", "SAMEORIGIN")
	return nonce
}

func htmlPage(c echo.Context, page []byte) error {
	c.Response().Header().Set("Cache-Control", "no-store")
	return c.HTMLBlob(http.StatusOK, page)
}

// demoSecret is the demo app's protected route: what a host app does with
// validateSessionAndRefreshLastActive, so that a visitor using the app keeps
// the slot.
func (s *Server) demoSecret(c echo.Context) error {
	gate := s.opts.DefaultGate
	id, ok := s.sessionID(c.Request())
	if !ok {
		return apiError(codeNoSession, "no valid session: load the demo page first")
	}
	if err := s.opts.Waitlist.ValidateSessionAndRefreshLastActive(gate, id); err != nil {
		if errors.Is(err, session.ErrNotActive) {
			return apiError(session.CodeNotActive, "you are still waiting in line")
		}
		return err
	}
	return writeJSON(c, http.StatusOK, map[string]string{
		"message": "You are in: this JSON came from a route protected by validateSessionAndRefreshLastActive.",
		"session": id,
	})
}
