package gate

import (
	"bytes"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/anteroomhq/anteroom/gate/token"
	"github.com/anteroomhq/anteroom/gate/wire"
	"github.com/anteroomhq/anteroom/session"
	"github.com/anteroomhq/anteroom/static"
)

// "Leave, we'll call you": a waiter's backend marks its session notify
// (POST {base}/api/notify, API key); the waiter may close its tab; when it
// is promoted the promoted webhook carries a claim link. A GET (or HEAD) of
// the link (GET {base}/claim?gate=&ticket=) claims nothing: mail and chat
// link scanners fetch every link of a message before the person clicks.
// It answers a page whose form posts the ticket (POST {base}/claim?gate=,
// body ticket=&next=) when the person clicks its button, never by itself
// (some scanners run pages); the POST claims the slot and hands the browser
// the session's cookie.

// ClaimPath is the path of claim links under the base path.
const ClaimPath = "/claim"

func (s *Server) notifyRoutes(e *echo.Echo, b string, limited []echo.MiddlewareFunc) {
	e.POST(b+"/api/notify", s.notify, limited...)
	// A GET or HEAD (a scanner, a link preview, the person) only shows the
	// page; the page's POST claims.
	// A browser is told why a link is refused in a page (claimRefusedPage,
	// outermost: a rate limit's refusal too), anyone else in JSON; so is a
	// browser whose click posted the page's form without script.
	refused := append([]echo.MiddlewareFunc{s.claimRefusedPage}, limited...)
	e.Match([]string{http.MethodGet, http.MethodHead}, b+ClaimPath, s.claimPage, refused...)
	e.POST(b+ClaimPath, s.claimLink, refused...)
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
	gate := s.gateOf(c, req.Gate)
	if _, err := s.opts.Waitlist.GateConfig(gate); err != nil {
		return err
	}
	s.note(c, gate, req.SessionID)
	view, err := s.opts.Waitlist.SetNotify(r.Context(), gate, req.SessionID, *req.Notify)
	if err != nil {
		return err
	}
	return writeJSON(c, http.StatusOK, view)
}

// Referrer policies of the claim link's answers. The page sends only its
// origin as Referer (its URL holds the ticket), which keeps the Origin of
// its form's POST (a policy of no-referrer would make it "null"); the
// claim's redirect and errors send none, so the page the link leads to
// never sees the ticket.
var (
	valueStrictOrigin = []string{"strict-origin"}
	valueNoReferrer   = []string{"no-referrer"}
)

// verifyClaimTicket returns the session and claim deadline of claim ticket
// t at gate: 401 invalid_ticket when it is missing, does not verify, or
// has expired (then the error wraps token.ErrTicketExpired, which the
// answer's JSON does not tell apart, and a browser's page does).
func (s *Server) verifyClaimTicket(c echo.Context, gate, t string) (string, time.Time, error) {
	if t == "" {
		return "", time.Time{}, apiError(codeInvalidTicket, "claim link without a ticket")
	}
	id, deadline, err := s.opts.Signer.CheckClaimTicket(t, gate)
	if err != nil {
		return "", time.Time{}, &session.Error{Code: codeInvalidTicket, Message: "claim link invalid or expired", Err: err}
	}
	s.note(c, gate, id)
	return id, deadline, nil
}

// claimPage answers a claim link's GET or HEAD, which must not claim (link
// scanners fetch every link of a mail or chat message): a ticket that
// verifies gets the claim page (200, no-store, under a fresh CSP nonce),
// whose form posts the ticket; a missing, forged or expired one is 401
// invalid_ticket, an unknown gate 404 unknown_gate (to a browser as a
// page: claimRefusedPage). Whether the slot is still there is the POST's
// to say.
func (s *Server) claimPage(c echo.Context) error {
	c.Response().Header()["Referrer-Policy"] = valueNoReferrer
	gate := s.gateOf(c, "")
	if _, err := s.opts.Waitlist.GateConfig(gate); err != nil {
		return err
	}
	t, next := claimLinkFields(c)
	if _, _, err := s.verifyClaimTicket(c, gate, t); err != nil {
		return err
	}
	next = claimNext(t, next)
	data := static.ClaimPageData{BasePath: s.opts.BasePath, Gate: gate, Ticket: t, Next: next, Nonce: contentSecurityPolicy(c)}
	var buf bytes.Buffer
	if err := static.RenderClaimPage(&buf, data); err != nil {
		return err
	}
	c.Response().Header()["Referrer-Policy"] = valueStrictOrigin
	return htmlPage(c, buf.Bytes())
}

// claimRefusedPage is the middleware of a claim link's GET, HEAD and POST
// that answers their errors to a browser (an Accept that prefers text/html,
// prefersHTML) with the page of a claim link refused: the error's status
// (wire.Status of its code, as the JSON would have), the sentence of why,
// and a link to the waiting page or the link's next (a local path). Any
// other client is left as it is: the wire contract's JSON errors stay byte
// for byte. Since Accept chooses between the two forms of an error, every
// error answer of the route says so with Vary: Accept, in either form, so
// that no shared cache serves one client's form to the other. Whatever is
// not an error (the claim page, the claim's redirect) is the same for every
// Accept, and left as it is.
func (s *Server) claimRefusedPage(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		err := next(c)
		if err == nil || c.Response().Committed {
			return err
		}
		c.Response().Header().Add("Vary", "Accept")
		if !prefersHTML(c.Request().Header) {
			return err
		}
		if perr := s.renderClaimRefused(c, err); perr != nil {
			return err // the JSON error, then
		}
		return nil
	}
}

// renderClaimRefused answers err, the error of a claim link's GET, HEAD
// or POST, as the page of a claim link refused, under the status of err's
// code, not cached, with the pages' CSP and no Referer (the link's URL
// holds the ticket). The page never repeats the ticket: not in its text,
// nor in its link, which is the link's next (claimLinkFields) only when
// claimNext lets it. It returns the page's rendering error (nothing was
// written then).
func (s *Server) renderClaimRefused(c echo.Context, err error) error {
	r := c.Request()
	d := errorDetail(err)
	gate := s.gateOf(c, "")
	if _, gerr := s.opts.Waitlist.GateConfig(gate); gerr != nil {
		gate = s.opts.DefaultGate // not whatever the link named
	}
	next := claimNext(claimLinkFields(c))
	data := static.ClaimRefusedPageData{BasePath: s.opts.BasePath, Gate: gate, Next: next,
		Reason: claimRefusal(err, d.Code), Posted: r.Method == http.MethodPost, Nonce: contentSecurityPolicy(c)}
	var buf bytes.Buffer
	if err := static.RenderClaimRefusedPage(&buf, data); err != nil {
		return err
	}
	s.errorAnswered(c, err, d)
	h := c.Response().Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Length", strconv.Itoa(buf.Len()))
	h["Cache-Control"] = valueNoStore
	h["Referrer-Policy"] = valueNoReferrer
	h["X-Content-Type-Options"] = valueNosniff
	c.Response().WriteHeader(wire.Status(d.Code))
	if r.Method != http.MethodHead {
		_, _ = c.Response().Write(buf.Bytes()) // a write error: the client is gone
	}
	return nil
}

// ctxClaimForm is the key under which claimLink keeps, in the echo
// context, the form it parsed from a claim POST's body (url.Values), for
// the page of its refusal (claimLinkFields).
const ctxClaimForm = "anteroom.claim.form"

// claimLinkFields returns the ticket and next a claim link's request
// carries: a GET's or HEAD's from its URL (the link itself), a POST's from
// the form its body posted (the claim page's; the POST's URL names only
// the gate). A POST refused before its form was parsed (from another
// origin, a body too large or not a form, a rate limit) carries none.
func claimLinkFields(c echo.Context) (ticket, next string) {
	r := c.Request()
	if r.Method == http.MethodPost {
		form, _ := c.Get(ctxClaimForm).(url.Values)
		return form.Get("ticket"), form.Get("next")
	}
	return query(c, "ticket"), query(c, "next")
}

// maxClaimNext bounds, in bytes once form-encoded, the next a claim link
// leads to: a link's next is a page of the site, and a longer one is
// nobody's (common servers and proxies cap a request line at about 8 KiB,
// old browsers a URL at about 2). Form-encoded, because the claim page
// posts it back in its form, whose body the claim reads up to 4 KiB: a
// next of slashes or of a query doubles there, one of non-ASCII bytes
// triples.
const maxClaimNext = 2 << 10

// formEncodedLen returns the length of s as a browser's form
// (application/x-www-form-urlencoded) or url.QueryEscape encodes it, the
// longer of the two: a letter, a digit, "-", "_", ".", "~", "*" or a space
// is one byte, any other byte three.
func formEncodedLen(s string) int {
	n := 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9',
			c == '-', c == '_', c == '.', c == '~', c == '*', c == ' ':
			n++
		default:
			n += 3
		}
	}
	return n
}

// claimNext returns where a claim link leads once done with, given the
// ticket and next of its request (claimLinkFields): next when it is a local
// path (wire.LocalPath: not //host, /\host, a scheme, nor a control
// character) of at most maxClaimNext bytes form-encoded that does not hold
// the ticket, nor its MAC (the ticket's last part, base64url, which the
// usual escapes, query, path or form, leave as it is: a next holding the
// ticket so escaped holds its MAC; a next that hides it otherwise, by hand,
// is not caught); "" otherwise (the claim page then leads to the
// site's root, the page of a refusal to the waiting page). One rule for
// the claim page, the claim's redirect and the page of a refusal, so no
// way through the link puts the ticket, or a foreign place, in a URL, and
// a next the claim page accepts fits the body of its form's claim.
func claimNext(ticket, next string) string {
	if formEncodedLen(next) > maxClaimNext || !wire.LocalPath(next) {
		return ""
	}
	if ticket != "" && strings.Contains(next, ticket) {
		return ""
	}
	if mac := ticket[strings.LastIndexByte(ticket, '.')+1:]; len(mac) >= minTicketMAC && strings.Contains(next, mac) {
		return ""
	}
	return next
}

// minTicketMAC is the shortest last part of a ticket that claimNext takes
// for its MAC (a real one is 43 bytes of base64url): a shorter one is no
// secret, and would refuse too many paths.
const minTicketMAC = 16

// claimRefusal names, for the page, why a claim link's request failed
// with err of code: its ticket expired (genuine, and too late), the slot
// was claimed already, the sidecar is busy or failing (429, 5xx: the same
// link may work in a moment), or else the link is not valid (no ticket, a
// mangled or forged one, another or an unknown gate).
func claimRefusal(err error, code session.Code) static.ClaimRefusal {
	status := wire.Status(code)
	switch {
	case errors.Is(err, token.ErrTicketExpired):
		return static.ClaimExpired
	case code == wire.CodeAlreadyClaimed || code == session.CodeNotActive:
		return static.ClaimUsed
	case status == http.StatusTooManyRequests || status >= http.StatusInternalServerError:
		return static.ClaimBusy
	default:
		return static.ClaimInvalid
	}
}

// claimLink claims the slot of a claim link's ticket, posted by the claim
// page's form (body ticket= and next=, form-encoded; the body only, so the
// ticket never sits in a POST's URL; the gate is the URL's ?gate=): the
// first claim while the slot waits claims
// it, sets the session's cookie and redirects (303) to next (a local path)
// or "/". A request from a page of another origin is 403 cross_origin (as
// join's); a ticket missing, that does not verify or has expired is 401
// invalid_ticket; a slot claimed already (or purged, or never promoted, or
// promoted again since the link was issued: the ticket names its promotion
// by the claim deadline) is 409 already_claimed; a body that is not a form
// is 400 invalid_argument, a larger one than the limit 413.
func (s *Server) claimLink(c echo.Context) error {
	r := c.Request()
	c.Response().Header()["Referrer-Policy"] = valueNoReferrer
	if err := s.checkOrigin(r); err != nil {
		return err
	}
	body, err := s.readBody(r)
	if err != nil {
		return err
	}
	form, err := url.ParseQuery(string(body))
	if err != nil {
		return apiError(session.CodeInvalidArgument, "the claim's body must be a form: ticket=...&next=...")
	}
	c.Set(ctxClaimForm, form) // for the page of a refusal
	gate := s.gateOf(c, "")
	if _, err := s.opts.Waitlist.GateConfig(gate); err != nil {
		return err
	}
	ticket, next := claimLinkFields(c)
	id, deadline, err := s.verifyClaimTicket(c, gate, ticket)
	if err != nil {
		return err
	}
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
	if next = claimNext(ticket, next); next == "" {
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
