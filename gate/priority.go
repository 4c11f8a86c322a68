package gate

import (
	"crypto/rand"
	"encoding/base32"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/anteroomhq/anteroom/gate/wire"
	"github.com/anteroomhq/anteroom/session"
)

// Priority codes over HTTP (issue 13): a join may give {"code":"…"}; the
// admin API creates, lists and deletes a gate's codes; a backend with an API
// key issues codes (a referral: one code per referrer with a number of
// uses). The Waitlist and the Store decide; this file translates.

// defaultCodeRateLimit bounds the joins with a code per client: plenty for
// a visitor who mistyped, nothing for a guesser (10 a minute, bursts of 5).
var defaultCodeRateLimit = RateLimitOptions{PerSecond: 1.0 / 6, Burst: 5}

// Defaults of a code created without them.
const (
	defaultCodeTTL  = 7 * 24 * time.Hour
	defaultCodeUses = 1
)

// joinCodeResponse is the answer of a join whose code gave no priority: the
// join happened (the session exists, the cookie is set), so the body is the
// join's, plus the error of the code; the status is the code's (404
// code_unknown, 409 code_used).
type joinCodeResponse struct {
	joinResponse
	Error wire.ErrorDetail `json:"error"`
}

// spendCodeAttempt charges a join that gives a code to the client's budget
// of code attempts; over it, the join is refused with 429 (it may come
// again without a code).
func (s *Server) spendCodeAttempt(c echo.Context) error {
	allowed := false
	if err := s.codeLimit(func(echo.Context) error { allowed = true; return nil })(c); err != nil {
		return err
	}
	if !allowed {
		return errAnswered
	}
	return nil
}

// answerJoin writes the join's answer: 200, or with a code that gave no
// priority, the code's status and error beside the join's body.
func (s *Server) answerJoin(c echo.Context, resp joinResponse, codeErr error) error {
	if codeErr == nil {
		return writeJSON(c, http.StatusOK, resp)
	}
	d := errorDetail(codeErr)
	return writeJSON(c, wire.Status(d.Code), joinCodeResponse{joinResponse: resp, Error: d})
}

// newCode returns a fresh code: 128 random bits in 26 characters of
// lower-case base32.
func newCode() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b[:])), nil
}

// codeRequest is the body of POST …/codes: every field optional.
type codeRequest struct {
	// Gate names the gate (POST {base}/api/codes only; the admin API has it
	// in the path).
	Gate string `json:"gate"`
	// Code is the operator's chosen code (admin API only); absent, one is
	// generated.
	Code      string `json:"code"`
	Uses      *int64 `json:"uses"`
	TTL       string `json:"ttl"`
	ExpiresAt string `json:"expiresAt"`
	Label     string `json:"label"`
}

// createdCode is the answer of a creation: the only time the code itself
// is shown (the store keeps its digest).
type createdCode struct {
	session.PriorityCode
	Code string `json:"code"`
}

// codeList is the answer of GET …/codes.
type codeList struct {
	Codes []session.PriorityCode `json:"codes"`
}

// createCode reads a codeRequest and creates the code in gate.
func (s *Server) createCode(c echo.Context, gate string, req codeRequest) error {
	bad := func(field, want string) error { return apiError(session.CodeInvalidArgument, field+": "+want) }
	uses := int64(defaultCodeUses)
	if req.Uses != nil {
		uses = *req.Uses
	}
	ttl := defaultCodeTTL
	switch {
	case req.TTL != "" && req.ExpiresAt != "":
		return bad("ttl", "give ttl or expiresAt, not both")
	case req.TTL != "":
		d, err := time.ParseDuration(req.TTL)
		if err != nil || d <= 0 {
			return bad("ttl", `want a positive Go duration such as "72h"`)
		}
		ttl = d
	case req.ExpiresAt != "":
		t, err := time.Parse(time.RFC3339, req.ExpiresAt)
		if err != nil {
			return bad("expiresAt", "want an RFC 3339 time")
		}
		ttl = time.Until(t)
	}
	if ttl > session.MaxCodeTTL {
		return bad("ttl", "at most "+session.MaxCodeTTL.String())
	}
	code := req.Code
	if code == "" {
		var err error
		if code, err = newCode(); err != nil {
			return err
		}
	} else if !session.ValidCode(code) {
		return bad("code", "want 6-64 characters of a-z, A-Z, 0-9, '-' or '_'")
	}
	pc, err := s.opts.Waitlist.CreateCode(c.Request().Context(), gate, code, req.Label, uses, ttl)
	if err != nil {
		return err
	}
	s.log.Info("anteroom: priority code created", "gate", gate, "id", pc.ID[:16], "uses", pc.MaxUses, "expires", pc.ExpiresAt, "label", pc.Label, "client", c.RealIP())
	return writeJSON(c, http.StatusCreated, createdCode{PriorityCode: pc, Code: code})
}

// adminCodeRoutes registers the codes of the admin API under b (the admin
// API's base) with its middleware.
func (s *Server) adminCodeRoutes(e *echo.Echo, b string, mw []echo.MiddlewareFunc) {
	e.GET(b+"/gates/:gate/codes", s.adminListCodes, mw...)
	e.POST(b+"/gates/:gate/codes", s.adminCreateCode, mw...)
	e.DELETE(b+"/gates/:gate/codes/:id", s.adminDeleteCode, mw...)
}

func (s *Server) adminCreateCode(c echo.Context) error {
	var req codeRequest
	body, err := s.readBody(c.Request())
	if err != nil {
		return err
	}
	if err := decodeOne(body, &req, `a JSON object such as {"uses":1,"ttl":"72h"}`); err != nil {
		return err
	}
	if req.Gate != "" {
		return apiError(session.CodeInvalidArgument, "gate: named by the path")
	}
	return s.createCode(c, c.Param("gate"), req)
}

func (s *Server) adminListCodes(c echo.Context) error {
	list, err := s.opts.Waitlist.Codes(c.Request().Context(), c.Param("gate"))
	if err != nil {
		return err
	}
	if list == nil {
		list = []session.PriorityCode{}
	}
	return writeJSON(c, http.StatusOK, codeList{Codes: list})
}

func (s *Server) adminDeleteCode(c echo.Context) error {
	gate, id := c.Param("gate"), c.Param("id")
	if err := s.opts.Waitlist.DeleteCode(c.Request().Context(), gate, id); err != nil {
		return err
	}
	s.log.Info("anteroom: priority code deleted", "gate", gate, "id", id[:16], "client", c.RealIP())
	return c.NoContent(http.StatusNoContent)
}

// issueCode is POST {base}/api/codes: a backend holding an API key issues a
// generated code (seed 000's referral: one code per referrer, with as many
// uses as the referrer may bring friends). 401 api_key_required without a
// key.
func (s *Server) issueCode(c echo.Context) error {
	r := c.Request()
	if !s.trusted(r) {
		return apiError(codeAPIKeyRequired, "issuing codes needs a valid API key")
	}
	var req codeRequest
	body, err := s.readBody(r)
	if err != nil {
		return err
	}
	if err := decodeOne(body, &req, `a JSON object such as {"gate":"default","uses":5,"label":"referral:42"}`); err != nil {
		return err
	}
	if req.Code != "" {
		return apiError(session.CodeInvalidArgument, "code: issued codes are generated; choose one through the admin API")
	}
	gate := s.gateOf(c, req.Gate)
	return s.createCode(c, gate, req)
}

// cmpOr returns o, or def when o is off.
func cmpOr(o, def RateLimitOptions) RateLimitOptions {
	if o.PerSecond <= 0 {
		return def
	}
	return o
}
