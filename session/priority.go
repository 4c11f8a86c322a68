package session

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"time"
	"unicode/utf8"
)

// Priority codes (issue 13). An operator (or an app's backend, for a
// referral) creates a code with a number of uses and an expiry; a join that
// gives it puts a new waiting session in the gate's priority lane, which is
// promoted before the normal lane. The rules below are pure: a Store reads
// the code's row in the join's own transaction, asks DecideCode, and writes
// the use it decided in that same transaction, so a code with one use and
// fifty concurrent joins gives priority exactly once.
//
// Places: a waiter's place counts only the waiters of its own lane ahead of
// it. Nobody in the normal lane ever sees their place rise because of a
// priority join (CrowdHandler's rule): a priority join enters the other
// lane, and a normal join enters behind. GlobalView's lane fields describe
// the normal lane and GlobalView.Priority the priority lane, so each client
// computes its own place from the one broadcast.

// Lane is the waiting lane of a session.
type Lane uint8

// The lanes, in the order they are served.
const (
	LaneNormal   Lane = 0 // the line everybody joins
	LanePriority Lane = 1 // sessions that gave a valid code; promoted first
)

// String names the lane as the wire does.
func (l Lane) String() string {
	if l == LanePriority {
		return "priority"
	}
	return "normal"
}

// The errors of a code given with a join. The join still happens, without
// priority: Waitlist.JoinWithCode returns them beside the view.
const (
	CodeCodeUnknown Code = "code_unknown" // no such code in this gate (or it was deleted)
	CodeCodeUsed    Code = "code_used"    // the code has no use left or has expired
)

// Sentinel errors of codes, for use with errors.Is.
var (
	ErrCodeUnknown = &Error{Code: CodeCodeUnknown, Message: "unknown code"}
	ErrCodeUsed    = &Error{Code: CodeCodeUsed, Message: "code used up or expired"}
)

// Bounds of a code as given by a client or an operator.
const (
	MaxCodeLength = 64      // bytes
	MinCodeLength = 6       // an operator's chosen code; generated ones are 26 characters
	MaxCodeUses   = 1 << 20 // uses per code
	MaxCodeTTL    = 366 * 24 * time.Hour
	MaxCodeLabel  = 128 // bytes of an operator's label
	// MaxCodesPerGate bounds the codes a gate holds (expired ones count until
	// deleted).
	MaxCodesPerGate = 100000
)

// ValidCode reports whether s can be a code: MinCodeLength to MaxCodeLength
// characters of ASCII letters, digits, '-' and '_'. Codes are compared
// exactly (case-sensitive).
func ValidCode(s string) bool {
	if len(s) < MinCodeLength || len(s) > MaxCodeLength {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// CodeID is the id a code is stored and listed under: the hex SHA-256 of
// the code. The store keeps only it, never the code itself, so a copy of
// the database gives nobody a usable code.
func CodeID(code string) string {
	h := sha256.Sum256([]byte(code))
	return hex.EncodeToString(h[:])
}

// ValidCodeID reports whether s has the form of a CodeID.
func ValidCodeID(s string) bool {
	if len(s) != 64 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

// PriorityCode is one stored code of a gate.
type PriorityCode struct {
	Gate string `json:"gate"`
	// ID is CodeID of the code.
	ID string `json:"id"`
	// Hint is the code's first four characters, so an operator recognises it.
	Hint      string    `json:"hint"`
	Label     string    `json:"label,omitempty"`
	MaxUses   int64     `json:"maxUses"`
	Used      int64     `json:"used"`
	ExpiresAt time.Time `json:"expiresAt"`
	CreatedAt time.Time `json:"createdAt"`
}

// NewPriorityCode builds the stored form of code for gate, valid for uses
// joins until expiresAt. It returns an ErrInvalidArgument error for a
// malformed gate, code or label, uses out of 1..MaxCodeUses, or an expiry
// not after now or beyond MaxCodeTTL.
func NewPriorityCode(gate, code, label string, uses int64, expiresAt, now time.Time) (PriorityCode, error) {
	switch {
	case !ValidGateName(gate):
		return PriorityCode{}, Errorf(CodeInvalidArgument, "gate name %q", gate)
	case !ValidCode(code):
		return PriorityCode{}, Errorf(CodeInvalidArgument, "code: want %d-%d characters of a-z, A-Z, 0-9, '-' or '_'", MinCodeLength, MaxCodeLength)
	case len(label) > MaxCodeLabel || !utf8.ValidString(label):
		return PriorityCode{}, Errorf(CodeInvalidArgument, "label: want at most %d bytes of UTF-8", MaxCodeLabel)
	case uses < 1 || uses > MaxCodeUses:
		return PriorityCode{}, Errorf(CodeInvalidArgument, "uses %d: want 1 to %d", uses, MaxCodeUses)
	case !expiresAt.After(now) || expiresAt.Sub(now) > MaxCodeTTL:
		return PriorityCode{}, Errorf(CodeInvalidArgument, "expiry %v: want after now and within %v", expiresAt, MaxCodeTTL)
	}
	return PriorityCode{
		Gate: gate, ID: CodeID(code), Hint: code[:4], Label: label,
		MaxUses: uses, ExpiresAt: expiresAt.UTC(), CreatedAt: now.UTC(),
	}, nil
}

// CodeDecision is what DecideCode decided for a join that gave a code.
type CodeDecision struct {
	// Lane is the lane the join's new session takes.
	Lane Lane
	// Use is set when the join uses the code up by one (Store: used + 1 in
	// the join's transaction).
	Use bool
	// Err is ErrCodeUnknown or ErrCodeUsed (wrapped) when the code does not
	// give priority; the join still happens, in the normal lane.
	Err error
}

// DecideCode decides what the code c (nil when the gate has no such code)
// does for a join whose outcome DecideJoin decided (out): a new session
// that waits takes the priority lane and uses the code once; one admitted
// at once uses nothing. For a new session, a code unknown, used up or
// expired at now is an error carried in the decision (the join goes on in
// the normal lane), also when nothing would have been used, so a client
// learns its code is bad. A session that exists keeps its lane and the code
// is ignored, error or not: a page that sends its code again on every
// reload must not be told that the code it used is used up.
func DecideCode(c *PriorityCode, out Outcome, now time.Time) CodeDecision {
	switch {
	case out.Action != ActionInsert:
		return CodeDecision{}
	case c == nil:
		return CodeDecision{Err: Errorf(CodeCodeUnknown, "no such code in this gate")}
	case c.Used >= c.MaxUses:
		return CodeDecision{Err: Errorf(CodeCodeUsed, "the code has no use left")}
	case !now.Before(c.ExpiresAt):
		return CodeDecision{Err: Errorf(CodeCodeUsed, "the code expired at %s", c.ExpiresAt.UTC().Format(time.RFC3339))}
	}
	if out.Action == ActionInsert && out.Session.Status == StatusWaiting {
		return CodeDecision{Lane: LanePriority, Use: true}
	}
	return CodeDecision{}
}

// ApplyCode returns out with d applied: the new session in d's lane.
func ApplyCode(out Outcome, d CodeDecision) Outcome {
	if out.Action == ActionInsert {
		out.Session.Lane = d.Lane
	}
	return out
}

// PromotionLanes is the order in which a Store promotes: every waiter of the
// priority lane in position order, then the normal lane in position order.
var PromotionLanes = [...]Lane{LanePriority, LaneNormal}

// CodeStore is implemented by a Store that keeps priority codes (both of
// anteroom's do). Every method returns ErrUnavailable after Close,
// ErrInvalidArgument for malformed input and a CodeInternal error on
// storage failure.
type CodeStore interface {
	// JoinWithCode is Join where the join also gives code: in the join's
	// transaction it reads the code's row, runs DecideCode after DecideJoin,
	// stores the session in the lane decided and the code's use. It returns
	// the session and the decision's error (ErrCodeUnknown, ErrCodeUsed)
	// apart from the join's own error: the join happened when err is nil.
	JoinWithCode(ctx context.Context, cfg GateConfig, id, code string, now time.Time) (s Session, codeErr error, err error)
	// CreateCode stores c. It returns ErrCodeExists when a code with that
	// id exists in the gate, and an ErrInvalidArgument error when the gate
	// holds MaxCodesPerGate codes.
	CreateCode(ctx context.Context, c PriorityCode) error
	// ListCodes returns the gate's codes, newest first.
	ListCodes(ctx context.Context, gate string) ([]PriorityCode, error)
	// DeleteCode deletes the code with that id; ErrCodeUnknown when absent.
	DeleteCode(ctx context.Context, gate, id string) error
}

// CodeCodeExists: a code of that text already exists in the gate.
const CodeCodeExists Code = "code_exists"

// ErrCodeExists is returned by CreateCode for a code that exists.
var ErrCodeExists = &Error{Code: CodeCodeExists, Message: "code exists"}

// LaneView is the priority lane in a GlobalView, with the same meaning as
// the view's own fields for the normal lane: a client of the priority lane
// computes its place from it with the same arithmetic
// (LaneView.EstimatePlace), and a client of the normal lane adds Waiting to
// its place for an estimated wait, since the priority lane goes first.
type LaneView struct {
	FirstWaitingPosition int64   `json:"firstWaitingPosition"`
	LastWaitingPosition  int64   `json:"lastWaitingPosition"`
	Waiting              int64   `json:"waiting"`
	Buckets              []int64 `json:"buckets,omitempty"`
}

// EstimatePlace is GlobalView.EstimatePlace for a waiter of the priority
// lane; 0 when the position is not in it (or v is nil).
func (v *LaneView) EstimatePlace(position int64) int64 {
	if v == nil {
		return 0
	}
	return estimatePlace(v.FirstWaitingPosition, v.LastWaitingPosition, v.Waiting, v.Buckets, position)
}

func (v *LaneView) equal(o *LaneView) bool {
	if v == nil || o == nil {
		return v == o
	}
	if v.FirstWaitingPosition != o.FirstWaitingPosition || v.LastWaitingPosition != o.LastWaitingPosition ||
		v.Waiting != o.Waiting || len(v.Buckets) != len(o.Buckets) {
		return false
	}
	for i := range v.Buckets {
		if v.Buckets[i] != o.Buckets[i] {
			return false
		}
	}
	return true
}

// AllWaiting is the number of waiters in both lanes.
func (v GlobalView) AllWaiting() int64 {
	if v.Priority != nil {
		return v.Waiting + v.Priority.Waiting
	}
	return v.Waiting
}

// EstimatePlaceIn is EstimatePlace in the named lane.
func (v GlobalView) EstimatePlaceIn(lane Lane, position int64) int64 {
	if lane == LanePriority {
		return v.Priority.EstimatePlace(position)
	}
	return v.EstimatePlace(position)
}

// ServedBefore is how many waiters are admitted before a waiter at place in
// its lane, on which its wait is estimated (place / AdmittedPerMinute): the
// place itself in the priority lane; in the normal lane, the place plus the
// priority lane's waiters, who go first. The place shown never rises; this
// may, and the wait with it, which is the honest answer.
func (v GlobalView) ServedBefore(lane Lane, place int64) int64 {
	if lane == LanePriority || v.Priority == nil {
		return place
	}
	return place + max(0, v.Priority.Waiting)
}

// LotteryEntrants returns the pre-queue waiters a scheduled event's lottery
// shuffles: those of the normal lane, in the order given. The priority lane
// is served before the normal lane anyway, and a draw that moved a position
// from one lane to the other would change both lanes' sets of positions,
// which each lane's place arithmetic counts on staying put.
func LotteryEntrants(waiters []Session) []Session {
	out := waiters[:0:0]
	for _, w := range waiters {
		if w.Lane == LaneNormal {
			out = append(out, w)
		}
	}
	return out
}
