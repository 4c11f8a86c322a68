package wire

import (
	"encoding/hex"
	"time"

	"github.com/anteroomhq/anteroom/session"
)

// PositionsParam is the query parameter of GET {base}/api/events: "0"
// leaves out each started event's Positions (the whole pre-queue, large at
// a launch, and not needed to show a countdown or a place); any other value
// changes nothing.
const PositionsParam = "positions"

// EventsView is the answer of GET {base}/api/events?gate=: the gate's
// scheduled events, public (no secret before its time), with the server's
// clock so that a countdown does not depend on the client's.
type EventsView struct {
	Gate   string      `json:"gate"`
	Now    time.Time   `json:"now"`
	Events []EventView `json:"events"`
}

// EventView is one scheduled event as published. Commitment is the
// lowercase hex SHA-256 of the lottery's seed, published from the moment
// the event exists; Seed (hex) and Positions (the pre-queue's positions in
// arrival order) only once the event started, from which anyone recomputes
// the order (session.LotteryOrder, guard.LotteryOrder).
type EventView struct {
	ID                string     `json:"id"`
	Gate              string     `json:"gate"`
	PrequeueAt        time.Time  `json:"prequeueAt"`
	StartsAt          time.Time  `json:"startsAt"`
	EndsAt            *time.Time `json:"endsAt,omitempty"`
	Shuffle           bool       `json:"shuffle"`
	ActiveLimit       *int64     `json:"activeLimit,omitempty"`
	NewUsersPerMinute *int64     `json:"newUsersPerMinute,omitempty"`
	// Phase is scheduled, prequeue, started or ended.
	Phase      string `json:"phase"`
	Commitment string `json:"commitment"`
	// FirstPosition is the gate's next position when the pre-queue opened:
	// the pre-queue is every session at or above it (0 before).
	FirstPosition int64      `json:"firstPosition,omitempty"`
	Seed          string     `json:"seed,omitempty"`
	Positions     []int64    `json:"positions,omitempty"`
	StartedAt     *time.Time `json:"startedAt,omitempty"`
}

// NewEventView publishes ev as seen at now: never its seed before it
// started.
func NewEventView(ev session.ScheduledEvent, now time.Time) EventView {
	v := EventView{
		ID: ev.ID, Gate: ev.Gate, PrequeueAt: ev.PrequeueAt.UTC(), StartsAt: ev.StartsAt.UTC(), Shuffle: ev.Shuffle,
		ActiveLimit: ev.ActiveLimit, NewUsersPerMinute: ev.NewUsersPerMinute,
		Phase: string(ev.PhaseAt(now)), Commitment: ev.Commitment(), FirstPosition: ev.FirstPosition,
	}
	if !ev.EndsAt.IsZero() {
		t := ev.EndsAt.UTC()
		v.EndsAt = &t
	}
	if ev.Phase == session.EventStarted {
		v.Seed = hex.EncodeToString(ev.Seed)
		v.Positions = append([]int64{}, ev.Positions...)
		t := ev.StartedAt.UTC()
		v.StartedAt = &t
	}
	return v
}
