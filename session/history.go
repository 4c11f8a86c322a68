package session

import (
	"context"
	"time"
)

// History: every session's lifecycle (joined, left, returned, promoted,
// claimed, released, purged with its reason), recorded by the Store from the
// events of each commit, in the same transaction as the change that caused
// it. The rules of what is recorded live here; a Store only writes the
// records HistoryOf makes.

// The lifecycle events a Commit reports beyond the changes to the active set
// and the line (see Outcome.Note). They change no counter and no view.
const (
	// EventLeft: a session left (leave, the snippet's pagehide): its last
	// sign of life is now; a waiter keeps its place until WaitingTimeout
	// unless it shows up again.
	EventLeft EventKind = EventDequeued + 1 + iota
	// EventReturned: a waiting session joined again (it came back: a
	// reload, another tab, a return after a leave); it keeps its place.
	EventReturned
	// EventClaimed: a promoted session claimed its slot with its first sign
	// of life after the promotion.
	EventClaimed
)

// joinNote is the lifecycle event of a join of an existing session: a
// waiter returned, or a promoted session claimed its slot.
func joinNote(existing *Session) EventKind {
	switch {
	case existing.Status == StatusWaiting:
		return EventReturned
	case !existing.ClaimDeadline.IsZero():
		return EventClaimed
	}
	return 0
}

// HistoryKind names a lifecycle record.
type HistoryKind string

// The kinds of history records.
const (
	HistoryJoined   HistoryKind = "joined"   // a new session: Status says admitted at once (active) or queued (waiting)
	HistoryLeft     HistoryKind = "left"     // a departure (leave); the session stays until purged or it returns
	HistoryReturned HistoryKind = "returned" // a waiter joined again
	HistoryPromoted HistoryKind = "promoted" // a waiter was admitted; Wait is its time in line
	HistoryClaimed  HistoryKind = "claimed"  // a promoted session claimed its slot
	HistoryReleased HistoryKind = "released" // ended explicitly (release, disconnect grace, the admin API)
	HistoryPurged   HistoryKind = "purged"   // deleted by the rules; Reason says why
)

// HistoryKinds lists every kind, in the order of a session's life. A Store
// may keep a kind as its index here: new kinds are only appended.
var HistoryKinds = []HistoryKind{HistoryJoined, HistoryLeft, HistoryReturned, HistoryPromoted, HistoryClaimed, HistoryReleased, HistoryPurged}

// HistoryRecord is one recorded lifecycle event.
type HistoryRecord struct {
	// ID is the Store's number of the record, unique in the Store and
	// growing in commit order: it orders records (HistoryCursor).
	ID       int64
	At       time.Time
	Gate     string
	Session  string
	Kind     HistoryKind
	Status   Status // the session's status after the event (before it, for released and purged)
	Position int64
	// Reason is why a session was purged (Gone, Idle, Unclaimed), Released
	// on released records, NotStale otherwise.
	Reason PurgeReason
	// Wait is the time from the join to the admission, on admissions:
	// joined as active (0) and promoted. Negative on other records.
	Wait time.Duration
}

// Admission reports whether the record admitted its session: joined as
// active, or promoted.
func (r HistoryRecord) Admission() bool {
	return r.Kind == HistoryPromoted || r.Kind == HistoryJoined && r.Status == StatusActive
}

// HistoryOf returns the history record of a commit event, and false for an
// event that records nothing (EventRefreshed). At is the event's At, or the
// session's last sign of life for an event without one; ID is the Store's to
// give.
func HistoryOf(ev Event) (HistoryRecord, bool) {
	s := ev.Session
	r := HistoryRecord{At: ev.At, Gate: s.Gate, Session: s.ID, Status: s.Status, Position: s.Position, Wait: -1}
	if r.At.IsZero() {
		r.At = s.SeenAt()
	}
	switch ev.Kind {
	case EventActivated:
		r.Kind, r.Wait = HistoryJoined, 0
		r.At = s.CreatedAt
	case EventQueued:
		r.Kind = HistoryJoined
		r.At = s.CreatedAt
	case EventPromoted:
		r.Kind, r.Wait = HistoryPromoted, max(s.LastActive.Sub(s.CreatedAt), 0)
		r.At = s.LastActive
	case EventLeft:
		r.Kind = HistoryLeft
	case EventReturned:
		r.Kind = HistoryReturned
	case EventClaimed:
		r.Kind = HistoryClaimed
	case EventDeactivated, EventDequeued:
		r.Kind, r.Reason = HistoryPurged, ev.Reason
		if ev.Reason == Released {
			r.Kind = HistoryReleased
		}
	default:
		return HistoryRecord{}, false
	}
	return r, true
}

// Abandoned reports whether a commit event is a waiter giving up before it
// was admitted: a waiter purged or released, or a promoted session that
// never claimed its slot.
func Abandoned(ev Event) bool {
	return ev.Kind == EventDequeued || ev.Kind == EventDeactivated && ev.Reason == Unclaimed
}

// DefaultHistoryRetention is how long history is kept by default.
const DefaultHistoryRetention = 7 * 24 * time.Hour

// History reads are bounded: a query returns at most MaxHistoryLimit
// records, DefaultHistoryLimit when it asks for none.
const (
	DefaultHistoryLimit = 100
	MaxHistoryLimit     = 1000
)

// HistoryCursor is where a page of history ends: the next page holds the
// records numbered below ID. At is the record's time, for display.
type HistoryCursor struct {
	At time.Time
	ID int64
}

// HistoryQuery selects history records of one gate, newest first.
type HistoryQuery struct {
	Gate string
	// Session, when set, keeps only that session's records.
	Session string
	// Since and Until, when set, keep records at or after Since and before
	// Until.
	Since, Until time.Time
	// Limit is the most records returned: 1 to MaxHistoryLimit, 0 for
	// DefaultHistoryLimit.
	Limit int
	// Before, when set, keeps records numbered below Before.ID: the cursor
	// of the previous page.
	Before *HistoryCursor
}

// Normalize returns q with its default limit, or an ErrInvalidArgument
// error naming what is out of range.
func (q HistoryQuery) Normalize() (HistoryQuery, error) {
	switch {
	case !ValidGateName(q.Gate):
		return q, Errorf(CodeInvalidArgument, "history: gate name %q", q.Gate)
	case q.Session != "" && !ValidID(q.Session):
		return q, Errorf(CodeInvalidArgument, "history: session: want 1-%d printable ASCII characters without spaces or '.'", MaxIDLength)
	case q.Limit < 0 || q.Limit > MaxHistoryLimit:
		return q, Errorf(CodeInvalidArgument, "history: limit %d: want 1 to %d", q.Limit, MaxHistoryLimit)
	case !q.Since.IsZero() && !q.Until.IsZero() && !q.Until.After(q.Since):
		return q, Errorf(CodeInvalidArgument, "history: until must be after since")
	}
	if q.Limit == 0 {
		q.Limit = DefaultHistoryLimit
	}
	return q, nil
}

// HistoryPage is one answer of Store.History.
type HistoryPage struct {
	// Records are newest first: by ID, descending. A Store numbers records
	// in the order it commits them, so times descend too but for
	// operations whose clock readings crossed on their way to the Store.
	Records []HistoryRecord
	// Next is the cursor of the following page, nil when this one is the
	// last.
	Next *HistoryCursor
}

// HistoryStore is the part of a Store that keeps history (see Store).
type HistoryStore interface {
	// History returns the records q selects, newest first, at most q.Limit
	// (normalised with HistoryQuery.Normalize). Errors: ErrInvalidArgument
	// for a query out of range, ErrUnavailable after Close, a CodeInternal
	// error on storage failure.
	History(ctx context.Context, q HistoryQuery) (HistoryPage, error)
	// PruneHistory deletes, in one transaction, at most limit units of the
	// oldest history older than before (records, or rows of the records
	// one transaction wrote for one gate: never a record that is not older
	// than before), and returns how many units it deleted: callers repeat
	// it while it deletes limit. Errors: those of History.
	PruneHistory(ctx context.Context, before time.Time, limit int) (int64, error)
}

// History returns the gate's history (Store.History). Errors:
// ErrUnknownGate, ErrInvalidArgument, ErrUnavailable after Close, or the
// Store's.
func (w *Waitlist) History(ctx context.Context, q HistoryQuery) (HistoryPage, error) {
	if _, err := w.gate(q.Gate); err != nil {
		return HistoryPage{}, err
	}
	q, err := q.Normalize()
	if err != nil {
		return HistoryPage{}, err
	}
	if w.closed.Load() {
		return HistoryPage{}, ErrUnavailable
	}
	return w.store.History(ctx, q)
}

// maxPruneChunks bounds the chunks one update prunes: a backlog (history
// turned on again, a long outage) is worked off over several updates.
const maxPruneChunks = 64

// pruneHistory deletes history older than the retention, in transactions of
// at most one chunk each (never one huge DELETE). It returns how many
// records it deleted.
func (w *Waitlist) pruneHistory(ctx context.Context) (int64, error) {
	if w.retention <= 0 {
		return 0, nil
	}
	before := w.clock.Now().Add(-w.retention)
	var total int64
	for range maxPruneChunks {
		n, err := w.store.PruneHistory(ctx, before, w.chunk)
		total += n
		if err != nil || n < int64(w.chunk) {
			return total, err
		}
	}
	return total, nil
}

// StampEvents sets At to at on those of evs (the events one operation
// reported) that have none; a zero at changes nothing. Stores call it once
// per operation.
func StampEvents(evs []Event, at time.Time) {
	if at.IsZero() {
		return
	}
	for i := range evs {
		if evs[i].At.IsZero() {
			evs[i].At = at
		}
	}
}
