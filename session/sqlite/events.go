package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/anteroomhq/anteroom/session"
)

// Scheduled events live in the meta table (migrations/0001), one row per
// event keyed eventsPrefix+gate+"/"+id, its value session's stored JSON of
// the event (a started event's drawn line in a row of its own: lines.go):
// no schema change. Gate names and event ids have no '/', and
// '/' + 1 is '0', so the keys of a gate's events are exactly those in
// [eventsPrefix+gate+"/", eventsPrefix+gate+"0").
const eventsPrefix = "gate_events/"

const sqlGateEvents = `SELECT key, value FROM meta WHERE key >= ? AND key < ? ORDER BY key`

func eventKey(gate, id string) string { return eventsPrefix + gate + "/" + id }

func eventRange(gate string) (lo, hi string) {
	return eventsPrefix + gate + "/", eventsPrefix + gate + "0"
}

// gateOp runs fn in a transaction of the writer, with the gate's entry
// (its row created when missing) and its counters, beside the gates'
// pending promotions (promoted.go): fn reaches a session only by its id
// (find), writes no session row, or writes its gate's pending promotion
// first (materialize).
func (s *Store) gateOp(ctx context.Context, gate string, fn func(b *batch, e *gateEntry) error) error {
	if !session.ValidGateName(gate) {
		return session.Errorf(session.CodeInvalidArgument, "sqlite: event: gate name %q", gate)
	}
	o := newOp(ctx, opFunc)
	o.cfg.Name = gate
	o.fn = func(b *batch) error {
		e, err := s.gate(b, gate)
		if err != nil {
			return err
		}
		return fn(b, e)
	}
	err := s.do(o)
	putOp(o)
	return err
}

// storedEvent reads one event inside the writer's transaction, or nil.
// damage is DecodeStoredEvent's error for a row that does not decode (ev
// is then nil); err, a failed read.
func (s *Store) storedEvent(gate, id string) (ev *session.ScheduledEvent, damage, err error) {
	var dest [1]driver.Value
	found, err := s.wc.queryRow(s.wc.selectMeta, dest[:], eventKey(gate, id))
	if err != nil {
		return nil, nil, fmt.Errorf("read event %q of gate %q: %w", id, gate, err)
	}
	if !found {
		return nil, nil, nil
	}
	decoded, damage := session.DecodeStoredEvent(gate, id, asBytes(dest[0]))
	if damage != nil {
		return nil, damage, nil
	}
	return &decoded, nil, nil
}

// logDamagedEvent logs a stored event that does not decode, which the
// reads leave out.
func (s *Store) logDamagedEvent(gate string, damage error) {
	s.log.Warn("anteroom: a gate's stored event is damaged and left out; delete it (its id is in the error) and schedule it again", "gate", gate, "err", damage)
}

// writeEvent stores ev: its JSON, and its drawn line in a row of its own
// (lines.go) when it has one. A line is written once, as the event starts;
// an event written again without one keeps it.
func (s *Store) writeEvent(ev session.ScheduledEvent) error {
	js, line, err := eventRow(ev)
	if err != nil {
		return err
	}
	if _, err := s.wc.exec(s.wc.insertMeta, eventKey(ev.Gate, ev.ID), js); err != nil {
		return fmt.Errorf("save event %q of gate %q: %w", ev.ID, ev.Gate, err)
	}
	if line != nil {
		if _, err := s.wc.exec(s.wc.insertMeta, lineKey(ev.Gate, ev.ID), line); err != nil {
			return fmt.Errorf("save the drawn line of event %q of gate %q: %w", ev.ID, ev.Gate, err)
		}
	}
	return nil
}

// SaveEvent stores ev's schedule (session.MergeSaved decides) and returns
// the event as stored. Errors: session.ErrInvalidArgument,
// a session.CodeEventLocked error, session.ErrUnavailable after Close, the
// context's error, a session.CodeInternal error on storage failure.
func (s *Store) SaveEvent(ctx context.Context, ev session.ScheduledEvent) (session.ScheduledEvent, error) {
	if err := ev.Validate(); err != nil {
		return session.ScheduledEvent{}, err
	}
	var saved session.ScheduledEvent
	err := s.gateOp(ctx, ev.Gate, func(_ *batch, e *gateEntry) error { // the event's rows alone: beside a pending promotion
		stored, damage, err := s.storedEvent(ev.Gate, ev.ID)
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
		if err := s.writeEvent(next); err != nil {
			return err
		}
		saved = next
		e.setEvent(next)
		return nil
	})
	return saved, err
}

// DeleteEvent removes an event (session.CheckDelete decides); one whose
// row does not decode is deleted unchecked. Errors: a
// session.CodeEventNotFound or CodeEventLocked error,
// session.ErrInvalidArgument, session.ErrUnavailable after Close, the
// context's error, a session.CodeInternal error on storage failure.
func (s *Store) DeleteEvent(ctx context.Context, gate, id string) error {
	if !session.ValidGateName(id) {
		return session.Errorf(session.CodeInvalidArgument, "sqlite: delete event: id %q", id)
	}
	return s.gateOp(ctx, gate, func(_ *batch, e *gateEntry) error { // the event's rows alone: beside a pending promotion
		stored, damage, err := s.storedEvent(gate, id)
		if err != nil {
			return err
		}
		if err := session.CheckDeleteStored(gate, id, stored, damage); err != nil {
			return err
		}
		if damage != nil {
			s.log.Warn("anteroom: deleting a damaged stored event", "gate", gate, "event", id, "err", damage)
		}
		for _, key := range []string{eventKey(gate, id), lineKey(gate, id)} {
			if _, err := s.wc.exec(s.wc.deleteMeta, key); err != nil {
				return fmt.Errorf("delete event %q of gate %q: %w", id, gate, err)
			}
		}
		if e.damagedEvents {
			// The gate had an event left out (this one's JSON, or its
			// line, or another's): whether one is left, and one that
			// holds it, read again.
			e.events, e.damagedEvents, e.damagedHold, err = s.storedEvents(gate)
			return err
		}
		e.dropEvent(id)
		return nil
	})
}

// Events returns the gate's events, sorted by start, from the read pool;
// an event that does not decode (its drawn line included) is logged and
// left out. Errors: session.ErrInvalidArgument, session.ErrUnavailable
// after Close, a session.CodeInternal error on storage failure.
func (s *Store) Events(ctx context.Context, gate string) ([]session.ScheduledEvent, error) {
	evs, _, err := s.EventsAndDamaged(ctx, gate)
	return evs, err
}

// EventsAndDamaged returns what Events returns and the gate's events that
// do not decode, their drawn lines included (session.DamageReporter),
// from the same reads. Errors: as Events'.
func (s *Store) EventsAndDamaged(ctx context.Context, gate string) ([]session.ScheduledEvent, []session.DamagedEvent, error) {
	if !session.ValidGateName(gate) {
		return nil, nil, session.Errorf(session.CodeInvalidArgument, "sqlite: events: gate name %q", gate)
	}
	if s.closed.Load() {
		return nil, nil, session.ErrUnavailable
	}
	evs, damaged, err := s.eventsWithLines(gate, func(onDamaged func(error, string, []byte)) ([]session.ScheduledEvent, error) {
		return s.poolReadEvents(ctx, gate, onDamaged)
	}, func(key string) ([]byte, bool, error) {
		var v []byte
		err := s.readDB.QueryRowContext(ctx, sqlSelectMeta, key).Scan(&v)
		if errors.Is(err, sql.ErrNoRows) {
			return nil, false, nil
		}
		return v, err == nil, err
	})
	if err != nil {
		return nil, nil, s.readErr("events", err)
	}
	return evs, damaged, nil
}

// poolReadEvents is readEvents on the read pool.
func (s *Store) poolReadEvents(ctx context.Context, gate string, onDamaged func(err error, id string, raw []byte)) ([]session.ScheduledEvent, error) {
	lo, hi := eventRange(gate)
	rows, err := s.readDB.QueryContext(ctx, sqlGateEvents, lo, hi)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []session.ScheduledEvent
	for rows.Next() {
		var key string
		var val []byte
		if err := rows.Scan(&key, &val); err != nil {
			return nil, err
		}
		id := strings.TrimPrefix(key, lo)
		ev, damage := session.DecodeStoredEvent(gate, id, val)
		if damage != nil {
			onDamaged(damage, id, val)
			continue
		}
		out = append(out, ev)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	session.SortEvents(out)
	return out, nil
}

// eventsOf reads the gate's events, with their drawn lines, inside the
// writer's transaction (Load); as eventsWithLines.
func (s *Store) eventsOf(gate string) ([]session.ScheduledEvent, []session.DamagedEvent, error) {
	return s.eventsWithLines(gate, func(onDamaged func(error, string, []byte)) ([]session.ScheduledEvent, error) {
		return s.readEvents(gate, onDamaged)
	}, s.writerMeta)
}

// eventsWithLines reads the gate's events with read (readEvents on the
// writer's connection, or poolReadEvents) and their drawn lines with get:
// those that decode, sorted by start, with their lines; those that do not
// (an event whose line does not decode reads as started, and holds
// nothing), logged and left out, as every decision leaves them out
// (storedEvents), sorted by id. Errors: read's and get's.
func (s *Store) eventsWithLines(gate string, read func(onDamaged func(err error, id string, raw []byte)) ([]session.ScheduledEvent, error), get func(key string) ([]byte, bool, error)) ([]session.ScheduledEvent, []session.DamagedEvent, error) {
	var damaged []session.DamagedEvent
	evs, err := read(func(damage error, id string, raw []byte) {
		s.logDamagedEvent(gate, damage)
		damaged = append(damaged, session.NewDamagedEvent(id, raw, damage))
	})
	if err != nil {
		return nil, nil, err
	}
	evs, err = withLines(evs, get, func(id string, damage error) {
		s.logDamagedEvent(gate, damage)
		damaged = append(damaged, session.DamagedEvent{ID: id, Err: damage.Error()})
	}, true)
	slices.SortFunc(damaged, func(a, b session.DamagedEvent) int { return strings.Compare(a.ID, b.ID) })
	return evs, damaged, err
}

// writerMeta reads a meta row inside the writer's transaction.
func (s *Store) writerMeta(key string) ([]byte, bool, error) {
	var dest [1]driver.Value
	found, err := s.wc.queryRow(s.wc.selectMeta, dest[:], key)
	if err != nil {
		return nil, false, fmt.Errorf("read %s: %w", key, err)
	}
	if !found {
		return nil, false, nil
	}
	return asBytes(dest[0]), true, nil
}

// storedEvents reads the gate's events inside the writer's transaction,
// without their drawn lines (decisions do not read them; a large launch's
// is megabytes, in a row of its own: lines.go), leaving out (and logging)
// those that do not decode: damaged says some were, hold that one of them
// holds the gate (session.DamagedEventHolds). Errors: a failed read.
func (s *Store) storedEvents(gate string) (evs []session.ScheduledEvent, damaged, hold bool, err error) {
	evs, err = s.readEvents(gate, func(err error, id string, raw []byte) {
		h := session.DamagedEventHolds(id, raw)
		s.log.Warn("anteroom: a gate's stored event is damaged; its ops decide with the instance's own settings, and the gate admits nobody new unless the event still reads as started: delete it (its id is in the error)",
			"gate", gate, "holds", h, "err", err)
		damaged, hold = true, hold || h
	})
	if err != nil {
		return nil, false, false, err
	}
	for i := range evs {
		evs[i].Positions = nil
	}
	// A line that does not decode leaves its (started) event out here as
	// in Load and Events: checked, not kept (a million positions check in
	// a few milliseconds, at a cache miss of the gate's entry).
	evs, err = withLines(evs, s.writerMeta, func(_ string, err error) {
		s.log.Warn("anteroom: a gate's stored event is damaged; its ops decide with the instance's own settings", "gate", gate, "err", err)
		damaged = true
	}, false)
	return evs, damaged, hold, err
}

// setEvent puts ev, as just written, in the entry's events, without its
// drawn line. The slice is replaced, not changed: an undone op restores
// the entry's previous one.
func (e *gateEntry) setEvent(ev session.ScheduledEvent) {
	ev.Positions = nil
	e.dropEvent(ev.ID)
	e.events = append(e.events, ev)
	session.SortEvents(e.events)
}

// dropEvent takes the event id out of the entry's events (a new slice, as
// setEvent).
func (e *gateEntry) dropEvent(id string) {
	evs := make([]session.ScheduledEvent, 0, len(e.events)+1)
	for _, x := range e.events {
		if x.ID != id {
			evs = append(evs, x)
		}
	}
	e.events = evs
}

// readEvents reads the gate's events, sorted, inside the writer's
// transaction; an event that does not decode goes to onDamaged and is
// left out.
func (s *Store) readEvents(gate string, onDamaged func(err error, id string, raw []byte)) ([]session.ScheduledEvent, error) {
	lo, hi := eventRange(gate)
	pc, ok := s.wc.c.(driver.ConnPrepareContext)
	if !ok {
		return nil, errors.New("driver connection cannot prepare with a context")
	}
	st, err := pc.PrepareContext(context.Background(), sqlGateEvents)
	if err != nil {
		return nil, fmt.Errorf("read events: %w", err)
	}
	defer st.Close()
	rows, err := st.(driver.StmtQueryContext).QueryContext(context.Background(), []driver.NamedValue{{Ordinal: 1, Value: lo}, {Ordinal: 2, Value: hi}})
	if err != nil {
		return nil, fmt.Errorf("read events: %w", err)
	}
	defer rows.Close()
	var out []session.ScheduledEvent
	var dest [2]driver.Value
	for {
		err := rows.Next(dest[:])
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read events: %w", err)
		}
		id := strings.TrimPrefix(asString(dest[0]), lo)
		ev, err := session.DecodeStoredEvent(gate, id, asBytes(dest[1]))
		if err != nil {
			onDamaged(err, id, asBytes(dest[1]))
			continue
		}
		out = append(out, ev)
	}
	session.SortEvents(out)
	return out, nil
}

// AdvanceEvent runs the event's transitions due at now in one writer
// transaction: session.DecidePrequeue with the gate's counters, then, when
// the start is due, session.DecideStart over the waiters at or above
// FirstPosition, whose rows are moved to their new positions (deleted,
// then inserted: (gate, position) is the table's key), with an
// EventReordered each and one EventLaunched. Errors: a
// session.CodeEventNotFound error, a session.CodeEventLocked error when
// its row (or its drawn line) does not decode (session.EventDamaged),
// session.ErrInvalidArgument, session.ErrUnavailable after Close, the
// context's error, a session.CodeInternal error on storage failure.
func (s *Store) AdvanceEvent(ctx context.Context, gate, id string, now time.Time) (session.ScheduledEvent, bool, error) {
	if !session.ValidGateName(id) {
		return session.ScheduledEvent{}, false, session.Errorf(session.CodeInvalidArgument, "sqlite: advance event: id %q", id)
	}
	now = normTime(now)
	var out session.ScheduledEvent
	var changed bool
	err := s.gateOp(ctx, gate, func(b *batch, e *gateEntry) error { // only a draw moves rows: it writes the gate's pending promotion first
		stored, damage, err := s.storedEvent(gate, id)
		if err != nil {
			return err
		}
		if damage != nil {
			return session.EventDamaged(gate, id, damage)
		}
		if stored == nil {
			return session.EventNotFound(gate, id)
		}
		next, ch, startDue := session.DecidePrequeue(*stored, e.c, now)
		if startDue {
			if _, err := s.materialize(b, gate, -1); err != nil {
				return err
			}
			rows, err := s.wc.query(s.wc.firstWaiters, gate, next.FirstPosition, int64(math.MaxInt64), e.mark.seen, e.mark.pos)
			if err != nil {
				return fmt.Errorf("read the pre-queue: %w", err)
			}
			waiters, err := s.wc.sessions(rows, gate, nil)
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
			if err := s.moveSessions(b, e, waiters, moves); err != nil {
				return err
			}
			b.events = append(b.events, session.Event{Kind: session.EventLaunched,
				Session: session.Session{Gate: gate, ID: id, CreatedAt: now, Position: int64(len(positions))}})
			e.report = true
			ch = true
		}
		if ch {
			if err := s.writeEvent(next); err != nil {
				return err
			}
			e.setEvent(next)
		} else if next.Phase == session.EventStarted && next.Positions == nil {
			// Started before: as stored, with its drawn line.
			var lineDamage error
			evs, err := withLines([]session.ScheduledEvent{next}, s.writerMeta, func(_ string, d error) { lineDamage = d }, true)
			if err != nil {
				return err
			}
			if lineDamage != nil {
				return session.EventDamaged(gate, id, lineDamage)
			}
			next = evs[0]
		}
		out, changed = next, ch
		return nil
	})
	return out, changed, err
}

// readStored sets e's held settings and events from what is stored, inside
// the writer's transaction. A settings row or an event that does not decode
// is logged and left out (the gate's ops then decide with their own
// configuration); only a failed read is an error.
func (s *Store) readStored(e *gateEntry) error {
	var dest [1]driver.Value
	found, err := s.wc.queryRow(s.wc.selectMeta, dest[:], settingsPrefix+e.name)
	if err != nil {
		return fmt.Errorf("read settings: %w", err)
	}
	e.held = nil
	if found {
		if cfg, err := decodeSettings(e.name, asBytes(dest[0])); err != nil {
			s.log.Warn("anteroom: a gate's stored runtime settings are damaged; its ops decide with the instance's own", "gate", e.name, "err", err)
		} else {
			e.held = &cfg
		}
	}
	e.events, e.damagedEvents, e.damagedHold, err = s.storedEvents(e.name)
	return err
}

// decidedWith gives o, an op that decides, the configuration of its gate as
// stored (gateEntry.held, the events over it) when the gate has runtime
// settings and its events all decode, else o keeps its own; held while a
// pre-queue is open as stored (session.PrequeueHold).
func (s *Store) decidedWith(b *batch, o *op) error {
	e, err := s.gate(b, o.cfg.Name)
	if err != nil {
		return err
	}
	if e.held != nil && !e.damagedEvents {
		o.cfg = session.EventConfig(*e.held, e.events, o.now)
	}
	o.cfg = session.PrequeueHold(o.cfg, e.events, e.damagedHold)
	return nil
}

// moveSessions gives the waiters named in moves (old position -> new) their
// new positions: every moved row is deleted, then inserted again.
func (s *Store) moveSessions(b *batch, e *gateEntry, waiters []session.Session, moves map[int64]int64) error {
	if len(moves) == 0 {
		return nil
	}
	s.wc.cursorResets++ // an update's in-place cursor no longer holds (updateStep.inPlace)
	var moved []session.Session
	for _, w := range waiters {
		to, ok := moves[w.Position]
		if !ok {
			continue
		}
		if _, err := s.wc.exec(s.wc.deleteRow, e.name, w.Position); err != nil {
			return fmt.Errorf("move session: %w", err)
		}
		w.Position = to
		keepLive(e, &w) // its new position may fall below the mark
		moved = append(moved, w)
	}
	for _, w := range moved {
		if _, err := s.wc.exec(s.wc.insertRow, e.name, w.Position, w.ID, statusValue(w.Status), nullNanos(w.LastActive), w.CreatedAt.UnixNano(), nullNanos(w.ClaimDeadline), boolValue(w.Notify), int64(w.Lane)); err != nil {
			return fmt.Errorf("move session: %w", err)
		}
		_, sl, _ := s.idx.lookup(e.name, w.ID)
		s.idx.put(e.name, w.ID, sl, w.Position)
		b.events = append(b.events, session.Event{Kind: session.EventReordered, Session: w})
	}
	return nil
}
