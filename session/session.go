package session

import (
	"fmt"
	"time"
)

// Status is the state of a session in its gate: waiting in line or active.
type Status string

// The two statuses a stored session can have.
const (
	StatusWaiting Status = "waiting"
	StatusActive  Status = "active"
)

// Valid reports whether s is one of the defined statuses.
func (s Status) Valid() bool { return s == StatusWaiting || s == StatusActive }

// Session is one row of a gate's line.
type Session struct {
	Gate     string
	ID       string
	Position int64 // global in its gate, monotonically increasing, never reused
	Status   Status
	// LastActive is the session's last sign of life as persisted: its join,
	// a refresh, a request or an open socket naming it (coalesced), or its
	// departure. A waiter is purged WaitingTimeout after it, an active session
	// ActiveTimeout after it. It is the zero time only for rows written
	// before presence existed (a waiting session that had not left); the
	// rules then read CreatedAt instead.
	LastActive time.Time
	CreatedAt  time.Time
	// ClaimDeadline is set on a session promoted from the line while it has
	// shown no sign of life since (unclaimed): past it, the session is
	// purged and its slot passed on. Zero once claimed, and for sessions
	// admitted at join (the join is their sign of life).
	ClaimDeadline time.Time
	// Notify is set by the waiter's backend (Waitlist.SetNotify): the waiter
	// may leave and is called back (the promoted webhook) when it reaches
	// the front. A waiting notify session is not purged for absence, and
	// its claim window is the gate's NotifyClaimTimeout (see ClaimWindow).
	Notify bool
	// Lane is the waiting lane the session joined (LanePriority when it gave
	// a valid code); it never changes.
	Lane Lane
}

// GateConfig is what the rules need to know of a gate.
type GateConfig struct {
	Name string
	// ActiveLimit is the most sessions that may be active at once.
	ActiveLimit int64
	// ActiveTimeout: an active session whose last activity is older than this
	// is purged by the next update.
	ActiveTimeout time.Duration
	// WaitingTimeout: a waiting session that shows no sign of life for this
	// long (beacon or not) is purged by the next update.
	WaitingTimeout time.Duration
	// ClaimTimeout: a promoted session that shows no sign of life within this
	// is purged and its slot passed on at once. Zero: promotions need no
	// claim.
	ClaimTimeout time.Duration
	// ReleaseOnDisconnect: when the last socket of an active session closes
	// and no sign of life follows within this grace, the session is released
	// at once. Zero: off.
	ReleaseOnDisconnect time.Duration
	// Mode says who gets in: ModeOpen (the zero value, "" reads as open),
	// ModeQueueAll or ModeReject.
	Mode Mode
	// NewUsersPerMinute caps admissions (at join and promotions) at this
	// many per minute, spread evenly, with a burst of at most one second's
	// worth (see Pace). Zero: no pacing.
	NewUsersPerMinute int64
	// NotifyClaimTimeout is the claim window of a session promoted with
	// Notify set (it was called back and must come from a mail or a push).
	// Zero: DefaultNotifyClaimTimeout.
	NotifyClaimTimeout time.Duration
	// AdmissionTTL is the lifetime of the gate's admission tokens (issued
	// by the sidecar, see gate.Admissions): 0 for none, else 1s to
	// MaxAdmissionTTL. The session package only keeps it with the rest.
	AdmissionTTL time.Duration
}

// MaxAdmissionTTL bounds GateConfig.AdmissionTTL (token.MaxAdmissionTTL).
const MaxAdmissionTTL = 24 * time.Hour

// String renders the configuration for logs.
func (c GateConfig) String() string {
	mode := c.Mode
	if mode == "" {
		mode = ModeOpen
	}
	return fmt.Sprintf("limit=%d active_timeout=%v waiting_timeout=%v claim_timeout=%v release_on_disconnect=%v mode=%s new_users_per_minute=%d",
		c.ActiveLimit, c.ActiveTimeout, c.WaitingTimeout, c.ClaimTimeout, c.ReleaseOnDisconnect, mode, c.NewUsersPerMinute)
}

// Mode is a gate's admission mode.
type Mode string

// The modes of a gate.
const (
	// ModeOpen admits new sessions while slots are free and nobody waits,
	// and promotes waiters into freed slots.
	ModeOpen Mode = "open"
	// ModeQueueAll puts every new session in line and promotes nobody;
	// active sessions go on (maintenance, a sale that has not started).
	ModeQueueAll Mode = "queue_all"
	// ModeReject refuses new sessions (ErrGateClosed) and promotes nobody;
	// existing sessions keep their place and status.
	ModeReject Mode = "reject"
)

// Valid reports whether m is a mode; "" is read as ModeOpen.
func (m Mode) Valid() bool { return m == "" || m == ModeOpen || m == ModeQueueAll || m == ModeReject }

// Admits reports whether the mode admits anyone new: open, or "".
func (m Mode) Admits() bool { return m == "" || m == ModeOpen }

// MaxNewUsersPerMinute bounds GateConfig.NewUsersPerMinute.
const MaxNewUsersPerMinute = 1 << 40

// MaxWindow bounds a gate's claim windows and its release_on_disconnect
// grace: a year. A deadline is stored in Unix nanoseconds, which end in
// 2262; a window of a few million hours wrapped around into the past and
// had every promoted session purged at once.
const MaxWindow = 365 * 24 * time.Hour

// Validate returns an ErrInvalidArgument error naming the first field that is
// out of range.
func (c GateConfig) Validate() error {
	switch {
	case !ValidGateName(c.Name):
		return Errorf(CodeInvalidArgument, "gate name %q: want 1-64 characters of a-z, A-Z, 0-9, '-', '_' or '.'", c.Name)
	case c.ActiveLimit < 0:
		return Errorf(CodeInvalidArgument, "gate %q: active_limit %d: must not be negative", c.Name, c.ActiveLimit)
	case c.ActiveTimeout <= 0:
		return Errorf(CodeInvalidArgument, "gate %q: active_timeout %v: must be positive", c.Name, c.ActiveTimeout)
	case c.WaitingTimeout <= 0:
		return Errorf(CodeInvalidArgument, "gate %q: waiting_timeout %v: must be positive", c.Name, c.WaitingTimeout)
	case c.ClaimTimeout < 0 || c.ClaimTimeout > MaxWindow:
		return Errorf(CodeInvalidArgument, "gate %q: claim_timeout %v: must be from 0 to %v", c.Name, c.ClaimTimeout, MaxWindow)
	case c.NotifyClaimTimeout < 0 || c.NotifyClaimTimeout > MaxWindow:
		return Errorf(CodeInvalidArgument, "gate %q: notify_claim_timeout %v: must be from 0 to %v", c.Name, c.NotifyClaimTimeout, MaxWindow)
	case c.AdmissionTTL != 0 && (c.AdmissionTTL < time.Second || c.AdmissionTTL > MaxAdmissionTTL):
		return Errorf(CodeInvalidArgument, "gate %q: admission_token.ttl %v: must be 0 (no admission tokens) or from 1s to %v", c.Name, c.AdmissionTTL, MaxAdmissionTTL)
	case c.ReleaseOnDisconnect < 0 || c.ReleaseOnDisconnect > MaxWindow:
		return Errorf(CodeInvalidArgument, "gate %q: release_on_disconnect %v: must be from 0 to %v", c.Name, c.ReleaseOnDisconnect, MaxWindow)
	case !c.Mode.Valid():
		return Errorf(CodeInvalidArgument, "gate %q: mode %q: want open, queue_all or reject", c.Name, c.Mode)
	case c.NewUsersPerMinute < 0 || c.NewUsersPerMinute > MaxNewUsersPerMinute:
		return Errorf(CodeInvalidArgument, "gate %q: new_users_per_minute %d: must be 0 (no pacing) to %d", c.Name, c.NewUsersPerMinute, int64(MaxNewUsersPerMinute))
	}
	return nil
}

// MaxIDLength is the longest session id accepted.
const MaxIDLength = 128

// ValidGateName reports whether name can name a gate: 1 to 64 characters of
// ASCII letters, digits, '-', '_' and '.'.
func ValidGateName(name string) bool {
	return validName(name, 64)
}

// ValidID reports whether id can name a session: 1 to MaxIDLength printable
// ASCII characters other than space and '.', which separates a token's id
// from its MAC.
func ValidID(id string) bool {
	if len(id) == 0 || len(id) > MaxIDLength {
		return false
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c <= ' ' || c > '~' || c == '.' {
			return false
		}
	}
	return true
}

func validName(s string, max int) bool {
	if len(s) == 0 || len(s) > max {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.'
		if !ok {
			return false
		}
	}
	return true
}

func checkID(id string) error {
	if !ValidID(id) {
		return Errorf(CodeInvalidArgument, "session id: want 1-%d printable ASCII characters without spaces or '.'", MaxIDLength)
	}
	return nil
}

// Counters are a gate's persisted counters, kept in the same transaction as
// the rows they count.
type Counters struct {
	// NextPosition is the position the next new session gets. It only grows.
	NextPosition int64
	Active       int64
	Waiting      int64
}

// GateState is a gate's counters plus the bounds of its waiting line, as a
// Store reads them inside a transaction.
type GateState struct {
	Counters
	// FirstWaitingPosition is the smallest position of a waiting session; when
	// nobody waits it equals NextPosition.
	FirstWaitingPosition int64
	// LastWaitingPosition is the largest position of a waiting session; when
	// nobody waits it equals NextPosition-1, so that the line length
	// LastWaitingPosition-FirstWaitingPosition+1 is 0.
	LastWaitingPosition int64
}

// GlobalView is the one message per gate that every client receives; each
// client computes its own place from it:
//
//	place   = position - firstWaitingPosition + 1
//	in line = lastWaitingPosition - firstWaitingPosition + 1
type GlobalView struct {
	Gate                 string `json:"gate"`
	FirstWaitingPosition int64  `json:"firstWaitingPosition"`
	LastWaitingPosition  int64  `json:"lastWaitingPosition"`
	// Waiting is the real number of waiting sessions, which is smaller than
	// the line length when people ahead have left.
	Waiting int64 `json:"waiting"`
	Active  int64 `json:"active"`
	Limit   int64 `json:"limit"`
	// AdmittedPerMinute is the rate at which waiters were promoted over the
	// last few minutes, for an estimated wait. Zero when nobody was promoted.
	AdmittedPerMinute float64 `json:"admittedPerMinute"`
	// Buckets summarises where the waiters are, so that a client computes an
	// exact place even after people ahead of it left: pairs of
	// [offset, count], where offset is the first position of a bucket minus
	// FirstWaitingPosition (every bucket starts at a waiter) and count the
	// waiters from there up to the next bucket's first position. The counts
	// add up to Waiting. At most MaxBuckets pairs; empty when nobody waits.
	Buckets []int64 `json:"buckets,omitempty"`
	// Priority describes the priority lane, served before the lane above;
	// nil when nobody waits in it (see priority.go). While it is set, the
	// fields above describe the normal lane only.
	Priority *LaneView `json:"priority,omitempty"`
}

// Equal reports whether two views carry the same values.
func (v GlobalView) Equal(o GlobalView) bool {
	same := v.Gate == o.Gate && v.FirstWaitingPosition == o.FirstWaitingPosition &&
		v.LastWaitingPosition == o.LastWaitingPosition && v.Waiting == o.Waiting &&
		v.Active == o.Active && v.Limit == o.Limit && v.AdmittedPerMinute == o.AdmittedPerMinute
	if !same || len(v.Buckets) != len(o.Buckets) || !v.Priority.equal(o.Priority) {
		return false
	}
	for i := range v.Buckets {
		if v.Buckets[i] != o.Buckets[i] {
			return false
		}
	}
	return true
}

// MaxBuckets is the most buckets a GlobalView carries, which bounds the
// global message (about 2 KB at a million waiters).
const MaxBuckets = 160

// MinBucketSize is the fewest waiters a bucket holds when there are enough.
const MinBucketSize = 8

// EstimatePlace is the place a client computes from the global view alone
// for a waiter at position: the waiters of every bucket that ends before it,
// plus an interpolation inside its own bucket, plus one. It is 0 when the
// position is not in the line. The snippet does the same arithmetic.
func (v GlobalView) EstimatePlace(position int64) int64 {
	return estimatePlace(v.FirstWaitingPosition, v.LastWaitingPosition, v.Waiting, v.Buckets, position)
}

func estimatePlace(first, last, waiting int64, b []int64, position int64) int64 {
	if waiting == 0 || position < first || position > last {
		return 0
	}
	off := position - first
	if len(b) < 2 {
		// No summary: Convex's upper bound.
		return off + 1
	}
	var ahead int64
	for i := 0; i+1 < len(b); i += 2 {
		start, count := b[i], b[i+1]
		end := last - first // last offset of the bucket
		if i+2 < len(b) {
			end = b[i+2] - 1
		}
		if off > end {
			ahead += count
			continue
		}
		if off <= start || count <= 1 || end <= start {
			return ahead + 1
		}
		// Interpolate, rounding to the nearest: the bucket's first waiter is
		// at start, the others spread over (start, end].
		span := end - start
		inside := (2*(count-1)*(off-start) + span) / (2 * span)
		return ahead + inside + 1
	}
	return ahead + 1
}

// SessionView is what a session's own client sees: the global view plus the
// session's id, status and position, its exact place while it waits, and its
// claim deadline while it is promoted but unclaimed.
type SessionView struct {
	GlobalView
	Session  string `json:"session"`
	Status   Status `json:"status"`
	Position int64  `json:"position"`
	// Place is the session's exact 1-based place among the waiters, counted
	// by the server when the view was made; 0 when not waiting.
	Place int64 `json:"place,omitempty"`
	// ClaimDeadline is set while the session was promoted and has not
	// claimed its slot yet (see GateConfig.ClaimTimeout).
	ClaimDeadline *time.Time `json:"claimDeadline,omitempty"`
	// ClaimWindow is the claim window in seconds (ClaimWindow of the gate's
	// configuration and the session) while the session waits or is promoted
	// and unclaimed: once promoted, it must show a sign of life within it.
	// 0 (absent) when the gate has none or the slot is claimed. A client
	// that polls asks again well within it (guard.RetryAfter).
	ClaimWindow float64 `json:"claimWindow,omitempty"`
	// Admission is the session's admission token (a JWT, see gate/token),
	// set by the sidecar on join and status answers once the session is
	// active and has claimed its slot, at gates with admission tokens.
	Admission string `json:"admission,omitempty"`
	// Notify is set while the session is to be called back (SetNotify).
	Notify bool `json:"notify,omitempty"`
	// Lane is "priority" for a session of the priority lane (its place
	// counts that lane: GlobalView.Priority); absent in the normal lane.
	Lane string `json:"lane,omitempty"`
	// Draw is DrawPending while the session's place is still to be drawn
	// by a shuffled event, DrawDrawn once the current event drew it (see
	// DrawOf); set by the sidecar on join and status answers.
	Draw string `json:"draw,omitempty"`
}

// String renders the view for logs.
func (v GlobalView) String() string {
	return fmt.Sprintf("gate=%s first=%d last=%d waiting=%d active=%d limit=%d",
		v.Gate, v.FirstWaitingPosition, v.LastWaitingPosition, v.Waiting, v.Active, v.Limit)
}

// Clock tells the time. The service reads it for every rule; tests pass a
// fake one.
type Clock interface {
	Now() time.Time
}

// SystemClock is the wall clock.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }
