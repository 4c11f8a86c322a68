// Package token signs and verifies anteroom session tokens and tickets.
//
// A session token is "<id>.<exp>.<mac>": the session id, the expiry in unix
// seconds (decimal), and the unpadded base64url HMAC-SHA256 of
// "s2\x00<id>\x00<exp>" under the secret key. Tokens of the first format,
// "<id>.<mac>" with the MAC of the bare id and no expiry, still verify (they
// are migrated: [Claims.Renew] is set, and the sidecar re-issues them in the
// current format). A token whose MAC does not verify, or that has expired,
// names no session at all.
//
// A ticket is a short-lived credential for one purpose (PurposeWS,
// PurposeLeave) of one session at one gate, for the places where a browser
// cannot send a header (a WebSocket handshake, sendBeacon): "<exp>.<id>.<mac>"
// with the MAC of "t1\x00<purpose>\x00<gate>\x00<id>\x00<exp>". A ticket is not
// a session token and a session token is not a ticket.
//
// A previous secret (key rotation) keeps verifying: tokens signed with it
// are accepted with Renew set, so that they are re-issued under the current
// key. Tickets verify under the current key only.
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
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/anteroomhq/anteroom/session"
)

// MinSecretLength is the shortest key NewSigner accepts, in bytes.
const MinSecretLength = 32

// DefaultTTL is how long a session token is valid when Options.TTL is 0.
const DefaultTTL = 24 * time.Hour

// TicketTTL is how long a ticket is valid.
const TicketTTL = 60 * time.Second

// Ticket purposes.
const (
	PurposeWS    = "ws"    // opens the websocket of the session
	PurposeLeave = "leave" // marks the session's departure (beacon)
)

// macLength is the length of an encoded MAC: 32 bytes in unpadded base64url.
var macLength = base64.RawURLEncoding.EncodedLen(sha256.Size)

// maxExpLength bounds the decimal expiry of a token (int64 seconds).
const maxExpLength = 19

// MaxLength is the longest token Verify considers; longer ones are refused
// before any hashing.
var MaxLength = session.MaxIDLength + 1 + maxExpLength + 1 + macLength

// Options configure a Signer beyond its secret.
type Options struct {
	// Previous is the secret used before the current one, or nil. Tokens it
	// signed keep verifying (and are to be re-issued); it signs nothing.
	Previous []byte
	// TTL is how long a signed token is valid. Default DefaultTTL.
	TTL time.Duration
	// Now tells the time. Default time.Now.
	Now func() time.Time
}

// Signer signs and verifies tokens under one key (and verifies under a
// previous one). Safe for concurrent use.
type Signer struct {
	cur, prev *keyState
	ttl       time.Duration
	now       func() time.Time
}

type keyState struct {
	key []byte
	// macs pools keyed HMAC states (*macState): hmac.New costs two hash
	// states and the keyed pads per call, and Verify sits on every checked
	// request.
	macs sync.Pool
}

// macState is a keyed HMAC and a scratch buffer for the message, which is
// hashed in one Write (each Write of a string converted to bytes through the
// hash.Hash interface cost an allocation).
type macState struct {
	h   hash.Hash
	msg []byte
}

// maxPooledMsg is the largest message buffer kept with a pooled state.
const maxPooledMsg = 1 << 10

func newKey(secret []byte) *keyState {
	k := &keyState{key: append([]byte(nil), secret...)}
	k.macs.New = func() any { return &macState{h: hmac.New(sha256.New, k.key), msg: make([]byte, 0, 256)} }
	return k
}

// NewSigner returns a Signer for secret with the default options. It returns
// an error when secret is shorter than MinSecretLength bytes.
func NewSigner(secret []byte) (*Signer, error) {
	return NewSignerWithOptions(secret, Options{})
}

// NewSignerWithOptions returns a Signer for secret. It returns an error when
// secret or a non-empty opts.Previous is shorter than MinSecretLength bytes,
// or opts.TTL is negative.
func NewSignerWithOptions(secret []byte, opts Options) (*Signer, error) {
	if len(secret) < MinSecretLength {
		return nil, fmt.Errorf("token: secret of %d bytes: want at least %d", len(secret), MinSecretLength)
	}
	if len(opts.Previous) > 0 && len(opts.Previous) < MinSecretLength {
		return nil, fmt.Errorf("token: previous secret of %d bytes: want at least %d", len(opts.Previous), MinSecretLength)
	}
	if opts.TTL < 0 {
		return nil, fmt.Errorf("token: negative TTL %v", opts.TTL)
	}
	s := &Signer{cur: newKey(secret), ttl: opts.TTL, now: opts.Now}
	if len(opts.Previous) > 0 {
		s.prev = newKey(opts.Previous)
	}
	if s.ttl == 0 {
		s.ttl = DefaultTTL
	}
	if s.now == nil {
		s.now = time.Now
	}
	return s, nil
}

// TTL returns how long a token signed now stays valid.
func (s *Signer) TTL() time.Duration { return s.ttl }

// Sign returns a token for session id, valid for the Signer's TTL. It
// returns an error when id is not a valid session id (session.ValidID).
func (s *Signer) Sign(id string) (string, error) {
	if !session.ValidID(id) {
		return "", errors.New("token: invalid session id")
	}
	var expBuf [maxExpLength + 1]byte
	exp := strconv.AppendInt(expBuf[:0], s.now().Add(s.ttl).Unix(), 10)
	var mac [sha256.Size]byte
	s.cur.sumToken(&mac, id, exp)
	// One allocation: the token, written into a Builder of its exact size.
	var b strings.Builder
	b.Grow(len(id) + 1 + len(exp) + 1 + macLength)
	b.WriteString(id)
	b.WriteByte('.')
	b.Write(exp)
	b.WriteByte('.')
	var enc [43]byte // macLength
	base64.RawURLEncoding.Encode(enc[:], mac[:])
	b.Write(enc[:])
	return b.String(), nil
}

// Claims is what a verified token says.
type Claims struct {
	// ID is the session id.
	ID string
	// Expires is when the token stops verifying; zero for a token of the
	// first format, which has no expiry.
	Expires time.Time
	// Renew is set when the token should be replaced by a fresh one (Sign):
	// it is of the first format, was signed with the previous secret, or has
	// used more than half of its lifetime.
	Renew bool
}

// Verify returns the session id a token names, and false when the token is
// malformed, too long, expired, or its MAC does not verify.
func (s *Signer) Verify(tok string) (string, bool) {
	c, ok := s.Check(tok)
	return c.ID, ok
}

// Check verifies a token as Verify does and returns its claims; ok is false
// when it does not verify.
func (s *Signer) Check(tok string) (Claims, bool) {
	if len(tok) > MaxLength {
		return Claims{}, false
	}
	id, rest, ok := strings.Cut(tok, ".")
	if !ok || !session.ValidID(id) {
		return Claims{}, false
	}
	exp, mac, current := strings.Cut(rest, ".")
	if !current { // the first format: "<id>.<mac>"
		mac = exp
		for _, k := range s.keys() {
			if k.verify(mac, "", id) {
				return Claims{ID: id, Renew: true}, true
			}
		}
		return Claims{}, false
	}
	e, ok := parseExp(exp)
	if !ok || !s.now().Before(time.Unix(e, 0)) {
		return Claims{}, false
	}
	for i, k := range s.keys() {
		if k.verify(mac, "s2", id, exp) {
			expires := time.Unix(e, 0)
			renew := i > 0 || expires.Sub(s.now()) < s.ttl/2
			return Claims{ID: id, Expires: expires, Renew: renew}, true
		}
	}
	return Claims{}, false
}

// Ticket returns a ticket for purpose (PurposeWS or PurposeLeave) of session
// id at gate, valid for TicketTTL. It returns an error for an unknown
// purpose, an invalid session id or an invalid gate name.
func (s *Signer) Ticket(purpose, gate, id string) (string, error) {
	if purpose != PurposeWS && purpose != PurposeLeave {
		return "", fmt.Errorf("token: unknown ticket purpose %q", purpose)
	}
	if !session.ValidID(id) || !session.ValidGateName(gate) {
		return "", errors.New("token: invalid session id or gate")
	}
	exp := strconv.FormatInt(s.now().Add(TicketTTL).Unix(), 10)
	var sum [sha256.Size]byte
	return exp + "." + id + "." + base64.RawURLEncoding.EncodeToString(s.cur.sum(sum[:0], "t1", purpose, gate, id, exp)), nil
}

// VerifyTicket returns the session id a ticket names, and false unless it was
// issued for this purpose and gate under the current or the previous secret
// and has not expired. A claim ticket (PurposeClaim) never verifies here: see
// VerifyClaimTicket.
func (s *Signer) VerifyTicket(ticket, purpose, gate string) (string, bool) {
	if purpose == PurposeClaim {
		return "", false
	}
	id, _, err := s.verifyTicket(ticket, "t1", purpose, gate, time.Second)
	return id, err == nil
}

// verifyTicket checks a ticket "<exp>.<id>.<mac>" whose expiry counts in
// unit from the epoch and whose MAC is of (domain, purpose, gate, id, exp)
// under the current or the previous secret; it returns the id and the
// expiry, ErrTicketExpired when the MAC verifies but the expiry has passed,
// or ErrTicketInvalid.
func (s *Signer) verifyTicket(ticket, domain, purpose, gate string, unit time.Duration) (string, time.Time, error) {
	if len(ticket) > MaxLength {
		return "", time.Time{}, ErrTicketInvalid
	}
	exp, rest, ok := strings.Cut(ticket, ".")
	if !ok {
		return "", time.Time{}, ErrTicketInvalid
	}
	id, mac, ok := strings.Cut(rest, ".")
	if !ok || !session.ValidID(id) {
		return "", time.Time{}, ErrTicketInvalid
	}
	e, ok := parseExp(exp)
	if !ok || e > math.MaxInt64/int64(unit) {
		return "", time.Time{}, ErrTicketInvalid
	}
	for _, k := range s.keys() {
		if !k.verify(mac, domain, purpose, gate, id, exp) {
			continue
		}
		expires := time.Unix(0, e*int64(unit))
		if !s.now().Before(expires) {
			return "", time.Time{}, ErrTicketExpired
		}
		return id, expires, nil
	}
	return "", time.Time{}, ErrTicketInvalid
}

func (s *Signer) keys() []*keyState {
	if s.prev == nil {
		return []*keyState{s.cur}
	}
	return []*keyState{s.cur, s.prev}
}

// parseExp reads a decimal expiry: digits only, no sign, no leading zero.
func parseExp(s string) (int64, bool) {
	if s == "" || len(s) > maxExpLength || s[0] == '0' {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	e, err := strconv.ParseInt(s, 10, 64)
	return e, err == nil
}

// verify reports whether mac (encoded) is the MAC of the parts. With an
// empty domain the MAC is of the single part alone (the first format).
func (k *keyState) verify(mac, domain string, parts ...string) bool {
	if len(mac) != macLength {
		return false
	}
	// Compare raw MACs: decode the token's (strictly: no padding, no stray
	// bits) rather than encode ours.
	var got, want [sha256.Size]byte
	if n, err := base64.RawURLEncoding.Strict().Decode(got[:], []byte(mac)); err != nil || n != sha256.Size {
		return false
	}
	return hmac.Equal(got[:], k.sum(want[:0], domain, parts...))
}

// sum appends to b the HMAC of domain and parts, each followed by a zero
// byte; with an empty domain, of the one part alone.
func (k *keyState) sum(b []byte, domain string, parts ...string) []byte {
	m := k.macs.Get().(*macState)
	msg := m.msg[:0]
	if domain == "" {
		msg = append(msg, parts[0]...)
	} else {
		msg = append(msg, domain...)
		for _, p := range parts {
			msg = append(msg, 0)
			msg = append(msg, p...)
		}
	}
	b = k.hash(m, msg, b)
	return b
}

// sumToken writes to mac the HMAC of a current-format session token's
// message, "s2\x00<id>\x00<exp>" (sum(_, "s2", id, exp) without the
// strings).
func (k *keyState) sumToken(mac *[sha256.Size]byte, id string, exp []byte) {
	m := k.macs.Get().(*macState)
	msg := append(m.msg[:0], "s2\x00"...)
	msg = append(msg, id...)
	msg = append(msg, 0)
	msg = append(msg, exp...)
	k.hash(m, msg, mac[:0])
}

// hash returns b with the HMAC of msg appended, and puts m (holding msg as
// its scratch buffer) back in the pool.
func (k *keyState) hash(m *macState, msg, b []byte) []byte {
	m.h.Reset()
	m.h.Write(msg)
	b = m.h.Sum(b)
	if cap(msg) <= maxPooledMsg {
		m.msg = msg[:0]
	}
	k.macs.Put(m)
	return b
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
