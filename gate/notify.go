package gate

import (
	"errors"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/anteroomhq/anteroom/gate/token"
	"github.com/anteroomhq/anteroom/gate/wire"
	"github.com/anteroomhq/anteroom/session"
)

// "Leave, we'll call you": a waiter's backend marks its session notify
// (POST {base}/api/notify, API key); the waiter may close its tab; when it
// is promoted the promoted webhook carries a claim link, whose first visit
// (GET {base}/claim?gate=&ticket=) claims the slot and hands the browser
// the session's cookie.

// ClaimPath is the path of claim links under the base path.
const ClaimPath = "/claim"

func (s *Server) notifyRoutes(e *echo.Echo, b string, limited []echo.MiddlewareFunc) {
	e.POST(b+"/api/notify", s.notify, limited...)
	// GET only: a HEAD (a link preview, a scanner's probe) must not claim.
	e.GET(b+ClaimPath, s.claimLink, limited...)
}

// notifyRequest is the JSON body of POST {base}/api/notify.
type notifyRequest struct {
	Gate      string `json:"gate"`
	SessionID string `json:"sessionId"`
	Notify    *bool  `json:"notify"`
}

// notify sets or clears a session's notify flag for a backend holding an
// API key: 200 SessionView (with "notify"), 401 api_key_required without a
// key, 400 for a body without sessionId or notify, 404 session_not_found.
func (s *Server) notify(c echo.Context) error {
	r := c.Request()
	if !s.trusted(r) {
		return apiError(codeAPIKeyRequired, "notify needs an API key (X-Anteroom-Key)")
	}
	body, err := s.readBody(r)
	if err != nil {
		return err
	}
	var req notifyRequest
	if err := decodeOne(body, &req, `JSON such as {"sessionId":"user:42","notify":true}`); err != nil {
		return err
	}
	if req.SessionID == "" || req.Notify == nil {
		return apiError(session.CodeInvalidArgument, `body must name "sessionId" and "notify" (true or false)`)
	}
	if !session.ValidID(req.SessionID) {
		return apiError(session.CodeInvalidArgument, "sessionId: want 1-128 printable ASCII characters without spaces or '.'")
	}
	gate := s.gateOf(r, req.Gate)
	if _, err := s.opts.Waitlist.GateConfig(gate); err != nil {
		return err
	}
	s.note(c, gate, req.SessionID)
	view, err := s.opts.Waitlist.SetNotify(r.Context(), gate, req.SessionID, *req.Notify)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, view)
}

// claimLink serves a claim link's visit: the first visit while the slot
// waits to be claimed claims it, sets the session's cookie and redirects
// (303) to ?next= (a local path) or "/". A ticket that does not verify or
// has expired is 401 invalid_ticket; a slot claimed already (or purged, or
// never promoted, or promoted again since the link was issued: the ticket
// names its promotion by the claim deadline) is 409 already_claimed.
func (s *Server) claimLink(c echo.Context) error {
	r := c.Request()
	gate := s.gateOf(r, "")
	if _, err := s.opts.Waitlist.GateConfig(gate); err != nil {
		return err
	}
	t := ""
	if r.URL.RawQuery != "" {
		t = r.URL.Query().Get("ticket")
	}
	if t == "" {
		return apiError(codeInvalidTicket, "claim link without a ticket")
	}
	id, deadline, ok := s.opts.Signer.VerifyClaimTicket(t, gate)
	if !ok {
		return apiError(codeInvalidTicket, "claim link invalid or expired")
	}
	s.note(c, gate, id)
	if err := s.opts.Waitlist.ClaimLink(r.Context(), gate, id, deadline); err != nil {
		if errors.Is(err, session.ErrNotActive) {
			return apiError(wire.CodeAlreadyClaimed, "this link was used already, or its slot is gone")
		}
		return err
	}
	tok, err := s.opts.Signer.Sign(id)
	if err != nil {
		return err
	}
	s.setCookie(c, tok)
	next := r.URL.Query().Get("next")
	if !wire.LocalPath(next) {
		next = "/"
	}
	return c.Redirect(http.StatusSeeOther, next)
}

// BuildClaimURL returns the claim link of session id at gate, valid until
// deadline (its claim deadline): publicURL (the origin at which visitors
// reach the sidecar's base path, such as "https://shop.example.com"; empty
// gives a path alone) + basePath + "/claim?gate=…&ticket=…". The ticket is a
// token.PurposeClaim ticket, never the session token; it carries deadline
// to the nanosecond, which binds the link to that promotion. It returns
// Signer.ClaimTicket's error.
func BuildClaimURL(signer *token.Signer, publicURL, basePath, gate, id string, deadline time.Time) (string, error) {
	t, err := signer.ClaimTicket(gate, id, deadline)
	if err != nil {
		return "", err
	}
	q := url.Values{"gate": {gate}, "ticket": {t}}
	return strings.TrimRight(publicURL, "/") + basePath + ClaimPath + "?" + q.Encode(), nil
}
