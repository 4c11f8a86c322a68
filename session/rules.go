package session

import "time"

// The rules of the waiting line, as pure functions. A Store calls them inside
// its transaction with the rows and counters it read there, then writes what
// they decided. Nothing here does I/O or reads a clock.
//
// A session's status only moves forward: a session is inserted waiting or
// active, a waiting session may become active (Promote), and any session may
// be deleted (DecideRelease, DecidePurge). No rule turns an active session
// back into a waiting one. Stores rely on it: with positions handed out in
// order and promotions in position order, every active position of a gate is
// below every waiting one, so the first waiter can be sought from a lower
// bound that only grows. sessiontest checks it of every Store.

// Action says what a Store must do with a session row.
type Action uint8

// The actions a rule can decide.
const (
	ActionNone   Action = iota // leave the row as it is (or absent)
	ActionInsert               // insert Outcome.Session as a new row
	ActionUpdate               // overwrite the existing row with Outcome.Session
	ActionDelete               // delete the existing row
)

// Outcome is what a rule decided for one session.
type Outcome struct {
	Action Action
	// Session is the row as it must be stored; for ActionDelete, the row as it
	// was; for ActionNone, the existing row or the zero Session when absent.
	Session Session
	// Delta is added to the gate's counters in the same transaction.
	Delta Counters
	// Promote is how many waiters, in position order, must be promoted (with
	// Promote) in the same transaction after this outcome is applied.
	Promote int64
}

// Add returns c with every field of d added.
func (c Counters) Add(d Counters) Counters {
	return Counters{
		NextPosition: c.NextPosition + d.NextPosition,
		Active:       c.Active + d.Active,
		Waiting:      c.Waiting + d.Waiting,
	}
}

// DecideJoin decides join(session): a returning waiter's departure mark is
// cleared; an active session is refreshed; a new session takes the next
// position and is active only when a slot is free and nobody is waiting (no
// queue jumping), else it waits. existing is nil when the session has no row.
func DecideJoin(cfg GateConfig, c Counters, existing *Session, id string, now time.Time) Outcome {
	if existing != nil {
		s := *existing
		switch s.Status {
		case StatusWaiting:
			if s.LastActive.IsZero() {
				return Outcome{Action: ActionNone, Session: s}
			}
			s.LastActive = time.Time{}
		case StatusActive:
			s.LastActive = now
		}
		return Outcome{Action: ActionUpdate, Session: s}
	}
	s := Session{Gate: cfg.Name, ID: id, Position: c.NextPosition, CreatedAt: now}
	delta := Counters{NextPosition: 1}
	if c.Active < cfg.ActiveLimit && c.Waiting == 0 {
		s.Status = StatusActive
		s.LastActive = now
		delta.Active = 1
	} else {
		s.Status = StatusWaiting
		delta.Waiting = 1
	}
	return Outcome{Action: ActionInsert, Session: s, Delta: delta}
}

// DecideLeave decides leave(session): a waiting session gets its departure
// mark (LastActive = now) and is purged after the waiting timeout unless it
// joins again; an active session is only refreshed. An absent session is left
// alone, so leave is idempotent.
func DecideLeave(existing *Session, now time.Time) Outcome {
	if existing == nil {
		return Outcome{Action: ActionNone}
	}
	s := *existing
	s.LastActive = now
	return Outcome{Action: ActionUpdate, Session: s}
}

// DecideRelease decides release(session): the row is deleted now. When it was
// active, the freed slot goes at once to the first waiters, up to the limit.
// An absent session is left alone.
func DecideRelease(cfg GateConfig, c Counters, existing *Session) Outcome {
	if existing == nil {
		return Outcome{Action: ActionNone}
	}
	o := DecidePurge(*existing)
	if existing.Status == StatusActive {
		o.Promote = PromotionCount(cfg.ActiveLimit, c.Add(o.Delta))
	}
	return o
}

// DecidePurge decides the deletion of a stored session by update() (one that
// IsStale) or by release(): the row is deleted and the counter of its status
// goes down by one. It decides no promotion: update() promotes once after
// its purges, release() per DecideRelease.
func DecidePurge(s Session) Outcome {
	o := Outcome{Action: ActionDelete, Session: s}
	if s.Status == StatusActive {
		o.Delta.Active = -1
	} else {
		o.Delta.Waiting = -1
	}
	return o
}

// Promote decides the promotion of one waiting session to active.
func Promote(waiting Session, now time.Time) Outcome {
	s := waiting
	s.Status = StatusActive
	s.LastActive = now
	return Outcome{Action: ActionUpdate, Session: s, Delta: Counters{Active: 1, Waiting: -1}}
}

// PromotionCount is how many waiters to promote given the counters: as many
// as there are free slots, but no more than are waiting. Never negative, also
// when the limit was lowered below the active count.
func PromotionCount(limit int64, c Counters) int64 {
	free := limit - c.Active
	n := min(free, c.Waiting)
	return max(n, 0)
}

// StaleCutoffs returns the instants before which a session's LastActive makes
// it stale: a waiting session that left before waitingCutoff, or an active
// session last seen before activeCutoff. A session exactly at the cutoff is
// not stale yet. IsStale is written with them, and a Store that selects stale
// rows in its own query language must select exactly the rows IsStale
// reports: LastActive set and strictly before the cutoff of its status
// (sessiontest checks it).
func StaleCutoffs(cfg GateConfig, now time.Time) (waitingCutoff, activeCutoff time.Time) {
	return now.Add(-cfg.WaitingTimeout), now.Add(-cfg.ActiveTimeout)
}

// IsStale reports whether update() at now purges s. A waiting session that
// has not left (LastActive zero) is never stale.
func IsStale(cfg GateConfig, s Session, now time.Time) bool {
	if s.LastActive.IsZero() {
		return false
	}
	waitingCutoff, activeCutoff := StaleCutoffs(cfg, now)
	if s.Status == StatusActive {
		return s.LastActive.Before(activeCutoff)
	}
	return s.LastActive.Before(waitingCutoff)
}
