package session

import (
	"context"
	"time"
)

// EventStore is the part of a Store that keeps scheduled events
// (events.go). Every method runs under the gate's lock of the Store (its
// writer, or the gate row's lock on a shared database), so that the
// transitions are done once whichever process asks.
type EventStore interface {
	// SaveEvent stores ev's schedule and overrides (MergeSaved decides: a
	// new event is stored scheduled with ev.Seed; an existing one that is
	// still scheduled takes the new schedule and keeps its seed) and
	// returns the event as stored. Errors: ErrInvalidArgument, a
	// CodeEventLocked error once the stored event's pre-queue opened or
	// when its stored row does not decode (EventDamaged), ErrUnavailable,
	// or a CodeInternal error on storage failure.
	SaveEvent(ctx context.Context, ev ScheduledEvent) (ScheduledEvent, error)

	// DeleteEvent removes an event (CheckDeleteStored decides: one whose
	// row does not decode is deleted unchecked). Errors: a
	// CodeEventNotFound error, a CodeEventLocked error while its pre-queue
	// is open, ErrInvalidArgument, ErrUnavailable, or a CodeInternal error.
	DeleteEvent(ctx context.Context, gate, id string) error

	// Events returns the events of a gate, sorted by SortEvents; one whose
	// row does not decode is logged and left out (as every decision
	// leaves it out). Errors: ErrInvalidArgument, ErrUnavailable, or a
	// CodeInternal error.
	Events(ctx context.Context, gate string) ([]ScheduledEvent, error)

	// AdvanceEvent runs the transitions of an event that are due at now, in
	// one transaction under the gate's lock: DecidePrequeue with the gate's
	// counters; then, when the start is due, DecideStart with the positions
	// of the sessions waiting at or above FirstPosition, moving each
	// shuffled session to its new position (an EventReordered each) and
	// recording an EventLaunched. It returns the event as stored afterwards
	// and whether this call changed it. Errors: a CodeEventNotFound error,
	// a CodeEventLocked error when its stored row does not decode
	// (EventDamaged), ErrInvalidArgument, ErrUnavailable, or a CodeInternal
	// error.
	AdvanceEvent(ctx context.Context, gate, id string, now time.Time) (ScheduledEvent, bool, error)
}

// DamagedEvent is a stored event whose row does not decode (a hand edit, a
// newer version's row): every Store leaves it out of Events, Load and its
// decisions, and logs it.
type DamagedEvent struct {
	ID string
	// Holds reports that it holds its gate (DamagedEventHolds): nobody new
	// is admitted until it is deleted.
	Holds bool
	// Err says what does not decode.
	Err string
}

// NewDamagedEvent is the DamagedEvent of the stored row raw of event id,
// which DecodeStoredEvent refused with damage.
func NewDamagedEvent(id string, raw []byte, damage error) DamagedEvent {
	return DamagedEvent{ID: id, Holds: DamagedEventHolds(id, raw), Err: damage.Error()}
}

// DamageReporter is implemented by a Store that reports the events it
// leaves out for damage, so that memory shows (and holds) what its
// writer does. Both stores of this module are one (the shared suite's
// RunDamagedRowSuite requires it).
type DamageReporter interface {
	// EventsAndDamaged returns, from one read, what Events returns and
	// the gate's damaged events, sorted by id. Errors: as Events'.
	EventsAndDamaged(ctx context.Context, gate string) ([]ScheduledEvent, []DamagedEvent, error)
}
