package token_test

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/gate/token"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func ring(t *testing.T) token.AdmissionKeyring {
	t.Helper()
	b, changed, err := token.RotateAdmissionKeyring(nil, t0)
	require.NoError(t, err)
	require.True(t, changed)
	r, err := token.ParseAdmissionKeyring(b)
	require.NoError(t, err)
	return r
}

func enc(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

// Every way of bending a token is refused with the error that names it.
func TestVerifyAdmissionRefusesHostileTokens(t *testing.T) {
	r := ring(t)
	key, ok := r.Signing(t0)
	require.True(t, ok)
	claims := token.AdmissionClaims{Gate: "sale", Subject: "s1", ID: "j1", IssuedAt: t0.Unix(), Expires: t0.Add(5 * time.Minute).Unix()}
	good, err := token.SignAdmission(key, claims)
	require.NoError(t, err)
	got, err := token.VerifyAdmission(r, good, "sale", t0)
	require.NoError(t, err)
	assert.Equal(t, claims, got)

	parts := strings.Split(good, ".")
	_, other, err := ed25519.GenerateKey(nil)
	require.NoError(t, err)
	signOther := func(h, p string) string {
		in := enc(h) + "." + enc(p)
		return in + "." + base64.RawURLEncoding.EncodeToString(ed25519.Sign(other, []byte(in)))
	}
	payload, _ := json.Marshal(claims)
	kidHeader := `{"alg":"EdDSA","typ":"JWT","kid":"` + key.ID + `"}`
	tests := []struct {
		name string
		tok  string
		gate string
		now  time.Time
		want error
	}{
		{"tampered payload", parts[0] + "." + enc(strings.Replace(string(payload), `"s1"`, `"s2"`, 1)) + "." + parts[2], "sale", t0, token.ErrAdmissionSignature},
		{"signed by another key under our kid", signOther(kidHeader, string(payload)), "sale", t0, token.ErrAdmissionSignature},
		{"unknown kid", signOther(`{"alg":"EdDSA","kid":"nope"}`, string(payload)), "sale", t0, token.ErrAdmissionKey},
		{"no kid", signOther(`{"alg":"EdDSA"}`, string(payload)), "sale", t0, token.ErrAdmissionKey},
		{"alg none", enc(`{"alg":"none","kid":"`+key.ID+`"}`) + "." + parts[1] + ".", "sale", t0, token.ErrAdmissionAlg},
		{"alg HS256", enc(`{"alg":"HS256","kid":"`+key.ID+`"}`) + "." + parts[1] + "." + parts[2], "sale", t0, token.ErrAdmissionAlg},
		{"alg lower case", enc(`{"alg":"eddsa","kid":"`+key.ID+`"}`) + "." + parts[1] + "." + parts[2], "sale", t0, token.ErrAdmissionAlg},
		{"alg Ed25519", enc(`{"alg":"Ed25519","kid":"`+key.ID+`"}`) + "." + parts[1] + "." + parts[2], "sale", t0, token.ErrAdmissionAlg},
		{"crit header", enc(`{"alg":"EdDSA","kid":"`+key.ID+`","crit":["exp"]}`) + "." + parts[1] + "." + parts[2], "sale", t0, token.ErrAdmissionMalformed},
		{"typ JWE", enc(`{"alg":"EdDSA","typ":"JWE","kid":"`+key.ID+`"}`) + "." + parts[1] + "." + parts[2], "sale", t0, token.ErrAdmissionMalformed},
		{"huge", good + strings.Repeat("A", token.MaxAdmissionLength), "sale", t0, token.ErrAdmissionMalformed},
		{"two parts", parts[0] + "." + parts[1], "sale", t0, token.ErrAdmissionMalformed},
		{"four parts", good + ".", "sale", t0, token.ErrAdmissionMalformed},
		{"padding", parts[0] + "==." + parts[1] + "." + parts[2], "sale", t0, token.ErrAdmissionMalformed},
		{"std base64 alphabet", parts[0][:len(parts[0])-1] + "+." + parts[1] + "." + parts[2], "sale", t0, token.ErrAdmissionMalformed},
		{"header not JSON", enc("alg") + "." + parts[1] + "." + parts[2], "sale", t0, token.ErrAdmissionMalformed},
		{"short signature", parts[0] + "." + parts[1] + "." + parts[2][:20], "sale", t0, token.ErrAdmissionSignature},
		{"empty", "", "sale", t0, token.ErrAdmissionMalformed},
		{"expired past the leeway", good, "sale", t0.Add(5*time.Minute + token.AdmissionLeeway + time.Second), token.ErrAdmissionExpired},
		{"within the leeway", good, "sale", t0.Add(5*time.Minute + token.AdmissionLeeway), nil},
		{"issued in the future", good, "sale", t0.Add(-token.AdmissionLeeway - time.Second), token.ErrAdmissionNotYet},
		{"another gate", good, "checkout", t0, token.ErrAdmissionGate},
		{"any gate", good, "", t0, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := token.VerifyAdmission(r, tt.tok, tt.gate, tt.now)
			if tt.want == nil {
				assert.NoError(t, err)
				return
			}
			assert.ErrorIs(t, err, tt.want)
		})
	}

	// Claims missing a field do not verify, even correctly signed.
	for _, p := range []string{`{"gate":"sale","sub":"s","jti":"j","iat":1}`, `{"sub":"s","jti":"j","iat":1,"exp":9999999999}`, `{"gate":"sale","sub":"s","jti":"j","iat":1,"exp":9999999999} {}`} {
		in := enc(kidHeader) + "." + enc(p)
		tok := in + "." + base64.RawURLEncoding.EncodeToString(ed25519.Sign(ed25519.NewKeyFromSeed(key.Seed), []byte(in)))
		_, err := token.VerifyAdmission(r, tok, "", t0)
		assert.ErrorIs(t, err, token.ErrAdmissionMalformed, p)
	}
}

// Rotation: one key signs from the start; the next is added AdmissionKeyLead
// before the current stops signing and signs from then; a key stays until
// its last token expired; the ring is unchanged between those moments.
func TestRotateAdmissionKeyring(t *testing.T) {
	b, _, err := token.RotateAdmissionKeyring(nil, t0)
	require.NoError(t, err)
	same, changed, err := token.RotateAdmissionKeyring(b, t0.Add(time.Hour))
	require.NoError(t, err)
	assert.False(t, changed)
	assert.Equal(t, b, same)

	r1, err := token.ParseAdmissionKeyring(b)
	require.NoError(t, err)
	require.Len(t, r1.Keys, 1)
	first := r1.Keys[0]

	lead := t0.Add(token.AdmissionKeyPeriod - token.AdmissionKeyLead)
	_, changed, err = token.RotateAdmissionKeyring(b, lead.Add(-time.Second))
	require.NoError(t, err)
	assert.False(t, changed, "not yet")
	b, changed, err = token.RotateAdmissionKeyring(b, lead)
	require.NoError(t, err)
	require.True(t, changed)
	r2, err := token.ParseAdmissionKeyring(b)
	require.NoError(t, err)
	require.Len(t, r2.Keys, 2)
	k, _ := r2.Signing(lead)
	assert.Equal(t, first.ID, k.ID, "the current key signs until its end")
	k, _ = r2.Signing(t0.Add(token.AdmissionKeyPeriod))
	assert.NotEqual(t, first.ID, k.ID, "the next one from then")
	assert.Len(t, r2.JWKS().Keys, 2)

	retire := first.NotAfter.Add(token.MaxAdmissionTTL + token.AdmissionLeeway)
	b3, _, err := token.RotateAdmissionKeyring(b, retire.Add(-time.Second))
	require.NoError(t, err)
	r3, _ := token.ParseAdmissionKeyring(b3)
	_, ok := r3.PublicKey(first.ID)
	assert.True(t, ok, "kept while its tokens may live")
	b4, _, err := token.RotateAdmissionKeyring(b, retire)
	require.NoError(t, err)
	r4, _ := token.ParseAdmissionKeyring(b4)
	_, ok = r4.PublicKey(first.ID)
	assert.False(t, ok, "dropped after")

	// Long asleep: a ring whose keys all expired gets a fresh signing key.
	b5, _, err := token.RotateAdmissionKeyring(b, t0.Add(100*24*time.Hour))
	require.NoError(t, err)
	r5, _ := token.ParseAdmissionKeyring(b5)
	_, ok = r5.Signing(t0.Add(100 * 24 * time.Hour))
	assert.True(t, ok)
	assert.Len(t, r5.Keys, 1)

	for _, bad := range []string{`{`, `{"keys":[{"kid":"x","seed":"AAAA"}]}`} {
		_, err := token.ParseAdmissionKeyring([]byte(bad))
		assert.Error(t, err, bad)
		_, _, err = token.RotateAdmissionKeyring([]byte(bad), t0)
		assert.Error(t, err, bad)
	}
}

// The JWKS carries public keys only, with RFC 7638 thumbprints as kids;
// ParseJWKS reads them back, skips other key types and refuses malformed
// Ed25519 keys and oversized sets.
func TestJWKS(t *testing.T) {
	r := ring(t)
	b, err := json.Marshal(r.JWKS())
	require.NoError(t, err)
	assert.NotContains(t, string(b), enc(string(r.Keys[0].Seed)), "no private key")
	keys, err := token.ParseJWKS(b)
	require.NoError(t, err)
	require.Len(t, keys, 1)
	pub := keys[r.Keys[0].ID]
	assert.Equal(t, r.Keys[0].Public(), pub)
	// RFC 7638's example thumbprint input order: crv, kty, x.
	assert.Equal(t, token.Thumbprint(pub), r.Keys[0].ID)

	rsa := `{"kty":"RSA","n":"x","e":"AQAB","kid":"r"}`
	keys, err = token.ParseJWKS([]byte(`{"keys":[` + rsa + `]}`))
	require.NoError(t, err)
	assert.Empty(t, keys)
	for _, bad := range []string{
		`{"keys":[{"kty":"OKP","crv":"Ed25519","x":"AAAA","kid":"k"}]}`,
		`{"keys":[{"kty":"OKP","crv":"Ed25519","x":"` + enc(string(make([]byte, 32))) + `"}]}`,
		`[]`,
		`{"keys":[` + strings.Repeat(rsa+",", token.MaxJWKSKeys) + rsa + `]}`,
	} {
		_, err := token.ParseJWKS([]byte(bad))
		assert.Error(t, err, bad)
	}
}
