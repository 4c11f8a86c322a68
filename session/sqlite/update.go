package sqlite

import (
	"database/sql/driver"
	"fmt"
	"math"
	"time"

	"github.com/anteroomhq/anteroom/session"
)

// testHookUpdateStep, set only by this package's tests, runs after each step
// of an update's transaction.
var testHookUpdateStep func()

// updateYieldAfter is session.UpdateYieldAfter; a variable for the tests.
var updateYieldAfter = session.UpdateYieldAfter

// applyUpdate runs one transaction's worth of an Update: at most chunk rows,
// the phases in order (purge stale waiters, purge stale active sessions,
// promote), continuing where the previous transaction stopped. It goes in
// steps of at most session.UpdateYieldRows rows and, while another operation
// waits for the writer (queued, or in this batch), ends the transaction
// after the first step that ends session.UpdateYieldAfter or more after it
// began: a join queued behind an update waits for a few milliseconds and a
// commit, not for the whole chunk.
func (s *Store) applyUpdate(b *batch, o *op) error {
	// Work on a copy of the input: a transaction that fails is run again
	// from the same place.
	step := o.updIn
	st := &step
	e, err := s.gate(b, o.cfg.Name)
	if err != nil {
		return err
	}
	// The cutoffs of the configuration the transaction decides with
	// (decidedWith): stored settings changed since the caller read its own
	// may set other timeouts.
	wc, ac := session.StaleCutoffs(o.cfg, o.now)
	st.waitingCutoff, st.activeCutoff = wc.UnixNano(), ac.UnixNano()
	defer func() { o.upd = step }()
	if st.lineEnd == 0 {
		st.lineEnd = e.c.NextPosition
	}
	budget := int64(st.chunk)
	began := time.Now()
	for budget > 0 && !st.finished {
		n := min(budget, session.UpdateYieldRows)
		did, err := s.updateStep(b, e, o, st, n)
		if err != nil {
			return err
		}
		budget -= did
		if testHookUpdateStep != nil {
			testHookUpdateStep()
		}
		if s.othersWait(b) && time.Since(began) >= updateYieldAfter {
			return nil // the next transaction goes on from here
		}
	}
	return nil
}

// takeQueued moves the ops queued for the writer into the batch being run
// (up to Options.MaxBatch ops in all), after an update's op: those that
// queued during its steps, which it yielded to, run in its transaction and
// share its commit instead of waiting for another. An op whose context is
// done is answered and left out, as runBatch does.
func (s *Store) takeQueued(b *batch) {
	for len(b.live) < s.maxBatch {
		select {
		case o, ok := <-s.ops:
			if !ok {
				return // closing: the writer's loop ends after this batch
			}
			s.admit(b, o)
		default:
			return
		}
	}
}

// othersWait reports whether another operation waits for the writer: queued
// for it, or in the batch being run (in the same transaction, after the
// update).
func (s *Store) othersWait(b *batch) bool {
	return len(s.ops) > 0 || len(b.live) > 1
}

// The phases of an update, in order.
const (
	phasePurgeSeen           = iota // waiters last seen before the cutoff's second: the purge mark rises over them
	phasePurgeWaitingInPlace        // waiters without a last sign of life (written before 0003), or last seen in the cutoff's second before it, deleted
	phasePurgeActiveSeen            // active sessions idle since before the cutoff's second: the active mark rises over them
	phasePurgeActive                // the other stale active sessions (called back, unclaimed, unseen, idle since the cutoff's second), deleted
	phasePromote                    // waiters into the freed slots
)

// updateStep runs one statement of an update's current phase on at most n
// rows and returns how many rows it touched; the phase moves on when the
// statement found fewer than n, and st.finished is set once the promotion
// is done.
func (s *Store) updateStep(b *batch, e *gateEntry, o *op, st *updateStep, n int64) (int64, error) {
	switch st.phase {
	case phasePurgeSeen, phasePurgeActiveSeen:
		what, status, cutoff, counted := "purge waiting", session.StatusWaiting, st.waitingCutoff, &st.purgedWaiting
		if st.phase == phasePurgeActiveSeen {
			what, status, cutoff, counted = "purge active", session.StatusActive, st.activeCutoff, &st.purgedActive
		}
		did, err := s.purgeSeen(b, e, o, status, cutoff, n)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", what, err)
		}
		*counted += did
		if did < n {
			st.phase++
		}
		return did, nil
	case phasePurgeWaitingInPlace, phasePurgeActive:
		what, stmt, cutoff, mark := "purge waiting", s.wc.purgeWaitingInPlace, st.waitingCutoff, e.mark
		if st.phase == phasePurgeActive {
			what, stmt, cutoff, mark = "purge active", s.wc.purgeActive, st.activeCutoff, e.activeMark
		}
		after := st.inPlaceAfter(cutoff, mark, s.wc.cursorResets)
		// The two statements take the same parameters (?4, the update's
		// time, only sqlPurgeActive uses).
		rows, err := s.wc.query(stmt, e.name, cutoff, n, st.now, mark.seen, mark.pos, after)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", what, err)
		}
		b.rows, err = s.wc.sessions(rows, e.name, b.rows[:0])
		if err != nil {
			return 0, fmt.Errorf("%s: %w", what, err)
		}
		if err := s.purged(b, e, o); err != nil {
			return 0, err
		}
		st.deletedInPlace(b.rows, cutoff, s.wc.cursorResets)
		did := int64(len(b.rows))
		if st.phase == phasePurgeWaitingInPlace {
			st.purgedWaiting += did
		} else {
			st.purgedActive += did
		}
		if did < n {
			st.phase++ // none left: the next step goes on with the next phase
		}
		return did, nil
	}
	want := session.Promotions(o.cfg, e.c)
	m := min(want, n)
	did, err := s.promote(b, e, o.cfg, m, normTime(o.now), st.lineEnd, true)
	if err != nil {
		return 0, err
	}
	st.promoted += did
	st.finished = did == want || did < m
	return did, nil
}

// purgeSeen purges up to n of the gate's sessions of status last seen
// before the second of cutoff (unix nanoseconds) and not to be called
// back, without touching their rows (migrations/0011, 0012, 0013; those of
// the cutoff's own second are deleted in place by the next phase): it
// reads them from the index sessions_seen, from the gate's mark of that
// status on (e.mark for waiters, e.activeMark for active sessions), in
// the marks' order, accounts for each as a purge
// (session.DecidePurge, the index, the events), and raises the mark just
// over the last of them. Only over them: the mark is always a purged
// session's own sign of life, never the cutoff, which an update run on a
// clock that was ahead would set in the future (keepLive would then date
// every newcomer there, and none would be stale until the clock caught
// up). The cleaner deletes the rows later. It returns how many it purged.
func (s *Store) purgeSeen(b *batch, e *gateEntry, o *op, status session.Status, cutoff, n int64) (int64, error) {
	mark, stmts, cols := &e.mark, [2]*stmt{s.wc.staleSeen, s.wc.staleSeenAfter}, 5
	if status == session.StatusActive {
		mark = &e.activeMark
	}
	if !mark.less(purgeMark{cutoff, math.MinInt64}) {
		return 0, nil // nothing the mark leaves live is below the cutoff
	}
	if status == session.StatusActive {
		// An active session's claim deadline decides the reason of its
		// purge; the index does not hold it, so the rows are read when
		// the gate has any.
		var one [1]driver.Value
		claims, err := s.wc.queryRow(s.wc.anyClaim, one[:], e.name)
		if err != nil {
			return 0, err
		}
		if claims {
			stmts, cols = [2]*stmt{s.wc.staleSeenClaim, s.wc.staleSeenClaimAfter}, 6
		}
	}
	// The rest of the mark's second, then the later seconds.
	b.rows = b.rows[:0]
	var dest [6]driver.Value
	for _, st := range stmts {
		left := n - int64(len(b.rows))
		if left <= 0 {
			break
		}
		rows, err := s.wc.query(st, e.name, mark.seen, mark.pos, cutoff, left, statusValue(status))
		if err != nil {
			return 0, err
		}
		if err := eachRow(rows, dest[:cols], func() {
			r := rawRow{position: asInt(dest[0]), id: asString(dest[1]), status: statusValue(status), lastActive: asNullInt(dest[2]), createdAt: asInt(dest[3]), lane: asInt(dest[4])}
			if cols > 5 {
				r.claim = asNullInt(dest[5])
			}
			b.rows = append(b.rows, r.session(e.name))
		}); err != nil {
			return 0, err
		}
	}
	did := int64(len(b.rows))
	if did == 0 {
		return 0, nil
	}
	// The index and the counters change: an error from here on must roll
	// the whole transaction back (runOp undoes an op without writes by its
	// gate entries alone, and the index's pending removals would stay).
	s.wc.writes++
	if err := s.purged(b, e, o); err != nil {
		return 0, err
	}
	last := b.rows[did-1]
	*mark = purgeMark{last.LastActive.UnixNano(), last.Position + 1}
	e.save, e.report = true, true
	b.purged = append(b.purged, e.name)
	return did, nil
}

// purged accounts for the rows in b.rows that a purge statement deleted, or
// that the purge mark is about to cover (purgeSeen), with
// session.DecidePurge. The statements select stale rows in SQL
// (last seen below the cutoff of session.StaleCutoffs, or unclaimed past its
// deadline): a row that session.IsStale does not call stale means the SQL
// and the rule disagree, and the op fails (its transaction is rolled back)
// rather than purge it.
func (s *Store) purged(b *batch, e *gateEntry, o *op) error {
	now := normTime(o.now)
	for _, r := range b.rows {
		if !session.IsStale(o.cfg, r, now) {
			return fmt.Errorf("purge: session %q of gate %q (%s, last active %v) is not stale at %v: the purge SQL disagrees with session.IsStale",
				r.ID, e.name, r.Status, r.LastActive, now)
		}
		out := session.DecidePurge(r)
		e.c = e.c.Add(out.Delta)
		e.save, e.report = true, true
		s.idx.remove(e.name, r.ID, r.Position)
		b.left(r, session.StaleReason(o.cfg, r, now))
	}
	return nil
}

// inPlaceAfter returns the position after which this step deletes the
// stale rows of the second of cutoff (unix nanoseconds) in the current
// phase: where the previous steps stopped (updateStep.inPlace: the same
// phase, cutoff and count of cursor resets), or else just before the mark's
// position when the mark lies in that second (the rows before it are
// purged already), or else before every position.
func (st *updateStep) inPlaceAfter(cutoff int64, m purgeMark, resets uint64) int64 {
	sec := seenSecond(cutoff)
	if st.inPlace.holds(st.phase, cutoff, resets) {
		return st.inPlace.pos
	}
	if seenSecond(m.seen) == sec && m.pos > math.MinInt64 {
		return m.pos - 1
	}
	return math.MinInt64
}

// deletedInPlace records the last position of the cutoff's own second
// among the rows a step of the in-place phases deleted: those not to be
// called back, last seen in that second before cutoff (the other branches
// delete rows called back, without a sign of life, or seen since the
// cutoff).
func (st *updateStep) deletedInPlace(rows []session.Session, cutoff int64, resets uint64) {
	sec := seenSecond(cutoff)
	for _, r := range rows {
		if r.Notify || r.LastActive.IsZero() {
			continue
		}
		la := r.LastActive.UnixNano()
		if la >= cutoff || seenSecond(la) != sec {
			continue
		}
		if !st.inPlace.holds(st.phase, cutoff, resets) || r.Position > st.inPlace.pos {
			st.inPlace = inPlaceFrom{phase: st.phase, cutoff: cutoff, pos: r.Position, resets: resets}
		}
	}
}

// holds reports whether the place was taken in phase, at cutoff, with no
// cursor reset since (resets): the in-place phases only (the zero value's
// phase, phasePurgeSeen, deletes nothing in place).
func (f inPlaceFrom) holds(phase int, cutoff int64, resets uint64) bool {
	return phase != phasePurgeSeen && f.phase == phase && f.cutoff == cutoff && f.resets == resets
}
