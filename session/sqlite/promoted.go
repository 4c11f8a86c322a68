package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"time"

	"github.com/anteroomhq/anteroom/session"
)

// Logical promotion (migrations/0014). An update promotes the waiters at
// the front of the normal lane without writing their rows: it records a
// pending promotion in the gate's row, and the cleaner writes the rows
// afterwards (materializes them), a few an operation, beside the joins.
// The counters, the events, the history and the Waitlist's memory change
// at once, in the update's transaction, as for a promotion by rows.
//
// While a promotion is pending, a waiting row inside its range that the
// waiting mark leaves live is active since the promotion, with its claim
// deadline: every reader applies that (pendingPromotion.apply), and so:
//   - the writer's reads of a row by its id (find), which is how a join, a
//     touch or a claim, a leave, a release and a named purge reach it; the
//     row is written whole when they change it;
//   - the read pool's (sqlGetRow, sqlAllRows: the same in SQL);
//   - the search for the first waiter and the line's bounds start past the
//     range (gateEntry.searchFrom): no waiter is left in it.
//
// Two operations materialize their gate's pending promotion first: an
// update's purge phases (no purge mark may rise while a promotion is
// pending, or a pending row could fall under the waiting mark; an update
// raises only its gate's marks: pendingSafe), and a scheduled
// event's draw (a lottery moves rows: AdvanceEvent). Load adds the
// range's live rows to the active set it reads (loadRows). The others run
// beside it: those that reach a row by its id, and those that write no
// session row (settings, the events' and codes' rows, a gate's removal,
// the admissions, the outbox, the history's prune, the cleaner's
// deletions). Open materializes before it counts the rows, Close before
// its snapshot.

// logicalPromotion, read by Open, turns logical promotion on; off, an
// update writes each promoted row as other promotions do. A variable for
// the tests, which compare the two.
var logicalPromotion = true

// materializeChunk is how many rows one op of the cleaner materializes. A
// variable for the tests.
var materializeChunk int64 = 64

// pendingPromotion is a gate's pending promotion: every live waiting row
// of position in [from, to) is active since at (unix nanoseconds), with the
// claim deadline claim, or notifyClaim for a row to be called back (not
// valid: none). The zero value is none pending.
type pendingPromotion struct {
	from, to           int64
	at                 int64
	claim, notifyClaim sql.NullInt64
}

// active reports whether a promotion is pending. One that is not is the
// zero value (materialize empties it so), which the gate's row stores.
func (p pendingPromotion) active() bool { return p.to > p.from }

// covers reports whether the promotion makes the live row r active.
func (p pendingPromotion) covers(r *session.Session) bool {
	return p.active() && r.Status == session.StatusWaiting && r.Position >= p.from && r.Position < p.to
}

// apply makes the live row r what the pending promotion made it, when it
// covers r: what session.Promote decided at the promotion.
func (p pendingPromotion) apply(r *session.Session) {
	if !p.covers(r) {
		return
	}
	r.Status = session.StatusActive
	r.LastActive = fromNanos(p.at)
	deadline := p.claim
	if r.Notify {
		deadline = p.notifyClaim
	}
	r.ClaimDeadline = time.Time{}
	if deadline.Valid {
		r.ClaimDeadline = fromNanos(deadline.Int64)
	}
}

// pendingFor returns the pending promotion of cfg's gate that a promotion
// at now (normalized) of a row not to be called back, and of one to be,
// would record: session.Promote's decision for each kind of row.
func pendingFor(cfg session.GateConfig, now time.Time) pendingPromotion {
	p := pendingPromotion{at: now.UnixNano()}
	if w := session.ClaimWindow(cfg, session.Session{}); w > 0 {
		p.claim = sql.NullInt64{Int64: now.Add(w).UnixNano(), Valid: true}
	}
	if w := session.ClaimWindow(cfg, session.Session{Notify: true}); w > 0 {
		p.notifyClaim = sql.NullInt64{Int64: now.Add(w).UnixNano(), Valid: true}
	}
	return p
}

// sameDecision reports whether p and q promote to the same times.
func (p pendingPromotion) sameDecision(q pendingPromotion) bool {
	return p.at == q.at && p.claim == q.claim && p.notifyClaim == q.notifyClaim
}

// searchFrom is where the search for the gate's first waiter starts: the
// lower bound lb, or past the pending promotion's range, which holds no
// waiter.
func (e *gateEntry) searchFrom() int64 {
	if e.pend.active() && e.pend.to > e.lb {
		return e.pend.to
	}
	return e.lb
}

// promoteLogically records the promotion of w, decided as out at now (a
// waiter of the normal lane that firstWaiters found, in position order), in
// the gate's pending promotion instead of writing its row, when it can:
// the row's promotion is the pending one's decision, the range can grow to
// take it (none pending, or one of the same decision: every row between
// its end and w was promoted already or is not live, as w is the first
// live waiter past the search's start), and keepLive would not move its
// sign of life. It reports whether it did; the caller writes the row
// otherwise.
func (s *Store) promoteLogically(e *gateEntry, w session.Session, out *session.Outcome, p pendingPromotion) bool {
	if !s.logical || w.Lane != session.LaneNormal {
		return false
	}
	r := out.Session
	keepLive(e, &r)
	if !r.LastActive.Equal(out.Session.LastActive) {
		return false
	}
	probe := w
	probe.Status = session.StatusWaiting
	check := p
	check.from, check.to = w.Position, w.Position+1
	check.apply(&probe)
	if !sameRow(probe, out.Session) {
		return false // not what session.Promote decided (a rule changed): write the row
	}
	switch {
	case !e.pend.active():
		e.pend = p
		e.pend.from = w.Position
	case !e.pend.sameDecision(p) || w.Position < e.pend.to:
		return false
	}
	e.pend.to = w.Position + 1
	s.wc.writes++ // the counters change with no statement: a failure from here on rolls back
	e.c = e.c.Add(out.Delta)
	e.save, e.report = true, true
	return true
}

// The statements of logical promotion.
var (
	// sqlMaterialize writes up to ?9 rows of a pending promotion (gate ?1,
	// positions [?2, ?3), at ?4, claim deadlines ?5 and ?6 for a row to be
	// called back) in position order: the live waiting rows, with the
	// waiting mark ?7, ?8. It returns their positions.
	sqlMaterialize = `UPDATE sessions SET status = 1, last_active = ?4, claim_deadline = CASE WHEN notify = 1 THEN ?6 ELSE ?5 END ` +
		`WHERE gate = ?1 AND position IN (SELECT position FROM sessions WHERE gate = ?1 AND position >= ?2 AND position < ?3 AND status = 0 AND ` +
		liveIf(atOrAbove(`?7`, `?8`)) + ` ORDER BY position LIMIT ?9) RETURNING position`
	// sqlPendingGates names the gates with a promotion pending as stored.
	sqlPendingGates = `SELECT name FROM gates WHERE promoted_to > promoted_from`
	// pendingRow is the condition of a row of table sessions that the
	// pending promotion of its gate's row (table gates, named g) covers,
	// for the read pool's statements; pendingClaim is its claim deadline.
	pendingRow   = `(status = 0 AND position >= g.promoted_from AND position < g.promoted_to)`
	pendingClaim = `CASE WHEN notify = 1 THEN g.promoted_notify_claim ELSE g.promoted_claim END`
	// pendingColumns are the columns status, last_active and claim_deadline
	// with the pending promotion applied.
	pendingColumns = `CASE WHEN ` + pendingRow + ` THEN 1 ELSE status END, CASE WHEN ` + pendingRow + ` THEN g.promoted_at ELSE last_active END, ` +
		`created_at, CASE WHEN ` + pendingRow + ` THEN ` + pendingClaim + ` ELSE claim_deadline END`
)

// pendingSafe reports whether o runs with promotions pending. An update
// in its purge phases materializes its gate's first; an op of a kind not
// listed here, all of them (materializeAll: none today, the default for a
// new kind). Every function the writer runs (opFunc: the cleaner's, the
// admissions', the outbox's, gateOp's) is written to run beside them.
func pendingSafe(o *op) bool {
	switch o.kind {
	case opJoin, opLeave, opRelease, opTouch, opPurge, opProbe, opSecret, opPruneHistory, opCodes, opSettings, opLoad, opFunc:
		return true
	case opUpdate:
		return o.updIn.phase == phasePromote
	}
	return false
}

// materializeAll writes every pending promotion's rows inside the
// transaction: those of the gates the writer holds, and those stored.
func (s *Store) materializeAll(b *batch) error {
	var names []string
	for name, e := range s.cache {
		if e.pend.active() {
			names = append(names, name)
		}
	}
	rows, err := s.wc.query(s.wc.pendingGates)
	if err != nil {
		return fmt.Errorf("pending promotions: %w", err)
	}
	var dest [1]driver.Value
	if err := eachRow(rows, dest[:], func() {
		if name := asString(dest[0]); s.cache[name] == nil {
			names = append(names, name)
		}
	}); err != nil {
		return fmt.Errorf("pending promotions: %w", err)
	}
	for _, name := range names {
		if _, err := s.materialize(b, name, -1); err != nil {
			return err
		}
	}
	return nil
}

// materialize writes up to n rows (negative: all) of gate's pending
// promotion, in position order, and empties the range once none is left.
// It reports whether the promotion is still pending.
func (s *Store) materialize(b *batch, gate string, n int64) (bool, error) {
	e, err := s.gate(b, gate)
	if err != nil {
		return false, err
	}
	if !e.pend.active() {
		return false, nil
	}
	p := e.pend
	rows, err := s.wc.query(s.wc.materialize, e.name, p.from, p.to, p.at, nullInt(p.claim), nullInt(p.notifyClaim), e.mark.seen, e.mark.pos, n)
	if err != nil {
		return false, fmt.Errorf("materialize promotions of gate %q: %w", e.name, err)
	}
	var dest [1]driver.Value
	var did, last int64
	if err := eachRow(rows, dest[:], func() {
		did++
		last = max(last, asInt(dest[0]))
	}); err != nil {
		return false, fmt.Errorf("materialize promotions of gate %q: %w", e.name, err)
	}
	e.save = true
	if n < 0 || did < n {
		e.pend = pendingPromotion{}
		return false, nil
	}
	e.pend.from = last + 1
	if !e.pend.active() {
		e.pend = pendingPromotion{}
		return false, nil
	}
	return true, nil
}

// sameRow reports whether a and b would be stored as the same row.
func sameRow(a, b session.Session) bool {
	return a.Gate == b.Gate && a.ID == b.ID && a.Position == b.Position && a.Status == b.Status &&
		a.LastActive.Equal(b.LastActive) && a.CreatedAt.Equal(b.CreatedAt) && a.ClaimDeadline.Equal(b.ClaimDeadline) &&
		a.Notify == b.Notify && a.Lane == b.Lane
}

// nullInt is v as a statement's argument: nil when not valid.
func nullInt(v sql.NullInt64) any {
	if !v.Valid {
		return nil
	}
	return v.Int64
}

// settlePromoted writes, on conn, the rows of every pending promotion as
// stored and empties the ranges, in one transaction (Open, before anything
// counts the rows; the caller waited for quick_check's verdict when
// pending reports any). A range that is not one (not integers, reversed,
// past the gate's next position, a time more than markHorizon ahead), or
// that the counters disagree with once written, and a damaged purge mark
// (purgedToDelete, checked in the same transaction), refuse the file with
// ErrDamaged, nothing written: which rows it made active is unknown. It
// returns how many rows it wrote.
func settlePromoted(ctx context.Context, conn *sql.Conn, path string, verdict func() error) (int64, error) {
	type gatePending struct {
		name                   string
		ok                     bool
		from, to, at           int64
		claim, notifyClaim     sql.NullInt64
		markSeen, markPosition int64
	}
	rows, err := conn.QueryContext(ctx, `SELECT name, typeof(promoted_from) = 'integer' AND typeof(promoted_to) = 'integer' AND typeof(promoted_at) = 'integer' `+
		`AND typeof(promoted_claim) IN ('integer', 'null') AND typeof(promoted_notify_claim) IN ('integer', 'null') AND promoted_to <= next_position AND promoted_from >= 0 AND promoted_at <= ?1, `+
		`promoted_from, promoted_to, promoted_at, promoted_claim, promoted_notify_claim, purged_seen, purged_position FROM gates WHERE promoted_to IS NOT promoted_from`,
		wallNow().Add(markHorizon).UnixNano())
	if err != nil {
		if verr := verdict(); verr != nil {
			return 0, verr // a damaged file: say so, whatever the query met
		}
		return 0, fmt.Errorf("pending promotions: %w", err)
	}
	var gates []gatePending
	for rows.Next() {
		var g gatePending
		var from, to, at, seen, pos any
		if err := rows.Scan(&g.name, &g.ok, &from, &to, &at, &g.claim, &g.notifyClaim, &seen, &pos); err != nil {
			rows.Close()
			if verr := verdict(); verr != nil {
				return 0, verr
			}
			// A damaged value that does not scan: refused below as one
			// that is not an integer.
			return 0, damaged("database %s: the pending promotion of a gate (promoted_* in table gates) does not read: %v. %s", path, err, promotedAdvice())
		}
		g.from, g.to, g.at, g.markSeen, g.markPosition = anyInt(from), anyInt(to), anyInt(at), anyInt(seen), anyInt(pos)
		gates = append(gates, g)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		if verr := verdict(); verr != nil {
			return 0, verr
		}
		return 0, fmt.Errorf("pending promotions: %w", err)
	}
	if len(gates) == 0 {
		return 0, nil
	}
	if err := verdict(); err != nil {
		return 0, err
	}
	for _, g := range gates {
		if !g.ok || g.to < g.from {
			return 0, damaged("database %s: the pending promotion of gate %q (promoted_from, promoted_to, promoted_at, promoted_claim, promoted_notify_claim in table gates) is not a range of positions with integer times (not more than a year ahead), so which waiters it made active is unknown. %s",
				path, g.name, promotedAdvice())
		}
	}
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("pending promotions: %w", err)
	}
	defer tx.Rollback()
	var wrote int64
	for _, g := range gates {
		rows, err := tx.QueryContext(ctx, sqlMaterialize, g.name, g.from, g.to, g.at, nullInt(g.claim), nullInt(g.notifyClaim), g.markSeen, g.markPosition, int64(-1))
		if err != nil {
			return 0, fmt.Errorf("write the pending promotion of gate %q: %w", g.name, err)
		}
		for rows.Next() {
			wrote++
		}
		if err := errors.Join(rows.Err(), rows.Close()); err != nil {
			return 0, fmt.Errorf("write the pending promotion of gate %q: %w", g.name, err)
		}
	}
	if _, err := tx.ExecContext(ctx, sqlClearPending); err != nil {
		return 0, fmt.Errorf("pending promotions: %w", err)
	}
	// Nothing is written unless the marks the rows were written with are
	// sound (as settlePurged checks them), and the counters, written in
	// the same transaction as the ranges, count the rows as written: else
	// the range or a mark is damaged, and the transaction is rolled back.
	if _, err := purgedToDelete(ctx, tx, path, secondOrder); err != nil {
		return 0, err
	}
	for _, g := range gates {
		var waiting, active, waitRows, activeRows int64
		if err := tx.QueryRowContext(ctx, `SELECT waiting, active, (SELECT count(*) FROM sessions WHERE gate = ?1 AND status = 0 AND `+liveStored+`), `+
			`(SELECT count(*) FROM sessions WHERE gate = ?1 AND status = 1 AND `+liveStored+`) FROM gates WHERE name = ?1`, g.name).Scan(&waiting, &active, &waitRows, &activeRows); err != nil {
			return 0, fmt.Errorf("pending promotions: %w", err)
		}
		if waiting != waitRows || active != activeRows {
			return 0, damaged("database %s: with the pending promotion of gate %q written, its rows are %d active and %d waiting, but its counters, written with the promotion, count %d and %d: the range or the counters were edited or damaged. %s",
				path, g.name, activeRows, waitRows, active, waiting, promotedAdvice())
		}
	}
	return wrote, tx.Commit()
}

// setNoPending empties a gate's pending promotion (an assignment of table
// gates); sqlClearPending, every gate's.
const (
	setNoPending    = `promoted_from = 0, promoted_to = 0, promoted_at = 0, promoted_claim = NULL, promoted_notify_claim = NULL`
	sqlClearPending = `UPDATE gates SET ` + setNoPending + ` WHERE promoted_to IS NOT promoted_from OR promoted_at IS NOT 0`
)

// promotedAdvice says how to go on from a damaged pending promotion.
func promotedAdvice() string {
	return "Restore it from a backup; to keep every row as it is (the waiters it promoted wait again, and the counters are repaired at the next start), empty it: " +
		"UPDATE gates SET " + setNoPending
}

// anyInt is v as an int64, 0 when it is not one.
func anyInt(v any) int64 {
	n, _ := v.(int64)
	return n
}

// materializeRest writes, once the writer stopped (Close), the rows of
// every pending promotion and empties the ranges, in one transaction made
// of the writer's own steps (materializeAll, finish): the snapshot that
// follows counts the rows by status.
func (s *Store) materializeRest() error {
	if _, err := s.wc.exec(s.wc.begin); err != nil {
		return err
	}
	b := &batch{}
	err := s.materializeAll(b)
	if err == nil {
		_, err = s.finish(b)
	}
	if err == nil {
		if _, err = s.wc.exec(s.wc.commit); err == nil {
			return nil
		}
	}
	_, _ = s.wc.exec(s.wc.rollback)
	clear(s.cache)
	return err
}
