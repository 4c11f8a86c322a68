package gate_test

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/gate"
	"github.com/anteroomhq/anteroom/gate/gatetest"
	"github.com/anteroomhq/anteroom/gate/token"
	"github.com/anteroomhq/anteroom/session"
)

const admissionKey = "checkout-api-key-0123456789"

// admissionSidecar starts a sidecar whose gate "sale" (limit 1) issues
// admission tokens valid 5 minutes, and whose "plain" gate does not.
func admissionSidecar(t *testing.T) *gatetest.Sidecar {
	t.Helper()
	sale := gatetest.Gate("sale", 1)
	sale.ClaimTimeout = time.Minute
	return gatetest.StartSidecar(t, gatetest.Options{
		Gates:        []session.GateConfig{sale, gatetest.Gate("plain", 10)},
		AdmissionTTL: map[string]time.Duration{"sale": 5 * time.Minute},
		Gate:         func(o *gate.Options) { o.APIKeys = []string{admissionKey} },
	})
}

type answer struct {
	status int
	header http.Header
	body   []byte
}

func call(t *testing.T, method, url, body string, headers ...string) answer {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	require.NoError(t, err)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return answer{status: resp.StatusCode, header: resp.Header, body: b}
}

// viewOf joins (or asks the status of) a session with bearer tok at gate.
func viewOf(t *testing.T, sc *gatetest.Sidecar, method, path, gateName, tok string) (view struct {
	session.SessionView
	Token string `json:"token"`
}) {
	t.Helper()
	headers := []string{}
	if tok != "" {
		headers = append(headers, "Authorization", "Bearer "+tok)
	}
	a := call(t, method, sc.URL+gatetest.BasePath+path+"?gate="+gateName, "", headers...)
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	require.NoError(t, json.Unmarshal(a.body, &view))
	return view
}

// handJWT is an admission token taken apart by hand, without the project's
// code: what an API server with any JWT library sees.
type handJWT struct {
	header        map[string]any
	claims        map[string]any
	signingInput  []byte
	signature     []byte
	headerB64     string
	payloadB64    string
	signatureB64  string
	rawHeaderJSON []byte
}

func parseByHand(t *testing.T, jwt string) handJWT {
	t.Helper()
	parts := strings.Split(jwt, ".")
	require.Len(t, parts, 3, "a JWS compact serialization has three parts")
	var j handJWT
	j.headerB64, j.payloadB64, j.signatureB64 = parts[0], parts[1], parts[2]
	var err error
	j.rawHeaderJSON, err = base64.RawURLEncoding.DecodeString(parts[0])
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(j.rawHeaderJSON, &j.header))
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(payload, &j.claims))
	j.signature, err = base64.RawURLEncoding.DecodeString(parts[2])
	require.NoError(t, err)
	j.signingInput = []byte(parts[0] + "." + parts[1])
	return j
}

// jwksByHand fetches the JWKS and returns its keys by kid, checking each
// key's fields by hand.
func jwksByHand(t *testing.T, sc *gatetest.Sidecar) (map[string]ed25519.PublicKey, http.Header) {
	t.Helper()
	a := call(t, http.MethodGet, sc.URL+gatetest.BasePath+"/.well-known/jwks.json", "")
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	var set struct {
		Keys []map[string]string `json:"keys"`
	}
	require.NoError(t, json.Unmarshal(a.body, &set))
	out := map[string]ed25519.PublicKey{}
	for _, k := range set.Keys {
		assert.Equal(t, "OKP", k["kty"])
		assert.Equal(t, "Ed25519", k["crv"])
		assert.Equal(t, "sig", k["use"])
		assert.Equal(t, "EdDSA", k["alg"])
		assert.NotEmpty(t, k["kid"])
		assert.NotContains(t, k, "d", "never the private key")
		x, err := base64.RawURLEncoding.DecodeString(k["x"])
		require.NoError(t, err)
		require.Len(t, x, ed25519.PublicKeySize)
		out[k["kid"]] = x
	}
	return out, a.header
}

// A session admitted at join gets an admission token that an independent
// verifier accepts: the JWT parsed by hand, its key taken from the JWKS
// served over HTTP, its signature checked with crypto/ed25519, its claims
// as documented. The status answers carry the same admission (same jti);
// a gate without admission tokens and a waiter carry none.
func TestAdmissionTokenVerifiesIndependently(t *testing.T) {
	sc := admissionSidecar(t)
	v := viewOf(t, sc, http.MethodPost, "/api/join", "sale", "")
	require.Equal(t, session.StatusActive, v.Status)
	require.NotEmpty(t, v.Admission, "admitted at join: the answer carries the admission")

	j := parseByHand(t, v.Admission)
	assert.Equal(t, map[string]any{"alg": "EdDSA", "typ": "JWT", "kid": j.header["kid"]}, j.header)
	keys, hdr := jwksByHand(t, sc)
	pub, ok := keys[j.header["kid"].(string)]
	require.True(t, ok, "the JWKS publishes the token's key")
	assert.True(t, ed25519.Verify(pub, j.signingInput, j.signature), "crypto/ed25519 verifies the signature")
	tampered := bytes.Replace(j.signingInput, []byte(j.payloadB64[:4]), []byte("AAAA"), 1)
	assert.False(t, ed25519.Verify(pub, tampered, j.signature), "the check can fail")

	now := gatetest.Start.Unix()
	assert.Equal(t, "sale", j.claims["gate"])
	assert.Equal(t, v.Session, j.claims["sub"])
	assert.NotEmpty(t, j.claims["jti"])
	assert.EqualValues(t, now, j.claims["iat"])
	assert.EqualValues(t, now+300, j.claims["exp"])
	assert.Len(t, j.claims, 5, "gate, sub, jti, iat, exp: %v", j.claims)

	// Caching: public, bounded, revalidated by ETag.
	assert.Equal(t, "public, max-age=300", hdr.Get("Cache-Control"))
	assert.Equal(t, "application/jwk-set+json", hdr.Get("Content-Type"))
	require.NotEmpty(t, hdr.Get("ETag"))
	nm := call(t, http.MethodGet, sc.URL+gatetest.BasePath+"/.well-known/jwks.json", "", "If-None-Match", hdr.Get("ETag"))
	assert.Equal(t, http.StatusNotModified, nm.status)
	assert.Empty(t, nm.body)

	// The status answers carry the same admission.
	sc.Clock.Advance(time.Minute)
	s := viewOf(t, sc, http.MethodGet, "/api/status", "sale", v.Token)
	require.NotEmpty(t, s.Admission)
	assert.Equal(t, j.claims["jti"], parseByHand(t, s.Admission).claims["jti"], "one admission per session")
	assert.EqualValues(t, now+300, parseByHand(t, s.Admission).claims["exp"], "its expiry does not slide")

	// A waiter has none; promoted and claimed (its status), it has one.
	w := viewOf(t, sc, http.MethodPost, "/api/join", "sale", "")
	require.Equal(t, session.StatusWaiting, w.Status)
	assert.Empty(t, w.Admission)
	assert.Empty(t, viewOf(t, sc, http.MethodGet, "/api/status", "sale", w.Token).Admission)
	a := call(t, http.MethodPost, sc.URL+gatetest.BasePath+"/api/release?gate=sale", "", "Authorization", "Bearer "+v.Token)
	require.Equal(t, http.StatusNoContent, a.status, "%s", a.body)
	p := viewOf(t, sc, http.MethodGet, "/api/status", "sale", w.Token)
	require.Equal(t, session.StatusActive, p.Status)
	require.NotEmpty(t, p.Admission, "promoted and claimed by this status")
	pj := parseByHand(t, p.Admission)
	assert.Equal(t, w.Session, pj.claims["sub"])
	assert.NotEqual(t, j.claims["jti"], pj.claims["jti"])

	// A gate without admission tokens issues none.
	assert.Empty(t, viewOf(t, sc, http.MethodPost, "/api/join", "plain", "").Admission)
}

func redeem(t *testing.T, sc *gatetest.Sidecar, body string, headers ...string) answer {
	t.Helper()
	return call(t, http.MethodPost, sc.URL+gatetest.BasePath+"/api/redeem", body, headers...)
}

func admissionErrorCode(t *testing.T, a answer) string {
	t.Helper()
	var e struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	require.NoError(t, json.Unmarshal(a.body, &e), "%s", a.body)
	return e.Error.Code
}

// Redeem marks an admission used once: 200, then 409 already_redeemed by
// token or by jti; a session whose admission was redeemed is shown none.
// Hostile calls: no or a wrong API key, a tampered token, a token signed
// by another key, both or neither field, unknown fields, a huge body, an
// unknown jti, an expired token.
func TestRedeem(t *testing.T) {
	sc := admissionSidecar(t)
	v := viewOf(t, sc, http.MethodPost, "/api/join", "sale", "")
	require.NotEmpty(t, v.Admission)
	jti := parseByHand(t, v.Admission).claims["jti"].(string)
	key := []string{"X-Anteroom-Key", admissionKey}
	tokBody := `{"token":"` + v.Admission + `"}`

	// Refused before anything is redeemed.
	parts := strings.Split(v.Admission, ".")
	forged := signedWith(t, parts[0], `{"gate":"sale","sub":"x","jti":"`+jti+`","iat":1,"exp":9999999999}`)
	for name, tt := range map[string]struct {
		body    string
		headers []string
		status  int
		code    string
	}{
		"no API key":           {tokBody, nil, http.StatusUnauthorized, "api_key_required"},
		"wrong API key":        {tokBody, []string{"X-Anteroom-Key", "wrong-key-0123456789"}, http.StatusUnauthorized, "api_key_required"},
		"session token as key": {tokBody, []string{"Authorization", "Bearer " + v.Token}, http.StatusUnauthorized, "api_key_required"},
		"tampered payload": {`{"token":"` + parts[0] + "." + base64.RawURLEncoding.EncodeToString([]byte(`{"gate":"sale","sub":"x","jti":"`+jti+`","iat":1,"exp":9999999999}`)) + "." + parts[2] + `"}`,
			key, http.StatusBadRequest, "invalid_admission"},
		"signed by another key": {`{"token":"` + forged + `"}`, key, http.StatusBadRequest, "invalid_admission"},
		"alg none":              {`{"token":"` + b64(`{"alg":"none","typ":"JWT"}`) + "." + parts[1] + `."}`, key, http.StatusBadRequest, "invalid_admission"},
		"both fields":           {`{"token":"` + v.Admission + `","jti":"` + jti + `"}`, key, http.StatusBadRequest, "invalid_argument"},
		"neither field":         {`{}`, key, http.StatusBadRequest, "invalid_argument"},
		"empty body":            {``, key, http.StatusBadRequest, "invalid_json"},
		"unknown field":         {`{"jti":"` + jti + `","gate":"sale"}`, key, http.StatusBadRequest, "invalid_json"},
		"two objects":           {`{"jti":"` + jti + `"}{}`, key, http.StatusBadRequest, "invalid_json"},
		"huge body":             {`{"token":"` + strings.Repeat("A", 64<<10) + `"}`, key, http.StatusRequestEntityTooLarge, "body_too_large"},
		"unknown jti":           {`{"jti":"never-issued"}`, key, http.StatusNotFound, "admission_not_found"},
		"malformed jti":         {`{"jti":"a.b c"}`, key, http.StatusNotFound, "admission_not_found"},
	} {
		t.Run(name, func(t *testing.T) {
			a := redeem(t, sc, tt.body, tt.headers...)
			assert.Equal(t, tt.status, a.status, "%s", a.body)
			assert.Equal(t, tt.code, admissionErrorCode(t, a))
		})
	}

	// The first redeem wins; every later one, by token or jti, is a 409.
	a := redeem(t, sc, tokBody, key...)
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	var got map[string]any
	require.NoError(t, json.Unmarshal(a.body, &got))
	assert.Equal(t, jti, got["jti"])
	assert.Equal(t, "sale", got["gate"])
	assert.Equal(t, v.Session, got["session"])
	assert.Equal(t, "no-store", a.header.Get("Cache-Control"))
	for _, body := range []string{tokBody, `{"jti":"` + jti + `"}`} {
		a := redeem(t, sc, body, "Authorization", "Bearer "+admissionKey)
		assert.Equal(t, http.StatusConflict, a.status, "%s", a.body)
		assert.Equal(t, "already_redeemed", admissionErrorCode(t, a))
	}
	assert.Empty(t, viewOf(t, sc, http.MethodGet, "/api/status", "sale", v.Token).Admission, "a redeemed admission is not shown again")

	// Expired: the token, and its jti, are not found once past exp plus
	// the leeway.
	a = call(t, http.MethodPost, sc.URL+gatetest.BasePath+"/api/release?gate=sale", "", "Authorization", "Bearer "+v.Token)
	require.Equal(t, http.StatusNoContent, a.status)
	w := viewOf(t, sc, http.MethodPost, "/api/join", "sale", "")
	require.NotEmpty(t, w.Admission)
	sc.Clock.Advance(5*time.Minute + token.AdmissionLeeway + time.Second)
	for _, body := range []string{`{"token":"` + w.Admission + `"}`, `{"jti":"` + parseByHand(t, w.Admission).claims["jti"].(string) + `"}`} {
		a := redeem(t, sc, body, key...)
		assert.Equal(t, http.StatusNotFound, a.status, "%s", a.body)
		assert.Equal(t, "admission_not_found", admissionErrorCode(t, a))
	}
	assert.Empty(t, viewOf(t, sc, http.MethodGet, "/api/status", "sale", w.Token).Admission, "an expired admission is not shown")
}

func b64(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

// signedWith signs header.payload with a fresh key the sidecar never had.
func signedWith(t *testing.T, headerB64, payload string) string {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(nil)
	require.NoError(t, err)
	in := headerB64 + "." + b64(payload)
	return in + "." + base64.RawURLEncoding.EncodeToString(ed25519.Sign(priv, []byte(in)))
}

// 100 concurrent redeems of one jti over HTTP: exactly one 200, 99 409s.
func TestRedeemConcurrent(t *testing.T) {
	sc := admissionSidecar(t)
	v := viewOf(t, sc, http.MethodPost, "/api/join", "sale", "")
	require.NotEmpty(t, v.Admission)
	body := `{"token":"` + v.Admission + `"}`
	var wg sync.WaitGroup
	var mu sync.Mutex
	statuses := map[int]int{}
	start := make(chan struct{})
	for range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			req, err := http.NewRequest(http.MethodPost, sc.URL+gatetest.BasePath+"/api/redeem", strings.NewReader(body))
			if !assert.NoError(t, err) {
				return
			}
			req.Header.Set("X-Anteroom-Key", admissionKey)
			resp, err := http.DefaultClient.Do(req)
			if !assert.NoError(t, err) {
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			mu.Lock()
			statuses[resp.StatusCode]++
			mu.Unlock()
		}()
	}
	close(start)
	wg.Wait()
	assert.Equal(t, map[int]int{http.StatusOK: 1, http.StatusConflict: 99}, statuses)
}

// Key rotation: the next key is published an hour before it signs; once it
// signs, status answers are signed with it, and a token signed with the
// previous key still verifies with the published keys until its last token
// has expired, after which that key is withdrawn.
func TestAdmissionKeyRotation(t *testing.T) {
	sale := gatetest.Gate("sale", 10)
	sale.ActiveTimeout = 100 * time.Hour
	sc := gatetest.StartSidecar(t, gatetest.Options{
		Gates:        []session.GateConfig{sale},
		AdmissionTTL: map[string]time.Duration{"sale": 24 * time.Hour},
		Gate:         func(o *gate.Options) { o.APIKeys = []string{admissionKey} },
	})
	keys, _ := jwksByHand(t, sc) // the first key signs from Start
	require.Len(t, keys, 1)
	sc.Clock.Advance(12 * time.Hour)
	v := viewOf(t, sc, http.MethodPost, "/api/join", "sale", "")
	first := parseByHand(t, v.Admission)

	sc.Clock.Advance(token.AdmissionKeyPeriod - 12*time.Hour - token.AdmissionKeyLead + time.Minute)
	keys, _ = jwksByHand(t, sc)
	require.Len(t, keys, 2, "the next key is published ahead")
	s := viewOf(t, sc, http.MethodGet, "/api/status", "sale", v.Token)
	assert.Equal(t, first.header["kid"], parseByHand(t, s.Admission).header["kid"], "not signing yet")

	sc.Clock.Advance(token.AdmissionKeyLead)
	s = viewOf(t, sc, http.MethodGet, "/api/status", "sale", v.Token)
	second := parseByHand(t, s.Admission)
	assert.NotEqual(t, first.header["kid"], second.header["kid"], "the next key signs")
	assert.Equal(t, first.claims["jti"], second.claims["jti"], "the same admission")
	keys, _ = jwksByHand(t, sc)
	require.Contains(t, keys, first.header["kid"].(string), "the previous key verifies its tokens")
	assert.True(t, ed25519.Verify(keys[first.header["kid"].(string)], first.signingInput, first.signature))
	assert.True(t, ed25519.Verify(keys[second.header["kid"].(string)], second.signingInput, second.signature))

	sc.Clock.Advance(token.MaxAdmissionTTL + token.AdmissionLeeway)
	keys, _ = jwksByHand(t, sc)
	assert.NotContains(t, keys, first.header["kid"].(string), "withdrawn once its last token expired")
	assert.Contains(t, keys, second.header["kid"].(string))
}
