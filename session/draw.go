package session

import (
	"slices"
	"time"
)

// What a waiting session's place owes to a lottery (SessionView.Draw), so
// that a client shows the right thing from a join or status answer alone,
// before it has read the gate's events.
const (
	// DrawPending: the session is in an open shuffled pre-queue; it has no
	// place until the draw at the event's start.
	DrawPending = "pending"
	// DrawDrawn: the session's place was drawn at random by the gate's
	// current event (the last whose pre-queue opened).
	DrawDrawn = "drawn"
)

// DrawOf is the Draw of view v at a gate whose events are events, at now:
// DrawPending for a waiting session of the normal lane at or above the
// FirstPosition of the current event, shuffled and in its pre-queue;
// DrawDrawn for one whose position the current event, shuffled and
// started, drew; "" otherwise (also for the priority lane, which is never
// drawn). The current event is the one whose pre-queue opened last; an
// event due to open (PrequeueAt passed, not stored yet) is current with no
// session in it, since its pre-queue starts at the gate's next position.
func DrawOf(events []ScheduledEvent, v SessionView, now time.Time) string {
	if v.Status != StatusWaiting || v.Lane != "" || len(events) == 0 {
		return ""
	}
	var cur *ScheduledEvent
	for i := range events {
		e := &events[i]
		if e.PhaseAt(now) == EventScheduled && now.Before(e.PrequeueAt) {
			continue
		}
		if cur == nil || e.PrequeueAt.After(cur.PrequeueAt) {
			cur = e
		}
	}
	if cur == nil || !cur.Shuffle {
		return ""
	}
	switch cur.Phase {
	case EventPrequeue:
		if v.Position >= cur.FirstPosition {
			return DrawPending
		}
	case EventStarted:
		if _, ok := slices.BinarySearch(cur.Positions, v.Position); ok {
			return DrawDrawn
		}
	}
	return ""
}

// Draw is DrawOf for v with its gate's events in memory, now.
func (w *Waitlist) Draw(v SessionView) string {
	evs := w.ev.of(v.Gate)
	if len(evs) == 0 {
		return ""
	}
	return DrawOf(evs, v, w.clock.Now())
}
