package token

import (
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"strconv"
	"time"

	"github.com/anteroomhq/anteroom/session"
)

// PurposeClaim is the purpose of a claim link's ticket: its first visit
// claims the promoted slot of a session that was called back (notify).
const PurposeClaim = "claim"

// claimDomain is the MAC domain of a claim ticket. It differs from other
// tickets' ("t1") because a claim ticket's expiry is in nanoseconds: no
// claim ticket verifies as another ticket, nor the reverse.
const claimDomain = "c2"

// ClaimTicket returns a PurposeClaim ticket for session id at gate that
// expires at exp (the session's claim deadline), so that a claim link never
// carries the session token and dies with the claim window. The ticket is
// "<exp>.<id>.<mac>" with exp in unix nanoseconds, so that it names one
// promotion (its claim deadline exactly, as VerifyClaimTicket returns it),
// and the MAC of "c2\x00claim\x00<gate>\x00<id>\x00<exp>". It is
// deterministic: the same arguments give the same ticket (a webhook retried
// carries the same link). It returns an error for an invalid session id or
// gate name, or an expiry not in the future.
func (s *Signer) ClaimTicket(gate, id string, exp time.Time) (string, error) {
	if !session.ValidID(id) || !session.ValidGateName(gate) {
		return "", errors.New("token: invalid session id or gate")
	}
	e := exp.UnixNano()
	if !exp.After(s.now()) || e <= 0 || !time.Unix(0, e).Equal(exp) {
		return "", errors.New("token: claim ticket expiry not in the future, or out of range")
	}
	es := strconv.FormatInt(e, 10)
	var sum [sha256.Size]byte
	return es + "." + id + "." + base64.RawURLEncoding.EncodeToString(s.cur.sum(sum[:0], claimDomain, PurposeClaim, gate, id, es)), nil
}

// Why CheckClaimTicket refuses a ticket (the other tickets' verifications
// say only whether they verify).
var (
	// ErrTicketInvalid: the ticket is malformed, was not signed under the
	// current or the previous secret, or is of another purpose or gate.
	ErrTicketInvalid = errors.New("token: ticket invalid")
	// ErrTicketExpired: the ticket was signed under the current or the
	// previous secret for this purpose and gate, and has expired.
	ErrTicketExpired = errors.New("token: ticket expired")
)

// VerifyClaimTicket returns the session id and the claim deadline (to the
// nanosecond) a claim ticket names, and false unless it was issued by
// ClaimTicket for gate under the current or the previous secret (a link
// mailed before a rotation stays good for its claim window) and has not
// expired.
func (s *Signer) VerifyClaimTicket(ticket, gate string) (string, time.Time, bool) {
	id, deadline, err := s.CheckClaimTicket(ticket, gate)
	return id, deadline, err == nil
}

// CheckClaimTicket is VerifyClaimTicket that says why it refuses a
// ticket, so that a person who opens a claim link too late can be told
// so: it returns ErrTicketExpired for a ticket ClaimTicket issued for gate
// (its MAC verifies under the current or the previous secret) whose
// deadline has passed, and ErrTicketInvalid for any other it refuses
// (malformed, forged, cut short, of another gate, or no claim ticket).
func (s *Signer) CheckClaimTicket(ticket, gate string) (string, time.Time, error) {
	return s.verifyTicket(ticket, claimDomain, PurposeClaim, gate, time.Nanosecond)
}
