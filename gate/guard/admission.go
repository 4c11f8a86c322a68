package guard

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/anteroomhq/anteroom/gate/token"
	"github.com/anteroomhq/anteroom/gate/wire"
	"github.com/anteroomhq/anteroom/session"
)

// Admission tokens on the API server's side: AdmissionVerifier checks the
// JWT a session got from the sidecar (SessionView.admission) offline, with
// the standard library only, and redeems its jti once through the sidecar.
//
// Fail closed. When the sidecar cannot be reached, a request is denied
// (503, Retry-After): with no keys ever fetched nothing verifies; and a
// token that verifies is not let through unredeemed, since a redeem that
// cannot happen is a replay that cannot be ruled out. Fetched keys are kept
// while the sidecar is away: a token keeps verifying against them.
//
// FailOpenAfter is the one exception, and only for the redeem: once every
// redeem has failed to reach the sidecar for that long without a break (no
// answer in between, and no two failures more than FailStreakGap apart:
// after a quiet spell nothing says the sidecar was away meanwhile), a
// token that VERIFIES (signature, alg, gate, expiry: never relaxed) is let
// through without being redeemed (Admission.FailedOpen). The reasoning of a
// flash-sale operator: a short outage (a deploy, a restart) is ridden out
// closed, because a token lives minutes and the client retries; a long one
// would stop every checkout, and an operator may prefer selling to holders
// of genuine admissions at the risk of a second use of one. While the
// sidecar is down it mints no admissions, so what fails open is bounded by
// the tokens issued before the outage, each for the rest of its lifetime.

// FailStreakGap is the longest time between two failed redeems that still
// counts as one outage for FailOpenAfter: a failure after a longer quiet
// starts the streak again. A redeem whose caller went away (its context
// canceled: the visitor hung up) says nothing of the sidecar and never
// fails open; one cut by the caller's deadline counts as unanswered.
const FailStreakGap = 10 * time.Second

// AdmissionHeader is where Middleware reads the admission token first
// (then Authorization: Bearer).
const AdmissionHeader = "X-Anteroom-Admission"

// Defaults of AdmissionOptions.
const (
	// DefaultJWKSRefresh is how long fetched keys are used when the JWKS
	// answer carries no max-age.
	DefaultJWKSRefresh = 5 * time.Minute
	// unknownKidRefetch bounds refetches of the JWKS caused by tokens with
	// an unknown kid, so that a flood of forged kids cannot flood the
	// sidecar.
	unknownKidRefetch = 10 * time.Second
	// maxJWKSBytes bounds a fetched JWKS.
	maxJWKSBytes = 64 << 10
)

// AdmissionOptions configure an AdmissionVerifier.
type AdmissionOptions struct {
	// Gate is the gate whose tokens are accepted; tokens of other gates
	// are refused. Required.
	Gate string
	// JWKSURL is the sidecar's {base}/.well-known/jwks.json, fetched when
	// first needed, again when its max-age has passed (at least 30s, at
	// most an hour), and at most every 10s when a token names an unknown
	// key (the next one after a rotation). Either JWKSURL or PublicKeys.
	JWKSURL string
	// PublicKeys are fixed keys by kid, instead of fetching a JWKS.
	PublicKeys map[string]ed25519.PublicKey
	// RedeemURL is the sidecar's {base}/api/redeem, with APIKey one of its
	// api_keys. Set, Redeem and Middleware redeem each token once; empty,
	// they only verify (tokens can then be replayed until they expire).
	RedeemURL string
	APIKey    string
	// FailOpenAfter: see the package's notes on admission tokens. 0 (the
	// default): fail closed, always.
	FailOpenAfter time.Duration
	// Client makes the calls. Default: a client that follows no redirect.
	Client *http.Client
	// Timeout bounds each call to the sidecar. Default DefaultRemoteTimeout.
	Timeout time.Duration
	// Now tells the time. Default time.Now.
	Now func() time.Time
}

// Admission is a verified admission token.
type Admission struct {
	Claims token.AdmissionClaims
	// Redeemed is set when this call redeemed the token's jti.
	Redeemed bool
	// FailedOpen is set when the token verified but could not be redeemed,
	// the sidecar being unreachable for longer than FailOpenAfter.
	FailedOpen bool
}

// AdmissionVerifier verifies and redeems admission tokens. Safe for
// concurrent use.
type AdmissionVerifier struct {
	opts   AdmissionOptions
	static token.PublicKeys

	mu        sync.Mutex // one fetch at a time
	keys      atomic.Pointer[fetchedKeys]
	lastForce atomic.Int64 // unix nanos of the last refetch for an unknown kid
	downSince atomic.Int64 // unix nanos of the first failed redeem of the streak; 0 when up
	lastFail  atomic.Int64 // unix nanos of the streak's last failed redeem
}

type fetchedKeys struct {
	keys    token.PublicKeys
	expires time.Time
}

// NewAdmissionVerifier returns a verifier with opts. It returns a
// session.ErrInvalidArgument error when Gate is not a gate name, when not
// exactly one of JWKSURL and PublicKeys is given, when a URL is not
// absolute http(s), when RedeemURL is set without APIKey, or when a
// duration is negative.
func NewAdmissionVerifier(opts AdmissionOptions) (*AdmissionVerifier, error) {
	bad := func(format string, args ...any) error {
		return session.Errorf(session.CodeInvalidArgument, "guard: NewAdmissionVerifier: "+format, args...)
	}
	switch {
	case !session.ValidGateName(opts.Gate):
		return nil, bad("invalid gate name %q", opts.Gate)
	case (opts.JWKSURL == "") == (len(opts.PublicKeys) == 0):
		return nil, bad("want exactly one of JWKSURL and PublicKeys")
	case opts.RedeemURL != "" && opts.APIKey == "":
		return nil, bad("RedeemURL needs APIKey")
	case opts.FailOpenAfter < 0 || opts.Timeout < 0:
		return nil, bad("negative FailOpenAfter or Timeout")
	}
	for _, u := range []string{opts.JWKSURL, opts.RedeemURL} {
		if u == "" {
			continue
		}
		p, err := url.Parse(u)
		if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" || p.User != nil {
			return nil, bad("URL %q: want an absolute http(s) URL", u)
		}
	}
	v := &AdmissionVerifier{opts: opts}
	if len(opts.PublicKeys) > 0 {
		v.static = token.PublicKeys{}
		for kid, k := range opts.PublicKeys {
			if len(k) != ed25519.PublicKeySize {
				return nil, bad("public key %q: want %d bytes", kid, ed25519.PublicKeySize)
			}
			v.static[kid] = k
		}
	}
	if v.opts.Timeout == 0 {
		v.opts.Timeout = DefaultRemoteTimeout
	}
	if v.opts.Now == nil {
		v.opts.Now = time.Now
	}
	if v.opts.Client == nil {
		v.opts.Client = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	return v, nil
}

// Verify checks tok offline: signature (Ed25519, alg EdDSA only), key id,
// expiry with token.AdmissionLeeway, and the gate. Errors: those of
// token.VerifyAdmission, and session.ErrUnavailable when no key could be
// fetched.
func (v *AdmissionVerifier) Verify(ctx context.Context, tok string) (token.AdmissionClaims, error) {
	now := v.opts.Now()
	if v.static != nil {
		return token.VerifyAdmission(v.static, tok, v.opts.Gate, now)
	}
	keys, err := v.fetched(ctx, false)
	if err != nil {
		return token.AdmissionClaims{}, err
	}
	c, err := token.VerifyAdmission(keys, tok, v.opts.Gate, now)
	if !errors.Is(err, token.ErrAdmissionKey) {
		return c, err
	}
	// An unknown kid: a key published since the last fetch, or a forgery.
	// Fetch again, at most every unknownKidRefetch.
	last := v.lastForce.Load()
	if now.UnixNano()-last < int64(unknownKidRefetch) || !v.lastForce.CompareAndSwap(last, now.UnixNano()) {
		return c, err
	}
	if keys, ferr := v.fetched(ctx, true); ferr == nil {
		return token.VerifyAdmission(keys, tok, v.opts.Gate, now)
	}
	return c, err
}

// fetched returns the JWKS keys, fetching them when there are none, they
// are past their max-age, or force is set. A failed fetch keeps the keys
// there are; with none, it returns a session.ErrUnavailable error.
func (v *AdmissionVerifier) fetched(ctx context.Context, force bool) (token.PublicKeys, error) {
	now := v.opts.Now()
	if k := v.keys.Load(); k != nil && !force && now.Before(k.expires) {
		return k.keys, nil
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if k := v.keys.Load(); k != nil && !force && now.Before(k.expires) {
		return k.keys, nil
	}
	keys, maxAge, err := v.fetch(ctx)
	if err != nil {
		if k := v.keys.Load(); k != nil {
			return k.keys, nil // the sidecar is away: keep what we have
		}
		return nil, err
	}
	v.keys.Store(&fetchedKeys{keys: keys, expires: now.Add(maxAge)})
	return keys, nil
}

func (v *AdmissionVerifier) fetch(ctx context.Context) (token.PublicKeys, time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, v.opts.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, v.opts.JWKSURL, nil)
	if err != nil {
		return nil, 0, session.Errorf(session.CodeUnavailable, "guard: jwks request: %w", err)
	}
	req.Header.Set("User-Agent", "anteroom-guard")
	resp, err := v.opts.Client.Do(req)
	if err != nil {
		return nil, 0, session.Errorf(session.CodeUnavailable, "guard: fetching the jwks: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxJWKSBytes+1))
	if err != nil || resp.StatusCode != http.StatusOK || len(body) > maxJWKSBytes {
		return nil, 0, session.Errorf(session.CodeUnavailable, "guard: fetching the jwks: %s", resp.Status)
	}
	keys, err := token.ParseJWKS(body)
	if err != nil || len(keys) == 0 {
		return nil, 0, session.Errorf(session.CodeUnavailable, "guard: the jwks holds no usable key: %v", err)
	}
	return keys, maxAgeOf(resp.Header.Get("Cache-Control")), nil
}

// maxAgeOf reads max-age from a Cache-Control value, within [30s, 1h];
// DefaultJWKSRefresh without one.
func maxAgeOf(cc string) time.Duration {
	for _, d := range strings.Split(cc, ",") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(strings.ToLower(d)), "max-age="); ok {
			if n, err := strconv.Atoi(v); err == nil {
				return min(max(time.Duration(n)*time.Second, 30*time.Second), time.Hour)
			}
		}
	}
	return DefaultJWKSRefresh
}

// Redeem verifies tok and, with a RedeemURL, redeems its jti once.
// Errors: those of Verify; session.ErrAlreadyRedeemed (a replay);
// session.ErrAdmissionNotFound (the sidecar knows no such admission, or it
// expired); session.ErrUnavailable when the sidecar cannot be reached (and
// FailOpenAfter has not passed), refuses the API key, or a limiter in
// front of it answers 429.
func (v *AdmissionVerifier) Redeem(ctx context.Context, tok string) (Admission, error) {
	c, err := v.Verify(ctx, tok)
	if err != nil {
		return Admission{}, err
	}
	a := Admission{Claims: c}
	if v.opts.RedeemURL == "" {
		return a, nil
	}
	err = v.redeem(ctx, c.ID)
	now := v.opts.Now().UnixNano()
	if errors.Is(err, errLimited) {
		// Neither an answer of the sidecar's nor its absence: the streak is
		// left as it is (a limiter tripped once must not restart a real
		// outage, nor one tripped on purpose make an outage of nothing).
		return Admission{}, session.Errorf(session.CodeUnavailable, "guard: redeeming the admission: %w", err)
	}
	if !errors.Is(err, errUnreachable) {
		v.downSince.Store(0)
		if err != nil {
			return Admission{}, err
		}
		a.Redeemed = true
		return a, nil
	}
	if errors.Is(ctx.Err(), context.Canceled) { // the caller went away: nothing learnt of the sidecar
		return Admission{}, session.Errorf(session.CodeUnavailable, "guard: the request ended before the redeem was answered: %w", ctx.Err())
	}
	// A deadline of the caller's that passed counts: the sidecar did not
	// answer within the time the host gives a request.
	if prev := v.lastFail.Swap(now); prev == 0 || now-prev > int64(FailStreakGap) {
		v.downSince.Store(now) // the first failure after an answer or a quiet spell
	} else {
		v.downSince.CompareAndSwap(0, now)
	}
	if since := v.downSince.Load(); v.opts.FailOpenAfter > 0 && since != 0 && now-since >= int64(v.opts.FailOpenAfter) {
		a.FailedOpen = true
		return a, nil
	}
	return Admission{}, session.Errorf(session.CodeUnavailable, "guard: redeeming the admission: %w", err)
}

// errUnreachable marks a redeem that got no answer of the sidecar's: a
// network error, a timeout, a 5xx.
var errUnreachable = errors.New("sidecar unreachable")

// errLimited marks a redeem answered 429. The sidecar never sends one for a
// redeem: it comes from a limiter in front of it, which a client replaying
// a token can set off on purpose while the sidecar is up. It is refused
// (503, fail closed) and leaves FailOpenAfter's streak as it is, neither an
// outage nor an answer.
var errLimited = errors.New("sidecar's limiter refused the redeem")

func (v *AdmissionVerifier) redeem(ctx context.Context, jti string) error {
	ctx, cancel := context.WithTimeout(ctx, v.opts.Timeout)
	defer cancel()
	body, _ := json.Marshal(map[string]string{"jti": jti})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, v.opts.RedeemURL, bytes.NewReader(body))
	if err != nil {
		return session.Errorf(session.CodeUnavailable, "guard: redeem request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "anteroom-guard")
	req.Header.Set(wire.APIKeyHeader, v.opts.APIKey)
	resp, err := v.opts.Client.Do(req)
	if err != nil {
		return fmt.Errorf("%w: %w", errUnreachable, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
	var answer wire.ErrorBody
	_ = json.Unmarshal(b, &answer)
	switch code := answer.Error.Code; {
	case resp.StatusCode == http.StatusOK:
		return nil
	case resp.StatusCode == http.StatusConflict && code == session.CodeAlreadyRedeemed:
		return session.Errorf(session.CodeAlreadyRedeemed, "guard: admission %q already redeemed", jti)
	case resp.StatusCode == http.StatusNotFound && code == session.CodeAdmissionNotFound:
		return session.Errorf(session.CodeAdmissionNotFound, "guard: the sidecar knows no admission %q", jti)
	case resp.StatusCode >= 500:
		return fmt.Errorf("%w: %s", errUnreachable, resp.Status)
	case resp.StatusCode == http.StatusTooManyRequests:
		return fmt.Errorf("%w: %s", errLimited, resp.Status)
	default: // 401 (a wrong API key), 404 without the code (a wrong URL): a misconfiguration, never open
		return session.Errorf(session.CodeUnavailable, "guard: the sidecar answered the redeem %s %s", resp.Status, code)
	}
}

type admissionKey struct{}

// AdmissionFrom returns the admission Middleware let through with r's
// context.
func AdmissionFrom(ctx context.Context) (Admission, bool) {
	a, ok := ctx.Value(admissionKey{}).(Admission)
	return a, ok
}

// AdmissionToken returns the admission token of r: the AdmissionHeader,
// else an Authorization: Bearer value shaped like a JWT (two dots).
func AdmissionToken(r *http.Request) string {
	if t := r.Header.Get(AdmissionHeader); t != "" {
		return t
	}
	if t := wire.BearerToken(r.Header); strings.Count(t, ".") == 2 {
		return t
	}
	return ""
}

// Middleware lets a request through when its admission token (see
// AdmissionToken) verifies and, with a RedeemURL, is redeemed now; the
// handler finds it with AdmissionFrom. Others are answered without calling
// next: 403 with the error code invalid_admission (no token, a token that
// does not verify, expired, of another gate), already_redeemed (a replay)
// or admission_not_found; 503 unavailable with Retry-After when the sidecar
// cannot be reached (fail closed; see FailOpenAfter).
func (v *AdmissionVerifier) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok := AdmissionToken(r)
		if tok == "" {
			denyAdmission(w, r, session.CodeInvalidAdmission, "an admission token is required")
			return
		}
		a, err := v.Redeem(r.Context(), tok)
		switch code := session.CodeOf(err); {
		case err == nil:
			next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), admissionKey{}, a)))
		case code == session.CodeUnavailable:
			w.Header().Set("Retry-After", unavailableRetryAfter)
			wire.WriteError(w, r, session.CodeUnavailable, "the admission cannot be checked now: retry")
		case code == session.CodeAlreadyRedeemed || code == session.CodeAdmissionNotFound:
			denyAdmission(w, r, code, err.Error())
		default:
			denyAdmission(w, r, session.CodeInvalidAdmission, "the admission token does not verify")
		}
	})
}

// denyAdmission answers 403 with the contract's error body and code.
func denyAdmission(w http.ResponseWriter, r *http.Request, code session.Code, message string) {
	b, _ := json.Marshal(wire.NewErrorBody(code, message))
	b = append(b, '\n')
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusForbidden)
	if r.Method != http.MethodHead {
		_, _ = w.Write(b)
	}
}
