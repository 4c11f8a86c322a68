package token_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/gate/token"
)

// epoch is the fixed time of the test signers.
var epoch = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func secretOf(key string) []byte { return []byte(strings.Repeat(key, token.MinSecretLength)) }

// newSigner returns a signer with the key repeated, at a fixed time.
func newSigner(t testing.TB, key string) *token.Signer {
	s, err := token.NewSignerWithOptions(secretOf(key), token.Options{Now: func() time.Time { return epoch }})
	require.NoError(t, err)
	return s
}

// legacyToken is a token of the first format, "<id>.<mac>", as anteroom
// issued them before tokens expired.
func legacyToken(key, id string) string {
	m := hmac.New(sha256.New, secretOf(key))
	m.Write([]byte(id))
	return id + "." + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

func TestSignVerifyRoundTrip(t *testing.T) {
	s := newSigner(t, "k")
	for _, id := range []string{token.NewID(), "user:42", "a"} {
		tok, err := s.Sign(id)
		require.NoError(t, err)
		got, ok := s.Verify(tok)
		assert.True(t, ok, tok)
		assert.Equal(t, id, got)
	}
}

func TestVerifyRefuses(t *testing.T) {
	s := newSigner(t, "k")
	other := newSigner(t, "x")
	valid, err := s.Sign("abc")
	require.NoError(t, err)
	foreign, err := other.Sign("abc")
	require.NoError(t, err)
	parts := strings.Split(valid, ".")
	require.Len(t, parts, 3)
	id, exp, mac := parts[0], parts[1], parts[2]
	legacy := legacyToken("k", "abc")
	_, legacyMAC, _ := strings.Cut(legacy, ".")

	tests := map[string]string{
		"empty":                 "",
		"no dot":                id + exp + mac,
		"id only":               id + ".",
		"mac only":              "." + mac,
		"no expiry":             id + "." + mac,
		"truncated mac":         valid[:len(valid)-1],
		"extended mac":          valid + "A",
		"other id, same mac":    "abd." + exp + "." + mac,
		"later expiry":          id + "." + "9" + exp + "." + mac,
		"leading zero expiry":   id + ".0" + exp + "." + mac,
		"signed expiry":         id + ".+" + exp + "." + mac,
		"signed with other key": foreign,
		"legacy, other key":     legacyToken("x", "abc"),
		"legacy mac, new form":  id + "." + exp + "." + legacyMAC,
		"oversized":             strings.Repeat("a", token.MaxLength+1),
		"three dots":            valid + ".x",
		"space in id":           "a c." + exp + "." + mac,
		"padded base64":         valid + "=",
		"uppercased":            strings.ToUpper(valid),
	}
	for name, tok := range tests {
		t.Run(name, func(t *testing.T) {
			got, ok := s.Verify(tok)
			assert.False(t, ok)
			assert.Empty(t, got)
		})
	}
}

func TestNoMutationOfAValidTokenIsAccepted(t *testing.T) {
	s := newSigner(t, "k")
	valid, err := s.Sign(token.NewID())
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(1, 2))
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.:"
	tried := 0
	for tried < 5000 {
		b := []byte(valid)
		switch rng.IntN(3) {
		case 0: // replace one byte
			i := rng.IntN(len(b))
			b[i] = alphabet[rng.IntN(len(alphabet))]
		case 1: // delete one byte
			i := rng.IntN(len(b))
			b = append(b[:i], b[i+1:]...)
		case 2: // insert one byte
			i := rng.IntN(len(b) + 1)
			b = append(b[:i], append([]byte{alphabet[rng.IntN(len(alphabet))]}, b[i:]...)...)
		}
		if string(b) == valid {
			continue
		}
		tried++
		_, ok := s.Verify(string(b))
		require.False(t, ok, "mutation %q of %q accepted", b, valid)
	}
}

func TestNewSignerRefusesShortSecrets(t *testing.T) {
	_, err := token.NewSigner([]byte("short"))
	assert.ErrorContains(t, err, "want at least 32")
	secret, err := token.NewSecret()
	require.NoError(t, err)
	_, err = token.NewSigner(secret)
	assert.NoError(t, err)
}

func TestSignRefusesInvalidIDs(t *testing.T) {
	s := newSigner(t, "k")
	for _, id := range []string{"", "a.b", "a b", strings.Repeat("a", 200)} {
		_, err := s.Sign(id)
		assert.Error(t, err, id)
	}
}

func TestNewIDIsUniqueAndValid(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		id := token.NewID()
		assert.Len(t, id, 22)
		assert.False(t, seen[id])
		seen[id] = true
	}
}

func FuzzVerify(f *testing.F) {
	s := newSigner(f, "k")
	valid, _ := s.Sign("seed")
	for _, seed := range []string{"", ".", valid, valid[:10], "a." + strings.Repeat("A", 43), legacyToken("k", "seed"), "seed.1.x"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, tok string) {
		id, ok := s.Verify(tok)
		if !ok {
			return
		}
		// Anything accepted must be exactly what Sign produces for its id
		// (at the signer's fixed time), or a token of the first format.
		again, err := s.Sign(id)
		require.NoError(t, err)
		if tok != legacyToken("k", id) {
			require.Equal(t, again, tok)
		}
	})
}

// Tokens expire: valid until their expiry, refused from it on; Check asks
// for a fresh one once more than half the lifetime is used.
func TestTokensExpireAndAskForRenewalAtHalfLife(t *testing.T) {
	now := epoch
	s, err := token.NewSignerWithOptions(secretOf("k"), token.Options{TTL: time.Hour, Now: func() time.Time { return now }})
	require.NoError(t, err)
	tok, err := s.Sign("abc")
	require.NoError(t, err)
	tests := []struct {
		at           time.Duration
		valid, renew bool
	}{
		{0, true, false},
		{29 * time.Minute, true, false},
		{31 * time.Minute, true, true},
		{time.Hour - time.Second, true, true},
		{time.Hour, false, false},
		{48 * time.Hour, false, false},
	}
	for _, tt := range tests {
		now = epoch.Add(tt.at)
		c, ok := s.Check(tok)
		assert.Equal(t, tt.valid, ok, "at %v", tt.at)
		if tt.valid {
			assert.Equal(t, "abc", c.ID)
			assert.Equal(t, tt.renew, c.Renew, "renew at %v", tt.at)
			assert.True(t, epoch.Add(time.Hour).Equal(c.Expires), "expires %v", c.Expires)
		}
	}
}

// A key rotation keeps everyone's place: tokens signed with the previous
// secret (either format) verify and ask to be re-issued; the new signer signs
// with the new secret only; a signer without the previous secret refuses them.
func TestPreviousSecretVerifiesAndAsksForRenewal(t *testing.T) {
	old := newSigner(t, "o")
	oldTok, err := old.Sign("abc")
	require.NoError(t, err)
	rotated, err := token.NewSignerWithOptions(secretOf("n"), token.Options{Previous: secretOf("o"), Now: func() time.Time { return epoch }})
	require.NoError(t, err)
	for name, tok := range map[string]string{"current format": oldTok, "first format": legacyToken("o", "abc")} {
		c, ok := rotated.Check(tok)
		require.True(t, ok, name)
		assert.Equal(t, "abc", c.ID, name)
		assert.True(t, c.Renew, name)
		_, ok = newSigner(t, "n").Verify(tok)
		assert.False(t, ok, "%s: verified without the previous secret", name)
	}
	fresh, err := rotated.Sign("abc")
	require.NoError(t, err)
	c, ok := newSigner(t, "n").Check(fresh)
	require.True(t, ok, "re-issued token verifies under the new secret alone")
	assert.False(t, c.Renew)
	_, ok = old.Verify(fresh)
	assert.False(t, ok, "the new token must not be signed with the old secret")

	// Tokens of the first format under the current secret verify too, and
	// ask to be migrated.
	c, ok = newSigner(t, "k").Check(legacyToken("k", "abc"))
	require.True(t, ok)
	assert.True(t, c.Renew)

	_, err = token.NewSignerWithOptions(secretOf("n"), token.Options{Previous: []byte("short")})
	assert.ErrorContains(t, err, "previous secret")
}

// A ticket serves one purpose of one session at one gate for a minute, and
// is never a session token (nor the other way round).
func TestTicketsAreShortLivedAndSinglePurpose(t *testing.T) {
	now := epoch
	s, err := token.NewSignerWithOptions(secretOf("k"), token.Options{Now: func() time.Time { return now }})
	require.NoError(t, err)
	ticket, err := s.Ticket(token.PurposeWS, "default", "abc")
	require.NoError(t, err)
	tok, err := s.Sign("abc")
	require.NoError(t, err)

	id, ok := s.VerifyTicket(ticket, token.PurposeWS, "default")
	require.True(t, ok)
	assert.Equal(t, "abc", id)
	for name, check := range map[string]func() bool{
		"other purpose":   func() bool { _, ok := s.VerifyTicket(ticket, token.PurposeLeave, "default"); return ok },
		"other gate":      func() bool { _, ok := s.VerifyTicket(ticket, token.PurposeWS, "vip"); return ok },
		"ticket as token": func() bool { _, ok := s.Verify(ticket); return ok },
		"token as ticket": func() bool { _, ok := s.VerifyTicket(tok, token.PurposeWS, "default"); return ok },
		"other key":       func() bool { _, ok := newSigner(t, "x").VerifyTicket(ticket, token.PurposeWS, "default"); return ok },
		"tampered id": func() bool {
			_, ok := s.VerifyTicket(strings.Replace(ticket, ".abc.", ".abd.", 1), token.PurposeWS, "default")
			return ok
		},
		"expired": func() bool {
			now = epoch.Add(token.TicketTTL)
			defer func() { now = epoch }()
			_, ok := s.VerifyTicket(ticket, token.PurposeWS, "default")
			return ok
		},
		"legacy token as one": func() bool { _, ok := s.VerifyTicket(legacyToken("k", "abc"), token.PurposeWS, "default"); return ok },
	} {
		assert.False(t, check(), name)
	}
	now = epoch.Add(token.TicketTTL - time.Second)
	_, ok = s.VerifyTicket(ticket, token.PurposeWS, "default")
	assert.True(t, ok, "valid until its expiry")

	_, err = s.Ticket("admin", "default", "abc")
	assert.Error(t, err)
	_, err = s.Ticket(token.PurposeWS, "bad gate", "abc")
	assert.Error(t, err)
}

// A session token is exactly "<id>.<exp>.<mac>" with the MAC of
// "s2\x00<id>\x00<exp>": the bytes the format documents, whatever ids came
// through the pooled states before (a long id must not leave its tail in
// a shorter one's message).
func TestSignWritesTheDocumentedToken(t *testing.T) {
	s := newSigner(t, "k")
	exp := strconv.FormatInt(epoch.Add(token.DefaultTTL).Unix(), 10)
	for _, id := range []string{strings.Repeat("x", 128), "a", token.NewID(), "user:42", strings.Repeat("y", 300/3), "b"} {
		m := hmac.New(sha256.New, secretOf("k"))
		m.Write([]byte("s2\x00" + id + "\x00" + exp))
		want := id + "." + exp + "." + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
		got, err := s.Sign(id)
		require.NoError(t, err)
		assert.Equal(t, want, got)
		ticket, err := s.Ticket(token.PurposeWS, "default", id)
		require.NoError(t, err)
		texp := strconv.FormatInt(epoch.Add(token.TicketTTL).Unix(), 10)
		m = hmac.New(sha256.New, secretOf("k"))
		m.Write([]byte("t1\x00ws\x00default\x00" + id + "\x00" + texp))
		assert.Equal(t, texp+"."+id+"."+base64.RawURLEncoding.EncodeToString(m.Sum(nil)), ticket)
	}
}

func BenchmarkSign(b *testing.B) {
	s := newSigner(b, "k")
	id := token.NewID()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Sign(id); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCheck(b *testing.B) {
	s := newSigner(b, "k")
	tok, err := s.Sign(token.NewID())
	require.NoError(b, err)
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := s.Check(tok); !ok {
			b.Fatal("does not verify")
		}
	}
}
