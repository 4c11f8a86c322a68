package token_test

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/gate/token"
)

func newSigner(t testing.TB, key string) *token.Signer {
	s, err := token.NewSigner([]byte(strings.Repeat(key, token.MinSecretLength)))
	require.NoError(t, err)
	return s
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
	id, mac, _ := strings.Cut(valid, ".")

	tests := map[string]string{
		"empty":                 "",
		"no dot":                id + mac,
		"id only":               id + ".",
		"mac only":              "." + mac,
		"truncated mac":         valid[:len(valid)-1],
		"extended mac":          valid + "A",
		"other id, same mac":    "abd." + mac,
		"signed with other key": foreign,
		"oversized":             strings.Repeat("a", token.MaxLength+1),
		"two dots":              id + "." + mac + ".x",
		"space in id":           "a c." + mac,
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
	for _, seed := range []string{"", ".", valid, valid[:10], "a." + strings.Repeat("A", 43)} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, tok string) {
		id, ok := s.Verify(tok)
		if !ok {
			return
		}
		// Anything accepted must be exactly what Sign produces for its id.
		again, err := s.Sign(id)
		require.NoError(t, err)
		require.Equal(t, again, tok)
	})
}
