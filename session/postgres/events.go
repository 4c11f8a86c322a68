package postgres

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/anteroomhq/anteroom/session"
)

// Scheduled events live in anteroom_events (migrations/0004), one row per
// event, the JSON session keeps of it. Every change runs through the writer
// as an op on the event's gate, so under the gate row's lock: the
// transitions happen once whichever instance asks.
const (
	// sqlGateEventsNoLine reads the gate's events without their drawn
	// lines (RemoveGate's check needs none; a large launch's is megabytes).
	sqlGateEventsNoLine = `SELECT id, ` + eventNoLine + ` FROM anteroom_events WHERE gate = $1`
	// eventNoLine is an event row's JSON without its drawn line; a row
	// that is not an object (damaged) as it is ('-' fails on a scalar, and
	// a damaged row must not fail the transaction that reads it).
	eventNoLine = `CASE jsonb_typeof(event) WHEN 'object' THEN event - 'positions' ELSE event END`
	// The read side's (Events): the versions of the gate's rows, then the
	// rows it has not decoded in their version.
	sqlGateEventVersions = `SELECT id, xmin::text FROM anteroom_events WHERE gate = $1`
	sqlSomeEvents        = `SELECT id, xmin::text, event FROM anteroom_events WHERE gate = $1 AND id = ANY($2)`
	sqlOneEvent          = `SELECT event FROM anteroom_events WHERE gate = $1 AND id = $2`
	sqlSaveEvent         = `INSERT INTO anteroom_events (gate, id, event) VALUES ($1, $2, $3) ON CONFLICT (gate, id) DO UPDATE SET event = EXCLUDED.event`
	sqlDeleteEvent       = `DELETE FROM anteroom_events WHERE gate = $1 AND id = $2`
)

// eventOp runs fn in a writer transaction that holds the gate's lock.
func (s *Store) eventOp(ctx context.Context, gate string, fn func(ctx context.Context, b *batch, g *gateTx) error) error {
	if !session.ValidGateName(gate) {
		return session.Errorf(session.CodeInvalidArgument, "postgres: event: gate name %q", gate)
	}
	if s.closed.Load() {
		return session.ErrUnavailable
	}
	o := &op{kind: opFunc, ctx: ctx, cfg: session.GateConfig{Name: gate}}
	o.fn = func(ctx context.Context, b *batch) error {
		g := b.gates[gate]
		if g == nil {
			return fmt.Errorf("gate %q not locked", gate)
		}
		return fn(ctx, b, g)
	}
	return s.do(o)
}

// readEvent reads one event in tx, or nil. damage is
// DecodeStoredEvent's error for a row that does not decode (ev is then
// nil); err, a failed read.
func readEvent(ctx context.Context, tx pgx.Tx, gate, id string) (ev *session.ScheduledEvent, damage, err error) {
	var raw []byte
	err = tx.QueryRow(ctx, sqlOneEvent, gate, id).Scan(&raw)
	if err == pgx.ErrNoRows {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("read event %q of gate %q: %w", id, gate, err)
	}
	decoded, damage := session.DecodeStoredEvent(gate, id, raw)
	if damage != nil {
		return nil, damage, nil
	}
	return &decoded, nil, nil
}

func writeEvent(ctx context.Context, tx pgx.Tx, ev session.ScheduledEvent) error {
	b, err := session.EncodeStoredEvent(ev)
	if err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, sqlSaveEvent, ev.Gate, ev.ID, b); err != nil {
		return fmt.Errorf("save event %q of gate %q: %w", ev.ID, ev.Gate, err)
	}
	return nil
}

// SaveEvent stores ev's schedule (session.MergeSaved decides) and returns
// the event as stored. Errors: session.ErrInvalidArgument, a
// session.CodeEventLocked error, session.ErrUnavailable when closed or
// unreachable, a session.CodeInternal error on storage failure.
func (s *Store) SaveEvent(ctx context.Context, ev session.ScheduledEvent) (session.ScheduledEvent, error) {
	if err := ev.Validate(); err != nil {
		return session.ScheduledEvent{}, err
	}
	var saved session.ScheduledEvent
	err := s.eventOp(ctx, ev.Gate, func(ctx context.Context, b *batch, g *gateTx) error {
		stored, damage, err := readEvent(ctx, b.tx, ev.Gate, ev.ID)
		if err != nil {
			return err
		}
		if damage != nil {
			return session.EventDamaged(ev.Gate, ev.ID, damage)
		}
		next, err := session.MergeSaved(stored, ev)
		if err != nil {
			return err
		}
		if err := writeEvent(ctx, b.tx, next); err != nil {
			return err
		}
		saved = next
		g.setScheduled(next)
		return nil
	})
	return saved, err
}

// DeleteEvent removes an event (session.CheckDelete decides); one whose
// row does not decode is deleted unchecked. Errors: a
// session.CodeEventNotFound or CodeEventLocked error,
// session.ErrInvalidArgument, session.ErrUnavailable, a
// session.CodeInternal error on storage failure.
func (s *Store) DeleteEvent(ctx context.Context, gate, id string) error {
	if !session.ValidGateName(id) {
		return session.Errorf(session.CodeInvalidArgument, "postgres: delete event: id %q", id)
	}
	return s.eventOp(ctx, gate, func(ctx context.Context, b *batch, g *gateTx) error {
		stored, damage, err := readEvent(ctx, b.tx, gate, id)
		if err != nil {
			return err
		}
		if err := session.CheckDeleteStored(gate, id, stored, damage); err != nil {
			return err
		}
		if damage != nil {
			s.log.Warn("anteroom: deleting a damaged stored event", "gate", gate, "event", id, "err", damage)
		}
		if _, err := b.tx.Exec(ctx, sqlDeleteEvent, gate, id); err != nil {
			return fmt.Errorf("delete event %q of gate %q: %w", id, gate, err)
		}
		g.scheduled = slices.DeleteFunc(g.scheduled, func(e session.ScheduledEvent) bool { return e.ID == id })
		if damage != nil {
			// The batch's later ops: whether another damaged event holds
			// the gate (the writer's cache of its versions, read at the
			// lock). Its runtime settings stay dropped for the batch.
			delete(s.heldEvents[gate], id)
			g.damagedEvents, g.damagedHold = false, false
			for _, h := range s.heldEvents[gate] {
				if h.ev == nil {
					g.damagedEvents, g.damagedHold = true, g.damagedHold || h.hold
				}
			}
		}
		return nil
	})
}

// Events returns the gate's events, sorted by start; an event that does
// not decode is logged (once per version of its row) and left out. It
// reads the versions of the gate's rows, and reads whole (a started
// launch's row holds its drawn line: megabytes for a large one) only the
// rows it has not decoded in that version: a Waitlist over this store
// reads its events again every few seconds. Errors:
// session.ErrInvalidArgument, session.ErrUnavailable, a
// session.CodeInternal error on storage failure.
func (s *Store) Events(ctx context.Context, gate string) ([]session.ScheduledEvent, error) {
	cur, err := s.currentEvents(ctx, gate)
	if err != nil {
		return nil, err
	}
	return decodedEvents(cur), nil
}

// EventsAndDamaged returns what Events returns and the gate's events that
// do not decode (session.DamageReporter), from the same reads. Errors: as
// Events'.
func (s *Store) EventsAndDamaged(ctx context.Context, gate string) ([]session.ScheduledEvent, []session.DamagedEvent, error) {
	cur, err := s.currentEvents(ctx, gate)
	if err != nil {
		return nil, nil, err
	}
	var damaged []session.DamagedEvent
	for id, h := range cur {
		if h.ev == nil {
			damaged = append(damaged, session.DamagedEvent{ID: id, Holds: h.hold, Err: h.damage})
		}
	}
	slices.SortFunc(damaged, func(a, b session.DamagedEvent) int { return strings.Compare(a.ID, b.ID) })
	return decodedEvents(cur), damaged, nil
}

// decodedEvents returns the events of cur that decode, sorted by start.
func decodedEvents(cur map[string]heldEvent) []session.ScheduledEvent {
	out := make([]session.ScheduledEvent, 0, len(cur))
	for _, h := range cur {
		if h.ev != nil {
			out = append(out, *h.ev)
		}
	}
	session.SortEvents(out)
	return out
}

// currentEvents returns the gate's events as stored now, by id, decoded
// (or not, when damaged), reading whole only the rows not decoded in
// their version.
func (s *Store) currentEvents(ctx context.Context, gate string) (map[string]heldEvent, error) {
	if !session.ValidGateName(gate) {
		return nil, session.Errorf(session.CodeInvalidArgument, "postgres: events: gate name %q", gate)
	}
	if s.closed.Load() {
		return nil, session.ErrUnavailable
	}
	versions, err := s.eventVersions(ctx, gate)
	if err != nil {
		return nil, storageErr("read events", err)
	}
	cached := s.readCache.of(gate)
	var changed []string
	for id, xmin := range versions {
		if h, ok := cached[id]; !ok || h.xmin != xmin {
			changed = append(changed, id)
		}
	}
	next := make(map[string]heldEvent, len(versions))
	for id, xmin := range versions {
		if h, ok := cached[id]; ok && h.xmin == xmin {
			next[id] = h
		}
	}
	if len(changed) > 0 {
		// A row changed or deleted since its version was read is read as it
		// is now, or not at all.
		if err := s.readChangedEvents(ctx, gate, changed, next); err != nil {
			return nil, storageErr("read events", err)
		}
	}
	s.readCache.set(gate, next, time.Now())
	return next, nil
}

// eventVersions reads the id and row version of each of the gate's events.
func (s *Store) eventVersions(ctx context.Context, gate string) (map[string]string, error) {
	rows, err := s.pool.Query(ctx, sqlGateEventVersions, gate)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var id, xmin string
		if err := rows.Scan(&id, &xmin); err != nil {
			return nil, err
		}
		out[id] = xmin
	}
	return out, rows.Err()
}

// readChangedEvents reads the gate's events ids whole and puts each, with
// its version, in into (a damaged one without its event, logged).
func (s *Store) readChangedEvents(ctx context.Context, gate string, ids []string, into map[string]heldEvent) error {
	rows, err := s.pool.Query(ctx, sqlSomeEvents, gate, ids)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var id, xmin string
		var raw []byte
		if err := rows.Scan(&id, &xmin, &raw); err != nil {
			return err
		}
		s.eventBodyReads.Add(1)
		h := heldEvent{xmin: xmin}
		if ev, damage := session.DecodeStoredEvent(gate, id, raw); damage != nil {
			h.hold, h.damage = session.DamagedEventHolds(id, raw), damage.Error()
			s.log.Warn("anteroom: a gate's stored event is damaged and left out; delete it and schedule it again", "gate", gate, "event", id, "holds", h.hold, "err", damage)
		} else {
			h.ev = &ev
		}
		into[id] = h
	}
	return rows.Err()
}

// eventCache is the read side's decoding of the gates' events, by gate, id
// and row version (Events). Its maps are replaced, never changed. A gate
// that Events has not been asked for in eventCacheIdle is forgotten (a
// gate removed, here or on another instance: nobody asks for it again).
type eventCache struct {
	mu     sync.Mutex
	byGate map[string]cachedEvents
}

type cachedEvents struct {
	evs  map[string]heldEvent
	used time.Time
}

// eventCacheIdle is how long the read side keeps the events of a gate
// nobody asks for; a Waitlist asks for each of its gates every 2 s.
const eventCacheIdle = time.Minute

func (c *eventCache) of(gate string) map[string]heldEvent {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.byGate[gate].evs
}

// set keeps evs as the gate's, or forgets the gate when it has none, and
// forgets the gates not asked for since eventCacheIdle before now.
func (c *eventCache) set(gate string, evs map[string]heldEvent, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for name, ce := range c.byGate {
		if now.Sub(ce.used) > eventCacheIdle {
			delete(c.byGate, name)
		}
	}
	if len(evs) == 0 {
		delete(c.byGate, gate)
		return
	}
	if c.byGate == nil {
		c.byGate = map[string]cachedEvents{}
	}
	c.byGate[gate] = cachedEvents{evs: evs, used: now}
}

// loadEvents adds each gate's events to its snapshot (Load).
func (s *Store) loadEvents(ctx context.Context, snaps map[string]session.GateSnapshot) error {
	for name, snap := range snaps {
		evs, damaged, err := s.EventsAndDamaged(ctx, name)
		if err != nil {
			return err
		}
		snap.Events, snap.DamagedEvents = evs, damaged
		snaps[name] = snap
	}
	return nil
}

// AdvanceEvent runs the event's transitions due at now in one transaction
// under the gate row's lock: session.DecidePrequeue with the gate's
// counters, then, when the start is due, session.DecideStart over the
// waiters at or above FirstPosition, whose rows take their new positions
// (the batch's flush deletes each moved row before it writes it again),
// with an EventReordered each and one EventLaunched, which reach every
// instance through the outbox. Errors: a session.CodeEventNotFound error,
// a session.CodeEventLocked error when its row does not decode
// (session.EventDamaged), session.ErrInvalidArgument,
// session.ErrUnavailable, a session.CodeInternal error on storage failure.
func (s *Store) AdvanceEvent(ctx context.Context, gate, id string, now time.Time) (session.ScheduledEvent, bool, error) {
	if !session.ValidGateName(id) {
		return session.ScheduledEvent{}, false, session.Errorf(session.CodeInvalidArgument, "postgres: advance event: id %q", id)
	}
	now = normTime(now)
	var out session.ScheduledEvent
	var changed bool
	err := s.eventOp(ctx, gate, func(ctx context.Context, b *batch, g *gateTx) error {
		stored, damage, err := readEvent(ctx, b.tx, gate, id)
		if err != nil {
			return err
		}
		if damage != nil {
			return session.EventDamaged(gate, id, damage)
		}
		if stored == nil {
			return session.EventNotFound(gate, id)
		}
		next, ch, startDue := session.DecidePrequeue(*stored, g.c, now)
		if startDue {
			// The batch's earlier ops are written first, so that the
			// database holds the whole pre-queue as it is now.
			if err := s.flush(ctx, b); err != nil {
				return err
			}
			rows, err := b.tx.Query(ctx, sqlWaiters, gate, next.FirstPosition, int64(math.MaxInt64))
			if err != nil {
				return fmt.Errorf("read the pre-queue: %w", err)
			}
			waiters, err := scanSessions(rows, nil)
			if err != nil {
				return fmt.Errorf("read the pre-queue: %w", err)
			}
			waiters = session.LotteryEntrants(waiters)
			positions := make([]int64, len(waiters))
			for i, w := range waiters {
				positions[i] = w.Position
			}
			var moves map[int64]int64
			if next, moves, err = session.DecideStart(next, positions, now); err != nil {
				return err
			}
			for _, w := range waiters {
				to, ok := moves[w.Position]
				if !ok {
					continue
				}
				k := key{gate, w.ID}
				e := b.rows[k]
				if e == nil {
					e = &entry{s: w, live: true, dbPos: w.Position}
					b.rows[k] = e
				}
				e.s.Position = to
				e.dirty = true
				b.event(g, session.EventReordered, e.s)
			}
			b.event(g, session.EventLaunched, session.Session{Gate: gate, ID: id, CreatedAt: now, Position: int64(len(positions))})
			g.report = true
			ch = true
		}
		if ch {
			if err := writeEvent(ctx, b.tx, next); err != nil {
				return err
			}
			g.setScheduled(next)
		}
		out, changed = next, ch
		return nil
	})
	return out, changed, err
}

// setScheduled puts ev, as just written, in the gate's events for the rest
// of the batch: its later ops see the event saved, a pre-queue it opened
// (session.PrequeueHold) or closed.
func (g *gateTx) setScheduled(ev session.ScheduledEvent) {
	ev.Positions = nil // as read at the lock: without the drawn line
	g.scheduled = slices.DeleteFunc(g.scheduled, func(e session.ScheduledEvent) bool { return e.ID == ev.ID })
	g.scheduled = append(g.scheduled, ev)
	session.SortEvents(g.scheduled)
}
