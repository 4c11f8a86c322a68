// Package token signs and verifies anteroom session tokens: "<id>.<mac>",
// where mac is the unpadded base64url HMAC-SHA256 of id under a secret key.
// A token whose MAC does not verify names no session at all.
//
// Standard library only, so that host apps can verify tokens without the
// sidecar's dependencies.
package token

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"hash"
	"strings"
	"sync"

	"github.com/anteroomhq/anteroom/session"
)

// MinSecretLength is the shortest key NewSigner accepts, in bytes.
const MinSecretLength = 32

// macLength is the length of an encoded MAC: 32 bytes in unpadded base64url.
var macLength = base64.RawURLEncoding.EncodedLen(sha256.Size)

// MaxLength is the longest token Verify considers; longer ones are refused
// before any hashing.
var MaxLength = session.MaxIDLength + 1 + macLength

// Signer signs and verifies tokens under one key. Safe for concurrent use.
type Signer struct {
	key []byte
	// macs pools keyed HMAC states: hmac.New costs two hash states and the
	// keyed pads per call, and Verify sits on every checked request.
	macs sync.Pool
}

// NewSigner returns a Signer for secret. It returns an error when secret is
// shorter than MinSecretLength bytes.
func NewSigner(secret []byte) (*Signer, error) {
	if len(secret) < MinSecretLength {
		return nil, fmt.Errorf("token: secret of %d bytes: want at least %d", len(secret), MinSecretLength)
	}
	s := &Signer{key: append([]byte(nil), secret...)}
	s.macs.New = func() any { return hmac.New(sha256.New, s.key) }
	return s, nil
}

// Sign returns the token for session id. It returns an error when id is not a
// valid session id (session.ValidID).
func (s *Signer) Sign(id string) (string, error) {
	if !session.ValidID(id) {
		return "", errors.New("token: invalid session id")
	}
	return id + "." + s.mac(id), nil
}

// Verify returns the session id a token names, and false when the token is
// malformed, too long, or its MAC does not verify.
func (s *Signer) Verify(tok string) (string, bool) {
	if len(tok) > MaxLength {
		return "", false
	}
	id, mac, ok := strings.Cut(tok, ".")
	if !ok || len(mac) != macLength || !session.ValidID(id) {
		return "", false
	}
	// Compare raw MACs: decode the token's (strictly: no padding, no stray
	// bits) rather than encode ours.
	var got, want [sha256.Size]byte
	if n, err := base64.RawURLEncoding.Strict().Decode(got[:], []byte(mac)); err != nil || n != sha256.Size {
		return "", false
	}
	if !hmac.Equal(got[:], s.sum(id, want[:0])) {
		return "", false
	}
	return id, true
}

// sum appends the HMAC of id to b.
func (s *Signer) sum(id string, b []byte) []byte {
	h := s.macs.Get().(hash.Hash)
	h.Reset()
	h.Write([]byte(id))
	b = h.Sum(b)
	s.macs.Put(h)
	return b
}

func (s *Signer) mac(id string) string {
	var sum [sha256.Size]byte
	return base64.RawURLEncoding.EncodeToString(s.sum(id, sum[:0]))
}

// NewID returns a fresh random session id: 16 bytes from crypto/rand, as 22
// characters of base64url.
func NewID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// NewSecret returns a fresh random key of 32 bytes, for NewSigner.
func NewSecret() ([]byte, error) {
	b := make([]byte, MinSecretLength)
	if _, err := rand.Read(b); err != nil {
		return nil, fmt.Errorf("token: generating a secret: %w", err)
	}
	return b, nil
}
