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

// ClaimTicket returns a PurposeClaim ticket for session id at gate that
// expires at exp (the session's claim deadline), so that a claim link never
// carries the session token and dies with the claim window. It is
// deterministic: the same arguments give the same ticket (a webhook retried
// carries the same link). It returns an error for an invalid session id or
// gate name, or an expiry not in the future.
func (s *Signer) ClaimTicket(gate, id string, exp time.Time) (string, error) {
	if !session.ValidID(id) || !session.ValidGateName(gate) {
		return "", errors.New("token: invalid session id or gate")
	}
	e := exp.Unix()
	if !exp.After(s.now()) || e <= 0 {
		return "", errors.New("token: claim ticket expiry not in the future")
	}
	es := strconv.FormatInt(e, 10)
	var sum [sha256.Size]byte
	return es + "." + id + "." + base64.RawURLEncoding.EncodeToString(s.cur.sum(sum[:0], "t1", PurposeClaim, gate, id, es)), nil
}
