package session

import (
	"bytes"
	"slices"
	"sort"
	"time"
)

// Scheduled events: a launch with a pre-queue and an auditable lottery.
//
// A gate may have events. Before an event's PrequeueAt the gate behaves as
// configured. From PrequeueAt until the event has started, everyone new
// waits and nobody is promoted (the gate's open mode reads as queue_all);
// at the pre-queue transition the Store records the gate's next position
// (FirstPosition), so every session that arrives from then on has a
// position at or above it, and every earlier one below it. At StartsAt the
// Store, in one transaction under the gate's lock, reads the positions of
// the sessions still waiting at or above FirstPosition (the pre-queue, in
// arrival order), and, with Shuffle, permutes them among those sessions by
// LotteryOrder: the set of waiting positions does not change, so positions
// stay unique and are never reused, everyone who arrives later keeps a
// higher position than the whole pre-queue, and the place arithmetic of
// the snippet (place = position - firstWaitingPosition + 1, the buckets)
// holds as before. From the start until EndsAt (for ever without one) the
// event's overrides of the limit and pacing are in effect.
//
// Each transition is done once: the Store checks the event's stored phase
// under the gate's lock (Store.AdvanceEvent), whichever instance, sweeper
// or request gets there first.

// EventPhase is where a scheduled event is.
type EventPhase string

// The phases of an event. EventEnded is never stored: it is a started event
// past its EndsAt (PhaseAt).
const (
	EventScheduled EventPhase = "scheduled"
	EventPrequeue  EventPhase = "prequeue"
	EventStarted   EventPhase = "started"
	EventEnded     EventPhase = "ended"
)

// The error codes of scheduled events.
const (
	CodeEventNotFound Code = "event_not_found" // no event of that id in the gate
	CodeEventExists   Code = "event_exists"    // an event of that id exists already
	CodeEventLocked   Code = "event_locked"    // the event's pre-queue is open or it started: it cannot change
)

// Bounds of a scheduled event.
const (
	// MaxEventsPerGate is the most events a gate keeps.
	MaxEventsPerGate = 64
	// MaxEventLead is how far ahead an event may be scheduled.
	MaxEventLead = 366 * 24 * time.Hour
	// MaxPrequeue is the longest pre-queue (StartsAt - PrequeueAt).
	MaxPrequeue = 30 * 24 * time.Hour
	// MaxEventLength is the longest event (EndsAt - StartsAt).
	MaxEventLength = 366 * 24 * time.Hour
	// MaxEventActiveLimit bounds an event's ActiveLimit override.
	MaxEventActiveLimit = 1 << 40
)

// The commit event kinds of scheduled events (values apart from the
// others', which grow from 1).
const (
	// EventReordered: the lottery gave a waiting session a new position.
	// Event.Session is its row after the move. The set of waiting positions
	// is unchanged by a lottery, so the line's memory needs nothing; the
	// session's clients are told its new position.
	EventReordered EventKind = 32
	// EventLaunched: a scheduled event started (its lottery was drawn), in
	// the same transaction. Event.Session carries no session: its Gate
	// names the gate, its ID the scheduled event, its CreatedAt the start,
	// its Position the number of sessions in the pre-queue. It is the hook
	// of the event.started webhook.
	EventLaunched EventKind = 33
)

// ScheduledEvent is one event of a gate: its schedule and overrides, set by
// the operator, and its lottery state, kept by the Store.
type ScheduledEvent struct {
	Gate string
	// ID names the event within its gate: 1-64 characters of a-z, A-Z,
	// 0-9, '-', '_' or '.'.
	ID         string
	PrequeueAt time.Time
	StartsAt   time.Time
	// EndsAt is when the overrides stop; zero: they stay.
	EndsAt time.Time
	// Shuffle draws the lottery at StartsAt; without it the pre-queue is
	// served in arrival order.
	Shuffle bool
	// ActiveLimit and NewUsersPerMinute, when set, replace the gate's from
	// StartsAt until EndsAt.
	ActiveLimit       *int64
	NewUsersPerMinute *int64

	// The lottery state. Seed is secret until the start: never publish it
	// before Phase is EventStarted.
	Seed  []byte
	Phase EventPhase
	// FirstPosition is the gate's next position when the pre-queue opened
	// (0 before): the pre-queue is every session at or above it.
	FirstPosition int64
	// Positions are the pre-queue's positions in arrival order (ascending),
	// recorded at the start, which the lottery permuted.
	Positions []int64
	// PrequeueOpenedAt and StartedAt are when the transitions happened.
	PrequeueOpenedAt time.Time
	StartedAt        time.Time
}

// Commitment is the published commitment to the event's seed
// (LotteryCommitment), "" without a seed.
func (e ScheduledEvent) Commitment() string {
	if len(e.Seed) == 0 {
		return ""
	}
	return LotteryCommitment(e.Seed)
}

// PhaseAt is the event's phase at now: its stored phase, or EventEnded for
// a started event past its EndsAt.
func (e ScheduledEvent) PhaseAt(now time.Time) EventPhase {
	if e.Phase == EventStarted && !e.EndsAt.IsZero() && !now.Before(e.EndsAt) {
		return EventEnded
	}
	if e.Phase == "" {
		return EventScheduled
	}
	return e.Phase
}

// PhaseSpan returns the span of time [from, until) around now over which
// the PhaseAt of every one of events is what it is at now: the phases
// change with time only at the EndsAt of a started event (it reads as
// ended from then on), every other change is a change of the events
// themselves. A zero from or until leaves that side open.
func PhaseSpan(events []ScheduledEvent, now time.Time) (from, until time.Time) {
	for i := range events {
		e := &events[i]
		switch {
		case e.Phase != EventStarted || e.EndsAt.IsZero():
		case !now.Before(e.EndsAt): // ended at or before now
			if from.IsZero() || e.EndsAt.After(from) {
				from = e.EndsAt
			}
		case until.IsZero() || e.EndsAt.Before(until):
			until = e.EndsAt
		}
	}
	return from, until
}

// unixEpoch is 1970-01-01T00:00:00Z: a schedule's times are after it.
var unixEpoch = time.Unix(0, 0)

// Validate returns an ErrInvalidArgument error naming the first field of
// the schedule that is out of range (times relative to each other; see
// ValidateNew for times relative to now).
func (e ScheduledEvent) Validate() error {
	bad := func(format string, args ...any) error {
		return Errorf(CodeInvalidArgument, "event %q of gate %q: "+format, append([]any{e.ID, e.Gate}, args...)...)
	}
	switch {
	case !ValidGateName(e.Gate):
		return Errorf(CodeInvalidArgument, "event: gate name %q: want 1-64 characters of a-z, A-Z, 0-9, '-', '_' or '.'", e.Gate)
	case !ValidGateName(e.ID):
		return Errorf(CodeInvalidArgument, "event id %q: want 1-64 characters of a-z, A-Z, 0-9, '-', '_' or '.'", e.ID)
	case e.PrequeueAt.IsZero():
		return bad("prequeueAt: required")
	case e.StartsAt.IsZero():
		return bad("startsAt: required")
	case !e.PrequeueAt.After(unixEpoch):
		// The stored form writes a time as unix nanoseconds, 0 for none
		// (events_codec.go): a time at the epoch would read back as none.
		return bad("prequeueAt must be after 1970-01-01T00:00:00Z")
	case !e.StartsAt.After(e.PrequeueAt):
		return bad("startsAt must be after prequeueAt")
	case e.StartsAt.Sub(e.PrequeueAt) > MaxPrequeue:
		return bad("the pre-queue (startsAt - prequeueAt) must be at most %v", MaxPrequeue)
	case !e.EndsAt.IsZero() && !e.EndsAt.After(e.StartsAt):
		return bad("endsAt must be after startsAt")
	case !e.EndsAt.IsZero() && e.EndsAt.Sub(e.StartsAt) > MaxEventLength:
		return bad("endsAt - startsAt must be at most %v", MaxEventLength)
	case e.ActiveLimit != nil && (*e.ActiveLimit < 0 || *e.ActiveLimit > MaxEventActiveLimit):
		return bad("activeLimit must be 0 to %d", int64(MaxEventActiveLimit))
	case e.NewUsersPerMinute != nil && (*e.NewUsersPerMinute < 0 || *e.NewUsersPerMinute > MaxNewUsersPerMinute):
		return bad("newUsersPerMinute must be 0 (no pacing) to %d", int64(MaxNewUsersPerMinute))
	case e.Seed != nil && len(e.Seed) != LotterySeedSize:
		return bad("seed must be %d bytes", LotterySeedSize)
	}
	return nil
}

// ValidateNew is Validate for an event scheduled at now: it must start in
// the future, within MaxEventLead (its pre-queue may already be open).
func (e ScheduledEvent) ValidateNew(now time.Time) error {
	if err := e.Validate(); err != nil {
		return err
	}
	switch {
	case !e.StartsAt.After(now):
		return Errorf(CodeInvalidArgument, "event %q of gate %q: startsAt is not in the future", e.ID, e.Gate)
	case e.StartsAt.Sub(now) > MaxEventLead:
		return Errorf(CodeInvalidArgument, "event %q of gate %q: startsAt must be within %v from now", e.ID, e.Gate, MaxEventLead)
	}
	return nil
}

// checkOverlap returns an ErrInvalidArgument error when e's pre-queue
// overlaps that of another event of others (same id excepted): pre-queues
// follow one another.
func (e ScheduledEvent) checkOverlap(others []ScheduledEvent) error {
	n := 0
	for _, o := range others {
		if o.ID == e.ID {
			continue
		}
		n++
		if e.PrequeueAt.Before(o.StartsAt) && o.PrequeueAt.Before(e.StartsAt) {
			return Errorf(CodeInvalidArgument, "event %q of gate %q: its pre-queue overlaps that of event %q", e.ID, e.Gate, o.ID)
		}
	}
	if n >= MaxEventsPerGate {
		return Errorf(CodeInvalidArgument, "gate %q has %d events already (at most %d): remove one first", e.Gate, n, MaxEventsPerGate)
	}
	return nil
}

// EventConfig is the gate configuration in effect at now given the gate's
// events: while an event's pre-queue is open or its start not yet drawn
// (now at or past PrequeueAt, phase not started), an admitting gate reads
// as ModeQueueAll (everyone waits, nobody is promoted); while the latest
// started event runs (until EndsAt), its overrides apply.
func EventConfig(cfg GateConfig, events []ScheduledEvent, now time.Time) GateConfig {
	var cur *ScheduledEvent
	hold := false
	for i := range events {
		e := &events[i]
		switch e.PhaseAt(now) {
		case EventScheduled, EventPrequeue:
			if !now.Before(e.PrequeueAt) {
				hold = true
			}
		case EventStarted:
			if cur == nil || e.StartsAt.After(cur.StartsAt) {
				cur = e
			}
		}
	}
	if cur != nil {
		if cur.ActiveLimit != nil {
			cfg.ActiveLimit = *cur.ActiveLimit
		}
		if cur.NewUsersPerMinute != nil {
			cfg.NewUsersPerMinute = *cur.NewUsersPerMinute
		}
	}
	if hold && cfg.Mode.Admits() {
		cfg.Mode = ModeQueueAll
	}
	return cfg
}

// Due reports whether a transition of the event is due at now (the Store's
// AdvanceEvent would change it).
func (e ScheduledEvent) Due(now time.Time) bool {
	switch e.PhaseAt(now) {
	case EventScheduled:
		return !now.Before(e.PrequeueAt)
	case EventPrequeue:
		return !now.Before(e.StartsAt)
	}
	return false
}

// PrequeueHold returns cfg as an op decides with it, given the gate's
// events as stored: while one's pre-queue is open (stored phase
// EventPrequeue) an admitting gate reads as ModeQueueAll, everyone new
// waits and nobody is promoted, as EventConfig makes it from PrequeueAt on
// by the op's clock. An op's clock can be a moment behind the transition
// (its caller read the configuration just before PrequeueAt, or its
// instance's clock lags): a join into free slots, or a release's
// promotion, would otherwise let someone in ahead of the draw. The Stores
// apply it under the gate's lock, to every op that decides. damaged says
// the gate also has a stored event that does not decode and may be a
// pre-queue (DamagedEventHolds): it holds the gate the same way, until it
// is deleted.
func PrequeueHold(cfg GateConfig, stored []ScheduledEvent, damaged bool) GateConfig {
	if !cfg.Mode.Admits() {
		return cfg
	}
	if damaged {
		cfg.Mode = ModeQueueAll
		return cfg
	}
	for _, e := range stored {
		if e.Phase == EventPrequeue {
			cfg.Mode = ModeQueueAll
			break
		}
	}
	return cfg
}

// DecidePrequeue decides the pre-queue transition of e at now in a gate of
// counters c: when it is scheduled and now is at or past PrequeueAt, it
// opens, recording c.NextPosition. It reports whether the start is due too
// (the Store then reads the pre-queue and calls DecideStart).
func DecidePrequeue(e ScheduledEvent, c Counters, now time.Time) (next ScheduledEvent, changed, startDue bool) {
	next = e
	if next.Phase == "" {
		next.Phase = EventScheduled
	}
	if next.Phase == EventScheduled && !now.Before(next.PrequeueAt) {
		next.Phase = EventPrequeue
		next.FirstPosition = c.NextPosition
		next.PrequeueOpenedAt = now
		changed = true
	}
	return next, changed, next.Phase == EventPrequeue && !now.Before(next.StartsAt)
}

// DecideStart decides the start of e, whose pre-queue is open, at now:
// waiting are the positions of the sessions waiting at or above
// e.FirstPosition (ascending, the pre-queue). It returns the started event
// and, with Shuffle, the moves: the new position of each moved session by
// its old one (positions that stay are left out). Errors: ErrInvalidArgument
// for an event that is not in its pre-queue or has no valid seed.
func DecideStart(e ScheduledEvent, waiting []int64, now time.Time) (ScheduledEvent, map[int64]int64, error) {
	if e.Phase != EventPrequeue {
		return e, nil, Errorf(CodeInvalidArgument, "event %q of gate %q is %s, not in its pre-queue", e.ID, e.Gate, e.Phase)
	}
	if !sort.SliceIsSorted(waiting, func(i, j int) bool { return waiting[i] < waiting[j] }) {
		return e, nil, Errorf(CodeInvalidArgument, "event %q: pre-queue positions not ascending", e.ID)
	}
	e.Phase = EventStarted
	e.StartedAt = now
	e.Positions = append([]int64{}, waiting...)
	if !e.Shuffle {
		return e, nil, nil
	}
	served, err := LotteryOrder(e.Seed, waiting)
	if err != nil {
		return e, nil, err
	}
	all, err := lotteryMoves(waiting, served)
	if err != nil {
		return e, nil, Errorf(CodeInternal, "event %q: %w", e.ID, err)
	}
	moves := make(map[int64]int64, len(all))
	for from, to := range all {
		if from != to {
			moves[from] = to
		}
	}
	return e, moves, nil
}

// Schedule returns e's schedule and overrides as a new event would take
// them: the lottery state cleared, the given seed kept.
func (e ScheduledEvent) Schedule() ScheduledEvent {
	return ScheduledEvent{
		// As the stores keep them: UTC, whatever zone they were given in,
		// without a monotonic reading. Not through unix nanoseconds: a
		// time past 2262 would wrap around before it is validated.
		Gate: e.Gate, ID: e.ID, PrequeueAt: e.PrequeueAt.UTC(), StartsAt: e.StartsAt.UTC(), EndsAt: e.EndsAt.UTC(),
		Shuffle: e.Shuffle, ActiveLimit: e.ActiveLimit, NewUsersPerMinute: e.NewUsersPerMinute,
		Seed: e.Seed, Phase: EventScheduled,
	}
}

// SameSchedule reports whether a and b have the same schedule and
// overrides.
func SameSchedule(a, b ScheduledEvent) bool {
	eq := func(x, y *int64) bool { return x == nil && y == nil || x != nil && y != nil && *x == *y }
	return a.Gate == b.Gate && a.ID == b.ID && a.PrequeueAt.Equal(b.PrequeueAt) && a.StartsAt.Equal(b.StartsAt) &&
		a.EndsAt.Equal(b.EndsAt) && a.Shuffle == b.Shuffle && eq(a.ActiveLimit, b.ActiveLimit) && eq(a.NewUsersPerMinute, b.NewUsersPerMinute)
}

// sameEvent reports whether a and b are the same event in every field:
// equal times (whatever their location), equal overrides, seed and
// positions (nil and empty alike). Memory keeps what it holds when a
// reload from the store gives it again (eventMemory.setLocked).
func sameEvent(a, b ScheduledEvent) bool {
	return SameSchedule(a, b) && bytes.Equal(a.Seed, b.Seed) && a.Phase == b.Phase && a.FirstPosition == b.FirstPosition &&
		samePositions(a.Positions, b.Positions) && a.PrequeueOpenedAt.Equal(b.PrequeueOpenedAt) && a.StartedAt.Equal(b.StartedAt)
}

// samePositions reports whether a and b hold the same positions; at once
// when they are one slice (a shared Store's reload gives memory back the
// drawn line it decoded before, which a large launch's makes millions).
func samePositions(a, b []int64) bool {
	if len(a) == len(b) && len(a) > 0 && &a[0] == &b[0] {
		return true
	}
	return slices.Equal(a, b)
}

// sameEvents reports whether a and b hold the same events (sameEvent) in
// the same order.
func sameEvents(a, b []ScheduledEvent) bool {
	return slices.EqualFunc(a, b, sameEvent)
}

// MergeSaved decides what SaveEvent stores for ev given the stored event
// (nil when there is none): a new event is stored scheduled with ev's seed;
// an existing one that is still scheduled takes ev's schedule and keeps its
// seed. Errors: a CodeEventLocked error when the stored one's pre-queue is
// open or it started, ErrInvalidArgument when ev does not validate or a new
// event has no seed.
func MergeSaved(stored *ScheduledEvent, ev ScheduledEvent) (ScheduledEvent, error) {
	if err := ev.Validate(); err != nil {
		return ScheduledEvent{}, err
	}
	next := ev.Schedule()
	if stored == nil {
		if len(next.Seed) != LotterySeedSize {
			return ScheduledEvent{}, Errorf(CodeInvalidArgument, "event %q of gate %q: a new event needs a %d-byte seed", ev.ID, ev.Gate, LotterySeedSize)
		}
		return next, nil
	}
	if p := stored.Phase; p != "" && p != EventScheduled {
		return ScheduledEvent{}, Errorf(CodeEventLocked, "event %q of gate %q is %s: it can no longer change", ev.ID, ev.Gate, p)
	}
	next.Seed = bytes.Clone(stored.Seed)
	return next, nil
}

// CheckDelete returns the CodeEventLocked error of removing stored while
// its pre-queue is open (its commitment is out and people are waiting for
// the draw), else nil.
func CheckDelete(stored ScheduledEvent) error {
	if stored.Phase == EventPrequeue {
		return Errorf(CodeEventLocked, "event %q of gate %q: its pre-queue is open; it can be removed once it started", stored.ID, stored.Gate)
	}
	return nil
}

// CheckDeleteStored decides the deletion of event id of gate as stored:
// stored, or nil when there is none, and damage, DecodeStoredEvent's error
// for a row that does not decode. A damaged event is deleted unchecked
// (nothing can check it, and every decision leaves it out already).
// Errors: a CodeEventNotFound error, or CheckDelete's.
func CheckDeleteStored(gate, id string, stored *ScheduledEvent, damage error) error {
	switch {
	case damage != nil:
		return nil
	case stored == nil:
		return EventNotFound(gate, id)
	}
	return CheckDelete(*stored)
}

// SortEvents sorts events by StartsAt, then ID.
func SortEvents(evs []ScheduledEvent) {
	sort.Slice(evs, func(i, j int) bool {
		if !evs[i].StartsAt.Equal(evs[j].StartsAt) {
			return evs[i].StartsAt.Before(evs[j].StartsAt)
		}
		return evs[i].ID < evs[j].ID
	})
}

// EventNotFound returns the CodeEventNotFound error of event id of gate.
func EventNotFound(gate, id string) error {
	return Errorf(CodeEventNotFound, "gate %q has no event %q", gate, id)
}
