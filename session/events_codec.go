package session

import (
	"encoding/hex"
	"encoding/json"
	"time"
)

// storedEvent is the JSON every Store keeps of a scheduled event. Times are
// unix nanoseconds (0: none); the seed is hex.
type storedEvent struct {
	PrequeueAt        int64      `json:"prequeueAt"`
	StartsAt          int64      `json:"startsAt"`
	EndsAt            int64      `json:"endsAt,omitempty"`
	Shuffle           bool       `json:"shuffle,omitempty"`
	ActiveLimit       *int64     `json:"activeLimit,omitempty"`
	NewUsersPerMinute *int64     `json:"newUsersPerMinute,omitempty"`
	Seed              string     `json:"seed"`
	Phase             EventPhase `json:"phase"`
	FirstPosition     int64      `json:"firstPosition,omitempty"`
	Positions         []int64    `json:"positions,omitempty"`
	PrequeueOpenedAt  int64      `json:"prequeueOpenedAt,omitempty"`
	StartedAt         int64      `json:"startedAt,omitempty"`
}

func nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromNanos(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

// EncodeStoredEvent returns the JSON a Store keeps of ev (gate and id are
// the Store's key). It never fails on a valid event.
func EncodeStoredEvent(ev ScheduledEvent) ([]byte, error) {
	b, err := json.Marshal(storedEvent{
		PrequeueAt: nanos(ev.PrequeueAt), StartsAt: nanos(ev.StartsAt), EndsAt: nanos(ev.EndsAt),
		Shuffle: ev.Shuffle, ActiveLimit: ev.ActiveLimit, NewUsersPerMinute: ev.NewUsersPerMinute,
		Seed: hex.EncodeToString(ev.Seed), Phase: ev.Phase, FirstPosition: ev.FirstPosition,
		Positions: ev.Positions, PrequeueOpenedAt: nanos(ev.PrequeueOpenedAt), StartedAt: nanos(ev.StartedAt),
	})
	if err != nil {
		return nil, Errorf(CodeInternal, "encode event %q: %w", ev.ID, err)
	}
	return b, nil
}

// DecodeStoredEvent reads back what EncodeStoredEvent wrote for event id of
// gate. It returns a CodeInternal error when the JSON does not decode or
// the event does not validate (a Store must not run a gate on garbage).
func DecodeStoredEvent(gate, id string, b []byte) (ScheduledEvent, error) {
	var s storedEvent
	if err := json.Unmarshal(b, &s); err != nil {
		return ScheduledEvent{}, Errorf(CodeInternal, "event %q of gate %q: %w", id, gate, err)
	}
	seed, err := hex.DecodeString(s.Seed)
	if err != nil {
		return ScheduledEvent{}, Errorf(CodeInternal, "event %q of gate %q: seed: %w", id, gate, err)
	}
	ev := ScheduledEvent{
		Gate: gate, ID: id, PrequeueAt: fromNanos(s.PrequeueAt), StartsAt: fromNanos(s.StartsAt), EndsAt: fromNanos(s.EndsAt),
		Shuffle: s.Shuffle, ActiveLimit: s.ActiveLimit, NewUsersPerMinute: s.NewUsersPerMinute,
		Seed: seed, Phase: s.Phase, FirstPosition: s.FirstPosition, Positions: s.Positions,
		PrequeueOpenedAt: fromNanos(s.PrequeueOpenedAt), StartedAt: fromNanos(s.StartedAt),
	}
	switch ev.Phase {
	case EventScheduled, EventPrequeue, EventStarted:
	default:
		return ScheduledEvent{}, Errorf(CodeInternal, "event %q of gate %q: phase %q", id, gate, ev.Phase)
	}
	if err := ev.Validate(); err != nil {
		return ScheduledEvent{}, Errorf(CodeInternal, "event %q of gate %q: %w", id, gate, err)
	}
	return ev, nil
}

// EventDamaged returns the CodeEventLocked error a Store answers a save or
// a transition of event id of gate whose stored row does not decode
// (damage, DecodeStoredEvent's error). Such an event is left out of every
// decision and listing (each Store logs it); deleting it is the one change
// it takes.
func EventDamaged(gate, id string, damage error) error {
	return Errorf(CodeEventLocked, "event %q of gate %q is damaged in storage (%v): delete it, then schedule it again", id, gate, damage)
}

// DamagedEventHolds reports whether a stored event whose row does not
// decode (id, its key's id; raw, its stored bytes) holds its gate
// (PrequeueHold): unless its phase still reads as started, it may be a
// pre-queue that is open, or due to open, and an op that let anyone in
// could put them ahead of its draw, which cannot run. Its gate admits
// nobody new until the event is deleted; a started event's damage only
// loses its overrides. A row whose id is not a valid one was never an
// event of this service (and could not be deleted by its id): it holds
// nothing.
func DamagedEventHolds(id string, raw []byte) bool {
	if !ValidGateName(id) {
		return false
	}
	var peek struct {
		Phase EventPhase `json:"phase"`
	}
	if json.Unmarshal(raw, &peek) != nil {
		return true
	}
	return peek.Phase != EventStarted
}
