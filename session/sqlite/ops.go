package sqlite

import (
	"database/sql/driver"
	"errors"
	"fmt"
	"time"

	"github.com/anteroomhq/anteroom/session"
)

// gate returns the writer's entry for name, reading the gates row (creating
// it when missing) the first time, and remembers it for the op's undo.
func (s *Store) gate(b *batch, name string) (*gateEntry, error) {
	e := s.cache[name]
	if !s.inUndo(b, name) {
		u := undoEntry{name: name, had: e != nil}
		if e != nil {
			u.prev = *e
		}
		b.undo = append(b.undo, u)
	}
	if e == nil {
		e = &gateEntry{name: name}
		var dest [3]driver.Value
		found, err := s.wc.queryRow(s.wc.selectGate, dest[:], name)
		switch {
		case err != nil:
		case found:
			e.c = session.Counters{NextPosition: asInt(dest[0]), Active: asInt(dest[1]), Waiting: asInt(dest[2])}
		default:
			if _, err = s.wc.exec(s.wc.insertGate, name); err == nil {
				e.c = session.Counters{NextPosition: 1}
			}
		}
		if err != nil {
			return nil, fmt.Errorf("gate %q: %w", name, err)
		}
		s.cache[name] = e
	}
	if !e.inBatch {
		e.inBatch = true
		b.touched = append(b.touched, e)
	}
	return e, nil
}

func (s *Store) inUndo(b *batch, name string) bool {
	for i := range b.undo {
		if b.undo[i].name == name {
			return true
		}
	}
	return false
}

// finish writes the counters of every gate the transaction changed and
// computes the state of every gate whose rows it changed.
func (s *Store) finish(b *batch) (map[string]session.GateState, error) {
	var gates map[string]session.GateState
	for _, e := range b.touched {
		if !e.inBatch {
			continue // listed twice after an undo
		}
		e.inBatch = false
		if e.save {
			e.save = false
			if _, err := s.wc.exec(s.wc.updateGate, e.c.NextPosition, e.c.Active, e.c.Waiting, e.name); err != nil {
				return nil, fmt.Errorf("save gate %q: %w", e.name, err)
			}
		}
		if e.report {
			e.report = false
			st, err := s.state(e)
			if err != nil {
				return nil, err
			}
			if gates == nil {
				gates = make(map[string]session.GateState, len(b.touched))
			}
			gates[e.name] = st
		}
	}
	return gates, nil
}

// state returns the gate's state inside the transaction: its counters and
// the bounds of its waiting line (two index seeks, none when nobody waits).
func (s *Store) state(e *gateEntry) (session.GateState, error) {
	st := session.GateState{
		Counters:             e.c,
		FirstWaitingPosition: e.c.NextPosition,
		LastWaitingPosition:  e.c.NextPosition - 1,
	}
	if e.c.Waiting == 0 {
		return st, nil
	}
	var dest [2]driver.Value
	if _, err := s.wc.queryRow(s.wc.bounds, dest[:], e.name); err != nil {
		return st, fmt.Errorf("waiting bounds of gate %q: %w", e.name, err)
	}
	first, last := asNullInt(dest[0]), asNullInt(dest[1])
	if first.Valid && last.Valid {
		st.FirstWaitingPosition, st.LastWaitingPosition = first.Int64, last.Int64
	}
	return st, nil
}

// row reads the session (gate, id), or nil when it does not exist.
func (s *Store) row(gate, id string) (*session.Session, error) {
	var dest [4]driver.Value
	found, err := s.wc.queryRow(s.wc.selectRow, dest[:], gate, id)
	if err != nil {
		return nil, fmt.Errorf("read session: %w", err)
	}
	if !found {
		return nil, nil
	}
	r := rawRow{id: id, position: asInt(dest[0]), status: asInt(dest[1]), lastActive: asNullInt(dest[2]), createdAt: asInt(dest[3])}
	sess := r.session(gate)
	return &sess, nil
}

// errExists is write's answer to an insert of a row that exists.
var errExists = errors.New("session row exists")

// write does what a rule decided for one row and adds its delta to the
// gate's counters. An insert of a row that exists changes nothing and
// returns errExists.
func (s *Store) write(e *gateEntry, out session.Outcome) error {
	r := &out.Session
	var err error
	switch out.Action {
	case session.ActionNone:
		return nil
	case session.ActionInsert:
		var n int64
		n, err = s.wc.exec(s.wc.insertRow, e.name, r.ID, r.Position, statusValue(r.Status), nullNanos(r.LastActive), r.CreatedAt.UnixNano())
		if err == nil && n == 0 {
			return errExists
		}
	case session.ActionUpdate:
		_, err = s.wc.exec(s.wc.updateRow, statusValue(r.Status), nullNanos(r.LastActive), e.name, r.ID)
	case session.ActionDelete:
		_, err = s.wc.exec(s.wc.deleteRow, e.name, r.ID)
	}
	if err != nil {
		return fmt.Errorf("write session: %w", err)
	}
	e.report = true
	if out.Delta != (session.Counters{}) {
		e.c = e.c.Add(out.Delta)
		e.save = true
	}
	return nil
}

func (b *batch) event(kind session.EventKind, s session.Session) {
	b.events = append(b.events, session.Event{Kind: kind, Session: s})
}

func notFound(kind opKind, gate, id string) error {
	return session.Errorf(session.CodeNotFound, "sqlite: %s: session %q of gate %q not found", kind, id, gate)
}

func (s *Store) applyJoin(b *batch, o *op) error {
	e, err := s.gate(b, o.cfg.Name)
	if err != nil {
		return err
	}
	now := normTime(o.now)
	// Most joins are of new sessions: decide as if the row were absent and
	// insert, which does nothing when the row exists. Then, and only then,
	// read the row and decide again. One statement for a new session.
	out := session.DecideJoin(o.cfg, e.c, nil, o.id, now)
	err = s.write(e, out)
	if errors.Is(err, errExists) {
		existing, rerr := s.row(e.name, o.id)
		if rerr != nil {
			return rerr
		}
		if existing == nil {
			return fmt.Errorf("session %q of gate %q neither inserted nor found", o.id, e.name)
		}
		out = session.DecideJoin(o.cfg, e.c, existing, o.id, now)
		err = s.write(e, out)
	}
	if err != nil {
		return err
	}
	if out.Session.Status == session.StatusActive {
		switch out.Action {
		case session.ActionInsert:
			b.event(session.EventActivated, out.Session)
		case session.ActionUpdate:
			b.event(session.EventRefreshed, out.Session)
		}
	}
	o.sess = out.Session
	return nil
}

func (s *Store) applyLeave(b *batch, o *op) error {
	e, err := s.gate(b, o.cfg.Name)
	if err != nil {
		return err
	}
	existing, err := s.row(e.name, o.id)
	if err != nil {
		return err
	}
	if existing == nil {
		return notFound(o.kind, e.name, o.id)
	}
	out := session.DecideLeave(existing, normTime(o.now))
	if err := s.write(e, out); err != nil {
		return err
	}
	if out.Action == session.ActionUpdate && out.Session.Status == session.StatusActive {
		b.event(session.EventRefreshed, out.Session)
	}
	o.sess = out.Session
	return nil
}

func (s *Store) applyRelease(b *batch, o *op) error {
	e, err := s.gate(b, o.cfg.Name)
	if err != nil {
		return err
	}
	existing, err := s.row(e.name, o.id)
	if err != nil {
		return err
	}
	if existing == nil {
		return notFound(o.kind, e.name, o.id)
	}
	out := session.DecideRelease(o.cfg, e.c, existing)
	if err := s.write(e, out); err != nil {
		return err
	}
	if out.Action == session.ActionDelete && existing.Status == session.StatusActive {
		b.event(session.EventDeactivated, *existing)
	}
	if _, err := s.promote(b, e, out.Promote, normTime(o.now)); err != nil {
		return err
	}
	o.sess = out.Session
	return nil
}

// promote promotes the first n waiters of the gate, in position order, with
// session.Promote. It returns how many it promoted.
func (s *Store) promote(b *batch, e *gateEntry, n int64, now time.Time) (int64, error) {
	if n <= 0 {
		return 0, nil
	}
	rows, err := s.wc.query(s.wc.firstWaiters, e.name, n)
	if err != nil {
		return 0, fmt.Errorf("read waiters: %w", err)
	}
	b.waiters, err = s.wc.sessions(rows, e.name, b.waiters[:0])
	if err != nil {
		return 0, fmt.Errorf("read waiters: %w", err)
	}
	for _, w := range b.waiters {
		out := session.Promote(w, now)
		if err := s.write(e, out); err != nil {
			return 0, err
		}
		b.event(session.EventPromoted, out.Session)
	}
	return int64(len(b.waiters)), nil
}

func (s *Store) applyTouch(o *op) error {
	for _, t := range o.touches {
		if _, err := s.wc.exec(s.wc.touch, t.LastActive.UnixNano(), o.cfg.Name, t.ID); err != nil {
			return fmt.Errorf("touch: %w", err)
		}
	}
	return nil
}

// applyUpdate runs one transaction's worth of an Update: at most chunk rows,
// the phases in order, continuing where the previous transaction stopped.
func (s *Store) applyUpdate(b *batch, o *op) error {
	st := &o.upd
	e, err := s.gate(b, o.cfg.Name)
	if err != nil {
		return err
	}
	budget := int64(st.chunk)
	if st.phase == 0 {
		n, err := s.wc.exec(s.wc.purgeWaiting, e.name, st.waitingCutoff, budget)
		if err != nil {
			return fmt.Errorf("purge waiting: %w", err)
		}
		if n > 0 {
			e.c.Waiting -= n
			e.save, e.report = true, true
		}
		st.purgedWaiting = n
		if budget -= n; budget == 0 {
			return nil // maybe more: the next transaction looks again
		}
		st.phase = 1
	}
	if st.phase == 1 {
		rows, err := s.wc.query(s.wc.purgeActive, e.name, st.activeCutoff, budget)
		if err != nil {
			return fmt.Errorf("purge active: %w", err)
		}
		b.waiters, err = s.wc.sessions(rows, e.name, b.waiters[:0])
		if err != nil {
			return fmt.Errorf("purge active: %w", err)
		}
		n := int64(len(b.waiters))
		if n > 0 {
			e.c.Active -= n
			e.save, e.report = true, true
			for _, r := range b.waiters {
				b.event(session.EventDeactivated, r)
			}
		}
		st.purgedActive = n
		if budget -= n; budget == 0 {
			return nil
		}
		st.phase = 2
	}
	want := session.PromotionCount(o.cfg.ActiveLimit, e.c)
	n, err := s.promote(b, e, min(want, budget), normTime(o.now))
	if err != nil {
		return err
	}
	st.promoted = n
	st.finished = n == want || n < min(want, budget)
	return nil
}

func (s *Store) applyLoad(b *batch, o *op) error {
	o.snaps = make(map[string]session.GateSnapshot, len(o.gates))
	for _, name := range o.gates {
		e, err := s.gate(b, name)
		if err != nil {
			return err
		}
		st, err := s.state(e)
		if err != nil {
			return err
		}
		rows, err := s.wc.query(s.wc.active, name)
		if err != nil {
			return fmt.Errorf("read active sessions: %w", err)
		}
		active, err := s.wc.sessions(rows, name, nil)
		if err != nil {
			return fmt.Errorf("read active sessions: %w", err)
		}
		o.snaps[name] = session.GateSnapshot{State: st, Active: active}
	}
	return nil
}

func (s *Store) applySecret(o *op) error {
	var dest [1]driver.Value
	found, err := s.wc.queryRow(s.wc.selectMeta, dest[:], secretKey)
	if err != nil {
		return fmt.Errorf("read secret: %w", err)
	}
	if v, _ := dest[0].([]byte); found && len(v) > 0 {
		o.secret = append([]byte(nil), v...)
		return nil
	}
	v, err := o.gen()
	if err != nil {
		return &beforeWriteError{session.Errorf(session.CodeInternal, "sqlite: secret: generate: %w", err)}
	}
	if len(v) == 0 {
		return session.Errorf(session.CodeInvalidArgument, "sqlite: secret: generator returned an empty secret")
	}
	if _, err := s.wc.exec(s.wc.insertMeta, secretKey, v); err != nil {
		return fmt.Errorf("store secret: %w", err)
	}
	o.secret = append([]byte(nil), v...)
	return nil
}
