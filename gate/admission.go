package gate

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/anteroomhq/anteroom/gate/token"
	"github.com/anteroomhq/anteroom/session"
)

// JWKSPath is where, under the base path, the admission keys are published.
const JWKSPath = "/.well-known/jwks.json"

// keyringRefresh is how often an instance reads the stored keyring again
// (rotation by another instance, the next key published ahead).
const keyringRefresh = time.Minute

// AdmissionsOptions configure Admissions.
type AdmissionsOptions struct {
	// Store keeps the admission records and the keyring.
	Store session.AdmissionStore
	// TTL is the admission tokens' lifetime per gate; a gate without one
	// issues none. Each is rounded down to whole seconds, at least one
	// second and at most token.MaxAdmissionTTL.
	TTL map[string]time.Duration
	// TTLOf, when set, gives a gate's lifetime instead of TTL at each
	// issue (the Waitlist's GateConfig(gate).AdmissionTTL), so that a gate
	// added or changed at runtime issues tokens as its settings say; a
	// result below one second means none. TTL is then only validated.
	TTLOf func(gate string) time.Duration
	// Now tells the time. Default time.Now.
	Now    func() time.Time
	Logger *slog.Logger
}

// Admissions issues, publishes and redeems admission tokens: a JWT (EdDSA)
// that a session gets once it is let in at a gate with admission tokens,
// which an API server verifies offline with the published keys and redeems
// once (POST {base}/api/redeem).
type Admissions struct {
	store session.AdmissionStore
	ttl   map[string]time.Duration
	ttlOf func(gate string) time.Duration
	now   func() time.Time
	log   *slog.Logger

	mu   sync.Mutex // one reload at a time
	ring atomic.Pointer[ringState]
}

// ringState is the keyring as last read, with its JWKS encoded once.
type ringState struct {
	ring   token.AdmissionKeyring
	loaded time.Time
	jwks   []byte
	etag   string
}

// NewAdmissions returns Admissions over opts.Store and reads (creating or
// rotating) the keyring once. It returns an error when Store is nil, a TTL
// is out of range, or the keyring cannot be read.
func NewAdmissions(ctx context.Context, opts AdmissionsOptions) (*Admissions, error) {
	if opts.Store == nil {
		return nil, errors.New("gate: AdmissionsOptions.Store is required")
	}
	a := &Admissions{store: opts.Store, ttl: map[string]time.Duration{}, ttlOf: opts.TTLOf, now: opts.Now, log: opts.Logger}
	if a.now == nil {
		a.now = time.Now
	}
	if a.log == nil {
		a.log = slog.Default()
	}
	for g, d := range opts.TTL {
		d = d.Truncate(time.Second)
		if d < time.Second || d > token.MaxAdmissionTTL {
			return nil, fmt.Errorf("gate: admission token ttl of gate %q: %v, want 1s to %v", g, opts.TTL[g], token.MaxAdmissionTTL)
		}
		a.ttl[g] = d
	}
	if _, err := a.keyring(ctx); err != nil {
		return nil, err
	}
	return a, nil
}

// keyring returns the keyring, read again from the store (which rotates
// it) when it was read more than keyringRefresh ago or has no key signing
// now.
func (a *Admissions) keyring(ctx context.Context) (*ringState, error) {
	now := a.now()
	if st := a.ring.Load(); st != nil && now.Sub(st.loaded) < keyringRefresh && now.After(st.loaded.Add(-time.Second)) {
		if _, ok := st.ring.Signing(now); ok {
			return st, nil
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if st := a.ring.Load(); st != nil && now.Sub(st.loaded) < keyringRefresh && now.After(st.loaded.Add(-time.Second)) {
		if _, ok := st.ring.Signing(now); ok {
			return st, nil
		}
	}
	b, err := a.store.AdmissionKeyring(ctx, func(old []byte) ([]byte, bool, error) {
		return token.RotateAdmissionKeyring(old, now)
	})
	if err != nil {
		return nil, fmt.Errorf("gate: admission keyring: %w", err)
	}
	ring, err := token.ParseAdmissionKeyring(b)
	if err != nil {
		return nil, session.Errorf(session.CodeInternal, "gate: admission keyring: %w", err)
	}
	jwks, err := json.Marshal(ring.JWKS())
	if err != nil {
		return nil, session.Errorf(session.CodeInternal, "gate: jwks: %w", err)
	}
	sum := sha256.Sum256(jwks)
	st := &ringState{ring: ring, loaded: now, jwks: jwks, etag: `"` + base64.RawURLEncoding.EncodeToString(sum[:16]) + `"`}
	a.ring.Store(st)
	return st, nil
}

// Issue returns the admission token of the session view v: "" unless v's
// gate has admission tokens and v is active and claimed. The first call
// for a session stores its admission (jti, iat, exp); later calls sign the
// same claims again. A redeemed or expired admission yields "" (one
// admission per session: a session that wants another joins again).
//
// Errors: the store's (session.ErrUnavailable, storage errors), wrapped.
func (a *Admissions) Issue(ctx context.Context, v session.SessionView) (string, error) {
	ttl, ok := a.gateTTL(v.Gate)
	if !ok || v.Status != session.StatusActive || v.ClaimDeadline != nil || v.Position <= 0 {
		return "", nil
	}
	st, err := a.keyring(ctx)
	if err != nil {
		return "", err
	}
	now := a.now()
	iat := time.Unix(now.Unix(), 0)
	rec, err := a.store.IssueAdmission(ctx, session.Admission{ID: token.NewAdmissionID(), Gate: v.Gate, Session: v.Session,
		Position: v.Position, IssuedAt: iat, Expires: iat.Add(ttl)})
	if err != nil {
		return "", fmt.Errorf("gate: issue admission: %w", err)
	}
	if !rec.Redeemed.IsZero() || !now.Before(rec.Expires) {
		return "", nil
	}
	key, ok := st.ring.Signing(now)
	if !ok {
		return "", session.Errorf(session.CodeInternal, "gate: no admission key signs at %v", now)
	}
	return token.SignAdmission(key, token.AdmissionClaims{Gate: rec.Gate, Subject: rec.Session, ID: rec.ID,
		IssuedAt: rec.IssuedAt.Unix(), Expires: rec.Expires.Unix()})
}

// gateTTL is the lifetime of gate's admission tokens, and whether it issues
// any.
func (a *Admissions) gateTTL(gate string) (time.Duration, bool) {
	if a.ttlOf == nil {
		d, ok := a.ttl[gate]
		return d, ok
	}
	d := a.ttlOf(gate).Truncate(time.Second)
	return d, d >= time.Second && d <= token.MaxAdmissionTTL
}

// withAdmission sets v.Admission when the Server issues admission tokens.
// A failure leaves it unset and is logged: the session's own answer
// stands, and its next status asks again.
func (s *Server) withAdmission(ctx context.Context, v *session.SessionView) {
	if s.opts.Admissions == nil {
		return
	}
	tok, err := s.opts.Admissions.Issue(ctx, *v)
	if err != nil {
		s.log.Warn("anteroom: issuing an admission token failed", "gate", v.Gate, "err", err)
		return
	}
	v.Admission = tok
}

// jwks serves the published admission keys: the one signing, the next one
// (published an hour before it signs) and those whose tokens may still be
// alive, cacheable for token.JWKSMaxAge with an ETag.
func (s *Server) jwks(c echo.Context) error {
	st, err := s.opts.Admissions.keyring(c.Request().Context())
	if err != nil {
		return err
	}
	h := c.Response().Header()
	h.Set("Cache-Control", "public, max-age="+strconv.Itoa(int(token.JWKSMaxAge/time.Second)))
	h.Set("ETag", st.etag)
	h.Set("Access-Control-Allow-Origin", "*")
	if inm := c.Request().Header.Get("If-None-Match"); inm != "" && inm == st.etag {
		return c.NoContent(http.StatusNotModified)
	}
	return c.Blob(http.StatusOK, "application/jwk-set+json", st.jwks)
}

// redeemRequest is the body of POST {base}/api/redeem: the admission token
// or its jti, exactly one of them.
type redeemRequest struct {
	Token string `json:"token"`
	JTI   string `json:"jti"`
}

// redeemResponse answers a redeem.
type redeemResponse struct {
	JTI        string    `json:"jti"`
	Gate       string    `json:"gate"`
	Session    string    `json:"session"`
	IssuedAt   time.Time `json:"issuedAt"`
	ExpiresAt  time.Time `json:"expiresAt"`
	RedeemedAt time.Time `json:"redeemedAt"`
}

// redeem marks an admission's jti used, for a backend holding an API key:
// 200 the first time, 409 already_redeemed after, 404 admission_not_found
// for a jti never issued or expired, 400 invalid_admission for a token
// that does not verify.
func (s *Server) redeem(c echo.Context) error {
	r := c.Request()
	if !s.trusted(r) {
		return apiError(codeAPIKeyRequired, "redeem needs a valid API key (X-Anteroom-Key)")
	}
	body, err := s.readBody(r)
	if err != nil {
		return err
	}
	var req redeemRequest
	if err := decodeOne(body, &req, `JSON such as {"token":"<admission token>"} or {"jti":"..."}`); err != nil {
		return err
	}
	if (req.Token == "") == (req.JTI == "") {
		return apiError(session.CodeInvalidArgument, `want exactly one of "token" and "jti"`)
	}
	jti := req.JTI
	if req.Token != "" {
		st, err := s.opts.Admissions.keyring(r.Context())
		if err != nil {
			return err
		}
		claims, err := token.VerifyAdmission(st.ring, req.Token, "", s.opts.Admissions.now())
		switch {
		case errors.Is(err, token.ErrAdmissionExpired):
			return apiError(session.CodeAdmissionNotFound, "admission token expired")
		case err != nil:
			return apiError(session.CodeInvalidAdmission, "admission token does not verify")
		}
		jti = claims.ID
	}
	rec, err := s.opts.Admissions.store.RedeemAdmission(r.Context(), jti, s.opts.Admissions.now())
	switch session.CodeOf(err) {
	case "":
	case session.CodeAdmissionNotFound:
		return apiError(session.CodeAdmissionNotFound, "no such admission: never issued, or expired")
	case session.CodeAlreadyRedeemed:
		return apiError(session.CodeAlreadyRedeemed, "admission already redeemed at "+rec.Redeemed.UTC().Format(time.RFC3339))
	default:
		return err
	}
	return writeJSON(c, http.StatusOK, redeemResponse{JTI: rec.ID, Gate: rec.Gate, Session: rec.Session,
		IssuedAt: rec.IssuedAt.UTC(), ExpiresAt: rec.Expires.UTC(), RedeemedAt: rec.Redeemed.UTC()})
}

// admissionRoutes adds the JWKS and the redeem route when the Server
// issues admission tokens.
func (s *Server) admissionRoutes(e *echo.Echo) {
	if s.opts.Admissions == nil {
		return
	}
	b := s.opts.BasePath
	e.Match([]string{http.MethodGet, http.MethodHead}, b+JWKSPath, s.jwks)
	e.POST(b+"/api/redeem", s.redeem, noStore)
}
