package postgres

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/anteroomhq/anteroom/session"
)

// Scheduled events live in anteroom_events (migrations/0004), one row per
// event, the JSON session keeps of it. Every change runs through the writer
// as an op on the event's gate, so under the gate row's lock: the
// transitions happen once whichever instance asks.
const (
	sqlGateEvents  = `SELECT id, event FROM anteroom_events WHERE gate = $1`
	sqlOneEvent    = `SELECT event FROM anteroom_events WHERE gate = $1 AND id = $2`
	sqlSaveEvent   = `INSERT INTO anteroom_events (gate, id, event) VALUES ($1, $2, $3) ON CONFLICT (gate, id) DO UPDATE SET event = EXCLUDED.event`
	sqlDeleteEvent = `DELETE FROM anteroom_events WHERE gate = $1 AND id = $2`
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

func readEvent(ctx context.Context, tx pgx.Tx, gate, id string) (*session.ScheduledEvent, error) {
	var raw []byte
	err := tx.QueryRow(ctx, sqlOneEvent, gate, id).Scan(&raw)
	if err == pgx.ErrNoRows {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read event %q of gate %q: %w", id, gate, err)
	}
	ev, err := session.DecodeStoredEvent(gate, id, raw)
	if err != nil {
		return nil, err
	}
	return &ev, nil
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
		stored, err := readEvent(ctx, b.tx, ev.Gate, ev.ID)
		if err != nil {
			return err
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

// DeleteEvent removes an event (session.CheckDelete decides). Errors: a
// session.CodeEventNotFound or CodeEventLocked error,
// session.ErrInvalidArgument, session.ErrUnavailable, a
// session.CodeInternal error on storage failure.
func (s *Store) DeleteEvent(ctx context.Context, gate, id string) error {
	if !session.ValidGateName(id) {
		return session.Errorf(session.CodeInvalidArgument, "postgres: delete event: id %q", id)
	}
	return s.eventOp(ctx, gate, func(ctx context.Context, b *batch, g *gateTx) error {
		stored, err := readEvent(ctx, b.tx, gate, id)
		if err != nil {
			return err
		}
		if stored == nil {
			return session.EventNotFound(gate, id)
		}
		if err := session.CheckDelete(*stored); err != nil {
			return err
		}
		if _, err := b.tx.Exec(ctx, sqlDeleteEvent, gate, id); err != nil {
			return fmt.Errorf("delete event %q of gate %q: %w", id, gate, err)
		}
		g.scheduled = slices.DeleteFunc(g.scheduled, func(e session.ScheduledEvent) bool { return e.ID == id })
		return nil
	})
}

// Events returns the gate's events, sorted by start. Errors:
// session.ErrInvalidArgument, session.ErrUnavailable, a
// session.CodeInternal error on storage failure or an event that does not
// decode.
func (s *Store) Events(ctx context.Context, gate string) ([]session.ScheduledEvent, error) {
	if !session.ValidGateName(gate) {
		return nil, session.Errorf(session.CodeInvalidArgument, "postgres: events: gate name %q", gate)
	}
	if s.closed.Load() {
		return nil, session.ErrUnavailable
	}
	rows, err := s.pool.Query(ctx, sqlGateEvents, gate)
	if err != nil {
		return nil, storageErr("read events", err)
	}
	defer rows.Close()
	var out []session.ScheduledEvent
	for rows.Next() {
		var id string
		var raw []byte
		if err := rows.Scan(&id, &raw); err != nil {
			return nil, storageErr("read events", err)
		}
		ev, err := session.DecodeStoredEvent(gate, id, raw)
		if err != nil {
			return nil, err
		}
		out = append(out, ev)
	}
	if err := rows.Err(); err != nil {
		return nil, storageErr("read events", err)
	}
	session.SortEvents(out)
	return out, nil
}

// loadEvents adds each gate's events to its snapshot (Load).
func (s *Store) loadEvents(ctx context.Context, snaps map[string]session.GateSnapshot) error {
	for name, snap := range snaps {
		evs, err := s.Events(ctx, name)
		if err != nil {
			return err
		}
		snap.Events = evs
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
// session.ErrInvalidArgument, session.ErrUnavailable, a
// session.CodeInternal error on storage failure.
func (s *Store) AdvanceEvent(ctx context.Context, gate, id string, now time.Time) (session.ScheduledEvent, bool, error) {
	if !session.ValidGateName(id) {
		return session.ScheduledEvent{}, false, session.Errorf(session.CodeInvalidArgument, "postgres: advance event: id %q", id)
	}
	now = normTime(now)
	var out session.ScheduledEvent
	var changed bool
	err := s.eventOp(ctx, gate, func(ctx context.Context, b *batch, g *gateTx) error {
		stored, err := readEvent(ctx, b.tx, gate, id)
		if err != nil {
			return err
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
