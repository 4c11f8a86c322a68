package session

import (
	"context"
	"encoding/json"
	"time"
)

// The webhook outbox: what a commit did that a subscriber asked to hear of
// is written as outbox rows in the same transaction (so a crash between the
// commit and the delivery loses nothing), and a delivery worker
// (gate/webhook) posts them, at least once, leasing rows so that one worker
// of one instance delivers a given row at a time.

// The webhook events.
const (
	WebhookPromoted     = "promoted"      // a waiter got a slot (EventPromoted)
	WebhookClaimed      = "claimed"       // a promoted session claimed its slot (EventClaimed)
	WebhookPurged       = "purged"        // a session was purged: gone, idle or unclaimed
	WebhookReleased     = "released"      // a session was released
	WebhookEventStarted = "event.started" // a scheduled event started (EventLaunched, in the draw's transaction)
)

// WebhookEvents lists every webhook event, in documentation order.
var WebhookEvents = []string{WebhookPromoted, WebhookClaimed, WebhookPurged, WebhookReleased, WebhookEventStarted}

// ValidWebhookEvent reports whether name is one of WebhookEvents.
func ValidWebhookEvent(name string) bool {
	for _, e := range WebhookEvents {
		if e == name {
			return true
		}
	}
	return false
}

// OutboxTarget is one webhook subscriber as a Store sees it: a stable name
// (the delivery worker's key for its endpoint) and the events it wants.
type OutboxTarget struct {
	Name   string
	Events []string
}

// Outbox row states.
const (
	OutboxPending   = 0
	OutboxDelivered = 1
	OutboxDead      = 2
)

// OutboxMessage is one row of the outbox: one event for one target.
type OutboxMessage struct {
	// ID is the row's id, unique and stable across retries: the
	// idempotency key of the delivery.
	ID     int64
	Target string
	Event  string
	Gate   string
	// Dedup, when set, makes the row unique per target: enqueuing it again
	// is a no-op while the row is kept (delivered rows are kept for a day).
	Dedup     string
	Payload   []byte
	CreatedAt time.Time
	// Attempts is how many deliveries were tried before this one.
	Attempts int
	// Lease names the claim that handed the row out (ClaimOutbox); the
	// answers (Ack, Retry, Dead) apply only under it.
	Lease string
}

// OutboxData is the payload of the session events.
type OutboxData struct {
	Session  string `json:"session"`
	Gate     string `json:"gate"`
	Position int64  `json:"position"`
	Status   Status `json:"status"`
	Notify   bool   `json:"notify,omitempty"`
	// Reason says why a session left: gone, idle, unclaimed, released.
	Reason        string     `json:"reason,omitempty"`
	ClaimDeadline *time.Time `json:"claimDeadline,omitempty"`
	At            time.Time  `json:"at"`
}

// EventStartedData is the payload of the event.started webhook: which
// scheduled event of which gate started, when it started, and how many
// sessions its pre-queue held (the lottery's size).
type EventStartedData struct {
	Event        string    `json:"event"`
	Gate         string    `json:"gate"`
	StartedAt    time.Time `json:"startedAt"`
	PrequeueSize int64     `json:"prequeueSize"`
	At           time.Time `json:"at"`
}

// WebhookEvent is the webhook event a commit event is, or "" for none.
func WebhookEvent(ev Event) string {
	switch ev.Kind {
	case EventPromoted:
		return WebhookPromoted
	case EventClaimed: // the rules' note, which history records too
		return WebhookClaimed
	case EventLaunched:
		return WebhookEventStarted
	case EventDeactivated, EventDequeued:
		if ev.Reason == Released {
			return WebhookReleased
		}
		if ev.Reason != NotStale {
			return WebhookPurged
		}
	}
	return ""
}

// OutboxRouting is a Store's compiled targets: for each event, the targets
// that want it. The zero value routes nothing.
type OutboxRouting struct {
	byEvent map[string][]string
}

// NewOutboxRouting compiles targets. It returns an ErrInvalidArgument error
// for an empty or duplicate target name or an unknown event.
func NewOutboxRouting(targets []OutboxTarget) (*OutboxRouting, error) {
	r := &OutboxRouting{byEvent: map[string][]string{}}
	seen := map[string]bool{}
	for _, t := range targets {
		if t.Name == "" || len(t.Name) > 128 || seen[t.Name] {
			return nil, Errorf(CodeInvalidArgument, "outbox target %q: want a unique name of 1-128 bytes", t.Name)
		}
		seen[t.Name] = true
		for _, e := range t.Events {
			if !ValidWebhookEvent(e) {
				return nil, Errorf(CodeInvalidArgument, "outbox target %q: unknown event %q", t.Name, e)
			}
			r.byEvent[e] = append(r.byEvent[e], t.Name)
		}
	}
	return r, nil
}

// Empty reports whether no target wants any event of a commit: a Store then
// writes nothing.
func (r *OutboxRouting) Empty() bool { return r == nil || len(r.byEvent) == 0 }

// Messages returns the outbox rows of a commit's events at now, in event
// order, one per event and target that wants it.
func (r *OutboxRouting) Messages(events []Event, now time.Time) []OutboxMessage {
	if r.Empty() {
		return nil
	}
	var out []OutboxMessage
	for _, ev := range events {
		name := WebhookEvent(ev)
		targets := r.byEvent[name]
		if len(targets) == 0 {
			continue
		}
		s := ev.Session
		if ev.Kind == EventLaunched {
			// Written in the draw's own transaction; the event id makes
			// the row unique per target should it ever be written again.
			payload, _ := json.Marshal(EventStartedData{Event: s.ID, Gate: s.Gate, StartedAt: s.CreatedAt.UTC(), PrequeueSize: s.Position, At: now.UTC()})
			for _, t := range targets {
				out = append(out, OutboxMessage{Target: t, Event: name, Gate: s.Gate, Dedup: "event.started/" + s.Gate + "/" + s.ID, Payload: payload, CreatedAt: now})
			}
			continue
		}
		d := OutboxData{Session: s.ID, Gate: s.Gate, Position: s.Position, Status: s.Status, Notify: s.Notify, At: now.UTC()}
		if ev.Reason != NotStale {
			d.Reason = ev.Reason.String()
		}
		if name == WebhookPromoted && !s.ClaimDeadline.IsZero() {
			cd := s.ClaimDeadline.UTC()
			d.ClaimDeadline = &cd
		}
		payload, _ := json.Marshal(d) // plain fields: cannot fail
		for _, t := range targets {
			out = append(out, OutboxMessage{Target: t, Event: name, Gate: s.Gate, Payload: payload, CreatedAt: now})
		}
	}
	return out
}

// Custom returns the rows of an event enqueued by name (EnqueueWebhook):
// one per target that wants it.
func (r *OutboxRouting) Custom(event, gate, dedup string, payload []byte, now time.Time) []OutboxMessage {
	if r.Empty() {
		return nil
	}
	var out []OutboxMessage
	for _, t := range r.byEvent[event] {
		out = append(out, OutboxMessage{Target: t, Event: event, Gate: gate, Dedup: dedup, Payload: payload, CreatedAt: now})
	}
	return out
}

// OutboxCounts counts the outbox rows by state.
type OutboxCounts struct {
	Pending, Delivered, Dead int64
}

// OutboxTargets selects the rows a ClaimOutbox may hand out by their
// target. The zero value selects every row. A deliverer claims each
// endpoint's rows apart (Only), so that one receiver that hangs holds up
// none of the others, and the rows of targets it no longer knows apart
// (Not).
type OutboxTargets struct {
	// Only, when not empty, selects the rows of this target alone.
	Only string
	// Not, when Only is empty, leaves out the rows of these targets.
	Not []string
}

// OutboxStore is implemented by a Store that keeps a webhook outbox. Every
// method returns ErrUnavailable once the Store is closed and an
// ErrInternal-coded error on a storage failure.
type OutboxStore interface {
	// SetOutbox installs the routing of commit events to targets, before
	// any write; nil routes nothing (no row is written).
	SetOutbox(r *OutboxRouting)
	// EnqueueOutbox writes the rows of a named event (OutboxRouting.Custom
	// with the installed routing) in one transaction of their own; a row
	// whose (Target, Dedup) is already kept is skipped. It returns how many
	// rows it wrote.
	EnqueueOutbox(ctx context.Context, event, gate, dedup string, payload []byte, now time.Time) (int, error)
	// ClaimOutbox leases up to n pending rows of the targets which selects,
	// due at now (oldest first), for lease: no other claim hands them out
	// until the lease ends, also from another instance of a shared Store.
	ClaimOutbox(ctx context.Context, which OutboxTargets, now time.Time, lease time.Duration, n int) ([]OutboxMessage, error)
	// AckOutbox marks m delivered at now (kept a day, for Dedup). A lease that
	// is no longer m's is ignored.
	AckOutbox(ctx context.Context, m OutboxMessage, now time.Time) error
	// RetryOutbox counts a failed attempt of m and makes it due again at
	// next, with lastErr kept for the operator.
	RetryOutbox(ctx context.Context, m OutboxMessage, next time.Time, lastErr string) error
	// DeadOutbox dead-letters m: kept, never tried again.
	DeadOutbox(ctx context.Context, m OutboxMessage, lastErr string) error
	// ReleaseOutbox gives m back unattempted (a deliverer that stops before
	// it sends a row it claimed): its lease ends now, no attempt counted.
	ReleaseOutbox(ctx context.Context, m OutboxMessage) error
	// OutboxCounts counts the rows by state.
	OutboxCounts(ctx context.Context) (OutboxCounts, error)
}

// EnqueueWebhook enqueues a webhook event that is not a session's (such as
// WebhookEventStarted) for every target that wants it. A non-empty dedup
// makes it idempotent: enqueuing the same (event, dedup) again is a no-op
// while its rows are kept. Errors: ErrUnknownGate, ErrInvalidArgument for an unknown event
// or data that does not encode, ErrUnavailable when the Store keeps no
// outbox, or the Store's.
func (w *Waitlist) EnqueueWebhook(ctx context.Context, gate, event, dedup string, data any) error {
	if !ValidWebhookEvent(event) {
		return Errorf(CodeInvalidArgument, "webhook event %q: want one of %v", event, WebhookEvents)
	}
	if _, err := w.gate(gate); err != nil {
		return err
	}
	os, ok := w.store.(OutboxStore)
	if !ok {
		return Errorf(CodeUnavailable, "this store keeps no webhook outbox")
	}
	payload, err := json.Marshal(data)
	if err != nil {
		return Errorf(CodeInvalidArgument, "webhook %s: data: %w", event, err)
	}
	_, err = os.EnqueueOutbox(ctx, event, gate, dedup, payload, w.clock.Now())
	return err
}
