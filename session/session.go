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
	// LastActive is the zero time when the stored value is null: a waiting
	// session that has not left. Active sessions always have it set.
	LastActive time.Time
	CreatedAt  time.Time
}

// GateConfig is what the rules need to know of a gate.
type GateConfig struct {
	Name string
	// ActiveLimit is the most sessions that may be active at once.
	ActiveLimit int64
	// ActiveTimeout: an active session whose last activity is older than this
	// is purged by the next update.
	ActiveTimeout time.Duration
	// WaitingTimeout: a waiting session that left (LastActive set) and has not
	// come back within this is purged by the next update.
	WaitingTimeout time.Duration
}

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
}

// SessionView is what a session's own client sees: the global view plus the
// session's id, status and position.
type SessionView struct {
	GlobalView
	Session  string `json:"session"`
	Status   Status `json:"status"`
	Position int64  `json:"position"`
}

// Place returns the session's 1-based place in line from the view it carries,
// or 0 when it is not waiting.
func (v SessionView) Place() int64 {
	if v.Status != StatusWaiting {
		return 0
	}
	return v.Position - v.FirstWaitingPosition + 1
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
