package session

import (
	"context"
	"time"
)

// Codes of admission tokens (see AdmissionStore).
const (
	// CodeAlreadyRedeemed: the admission's jti was redeemed before (409).
	CodeAlreadyRedeemed Code = "already_redeemed"
	// CodeAdmissionNotFound: no admission has that jti: never issued, or
	// expired (404).
	CodeAdmissionNotFound Code = "admission_not_found"
	// CodeInvalidAdmission: an admission token that does not verify (400).
	CodeInvalidAdmission Code = "invalid_admission"
)

// AdmissionLeeway is the clock skew allowed around an admission's expiry:
// a token verifies, and its jti redeems, until AdmissionLeeway after it.
const AdmissionLeeway = 30 * time.Second

// Sentinels of admission tokens, for errors.Is.
var (
	ErrAlreadyRedeemed   = &Error{Code: CodeAlreadyRedeemed, Message: "admission already redeemed"}
	ErrAdmissionNotFound = &Error{Code: CodeAdmissionNotFound, Message: "no such admission"}
)

// Admission is the record of one admission token: the one a session gets
// when it is let in at a gate (claims its slot, or is admitted at join).
// There is at most one per session incarnation (gate, session, position):
// asking again returns the same record, so a session can check out once.
type Admission struct {
	ID       string // the token's jti: random, unique across gates
	Gate     string
	Session  string
	Position int64 // the session's position: a session that joins again after a purge is a new incarnation
	IssuedAt time.Time
	Expires  time.Time
	// Redeemed is when the jti was redeemed; zero while it was not.
	Redeemed time.Time
}

// AdmissionStore keeps admission records and the admission keyring. Both
// stores implement it (checked by the shared suite); it is an interface of
// its own so that a Store without it still serves gates without admission
// tokens.
type AdmissionStore interface {
	// IssueAdmission returns the admission of (a.Gate, a.Session,
	// a.Position) if one was issued, else stores a and returns it. Two
	// callers racing (several instances) get the same record. Errors:
	// ErrInvalidArgument for a malformed record, ErrUnavailable, an
	// ErrInternal-coded storage error.
	IssueAdmission(ctx context.Context, a Admission) (Admission, error)

	// RedeemAdmission marks the admission with jti id redeemed at now and
	// returns it. It succeeds once: later calls return ErrAlreadyRedeemed
	// (with the record), and concurrent ones exactly one success across
	// every instance of a shared store. ErrAdmissionNotFound when no
	// admission has that jti or it expired more than AdmissionLeeway
	// before now.
	RedeemAdmission(ctx context.Context, id string, now time.Time) (Admission, error)

	// Update prunes, for its gate, the admissions expired more than
	// AdmissionLeeway ago whose session incarnation is gone, in transactions
	// of at most its chunk.

	// AdmissionKeyring runs update on the stored keyring (nil when none yet)
	// in one read-modify-write and returns what is stored afterwards.
	// update returns the new ring and whether it changed; concurrent
	// callers (instances) see each other's writes. Errors: update's, wrapped
	// (ErrInternal-coded), ErrUnavailable, a storage error.
	AdmissionKeyring(ctx context.Context, update func(old []byte) ([]byte, bool, error)) ([]byte, error)
}

// ValidAdmission returns an ErrInvalidArgument error unless a can be stored.
func ValidAdmission(a Admission) error {
	switch {
	case !ValidID(a.ID):
		return Errorf(CodeInvalidArgument, "admission: jti %q", a.ID)
	case !ValidGateName(a.Gate) || !ValidID(a.Session) || a.Position <= 0:
		return Errorf(CodeInvalidArgument, "admission: gate %q, session %q, position %d", a.Gate, a.Session, a.Position)
	case a.IssuedAt.IsZero() || !a.Expires.After(a.IssuedAt):
		return Errorf(CodeInvalidArgument, "admission: expires %v not after issued %v", a.Expires, a.IssuedAt)
	}
	return nil
}
