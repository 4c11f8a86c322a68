package guard_test

import (
	"context"
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/gate"
	"github.com/anteroomhq/anteroom/gate/gatetest"
	"github.com/anteroomhq/anteroom/gate/guard"
	"github.com/anteroomhq/anteroom/gate/token"
	"github.com/anteroomhq/anteroom/session"
)

const redeemKey = "checkout-api-key-0123456789"

// admEnv is a sidecar issuing admission tokens at gates "sale" and
// "other", and a checkout API behind guard's admission middleware.
type admEnv struct {
	sc       *gatetest.Sidecar
	api      *httptest.Server
	verifier *guard.AdmissionVerifier
	// down makes the sidecar answer 503 to everything.
	down atomic.Bool
	// redeemStatus, when not 0, is the status every redeem is answered
	// with (what a limiter or proxy in front of the sidecar may send).
	redeemStatus atomic.Int32
	// jwksHits counts the sidecar's JWKS requests.
	jwksHits atomic.Int64
	// served counts requests the checkout handler got.
	served atomic.Int64
	last   atomic.Pointer[guard.Admission]
}

func newAdmEnv(t *testing.T, adjust func(*guard.AdmissionOptions)) *admEnv {
	t.Helper()
	e := &admEnv{}
	e.sc = gatetest.StartSidecar(t, gatetest.Options{
		Gates:        []session.GateConfig{gatetest.Gate("sale", 100), gatetest.Gate("other", 100)},
		AdmissionTTL: map[string]time.Duration{"sale": 5 * time.Minute, "other": 5 * time.Minute},
		Gate:         func(o *gate.Options) { o.APIKeys = []string{redeemKey} },
		Wrap: func(sidecar http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if strings.HasSuffix(r.URL.Path, "/jwks.json") {
					e.jwksHits.Add(1)
				}
				if e.down.Load() {
					http.Error(w, "down", http.StatusServiceUnavailable)
					return
				}
				if st := e.redeemStatus.Load(); st != 0 && strings.HasSuffix(r.URL.Path, "/api/redeem") {
					http.Error(w, http.StatusText(int(st)), int(st))
					return
				}
				sidecar.ServeHTTP(w, r)
			})
		},
	})
	opts := guard.AdmissionOptions{
		Gate:      "sale",
		JWKSURL:   e.sc.URL + basePath + gate.JWKSPath,
		RedeemURL: e.sc.URL + basePath + "/api/redeem",
		APIKey:    redeemKey,
		Now:       e.sc.Clock.Now,
	}
	if adjust != nil {
		adjust(&opts)
	}
	var err error
	e.verifier, err = guard.NewAdmissionVerifier(opts)
	require.NoError(t, err)
	e.api = httptest.NewServer(e.verifier.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.served.Add(1)
		a, ok := guard.AdmissionFrom(r.Context())
		if !ok {
			http.Error(w, "no admission in context", http.StatusInternalServerError)
			return
		}
		e.last.Store(&a)
		_, _ = io.WriteString(w, "checked out "+a.Claims.Subject)
	})))
	t.Cleanup(e.api.Close)
	return e
}

// admission joins gate and returns the session's admission token.
func (e *admEnv) admission(t *testing.T, gateName string) string {
	t.Helper()
	resp, err := http.Post(e.sc.URL+basePath+"/api/join?gate="+gateName, "application/json", nil)
	require.NoError(t, err)
	defer resp.Body.Close()
	var v session.SessionView
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&v))
	require.NotEmpty(t, v.Admission)
	return v.Admission
}

// checkout calls the API with tok in the given header; it returns the
// status and the error code of a denial.
func (e *admEnv) checkout(t *testing.T, header, tok string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, e.api.URL+"/checkout", strings.NewReader("{}"))
	require.NoError(t, err)
	if tok != "" {
		req.Header.Set(header, tok)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var eb struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	_ = json.Unmarshal(body, &eb)
	return resp.StatusCode, eb.Error.Code
}

func b64(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

// One checkout per admission: the first call with the token goes through
// and is redeemed, the replay is refused (403 already_redeemed), by header
// or by Bearer.
func TestAdmissionMiddlewareRedeemsOnce(t *testing.T) {
	e := newAdmEnv(t, nil)
	tok := e.admission(t, "sale")
	status, _ := e.checkout(t, guard.AdmissionHeader, tok)
	require.Equal(t, http.StatusOK, status)
	a := e.last.Load()
	require.NotNil(t, a)
	assert.True(t, a.Redeemed)
	assert.False(t, a.FailedOpen)
	assert.Equal(t, "sale", a.Claims.Gate)

	for _, h := range []string{guard.AdmissionHeader, "Authorization"} {
		v := tok
		if h == "Authorization" {
			v = "Bearer " + tok
		}
		status, code := e.checkout(t, h, v)
		assert.Equal(t, http.StatusForbidden, status, h)
		assert.Equal(t, "already_redeemed", code, h)
	}
	other := e.admission(t, "sale")
	status, _ = e.checkout(t, "Authorization", "Bearer "+other)
	assert.Equal(t, http.StatusOK, status, "Bearer works too")
	assert.EqualValues(t, 2, e.served.Load())
}

// Hostile tokens never reach the handler nor use up an admission: a
// tampered payload, an unknown kid, alg none, HS256 signed with the public
// key as its secret (algorithm confusion), a huge token, a token of
// another gate, garbage, an expired token.
func TestAdmissionMiddlewareRefusesHostileTokens(t *testing.T) {
	e := newAdmEnv(t, nil)
	good := e.admission(t, "sale")
	parts := strings.Split(good, ".")
	var claims map[string]any
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(payload, &claims))
	var header map[string]any
	hj, err := base64.RawURLEncoding.DecodeString(parts[0])
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(hj, &header))
	kid := header["kid"].(string)

	// The public key, as the attacker has it from the JWKS.
	resp, err := http.Get(e.sc.URL + basePath + gate.JWKSPath)
	require.NoError(t, err)
	jwks, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	keys, err := token.ParseJWKS(jwks)
	require.NoError(t, err)
	pub := keys[kid]

	tamperedClaims := map[string]any{}
	for k, v := range claims {
		tamperedClaims[k] = v
	}
	tamperedClaims["sub"] = "someone-else"
	tc, _ := json.Marshal(tamperedClaims)
	hs := b64(`{"alg":"HS256","typ":"JWT","kid":"`+kid+`"}`) + "." + parts[1]
	mac := hmac.New(sha256.New, pub)
	mac.Write([]byte(hs))
	_, foreignPriv, err := ed25519.GenerateKey(nil)
	require.NoError(t, err)
	wrongKid := b64(`{"alg":"EdDSA","typ":"JWT","kid":"not-a-key"}`) + "." + parts[1]

	hostile := map[string]string{
		"tampered payload":          parts[0] + "." + b64(string(tc)) + "." + parts[2],
		"unknown kid":               wrongKid + "." + base64.RawURLEncoding.EncodeToString(ed25519.Sign(foreignPriv, []byte(wrongKid))),
		"right kid, other key":      parts[0] + "." + parts[1] + "." + base64.RawURLEncoding.EncodeToString(ed25519.Sign(foreignPriv, []byte(parts[0]+"."+parts[1]))),
		"alg none":                  b64(`{"alg":"none","typ":"JWT"}`) + "." + parts[1] + ".",
		"alg none with kid":         b64(`{"alg":"none","kid":"`+kid+`"}`) + "." + parts[1] + "." + parts[2],
		"HS256 with the public key": hs + "." + base64.RawURLEncoding.EncodeToString(mac.Sum(nil)),
		"huge token":                parts[0] + "." + strings.Repeat("A", 1<<20) + "." + parts[2],
		"other gate":                e.admission(t, "other"),
		"garbage":                   "not.a.jwt",
		"two parts":                 parts[0] + "." + parts[1],
		"four parts":                good + ".x",
		"padded base64":             parts[0] + "=." + parts[1] + "." + parts[2],
		"signature truncated":       parts[0] + "." + parts[1] + "." + parts[2][:40],
	}
	for name, tok := range hostile {
		t.Run(name, func(t *testing.T) {
			status, code := e.checkout(t, guard.AdmissionHeader, tok)
			assert.Equal(t, http.StatusForbidden, status)
			assert.Equal(t, "invalid_admission", code)
		})
	}
	status, code := e.checkout(t, guard.AdmissionHeader, "")
	assert.Equal(t, http.StatusForbidden, status, "no token")
	assert.Equal(t, "invalid_admission", code)
	assert.Zero(t, e.served.Load(), "no hostile token reached the handler")

	// The genuine token was not used up by its forgeries.
	status, _ = e.checkout(t, guard.AdmissionHeader, good)
	assert.Equal(t, http.StatusOK, status)

	// Expired: past exp and the leeway.
	late := e.admission(t, "sale")
	e.sc.Clock.Advance(5*time.Minute + token.AdmissionLeeway + time.Second)
	status, code = e.checkout(t, guard.AdmissionHeader, late)
	assert.Equal(t, http.StatusForbidden, status)
	assert.Equal(t, "invalid_admission", code)
}

// A flood of tokens naming unknown kids refetches the JWKS at most once
// per ten seconds, not once per token.
func TestAdmissionUnknownKidsRefetchBounded(t *testing.T) {
	e := newAdmEnv(t, nil)
	_, priv, err := ed25519.GenerateKey(nil)
	require.NoError(t, err)
	for i := range 50 {
		h := b64(`{"alg":"EdDSA","kid":"forged-`+string(rune('a'+i%26))+`"}`) + "." + b64(`{"gate":"sale","sub":"x","jti":"y","iat":1,"exp":9999999999}`)
		status, _ := e.checkout(t, guard.AdmissionHeader, h+"."+base64.RawURLEncoding.EncodeToString(ed25519.Sign(priv, []byte(h))))
		assert.Equal(t, http.StatusForbidden, status)
	}
	assert.LessOrEqual(t, e.jwksHits.Load(), int64(2), "the first fetch and at most one refetch")
	assert.GreaterOrEqual(t, e.jwksHits.Load(), int64(1))
}

// Fail closed: with the sidecar unreachable, a genuine token is refused
// with 503 and Retry-After (it cannot be redeemed), and without keys ever
// fetched nothing verifies. With FailOpenAfter, the refusal lasts until
// the sidecar has been unreachable that long without a break; then a token
// that verifies is let through unredeemed (FailedOpen), a forged one still
// is not, and once the sidecar answers again, redeems resume.
func TestAdmissionFailsClosed(t *testing.T) {
	t.Run("closed", func(t *testing.T) {
		e := newAdmEnv(t, nil)
		warm := e.admission(t, "sale")
		status, _ := e.checkout(t, guard.AdmissionHeader, warm) // keys fetched
		require.Equal(t, http.StatusOK, status)
		tok := e.admission(t, "sale")
		e.down.Store(true)
		for range 3 {
			status, code := e.checkout(t, guard.AdmissionHeader, tok)
			assert.Equal(t, http.StatusServiceUnavailable, status)
			assert.Equal(t, "unavailable", code)
			e.sc.Clock.Advance(time.Minute)
		}
		assert.EqualValues(t, 1, e.served.Load())
		e.down.Store(false)
		status, _ = e.checkout(t, guard.AdmissionHeader, tok)
		assert.Equal(t, http.StatusOK, status, "back: the token is redeemed now")
	})
	t.Run("no keys ever fetched", func(t *testing.T) {
		e := newAdmEnv(t, func(o *guard.AdmissionOptions) { o.FailOpenAfter = time.Nanosecond })
		tok := e.admission(t, "sale")
		e.down.Store(true)
		status, code := e.checkout(t, guard.AdmissionHeader, tok)
		assert.Equal(t, http.StatusServiceUnavailable, status)
		assert.Equal(t, "unavailable", code)
		assert.Zero(t, e.served.Load(), "fail open never skips the signature")
	})
	t.Run("connection refused", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		dead := "http://" + ln.Addr().String() + "/anteroom/api/redeem"
		require.NoError(t, ln.Close())
		e := newAdmEnv(t, func(o *guard.AdmissionOptions) { o.RedeemURL = dead })
		status, code := e.checkout(t, guard.AdmissionHeader, e.admission(t, "sale"))
		assert.Equal(t, http.StatusServiceUnavailable, status)
		assert.Equal(t, "unavailable", code)
	})
	t.Run("fail open after", func(t *testing.T) {
		e := newAdmEnv(t, func(o *guard.AdmissionOptions) { o.FailOpenAfter = time.Minute })
		warm := e.admission(t, "sale")
		status, _ := e.checkout(t, guard.AdmissionHeader, warm)
		require.Equal(t, http.StatusOK, status)
		tok := e.admission(t, "sale")
		e.down.Store(true)
		status, _ = e.checkout(t, guard.AdmissionHeader, tok)
		assert.Equal(t, http.StatusServiceUnavailable, status, "a short outage is ridden out closed")
		for range 11 { // failures 5 s apart: one outage
			e.sc.Clock.Advance(5 * time.Second)
			status, _ = e.checkout(t, guard.AdmissionHeader, tok)
			assert.Equal(t, http.StatusServiceUnavailable, status, "not yet")
		}
		e.sc.Clock.Advance(4 * time.Second)
		status, _ = e.checkout(t, guard.AdmissionHeader, tok)
		assert.Equal(t, http.StatusServiceUnavailable, status, "59 s: not yet")
		e.sc.Clock.Advance(time.Second)
		status, _ = e.checkout(t, guard.AdmissionHeader, tok)
		require.Equal(t, http.StatusOK, status, "unreachable for FailOpenAfter: open")
		a := e.last.Load()
		assert.True(t, a.FailedOpen)
		assert.False(t, a.Redeemed)
		parts := strings.Split(tok, ".")
		status, code := e.checkout(t, guard.AdmissionHeader, parts[0]+"."+b64(`{"gate":"sale","sub":"x","jti":"y","iat":1,"exp":9999999999}`)+"."+parts[2])
		assert.Equal(t, http.StatusForbidden, status, "forged tokens are refused while open")
		assert.Equal(t, "invalid_admission", code)

		// The sidecar answers again: closed, and the streak starts over.
		e.down.Store(false)
		status, _ = e.checkout(t, guard.AdmissionHeader, tok)
		assert.Equal(t, http.StatusOK, status, "redeemed now")
		assert.True(t, e.last.Load().Redeemed)
		fresh := e.admission(t, "sale")
		e.down.Store(true)
		status, _ = e.checkout(t, guard.AdmissionHeader, fresh)
		assert.Equal(t, http.StatusServiceUnavailable, status, "a new outage starts closed")
	})
}

// Fixed public keys instead of a JWKS: a token verifies offline, with no
// call to the sidecar; a verifier with no redeem URL only verifies.
func TestAdmissionVerifierWithPublicKey(t *testing.T) {
	e := newAdmEnv(t, nil)
	tok := e.admission(t, "sale")
	resp, err := http.Get(e.sc.URL + basePath + gate.JWKSPath)
	require.NoError(t, err)
	jwks, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	keys, err := token.ParseJWKS(jwks)
	require.NoError(t, err)
	v, err := guard.NewAdmissionVerifier(guard.AdmissionOptions{Gate: "sale", PublicKeys: keys, Now: e.sc.Clock.Now})
	require.NoError(t, err)
	e.down.Store(true)
	a, err := v.Redeem(context.Background(), tok)
	require.NoError(t, err)
	assert.False(t, a.Redeemed)
	_, err = v.Verify(context.Background(), tok+"x")
	assert.ErrorIs(t, err, token.ErrAdmissionSignature)
	other, err := guard.NewAdmissionVerifier(guard.AdmissionOptions{Gate: "other", PublicKeys: keys, Now: e.sc.Clock.Now})
	require.NoError(t, err)
	_, err = other.Verify(context.Background(), tok)
	assert.ErrorIs(t, err, token.ErrAdmissionGate)

	for name, opts := range map[string]guard.AdmissionOptions{
		"no gate":            {PublicKeys: keys},
		"no keys":            {Gate: "sale"},
		"both key sources":   {Gate: "sale", PublicKeys: keys, JWKSURL: "http://x/jwks.json"},
		"redeem without key": {Gate: "sale", PublicKeys: keys, RedeemURL: "http://x/api/redeem"},
		"relative URL":       {Gate: "sale", JWKSURL: "/jwks.json"},
		"negative fail open": {Gate: "sale", PublicKeys: keys, FailOpenAfter: -1},
		"short key":          {Gate: "sale", PublicKeys: map[string]ed25519.PublicKey{"k": {1, 2}}},
	} {
		_, err := guard.NewAdmissionVerifier(opts)
		assert.ErrorIs(t, err, session.ErrInvalidArgument, name)
	}
}
