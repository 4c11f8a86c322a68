package sqlite

import (
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/anteroomhq/anteroom/session"
)

// gate returns the writer's entry for name, reading the gates row (creating
// it when missing) and the gate's stored settings and events (readStored)
// the first time, and remembers it for the op's undo.
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
		var dest [14]driver.Value
		found, err := s.wc.queryRow(s.wc.selectGate, dest[:], name)
		switch {
		case err != nil:
		case found:
			e.c = session.Counters{NextPosition: asInt(dest[0]), Active: asInt(dest[1]), Waiting: asInt(dest[2])}
			e.pace = paceOf(dest[3], dest[4])
			e.mark = purgeMark{asInt(dest[5]), asInt(dest[6])}
			e.activeMark = purgeMark{asInt(dest[7]), asInt(dest[8])}
			e.pend = pendingPromotion{from: asInt(dest[9]), to: asInt(dest[10]), at: asInt(dest[11]), claim: asNullInt(dest[12]), notifyClaim: asNullInt(dest[13])}
		default:
			if _, err = s.wc.exec(s.wc.insertGate, name); err == nil {
				e.c = session.Counters{NextPosition: 1}
				e.mark, e.activeMark = noMark, noMark
			}
		}
		if err == nil {
			err = s.readStored(e)
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
	if err := s.recordHistory(b.events); err != nil {
		return nil, err
	}
	var gates map[string]session.GateState
	for _, e := range b.touched {
		if !e.inBatch {
			continue // listed twice after an undo
		}
		e.inBatch = false
		if e.save {
			e.save = false
			tokens, at := paceRow(e.pace)
			p := e.pend
			if _, err := s.wc.exec(s.wc.updateGate, e.c.NextPosition, e.c.Active, e.c.Waiting, tokens, at, e.mark.seen, e.mark.pos, e.activeMark.seen, e.activeMark.pos,
				p.from, p.to, p.at, nullInt(p.claim), nullInt(p.notifyClaim), e.name); err != nil {
				return nil, fmt.Errorf("save gate %q: %w", e.name, err)
			}
		}
		if e.report {
			e.report = false
			delete(s.startScan, e.name) // its rows changed since Open's scan
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
// the bounds of its waiting line (two seeks, none when nobody waits).
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
	if _, err := s.wc.queryRow(s.wc.bounds, dest[:], e.name, e.searchFrom(), e.mark.seen, e.mark.pos); err != nil {
		return st, fmt.Errorf("waiting bounds of gate %q: %w", e.name, err)
	}
	first, last := asNullInt(dest[0]), asNullInt(dest[1])
	if first.Valid && last.Valid {
		st.FirstWaitingPosition, st.LastWaitingPosition = first.Int64, last.Int64
		e.lb = first.Int64
	}
	return st, nil
}

// find reads the session (e's gate, id) inside the transaction: its row,
// or nil when it does not exist, and the index slot an insert of it takes.
// A row of e's pending promotion comes back promoted (promoted.go).
func (s *Store) find(e *gateEntry, id string) (*session.Session, slot, error) {
	gate := e.name
	pos, sl, ok := s.idx.lookup(gate, id)
	if !ok {
		return nil, sl, nil
	}
	var dest [6]driver.Value
	found, err := s.wc.queryRow(s.wc.selectRow, dest[:], gate, pos, id)
	if err != nil {
		return nil, sl, fmt.Errorf("read session: %w", err)
	}
	if found {
		r := rawRow{id: id, position: pos, status: asInt(dest[0]), lastActive: asNullInt(dest[1]), createdAt: asInt(dest[2]), claim: asNullInt(dest[3]), notify: asInt(dest[4]) != 0, lane: asInt(dest[5])}
		sess := r.session(gate)
		e.pend.apply(&sess) // a row reached by its id is live
		return &sess, sl, nil
	}
	// The hash's entry names another row: that of another key with the
	// same hash (then this key goes to the long map), or a row gone.
	if !sl.long {
		alive, err := s.wc.queryRow(s.wc.rowExists, dest[:1], gate, pos)
		if err != nil {
			return nil, sl, fmt.Errorf("read session: %w", err)
		}
		sl.long = alive
	}
	return nil, sl, nil
}

// write does what a rule decided for one row (slot sl, for an insert) and
// adds its delta to the gate's counters. out.Session is what was stored
// (keepLive may have moved a waiter's last sign of life): the caller reports
// and returns it. A caller whose write turns a call-back off (Notify from
// true to false) must also count a cursor reset (wconn.cursorResets), as
// SetNotify does, since it alone has the row as it was.
func (s *Store) write(e *gateEntry, out *session.Outcome, sl slot) error {
	r := &out.Session
	keepLive(e, r)
	var err error
	switch out.Action {
	case session.ActionNone:
		return nil
	case session.ActionInsert:
		_, err = s.wc.exec(s.wc.insertRow, e.name, r.Position, r.ID, statusValue(r.Status), nullNanos(r.LastActive), r.CreatedAt.UnixNano(), nullNanos(r.ClaimDeadline), boolValue(r.Notify), int64(r.Lane))
		if err == nil {
			s.idx.put(e.name, r.ID, sl, r.Position)
		}
	case session.ActionUpdate:
		_, err = s.wc.exec(s.wc.updateRow, statusValue(r.Status), nullNanos(r.LastActive), nullNanos(r.ClaimDeadline), boolValue(r.Notify), e.name, r.Position)
	case session.ActionDelete:
		_, err = s.wc.exec(s.wc.deleteRow, e.name, r.Position)
		if err == nil {
			s.idx.remove(e.name, r.ID, r.Position)
		}
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

// keepLive keeps a session that is written live: a last sign of life that
// a clock set back dates below the gate's purge mark of its status (the
// waiting or the active mark) would purge the row without a word (nothing
// counted out, nothing reported), so it is recorded at the least time the
// mark leaves it live at. Such a session is stale at the next update all
// the same, and purged there as any other.
func keepLive(e *gateEntry, r *session.Session) {
	if r.Notify || r.LastActive.IsZero() {
		return
	}
	m := e.mark
	if r.Status == session.StatusActive {
		m = e.activeMark
	}
	if m.covers(r.LastActive.UnixNano(), r.Position) {
		// The least time the mark leaves the row live at: the start of
		// the mark's second, or of the next one for a row before the
		// mark's position (seenSecond).
		t := seenSecond(m.seen)
		if r.Position < m.pos {
			t++
		}
		r.LastActive = fromNanos(t * seenSecondNanos)
	}
}

func (b *batch) event(kind session.EventKind, s session.Session) {
	b.events = append(b.events, session.Event{Kind: kind, Session: s})
}

// left records that s left its gate (EventDeactivated or EventDequeued, by
// its status) for reason.
func (b *batch) left(s session.Session, reason session.PurgeReason) {
	kind := session.EventDequeued
	if s.Status == session.StatusActive {
		kind = session.EventDeactivated
	}
	b.events = append(b.events, session.Event{Kind: kind, Session: s, Reason: reason})
}

func (s *Store) applyJoin(b *batch, o *op) error {
	e, err := s.gate(b, o.cfg.Name)
	if err != nil {
		return err
	}
	// A new session (most joins) is not in the index: no read, one insert.
	existing, sl, err := s.find(e, o.id)
	if err != nil {
		return err
	}
	out, err := session.DecideJoin(o.cfg, e.c, e.pace, existing, o.id, normTime(o.now))
	if err != nil {
		return err // a domain refusal (gate_closed), before any write
	}
	if o.code != "" {
		out, err = s.applyCode(e, o, out) // reads the code, decides its lane, writes its use
		if err != nil {
			return err
		}
	}
	if err := s.write(e, &out, sl); err != nil {
		return err
	}
	e.pace = out.Pace
	switch {
	case out.Session.Status == session.StatusActive && out.Action == session.ActionInsert:
		b.event(session.EventActivated, out.Session)
	case out.Session.Status == session.StatusActive && out.Action == session.ActionUpdate:
		b.events = append(b.events, session.Event{Kind: session.EventRefreshed, Session: out.Session, Claimed: out.Note == session.EventClaimed})
	case out.Action == session.ActionInsert:
		b.event(session.EventQueued, out.Session)
	}
	b.note(out)
	o.sess = out.Session
	return nil
}

// existing returns the op's gate and its session's row, or the not-found
// error of an op on an absent session.
func (s *Store) existing(b *batch, o *op) (*gateEntry, *session.Session, slot, error) {
	e, err := s.gate(b, o.cfg.Name)
	if err != nil {
		return nil, nil, slot{}, err
	}
	row, sl, err := s.find(e, o.id)
	if err != nil {
		return nil, nil, sl, err
	}
	if row == nil {
		return nil, nil, sl, session.NotFoundError(e.name, o.id)
	}
	return e, row, sl, nil
}

func (s *Store) applyLeave(b *batch, o *op) error {
	e, existing, sl, err := s.existing(b, o)
	if err != nil {
		return err
	}
	out := session.DecideLeave(existing, normTime(o.now))
	if err := s.write(e, &out, sl); err != nil {
		return err
	}
	if out.Action == session.ActionUpdate && out.Session.Status == session.StatusActive {
		b.event(session.EventRefreshed, out.Session)
	}
	b.note(out)
	o.sess = out.Session
	return nil
}

func (s *Store) applyRelease(b *batch, o *op) error {
	e, existing, sl, err := s.existing(b, o)
	if err != nil {
		return err
	}
	out := session.DecideRelease(o.cfg, e.c, existing)
	if err := s.write(e, &out, sl); err != nil {
		return err
	}
	if out.Action == session.ActionDelete {
		b.left(*existing, session.Released)
	}
	if _, err := s.promote(b, e, o.cfg, out.Promote, normTime(o.now), 0, false); err != nil {
		return err
	}
	o.sess = out.Session
	return nil
}

// promote promotes the first n waiters of the gate, in position order, with
// session.Promote, but no more than the gate's pacing allows at now
// (session.Pace), and none at or after position below (session.Promotable;
// zero: any). It returns how many it promoted.
//
// With logical set (an update's promotion phase), the waiters of the normal
// lane are promoted by the gate's pending promotion where they can be
// (promoteLogically), and their rows are written later.
func (s *Store) promote(b *batch, e *gateEntry, cfg session.GateConfig, n int64, now time.Time, below int64, logical bool) (int64, error) {
	n = min(n, e.pace.Available(cfg, now))
	if n <= 0 {
		return 0, nil
	}
	// The priority lane first (session.PromotionLanes); the normal lane gets
	// what it leaves, and only once it is empty.
	done, err := s.promotePriority(b, e, cfg, n, now, below)
	if err != nil || done == n {
		return done, err
	}
	rows, err := s.wc.query(s.wc.firstWaiters, e.name, e.searchFrom(), n-done, e.mark.seen, e.mark.pos)
	if err != nil {
		return 0, fmt.Errorf("read waiters: %w", err)
	}
	b.rows, err = s.wc.sessions(rows, e.name, b.rows[:0])
	if err != nil {
		return 0, fmt.Errorf("read waiters: %w", err)
	}
	var promoted int64
	var p pendingPromotion
	if logical {
		p = pendingFor(cfg, now)
	}
	pending := false
	for _, w := range b.rows {
		if !session.Promotable(w, below) {
			break
		}
		out := session.Promote(cfg, w, now)
		if logical && s.promoteLogically(e, w, &out, p) {
			pending = true
		} else if err := s.write(e, &out, slot{}); err != nil {
			return 0, err
		}
		b.event(session.EventPromoted, out.Session)
		e.lb = w.Position + 1
		promoted++
	}
	_, e.pace = e.pace.Allow(cfg, promoted, now)
	if pending {
		b.purged = append(b.purged, e.name) // the cleaner writes the rows
	}
	return done + promoted, nil
}

func (s *Store) applyTouch(b *batch, o *op) error {
	e, err := s.gate(b, o.cfg.Name)
	if err != nil {
		return err
	}
	report := e.report
	for _, t := range o.touches {
		if t.LastActive.IsZero() && t.ClaimDeadline.IsZero() {
			continue
		}
		existing, sl, err := s.find(e, t.ID)
		if err != nil {
			return err
		}
		t.LastActive = normTime(t.LastActive)
		out := session.DecideTouch(existing, t)
		if err := s.write(e, &out, sl); err != nil {
			return err
		}
		if out.Action == session.ActionUpdate && !existing.ClaimDeadline.Equal(out.Session.ClaimDeadline) {
			b.events = append(b.events, session.Event{Kind: session.EventRefreshed, Session: out.Session, Claimed: true})
		}
		b.note(out)
	}
	// A touch moves no counter and no bound: the gate's state is not reported.
	e.report = report
	return nil
}

// applyPurge runs one transaction of a Purge: each named session that is
// stale goes (session.DecidePurge), then the freed slots are filled.
func (s *Store) applyPurge(b *batch, o *op) error {
	e, err := s.gate(b, o.cfg.Name)
	if err != nil {
		return err
	}
	now := normTime(o.now)
	var step updateStep
	for _, id := range o.ids {
		row, sl, err := s.find(e, id)
		if err != nil {
			return err
		}
		if row == nil {
			continue
		}
		why := session.StaleReason(o.cfg, *row, now)
		if why == session.NotStale {
			continue
		}
		out := session.DecidePurge(*row)
		if err := s.write(e, &out, sl); err != nil {
			return err
		}
		if row.Status == session.StatusActive {
			step.purgedActive++
		} else {
			step.purgedWaiting++
		}
		b.left(*row, why)
	}
	n, err := s.promote(b, e, o.cfg, session.Promotions(o.cfg, e.c), now, 0, false)
	if err != nil {
		return err
	}
	step.promoted = n
	o.upd = step
	return nil
}

func (s *Store) applyLoad(b *batch, o *op) error {
	settings, err := s.allSettings()
	if err != nil {
		return err
	}
	names := append([]string(nil), o.gates...)
	for name := range settings {
		if !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	o.snaps = make(map[string]session.GateSnapshot, len(names))
	for _, name := range names {
		e, err := s.gate(b, name)
		if err != nil {
			return err
		}
		st, err := s.state(e)
		if err != nil {
			return err
		}
		active, waiting, err := s.loadRows(name, e.mark, e.activeMark, e.pend, st)
		if err != nil {
			return err
		}
		snap := session.GateSnapshot{State: st, Active: active, Waiting: waiting}
		if snap.Events, snap.DamagedEvents, err = s.eventsOf(name); err != nil {
			return err
		}
		if snap.PriorityWaiting, err = s.priorityPositions(name, e.mark); err != nil {
			return err
		}
		if c, ok := settings[name]; ok {
			snap.Settings = &c
		}
		o.snaps[name] = snap
	}
	s.startScan = nil // what Open's scan found served the first Load
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
		return session.Errorf(session.CodeInternal, "sqlite: secret: generate: %w", err)
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

// waitingPositions reads the positions of the gate's live waiters (those
// the purge mark m leaves live), ascending.
func (s *Store) waitingPositions(gate string, m purgeMark, hint int64) ([]int64, error) {
	rows, err := s.wc.query(s.wc.waitingPos, gate, m.seen, m.pos)
	if err != nil {
		return nil, fmt.Errorf("read waiting positions: %w", err)
	}
	defer rows.Close()
	out := make([]int64, 0, min(max(hint, 0), 1<<20)) // hint: a counter; a capacity, not a bound
	var dest [1]driver.Value
	for {
		err := rows.Next(dest[:])
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read waiting positions: %w", err)
		}
		out = append(out, asInt(dest[0]))
	}
}

// probeKey names the row a readiness probe writes and deletes.
const probeKey = "ready_probe"

// probeBytes is what a probe writes (and deletes in the same transaction):
// more than a batch of joins writes. A probe of 8 KiB on a full disk
// committed into the blocks the failed commit had already added to the WAL,
// so the Store said ready while every join still failed.
const probeBytes = 1 << 20

// applyProbe writes a row of probeBytes and deletes it: the transaction
// commits only if the database and its WAL can take more new data than a
// batch of joins needs.
func (s *Store) applyProbe() error {
	if _, err := s.wc.exec(s.wc.insertMeta, probeKey, make([]byte, probeBytes)); err != nil {
		return fmt.Errorf("probe: %w", err)
	}
	if _, err := s.wc.exec(s.wc.deleteMeta, probeKey); err != nil {
		return fmt.Errorf("probe: %w", err)
	}
	return nil
}
