package gate

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/anteroomhq/anteroom/gate/token"
	"github.com/anteroomhq/anteroom/gate/wire"
	"github.com/anteroomhq/anteroom/session"
)

// ticketRequest is the optional JSON body of POST {base}/api/ticket.
type ticketRequest struct {
	Purpose string `json:"purpose"`
	Gate    string `json:"gate"`
}

// ticketResponse answers POST {base}/api/ticket.
type ticketResponse struct {
	Ticket    string `json:"ticket"`
	Purpose   string `json:"purpose"`
	Gate      string `json:"gate"`
	ExpiresIn int    `json:"expiresIn"` // seconds
}

// ticket issues a short-lived single-purpose ticket for the request's
// session: what a browser puts in a URL where it cannot send a header (the
// websocket's ?ticket=, a beacon's ?ticket=), instead of the session token.
// Purpose comes from {"purpose":...} or ?purpose=: "ws" (the default) or
// "leave".
func (s *Server) ticket(c echo.Context) error {
	r := c.Request()
	var req ticketRequest
	if err := s.readStateChange(r, &req, `JSON such as {"purpose":"ws"}`); err != nil {
		return err
	}
	if req.Purpose == "" {
		req.Purpose = query(c, "purpose")
	}
	if req.Purpose == "" {
		req.Purpose = token.PurposeWS
	}
	if req.Purpose != token.PurposeWS && req.Purpose != token.PurposeLeave {
		return apiError(session.CodeInvalidArgument, "purpose: want \"ws\" or \"leave\"")
	}
	gate := s.gateOf(c, req.Gate)
	if _, err := s.opts.Waitlist.GateConfig(gate); err != nil {
		return err
	}
	id, ok := s.sessionID(r)
	if !ok {
		return apiError(codeNoSession, "no valid session: join first")
	}
	t, err := s.opts.Signer.Ticket(req.Purpose, gate, id)
	if err != nil {
		return err
	}
	return writeJSON(c, http.StatusOK, ticketResponse{Ticket: t, Purpose: req.Purpose, Gate: gate, ExpiresIn: int(token.TicketTTL.Seconds())})
}

// ticketSession returns the session a ?ticket= of purpose names at gate. It
// returns ok=false when the request has no ticket, and an invalid_ticket
// error (401) when it has one that does not verify.
func (s *Server) ticketSession(r *http.Request, purpose, gate string) (string, bool, error) {
	if r.URL.RawQuery == "" {
		return "", false, nil
	}
	t, _ := wire.Query(r.URL.RawQuery, "ticket")
	if t == "" {
		return "", false, nil
	}
	id, ok := s.opts.Signer.VerifyTicket(t, purpose, gate)
	if !ok {
		return "", false, apiError(codeInvalidTicket, "ticket invalid or expired: ask POST /api/ticket for a new one")
	}
	return id, true, nil
}
