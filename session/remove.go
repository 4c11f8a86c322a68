package session

import (
	"context"
	"time"
)

// Removing a gate at runtime (Waitlist.RemoveGate) forgets everything the
// store keeps for it besides its sessions: its runtime settings, its
// scheduled events and its priority codes, in one transaction under the
// gate's lock, so that a gate added again under the same name starts
// without them.

// CodePrequeueOpen: the gate cannot be removed while a scheduled event's
// pre-queue is open (its commitment is out and people wait for the draw).
const CodePrequeueOpen Code = "prequeue_open"

// GateRemover is the part of a Store that removes a gate's data in one
// transaction.
type GateRemover interface {
	// RemoveGate runs CheckRemoveGate for cfg (the gate's configuration in
	// effect) with the gate's counters and events as stored, under the
	// gate's lock, and when it allows, deletes the gate's runtime settings
	// (as SaveGateSettings with nil does, reported to the commit listener
	// where the Store follows settings), its scheduled events and its
	// priority codes, in that one transaction. Sessions stay. Errors: a
	// CodeGateInUse or CodePrequeueOpen error (nothing changed),
	// ErrInvalidArgument, ErrUnavailable, or a CodeInternal error.
	RemoveGate(ctx context.Context, cfg GateConfig, now time.Time) error
}

// CheckRemoveGate decides whether gate cfg.Name may be removed at now,
// given its counters and its events: not while it has sessions and is not
// in ModeReject (a CodeGateInUse error), nor while an event's pre-queue is
// open or due to open, that is while EventConfig holds the line (a
// CodePrequeueOpen error); else nil.
func CheckRemoveGate(cfg GateConfig, c Counters, events []ScheduledEvent, now time.Time) error {
	for _, e := range events {
		switch e.PhaseAt(now) {
		case EventScheduled, EventPrequeue:
			if !now.Before(e.PrequeueAt) {
				return Errorf(CodePrequeueOpen, "gate %q: the pre-queue of event %q is open; remove the gate once the event started", cfg.Name, e.ID)
			}
		}
	}
	if cfg.Mode != ModeReject && (c.Active > 0 || c.Waiting > 0) {
		return Errorf(CodeGateInUse, "gate %q has %d active and %d waiting sessions: switch it to reject mode first", cfg.Name, c.Active, c.Waiting)
	}
	return nil
}
