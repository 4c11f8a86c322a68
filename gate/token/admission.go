package token

// Admission tokens: the proof an API server gets that a session was let in
// at a gate, a JWT signed with Ed25519 (RFC 8037, alg "EdDSA"), verifiable
// offline with the keys the sidecar publishes as a JWKS.
//
//	header  {"alg":"EdDSA","typ":"JWT","kid":"<RFC 7638 thumbprint>"}
//	claims  {"gate","sub" (the session id),"jti" (random),"iat","exp"}
//
// Verification is strict: exactly three unpadded base64url parts, alg
// exactly "EdDSA" (never "none", never an HMAC with the public key as its
// secret: the algorithm is fixed by the verifier, not read from the token),
// a kid naming a known key, an Ed25519 signature over the first two parts,
// and only then the claims are decoded: exp (with AdmissionLeeway), iat not
// in the future, the gate.

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/anteroomhq/anteroom/session"
)

// AdmissionAlg is the only JWS algorithm of admission tokens.
const AdmissionAlg = "EdDSA"

// AdmissionLeeway is the clock skew allowed between the sidecar and a
// verifier: a token verifies until AdmissionLeeway after its exp, and its
// iat may lie that far in the future. Redeem honours the same leeway.
const AdmissionLeeway = session.AdmissionLeeway

// MaxAdmissionTTL is the longest lifetime of an admission token.
const MaxAdmissionTTL = 24 * time.Hour

// MaxAdmissionLength is the longest admission token VerifyAdmission
// considers; longer ones are refused before any decoding (a real one is
// about 330 bytes).
const MaxAdmissionLength = 2048

// Errors of VerifyAdmission, for errors.Is.
var (
	ErrAdmissionMalformed = errors.New("admission token: malformed")
	ErrAdmissionAlg       = errors.New("admission token: algorithm is not EdDSA")
	ErrAdmissionKey       = errors.New("admission token: unknown key id")
	ErrAdmissionSignature = errors.New("admission token: signature does not verify")
	ErrAdmissionExpired   = errors.New("admission token: expired")
	ErrAdmissionNotYet    = errors.New("admission token: issued in the future")
	ErrAdmissionGate      = errors.New("admission token: issued for another gate")
)

// AdmissionClaims are the claims of an admission token. Times are unix
// seconds (JWT NumericDate).
type AdmissionClaims struct {
	Gate     string `json:"gate"`
	Subject  string `json:"sub"`
	ID       string `json:"jti"`
	IssuedAt int64  `json:"iat"`
	Expires  int64  `json:"exp"`
}

// admissionHeader is the JOSE header of an admission token.
type admissionHeader struct {
	Alg  string   `json:"alg"`
	Typ  string   `json:"typ,omitempty"`
	Kid  string   `json:"kid"`
	Crit []string `json:"crit,omitempty"`
}

// NewAdmissionID returns a fresh random jti: 16 bytes from crypto/rand in
// base64url (22 characters).
func NewAdmissionID() string { return NewID() }

// SignAdmission returns the JWT of c signed with key. It returns an error
// when key has no private part or c lacks a field.
func SignAdmission(key AdmissionKey, c AdmissionClaims) (string, error) {
	if len(key.Seed) != ed25519.SeedSize || key.ID == "" {
		return "", errors.New("token: admission key without a private key or id")
	}
	if c.Gate == "" || c.Subject == "" || c.ID == "" || c.IssuedAt == 0 || c.Expires == 0 {
		return "", errors.New("token: admission claims need gate, sub, jti, iat and exp")
	}
	h, err := json.Marshal(admissionHeader{Alg: AdmissionAlg, Typ: "JWT", Kid: key.ID})
	if err != nil {
		return "", fmt.Errorf("token: admission header: %w", err)
	}
	p, err := json.Marshal(c)
	if err != nil {
		return "", fmt.Errorf("token: admission claims: %w", err)
	}
	enc := base64.RawURLEncoding
	signing := enc.EncodeToString(h) + "." + enc.EncodeToString(p)
	sig := ed25519.Sign(ed25519.NewKeyFromSeed(key.Seed), []byte(signing))
	return signing + "." + enc.EncodeToString(sig), nil
}

// AdmissionKeys resolves a key id to an Ed25519 public key.
type AdmissionKeys interface {
	PublicKey(kid string) (ed25519.PublicKey, bool)
}

// PublicKeys is a fixed set of public keys by key id.
type PublicKeys map[string]ed25519.PublicKey

// PublicKey implements AdmissionKeys.
func (p PublicKeys) PublicKey(kid string) (ed25519.PublicKey, bool) {
	k, ok := p[kid]
	return k, ok && len(k) == ed25519.PublicKeySize
}

// VerifyAdmission checks tok against keys at now and returns its claims.
// gate, when not empty, must be the token's gate. The errors wrap
// ErrAdmissionMalformed (also for a token longer than MaxAdmissionLength),
// ErrAdmissionAlg, ErrAdmissionKey (the kid is unknown: a verifier may
// refresh its keys once and try again), ErrAdmissionSignature,
// ErrAdmissionExpired, ErrAdmissionNotYet or ErrAdmissionGate.
func VerifyAdmission(keys AdmissionKeys, tok, gate string, now time.Time) (AdmissionClaims, error) {
	if len(tok) > MaxAdmissionLength {
		return AdmissionClaims{}, fmt.Errorf("%w: longer than %d bytes", ErrAdmissionMalformed, MaxAdmissionLength)
	}
	hb, rest, ok := strings.Cut(tok, ".")
	if !ok {
		return AdmissionClaims{}, fmt.Errorf("%w: want three parts", ErrAdmissionMalformed)
	}
	pb, sb, ok := strings.Cut(rest, ".")
	if !ok || strings.Contains(sb, ".") {
		return AdmissionClaims{}, fmt.Errorf("%w: want three parts", ErrAdmissionMalformed)
	}
	enc := base64.RawURLEncoding.Strict()
	hj, err := enc.DecodeString(hb)
	if err != nil {
		return AdmissionClaims{}, fmt.Errorf("%w: header: %w", ErrAdmissionMalformed, err)
	}
	var h admissionHeader
	if err := strictJSON(hj, &h); err != nil {
		return AdmissionClaims{}, fmt.Errorf("%w: header: %w", ErrAdmissionMalformed, err)
	}
	if h.Alg != AdmissionAlg {
		return AdmissionClaims{}, fmt.Errorf("%w: %q", ErrAdmissionAlg, h.Alg)
	}
	if (h.Typ != "" && h.Typ != "JWT") || len(h.Crit) > 0 {
		return AdmissionClaims{}, fmt.Errorf("%w: typ %q or crit not understood", ErrAdmissionMalformed, h.Typ)
	}
	pub, ok := keys.PublicKey(h.Kid)
	if !ok {
		return AdmissionClaims{}, fmt.Errorf("%w: %q", ErrAdmissionKey, h.Kid)
	}
	sig, err := enc.DecodeString(sb)
	if err != nil || len(sig) != ed25519.SignatureSize {
		return AdmissionClaims{}, ErrAdmissionSignature
	}
	if !ed25519.Verify(pub, []byte(tok[:len(hb)+1+len(pb)]), sig) {
		return AdmissionClaims{}, ErrAdmissionSignature
	}
	pj, err := enc.DecodeString(pb)
	if err != nil {
		return AdmissionClaims{}, fmt.Errorf("%w: claims: %w", ErrAdmissionMalformed, err)
	}
	var c AdmissionClaims
	if err := strictJSON(pj, &c); err != nil {
		return AdmissionClaims{}, fmt.Errorf("%w: claims: %w", ErrAdmissionMalformed, err)
	}
	if c.Gate == "" || c.Subject == "" || c.ID == "" || c.IssuedAt <= 0 || c.Expires <= 0 {
		return AdmissionClaims{}, fmt.Errorf("%w: claims need gate, sub, jti, iat and exp", ErrAdmissionMalformed)
	}
	leeway := int64(AdmissionLeeway / time.Second)
	if now.Unix() > c.Expires+leeway {
		return c, ErrAdmissionExpired
	}
	if c.IssuedAt > now.Unix()+leeway {
		return c, ErrAdmissionNotYet
	}
	if gate != "" && c.Gate != gate {
		return c, fmt.Errorf("%w: %q", ErrAdmissionGate, c.Gate)
	}
	return c, nil
}

// strictJSON decodes one JSON object into v, with nothing after it.
func strictJSON(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data")
	}
	return nil
}

// AdmissionKey is one signing key of a keyring: it signs from NotBefore
// until NotAfter and is published (and verifies) from when it was created
// until its last token expired.
type AdmissionKey struct {
	// ID is the key's RFC 7638 JWK thumbprint (base64url SHA-256).
	ID string `json:"kid"`
	// Seed is the Ed25519 private key seed (32 bytes).
	Seed      []byte    `json:"seed"`
	NotBefore time.Time `json:"notBefore"`
	NotAfter  time.Time `json:"notAfter"`
}

// Public returns the key's public half.
func (k AdmissionKey) Public() ed25519.PublicKey {
	return ed25519.NewKeyFromSeed(k.Seed).Public().(ed25519.PublicKey)
}

// Thumbprint returns the RFC 7638 JWK thumbprint of an Ed25519 public key:
// base64url SHA-256 of {"crv":"Ed25519","kty":"OKP","x":"..."}.
func Thumbprint(pub ed25519.PublicKey) string {
	x := base64.RawURLEncoding.EncodeToString(pub)
	sum := sha256.Sum256([]byte(`{"crv":"Ed25519","kty":"OKP","x":"` + x + `"}`))
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

// newAdmissionKey generates a key that signs in [from, to).
func newAdmissionKey(from, to time.Time) (AdmissionKey, error) {
	seed := make([]byte, ed25519.SeedSize)
	if _, err := rand.Read(seed); err != nil {
		return AdmissionKey{}, fmt.Errorf("token: generating an admission key: %w", err)
	}
	k := AdmissionKey{Seed: seed, NotBefore: from.UTC(), NotAfter: to.UTC()}
	k.ID = Thumbprint(k.Public())
	return k, nil
}

// Key rotation of admission keys.
const (
	// AdmissionKeyPeriod is how long one key signs.
	AdmissionKeyPeriod = 24 * time.Hour
	// AdmissionKeyLead is how long before it signs a key is published, so
	// that a verifier caching the JWKS (for at most JWKSMaxAge) knows it
	// before its first token.
	AdmissionKeyLead = time.Hour
	// JWKSMaxAge is the Cache-Control max-age of the published JWKS.
	JWKSMaxAge = 5 * time.Minute
	// admissionKeyRetention is how long a key stays published after it
	// stopped signing: until the last token it signed has expired.
	admissionKeyRetention = MaxAdmissionTTL + AdmissionLeeway
)

// AdmissionKeyring is the set of admission keys, stored as JSON in the
// sidecar's database (beside the token secret) and shared by its instances.
type AdmissionKeyring struct {
	Keys []AdmissionKey `json:"keys"`
}

// ParseAdmissionKeyring decodes a stored keyring; empty data is an empty
// ring. It returns an error when data is not one or a key is malformed.
func ParseAdmissionKeyring(data []byte) (AdmissionKeyring, error) {
	var r AdmissionKeyring
	if len(data) == 0 {
		return r, nil
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return AdmissionKeyring{}, fmt.Errorf("token: admission keyring: %w", err)
	}
	for _, k := range r.Keys {
		if len(k.Seed) != ed25519.SeedSize || k.ID != Thumbprint(k.Public()) || !k.NotBefore.Before(k.NotAfter) {
			return AdmissionKeyring{}, fmt.Errorf("token: admission keyring: malformed key %q", k.ID)
		}
	}
	return r, nil
}

// RotateAdmissionKeyring returns the stored keyring old as it must be at
// now, encoded, and whether it changed: keys whose last token has expired
// are dropped; a key is added when none signs at now; and the next key is
// added AdmissionKeyLead before the newest stops signing. Every instance
// runs it inside the store's read-modify-write, so they agree on one ring.
func RotateAdmissionKeyring(old []byte, now time.Time) ([]byte, bool, error) {
	r, err := ParseAdmissionKeyring(old)
	if err != nil {
		return nil, false, err
	}
	changed := false
	kept := r.Keys[:0:0]
	for _, k := range r.Keys {
		if now.Before(k.NotAfter.Add(admissionKeyRetention)) {
			kept = append(kept, k)
		} else {
			changed = true
		}
	}
	r.Keys = kept
	if _, ok := r.Signing(now); !ok {
		k, err := newAdmissionKey(now, now.Add(AdmissionKeyPeriod))
		if err != nil {
			return nil, false, err
		}
		r.Keys = append(r.Keys, k)
		changed = true
	}
	last := r.Keys[0]
	for _, k := range r.Keys {
		if k.NotAfter.After(last.NotAfter) {
			last = k
		}
	}
	if !now.Before(last.NotAfter.Add(-AdmissionKeyLead)) {
		k, err := newAdmissionKey(last.NotAfter, last.NotAfter.Add(AdmissionKeyPeriod))
		if err != nil {
			return nil, false, err
		}
		r.Keys = append(r.Keys, k)
		changed = true
	}
	if !changed {
		return old, false, nil
	}
	b, err := json.Marshal(r)
	if err != nil {
		return nil, false, fmt.Errorf("token: admission keyring: %w", err)
	}
	return b, true, nil
}

// Signing returns the key that signs at now: of those whose window holds
// now, the one that started last.
func (r AdmissionKeyring) Signing(now time.Time) (AdmissionKey, bool) {
	var best AdmissionKey
	found := false
	for _, k := range r.Keys {
		if !now.Before(k.NotBefore) && now.Before(k.NotAfter) && (!found || k.NotBefore.After(best.NotBefore)) {
			best, found = k, true
		}
	}
	return best, found
}

// PublicKey implements AdmissionKeys: every key of the ring verifies.
func (r AdmissionKeyring) PublicKey(kid string) (ed25519.PublicKey, bool) {
	for _, k := range r.Keys {
		if k.ID == kid {
			return k.Public(), true
		}
	}
	return nil, false
}

// JWK is one public key of a JWKS (RFC 7517, OKP keys of RFC 8037).
type JWK struct {
	Kty string `json:"kty"`
	Crv string `json:"crv"`
	X   string `json:"x"`
	Kid string `json:"kid"`
	Use string `json:"use"`
	Alg string `json:"alg"`
}

// JWKS is a JSON Web Key Set.
type JWKS struct {
	Keys []JWK `json:"keys"`
}

// JWKS returns the public keys of the ring, newest first.
func (r AdmissionKeyring) JWKS() JWKS {
	out := JWKS{Keys: make([]JWK, 0, len(r.Keys))}
	for i := len(r.Keys) - 1; i >= 0; i-- {
		k := r.Keys[i]
		out.Keys = append(out.Keys, JWK{Kty: "OKP", Crv: "Ed25519", X: base64.RawURLEncoding.EncodeToString(k.Public()),
			Kid: k.ID, Use: "sig", Alg: AdmissionAlg})
	}
	return out
}

// MaxJWKSKeys bounds the keys ParseJWKS reads.
const MaxJWKSKeys = 64

// ParseJWKS reads the Ed25519 signing keys of a JWKS. Keys of other types,
// curves, uses or algorithms are skipped. It returns an error when data is
// not a JWKS, holds more than MaxJWKSKeys keys, or an Ed25519 key is
// malformed (x not 32 bytes, no kid).
func ParseJWKS(data []byte) (PublicKeys, error) {
	var set JWKS
	if err := json.Unmarshal(data, &set); err != nil {
		return nil, fmt.Errorf("token: jwks: %w", err)
	}
	if len(set.Keys) > MaxJWKSKeys {
		return nil, fmt.Errorf("token: jwks: %d keys, more than %d", len(set.Keys), MaxJWKSKeys)
	}
	out := PublicKeys{}
	for _, k := range set.Keys {
		if k.Kty != "OKP" || k.Crv != "Ed25519" || (k.Use != "" && k.Use != "sig") || (k.Alg != "" && k.Alg != AdmissionAlg) {
			continue
		}
		x, err := base64.RawURLEncoding.Strict().DecodeString(k.X)
		if err != nil || len(x) != ed25519.PublicKeySize || k.Kid == "" {
			return nil, fmt.Errorf("token: jwks: malformed Ed25519 key %q", k.Kid)
		}
		out[k.Kid] = ed25519.PublicKey(x)
	}
	return out, nil
}

// ValidAdmissionID reports whether s can be a jti: what NewAdmissionID
// makes, or any id a session could have (session.ValidID).
func ValidAdmissionID(s string) bool { return session.ValidID(s) }
