package session

import (
	"math"
	"time"
)

// The rules of the waiting line, as pure functions. A Store calls them inside
// its transaction with the rows and counters it read there, then writes what
// they decided. Nothing here does I/O or reads a clock.
//
// A session's status only moves forward: a session is inserted waiting or
// active, a waiting session may become active (Promote), and any session may
// be deleted (DecideRelease, DecidePurge). No rule turns an active session
// back into a waiting one. Stores rely on it: with positions handed out in
// order and each lane promoted in position order (the priority lane first,
// priority.go), a normal waiter is promoted only once nobody waits below it,
// so the first waiter can be sought from a lower bound that only grows; the
// priority lane is sought on its own. sessiontest checks it of every Store.

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
	// Promote) in the same transaction after this outcome is applied; the
	// Store admits no more of them than the gate's Pace allows (Pace.Allow).
	Promote int64
	// Pace is the gate's pacing after this outcome (DecideJoin only): the
	// Store keeps it for the next decision.
	Pace Pace
	// Note is the lifecycle event the outcome records beyond the changes a
	// Store reports anyway (EventActivated, EventQueued, EventRefreshed...):
	// EventReturned, EventLeft or EventClaimed (see history.go), 0 for none.
	// The Store reports it after those, with Outcome.Session.
	Note EventKind
}

// Add returns c with every field of d added.
func (c Counters) Add(d Counters) Counters {
	return Counters{
		NextPosition: c.NextPosition + d.NextPosition,
		Active:       c.Active + d.Active,
		Waiting:      c.Waiting + d.Waiting,
	}
}

// RepairCounters checks a gate's stored counters against what its rows
// hold (active and waiting rows counted, the largest position of a row, 0
// for none), as a store reads them at open: the counters become the counts,
// and the next position is raised above every position (never lowered:
// positions are never reused). It returns the counters to keep and whether
// they differ from stored.
func RepairCounters(stored Counters, activeRows, waitingRows, maxPosition int64) (Counters, bool) {
	fixed := Counters{NextPosition: max(stored.NextPosition, maxPosition+1, 1), Active: activeRows, Waiting: waitingRows}
	return fixed, fixed != stored
}

// DecideJoin decides join(session), which is a sign of life: a waiter's
// last sign of life becomes now (it keeps its place); an active session is
// refreshed and, when promoted and unclaimed, claims its slot. A new session
// takes the next position and is active only when the gate's mode admits
// (ModeOpen), a slot is free, nobody is waiting (no queue jumping) and the
// pacing p has a token at now; else it waits. In ModeReject a new session is
// refused with an ErrGateClosed error (existing ones are treated as above).
// existing is nil when the session has no row. Outcome.Pace is the pacing
// after the decision, which the Store keeps. A newcomer is refused with a
// CodeUnavailable error when c.NextPosition is not a position that can be
// given and followed (below 1, or the last int64): positions never wrap.
func DecideJoin(cfg GateConfig, c Counters, p Pace, existing *Session, id string, now time.Time) (Outcome, error) {
	if existing != nil {
		s := *existing
		s.LastActive = now
		if LinkOnly(*existing) { // a called-back session's slot waits for its link
			return Outcome{Action: ActionUpdate, Session: s, Pace: p}, nil
		}
		s.ClaimDeadline = time.Time{}
		return Outcome{Action: ActionUpdate, Session: s, Pace: p, Note: joinNote(existing)}, nil
	}
	if cfg.Mode == ModeReject {
		return Outcome{Action: ActionNone, Pace: p}, Errorf(CodeGateClosed, "gate %q is closed to new sessions", cfg.Name)
	}
	if c.NextPosition < 1 || c.NextPosition == math.MaxInt64 {
		// Positions never wrap: a counter damaged by hand or a restore
		// would put the newcomer ahead of everyone in line.
		// Unavailable, not internal: the op fails alone, and the other
		// ops of its transaction (other gates' among them) go through.
		return Outcome{Action: ActionNone, Pace: p}, Errorf(CodeUnavailable, "gate %q: next position %d is out of range (damaged counters? a restart repairs them)", cfg.Name, c.NextPosition)
	}
	s := Session{Gate: cfg.Name, ID: id, Position: c.NextPosition, CreatedAt: now, LastActive: now}
	delta := Counters{NextPosition: 1}
	admit := cfg.Mode.Admits() && c.Active < cfg.ActiveLimit && c.Waiting == 0
	if admit {
		var granted int64
		granted, p = p.Allow(cfg, 1, now)
		admit = granted == 1
	}
	if admit {
		s.Status = StatusActive
		delta.Active = 1
	} else {
		s.Status = StatusWaiting
		delta.Waiting = 1
	}
	return Outcome{Action: ActionInsert, Session: s, Delta: delta, Pace: p}, nil
}

// DecideLeave decides leave(session), a departure: the session's last sign
// of life becomes now, so a waiter is purged WaitingTimeout later unless it
// shows another; an active session is only refreshed (leaving does not claim
// a promoted slot). An absent session is left alone, so leave is idempotent.
func DecideLeave(existing *Session, now time.Time) Outcome {
	if existing == nil {
		return Outcome{Action: ActionNone}
	}
	s := *existing
	s.LastActive = now
	return Outcome{Action: ActionUpdate, Session: s, Note: EventLeft}
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
		o.Promote = Promotions(cfg, c.Add(o.Delta))
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

// Promotable reports whether a promotion limited to the sessions in line
// before position below may promote the waiting session s; a zero below
// limits nothing. An update passes the gate's next position when it began:
// it reads the gate's configuration once, then, and runs over many
// transactions, for more than a second on a long line, so a waiter that
// joined meanwhile is not its to promote (a pre-queue's first arrivals,
// when the pre-queue opened during the update, would be admitted before
// the draw). Positions, not clocks: a clock stepped back or an instance's
// skew cannot hold a waiter back. An op of one transaction (a release, a
// purge) passes zero: its configuration is read moments before it commits,
// and the slot it frees goes to the first waiter at once. The stores stop
// at a lane's first waiter that is not promotable, so promotions keep the
// line's order; the next op promotes it.
func Promotable(s Session, below int64) bool {
	return below == 0 || s.Position < below
}

// Promote decides the promotion of one waiting session to active. With a
// claim timeout the promoted session is unclaimed until its first sign of
// life, and is purged at its ClaimDeadline without one.
func Promote(cfg GateConfig, waiting Session, now time.Time) Outcome {
	s := waiting
	s.Status = StatusActive
	s.LastActive = now
	s.ClaimDeadline = time.Time{}
	if w := ClaimWindow(cfg, waiting); w > 0 {
		s.ClaimDeadline = now.Add(w)
	}
	return Outcome{Action: ActionUpdate, Session: s, Delta: Counters{Active: 1, Waiting: -1}}
}

// DecideTouch decides a coalesced sign of life t for a stored session: its
// LastActive moves forward to t's (never back), and t.ClaimDeadline claims
// the slot of the promotion it names when the session still waits for that
// claim (awaitsClaim): a sign of life seen under an earlier promotion of
// the same session id refreshes the row but claims nothing. An absent
// session is left alone.
func DecideTouch(existing *Session, t Touch) Outcome {
	if existing == nil {
		return Outcome{Action: ActionNone}
	}
	s := *existing
	changed := false
	if t.LastActive.After(s.LastActive) {
		s.LastActive = t.LastActive
		changed = true
	}
	var note EventKind
	if awaitsClaim(*existing, t.ClaimDeadline) {
		s.ClaimDeadline = time.Time{}
		changed = true
		note = EventClaimed
	}
	if !changed {
		return Outcome{Action: ActionNone, Session: s}
	}
	return Outcome{Action: ActionUpdate, Session: s, Note: note}
}

// awaitsClaim reports whether s is a promoted session whose slot waits to
// be claimed by the promotion of the given claim deadline. A claim deadline
// names its promotion, to the nanosecond: a claim (a claim link's or a
// Touch's) carrying the deadline of another promotion of the same session
// id, or none, claims nothing. It does not look at the clock.
func awaitsClaim(s Session, deadline time.Time) bool {
	return s.Status == StatusActive && !s.ClaimDeadline.IsZero() && s.ClaimDeadline.Equal(deadline)
}

// PromotionCount is how many waiters to promote given the counters: as many
// as there are free slots, but no more than are waiting. Never negative, also
// when the limit was lowered below the active count.
func PromotionCount(limit int64, c Counters) int64 {
	free := limit - c.Active
	n := min(free, c.Waiting)
	return max(n, 0)
}

// Promotions is how many waiters the gate may promote given its counters:
// PromotionCount in ModeOpen, none in ModeQueueAll and ModeReject. The Store
// admits no more of them than the gate's Pace allows.
func Promotions(cfg GateConfig, c Counters) int64 {
	if !cfg.Mode.Admits() {
		return 0
	}
	return PromotionCount(cfg.ActiveLimit, c)
}

// Pace is a gate's admission pacing, a token bucket as a value: Tokens
// admissions may happen at At; tokens come back at NewUsersPerMinute/60 per
// second, up to a burst of one second's worth (at least one). The zero Pace
// is a full bucket. A Store keeps one per gate with the gate's counters
// (saved in the same transaction, so a restart hands out no fresh burst and
// instances sharing a Store share one bucket) and passes it to DecideJoin
// and Allow.
type Pace struct {
	Tokens float64
	At     time.Time
}

// paceEpsilon absorbs the rounding of float refills: a token 1e-9 short is
// a token.
const paceEpsilon = 1e-9

// burst is the most tokens the bucket holds: one second's worth, at least
// one.
func paceBurst(perMinute int64) float64 { return max(1, float64(perMinute)/60) }

// refill returns the bucket at now. A clock that went back adds nothing.
func (p Pace) refill(perMinute int64, now time.Time) Pace {
	burst := paceBurst(perMinute)
	if p.At.IsZero() {
		return Pace{Tokens: burst, At: now}
	}
	if el := now.Sub(p.At); el > 0 {
		p.Tokens += el.Seconds() * float64(perMinute) / 60
		p.At = now
	}
	p.Tokens = min(p.Tokens, burst)
	return p
}

// Available is how many admissions cfg's pacing allows at now: all of them
// (math.MaxInt64) without pacing.
func (p Pace) Available(cfg GateConfig, now time.Time) int64 {
	if cfg.NewUsersPerMinute <= 0 {
		return math.MaxInt64
	}
	return int64(p.refill(cfg.NewUsersPerMinute, now).Tokens + paceEpsilon)
}

// Allow takes up to n admissions from the bucket at now and returns how many
// it granted and the bucket after them. Without pacing it grants all n and
// returns p as it is.
func (p Pace) Allow(cfg GateConfig, n int64, now time.Time) (int64, Pace) {
	if cfg.NewUsersPerMinute <= 0 || n <= 0 {
		return max(n, 0), p
	}
	p = p.refill(cfg.NewUsersPerMinute, now)
	k := min(n, int64(p.Tokens+paceEpsilon))
	p.Tokens = max(p.Tokens-float64(k), 0)
	return k, p
}

// PurgeReason says why update() purges a session, and (Released) why a
// session left otherwise: Event.Reason carries it.
type PurgeReason uint8

// The reasons a session is stale, and Released.
const (
	NotStale  PurgeReason = iota
	Gone                  // a waiter with no sign of life for WaitingTimeout
	Idle                  // an active session not seen for ActiveTimeout
	Unclaimed             // a promoted session that did not claim its slot by its ClaimDeadline
	// Released: the session was ended explicitly (release, or its last
	// socket closed past ReleaseOnDisconnect). StaleReason never returns it.
	Released
)

// String names the reason as metrics and history do.
func (r PurgeReason) String() string {
	switch r {
	case Gone:
		return "gone"
	case Idle:
		return "idle"
	case Unclaimed:
		return "unclaimed"
	case Released:
		return "released"
	}
	return "not_stale"
}

// StaleCutoffs returns the instants before which a session's last sign of
// life makes it stale: a waiting session last seen before waitingCutoff, or
// an active session last seen before activeCutoff. A session exactly at the
// cutoff is not stale yet. An unclaimed session is also stale once now is
// past its ClaimDeadline. A Store that selects stale rows in its own query
// language derives the bounds from here and must select exactly the rows
// StaleReason names.
func StaleCutoffs(cfg GateConfig, now time.Time) (waitingCutoff, activeCutoff time.Time) {
	return now.Add(-cfg.WaitingTimeout), now.Add(-cfg.ActiveTimeout)
}

// SeenAt is the session's last sign of life for the staleness rule:
// LastActive, or CreatedAt for a row written before presence existed.
func (s Session) SeenAt() time.Time {
	if s.LastActive.IsZero() {
		return s.CreatedAt
	}
	return s.LastActive
}

// StaleReason says whether, and why, update() at now purges s. A waiting
// session with Notify set is never purged for absence (it was told it may
// leave); promoted with Notify, it is purged only past its claim deadline.
func StaleReason(cfg GateConfig, s Session, now time.Time) PurgeReason {
	waitingCutoff, activeCutoff := StaleCutoffs(cfg, now)
	if s.Status == StatusActive {
		if !s.ClaimDeadline.IsZero() && now.After(s.ClaimDeadline) {
			return Unclaimed
		}
		if s.Notify && !s.ClaimDeadline.IsZero() {
			// Called back: its claim window alone decides.
			return NotStale
		}
		if s.SeenAt().Before(activeCutoff) {
			return Idle
		}
		return NotStale
	}
	if !s.Notify && s.SeenAt().Before(waitingCutoff) {
		return Gone
	}
	return NotStale
}

// IsStale reports whether update() at now purges s.
func IsStale(cfg GateConfig, s Session, now time.Time) bool {
	return StaleReason(cfg, s, now) != NotStale
}
