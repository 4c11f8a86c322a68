package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/anteroomhq/anteroom/session"
	sqlite "modernc.org/sqlite"
)

// The SQL of the writer. Every statement is prepared once on the writer
// connection at Open. Variables, not constants, only because some are built
// with atOrAbove.
var (
	sqlSelectGate = `SELECT next_position, active, waiting, pace_tokens, pace_at, purged_seen, purged_position, active_purged_seen, active_purged_position, ` +
		`promoted_from, promoted_to, promoted_at, promoted_claim, promoted_notify_claim FROM gates WHERE name = ?`
	sqlInsertGate = `INSERT INTO gates (name, next_position, active, waiting) VALUES (?, 1, 0, 0)`
	sqlUpdateGate = `UPDATE gates SET next_position = ?, active = ?, waiting = ?, pace_tokens = ?, pace_at = ?, purged_seen = ?, purged_position = ?, active_purged_seen = ?, active_purged_position = ?, ` +
		`promoted_from = ?, promoted_to = ?, promoted_at = ?, promoted_claim = ?, promoted_notify_claim = ? WHERE name = ?`
	// sqlResetGateMarks lowers a gate's purge marks to noMark at once,
	// before the transaction's end, if they are stored as ?2..?5 (resetMarks).
	sqlResetGateMarks = `UPDATE gates SET ` + setNoMarks + ` WHERE name = ?1 ` +
		`AND purged_seen = ?2 AND purged_position = ?3 AND active_purged_seen = ?4 AND active_purged_position = ?5`
	// A waiting row is live unless the update purged it (migrations/0011):
	// not to be called back, and its (second of last_active, position)
	// below the gate's purge mark (migrations/0013, purgeMark.covers). The purged rows wait for the cleaner, and every
	// statement that reads waiting rows leaves them out with this
	// condition: the writer's statements with the mark it holds (?mark:
	// two parameters), which runs ahead of the stored one inside a
	// transaction; the others with the mark as stored, in their snapshot.
	// The writer's reads of a row by its id (sqlSelectRow, sqlRowExists)
	// need no condition: it reaches a row by its id only through the id
	// index, which drops a purged session in the transaction that purges
	// it. The read pool's (sqlGetRow) does: it may read the row between
	// the commit of a purge and the index's.
	//
	// An active row is live in the same way unless the update purged it
	// (migrations/0012): not to be called back, and its (second of
	// last_active, position) below the gate's active mark.
	//
	// The first waiting position is sought from a lower bound the writer
	// keeps (every active position is below every waiting one, so without it
	// the search would step over the whole active set); the last, from the
	// end of the gate's range.
	sqlBounds = `SELECT (SELECT position FROM sessions WHERE gate = ?1 AND position >= ?2 AND status = 0 AND ` + liveWaiter3 + ` ORDER BY position LIMIT 1), ` +
		`(SELECT position FROM sessions WHERE gate = ?1 AND status = 0 AND ` + liveWaiter3 + ` ORDER BY position DESC LIMIT 1)`
	sqlSelectRow = `SELECT status, last_active, created_at, claim_deadline, notify, lane FROM sessions WHERE gate = ?1 AND position = ?2 AND id = ?3`
	// sqlGetRow is sqlSelectRow for the read pool, with the gate's pending
	// promotion applied (promoted.go) and the purged rows left out, in one
	// snapshot.
	sqlGetRow       = `SELECT ` + pendingColumns + `, notify, lane FROM sessions, gates g WHERE g.name = ?1 AND gate = ?1 AND position = ?2 AND id = ?3 AND ` + liveStored
	sqlRowExists    = `SELECT 1 FROM sessions WHERE gate = ?1 AND position = ?2`
	sqlInsertRow    = `INSERT INTO sessions (gate, position, id, status, last_active, created_at, claim_deadline, notify, lane) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`
	sqlUpdateRow    = `UPDATE sessions SET status = ?, last_active = ?, claim_deadline = ?, notify = ? WHERE gate = ? AND position = ?`
	sqlDeleteRow    = `DELETE FROM sessions WHERE gate = ? AND position = ?`
	sqlFirstWaiters = `SELECT position, id, status, last_active, created_at, claim_deadline, notify, lane FROM sessions WHERE gate = ?1 AND position >= ?2 AND status = 0 AND ` + liveWaiter4 + ` ORDER BY position LIMIT ?3`
	// The purges select exactly the rows session.StaleReason calls stale,
	// with the cutoffs of session.StaleCutoffs: a waiter last seen before
	// the cutoff and not to be called back; an active session last seen
	// before ?2 (unless called back and still unclaimed), or unclaimed past
	// its deadline at ?4. A row without last_active (written before 0003)
	// is last seen at its creation.
	//
	// Each branch is a range of an index on when the rows expire
	// (migrations/0009, 0011): sessions_seen for the last sign of life,
	// sessions_unseen for rows without one, sessions_claim for claim
	// deadlines. No branch sweeps the gate: the cost follows what is stale.
	// The branches are disjoint (UNION ALL, no sort): the claim branch
	// leaves out the rows the first ones select.
	//
	// sqlStaleSeenInMarksSecond and sqlStaleSeenAfterMarksSecond read the
	// sessions of status ?6 the update purges by raising that status's
	// mark (migrations/0011, 0012, 0013), from the mark (?2, ?3) up to the
	// cutoff ?4's second, in the mark's order, from the index alone: it
	// holds all a purge reports, but an active session's claim deadline,
	// which decides the reason reported (idle, or unclaimed). The Claim
	// statements read that too, from the row: for a gate where a row has
	// one (sqlAnyClaim).
	//
	// They are two ranges of the index, read one after the other: the rest
	// of the mark's second from its position, then the later seconds
	// (SQLite seeks no row value of an expression, and a filter on the
	// position would read the mark's second again from its start at every
	// step). staleSeenFrom is what both ranges share.
	sqlStaleSeenInMarksSecond         = `SELECT position, id, last_active, created_at, lane` + staleSeenInMarksSecond
	sqlStaleSeenAfterMarksSecond      = `SELECT position, id, last_active, created_at, lane` + staleSeenAfterMarksSecond
	sqlStaleSeenClaimInMarksSecond    = `SELECT position, id, last_active, created_at, lane, claim_deadline` + staleSeenInMarksSecond
	sqlStaleSeenClaimAfterMarksSecond = `SELECT position, id, last_active, created_at, lane, claim_deadline` + staleSeenAfterMarksSecond
	staleSeenFrom                     = ` FROM sessions INDEXED BY sessions_seen WHERE gate = ?1 AND status = ?6 AND notify = 0 AND last_active IS NOT NULL AND ` + sqlSeenSecond + ` < ?4` + sqlPerSecond + ` AND `
	staleSeenInMarksSecond            = staleSeenFrom + sqlSeenSecond + ` = ?2` + sqlPerSecond + ` AND position >= ?3 ORDER BY position LIMIT ?5`
	// ?3, the mark's position, is not needed past its second: bound to no
	// term, as SQLite allows.
	staleSeenAfterMarksSecond = staleSeenFrom + sqlSeenSecond + ` > ?2` + sqlPerSecond + ` ORDER BY ` + sqlSeenSecond + `, position LIMIT ?5`
	// sqlAnyClaim finds whether any row of the gate has a claim deadline
	// (index sessions_claim, migrations/0009): one seek.
	sqlAnyClaim = `SELECT 1 FROM sessions INDEXED BY sessions_claim WHERE gate = ?1 AND claim_deadline IS NOT NULL LIMIT 1`
	// sqlPurgeWaitingInPlace deletes the stale waiters the purge mark does
	// not purge: those without a sign of life, and those last seen in the
	// cutoff's own second (?2) before it (sqlStaleSeenAfterMarksSecond
	// stops at that second: the mark covers whole seconds, and some rows of
	// that one are live), above the mark (?5, ?6) and after position ?7:
	// the update's steps go on in position order through that second (a
	// seek, not a read of the second again from its start at every step).
	// Its parameters are sqlPurgeActive's; ?4 (the update's time) it does
	// not use. That takes the rows a step deletes there to be the first
	// ones after ?7: SQLite reads the branch in the index's order and the
	// branches of UNION ALL one after the other (the test of the in-place
	// steps, TestTheCutoffsSecondIsDeletedInPlaceThroughSmallSteps, fails
	// if it stops doing so).
	sqlPurgeWaitingInPlace = `DELETE FROM sessions WHERE gate = ?1 AND position IN (SELECT position FROM (` +
		`SELECT position FROM sessions WHERE gate = ?1 AND status = 0 AND notify = 0 AND last_active IS NULL AND created_at < ?2 ` +
		`UNION ALL SELECT position FROM sessions INDEXED BY sessions_seen WHERE gate = ?1 AND status = 0 AND notify = 0 AND last_active IS NOT NULL AND ` + sqlSeenSecond + ` = ?2` + sqlPerSecond + ` AND position > ?7 AND last_active < ?2 ` +
		`AND ` + atOrAbove(`?5`, `?6`) +
		`) LIMIT ?3) RETURNING position, id, status, last_active, created_at, claim_deadline, notify, lane`
	// sqlPurgeActive deletes the stale active sessions the active mark does
	// not purge: called back and never claimed, without a sign of life,
	// unclaimed past their deadline while seen since the cutoff or called
	// back (the claim branch leaves out the rows below the active mark, ?5
	// and ?6: purged already), or idle since the cutoff's own second, after
	// position ?7 (as sqlPurgeWaitingInPlace's second branch).
	sqlPurgeActive = `DELETE FROM sessions WHERE gate = ?1 AND position IN (SELECT position FROM (` +
		`SELECT position FROM sessions WHERE gate = ?1 AND status = 1 AND notify = 1 AND ` + sqlSeenSecond + ` <= ?2` + sqlPerSecond + ` AND last_active < ?2 AND claim_deadline IS NULL ` +
		`UNION ALL SELECT position FROM sessions INDEXED BY sessions_seen WHERE gate = ?1 AND status = 1 AND notify = 0 AND last_active IS NOT NULL AND ` + sqlSeenSecond + ` = ?2` + sqlPerSecond + ` AND position > ?7 AND last_active < ?2 ` +
		`AND ` + atOrAbove(`?5`, `?6`) + ` ` +
		`UNION ALL SELECT position FROM sessions WHERE gate = ?1 AND status = 1 AND last_active IS NULL AND created_at < ?2 AND NOT (notify = 1 AND claim_deadline IS NOT NULL) ` +
		`UNION ALL SELECT position FROM sessions WHERE gate = ?1 AND claim_deadline < ?4 AND status = 1 AND (coalesce(last_active, created_at) >= ?2 OR notify = 1) AND ` + liveActive5 +
		`) LIMIT ?3) RETURNING position, id, status, last_active, created_at, claim_deadline, notify, lane`
	// The active set: the rows below the first waiting position (?2), and
	// above it only active sessions of the priority lane (promoted ahead
	// of the normal lane; index sessions_priority_active, migrations/0010),
	// so the long line is not read; without those the active mark (?3,
	// ?4) purged.
	sqlActive = `SELECT position, id, status, last_active, created_at, claim_deadline, notify, lane FROM sessions WHERE gate = ?1 AND position < ?2 AND status = 1 AND ` + liveActive3 + ` ` +
		`UNION ALL SELECT position, id, status, last_active, created_at, claim_deadline, notify, lane FROM sessions INDEXED BY sessions_priority_active WHERE gate = ?1 AND position >= ?2 AND status = 1 AND lane = 1 AND ` + liveActive3 + ` ORDER BY position`
	sqlWaitingPos = `SELECT position FROM sessions WHERE gate = ?1 AND status = 0 AND ` + liveWaiter2 + ` ORDER BY position`
	sqlKeys       = `SELECT gate, position, id FROM sessions`
	sqlIDAt       = `SELECT id FROM sessions WHERE gate = ? AND position = ?`
	sqlSelectMeta = `SELECT value FROM meta WHERE key = ?`
	sqlInsertMeta = `INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)`
	sqlDeleteMeta = `DELETE FROM meta WHERE key = ?`
	sqlAllRows    = `SELECT id, position, ` + pendingColumns + `, notify, lane FROM sessions, gates g WHERE g.name = ?1 AND gate = ?1 AND ` + liveStored
)

// The condition of a live row (see sqlBounds), for a waiting row: with the
// mark as parameters ?N and ?N+1 (liveWaiterN); for an active row, with the
// active mark (liveActiveN, migrations/0012); for any row, with the marks
// as stored (liveStored). A row is live when it is to be called back, has
// no sign of life, or is at or above the mark in the marks' order.
var (
	liveWaiter2 = liveIf(atOrAbove(`?2`, `?3`))
	liveWaiter3 = liveIf(atOrAbove(`?3`, `?4`))
	liveWaiter4 = liveIf(atOrAbove(`?4`, `?5`))
	liveActive3 = liveWaiter3
	liveActive5 = liveIf(atOrAbove(`?5`, `?6`))
	liveStored  = liveIf(`(status = 0 AND ` + atOrAbove(`SELECT purged_seen`, `purged_position FROM gates WHERE name = ?1`) + `) ` +
		`OR (status = 1 AND ` + atOrAbove(`SELECT active_purged_seen`, `active_purged_position FROM gates WHERE name = ?1`) + `)`)
)

// liveIf is the condition of a live row that is not to be called back nor
// without a sign of life when it meets cond.
func liveIf(cond string) string {
	return `(notify = 1 OR last_active IS NULL OR ` + cond + `)`
}

// atOrAbove compares a row's place in the marks' order with a mark's:
// (second of last_active, position) >= (second of seen, pos), seen and pos
// parameters or columns. As a subquery, seen begins with its SELECT and pos
// ends with its FROM and WHERE.
func atOrAbove(seen, pos string) string {
	return `(` + sqlSeenSecond + `, position) >= (` + seen + sqlPerSecond + `, ` + pos + `)`
}

const (
	// sqlSeenSecond is the second of a row's last sign of life,
	// the first term of the order of sessions_seen and of the purge marks
	// (migrations/0013; seenSecond in Go). SQLite's integer division
	// truncates toward zero, as Go's does.
	sqlSeenSecond = `last_active` + sqlPerSecond
	// sqlPerSecond divides unix nanoseconds into seconds (seenSecondNanos
	// in Go; the index expression of migrations/0013 is written with it).
	sqlPerSecond = ` / 1000000000`
)

// markOrder is the order rows and purge marks are compared in, as the
// division that makes the first term of last_active and of a mark's seen:
// secondOrder since migrations/0013 (sqlSeenSecond); exactOrder in a file
// of schema 0011 or 0012, whose marks Open settles in that order before it
// upgrades the file (Store.migrate).
type markOrder string

const (
	secondOrder markOrder = sqlPerSecond
	exactOrder  markOrder = ""
)

// covered is the condition of a row of status (0 or 1) that gate ?1's
// stored mark of that status (columns seen and pos of table gates) covers,
// in order o: a range of sessions_seen, bounded above.
func (o markOrder) covered(status, seen, pos string) string {
	la, ms := `last_active`+string(o), seen+string(o)
	return `gate = ?1 AND status = ` + status + ` AND notify = 0 AND last_active IS NOT NULL AND ` + la + ` <= (SELECT ` + ms + ` FROM gates WHERE name = ?1) ` +
		`AND (` + la + `, position) < (SELECT ` + ms + `, ` + pos + ` FROM gates WHERE name = ?1)`
}

// cleanPurgedSQL deletes up to ?2 rows the update purged (below the stored
// marks, waiting and active, in order o).
func cleanPurgedSQL(o markOrder) string {
	return `DELETE FROM sessions WHERE gate = ?1 AND position IN (SELECT position FROM (` +
		`SELECT position FROM sessions INDEXED BY sessions_seen WHERE ` + o.covered("0", "purged_seen", "purged_position") +
		` UNION ALL SELECT position FROM sessions INDEXED BY sessions_seen WHERE ` + o.covered("1", "active_purged_seen", "active_purged_position") +
		`) LIMIT ?2)`
}

// sqlCleanPurged is the cleaner's statement, and Open's.
var sqlCleanPurged = cleanPurgedSQL(secondOrder)

// The marks as stored in table gates: the condition of a gate whose marks
// were raised (either mark, either column; IS NOT, so that a damaged value
// counts too), and the assignment that lowers them to noMark.
const (
	marksRaised = `(purged_seen IS NOT -9223372036854775808 OR purged_position IS NOT -9223372036854775808 ` +
		`OR active_purged_seen IS NOT -9223372036854775808 OR active_purged_position IS NOT -9223372036854775808)`
	setNoMarks = `purged_seen = -9223372036854775808, purged_position = -9223372036854775808, ` +
		`active_purged_seen = -9223372036854775808, active_purged_position = -9223372036854775808`
)

// stmt is a statement prepared on the writer's driver connection.
type stmt struct {
	st driver.Stmt
	ex driver.StmtExecContext
	q  driver.StmtQueryContext
	// writes is set for a statement that changes rows (INSERT, UPDATE,
	// DELETE): running it counts in wconn.writes.
	writes bool
}

// wconn is the writer's connection. The writer talks to the driver directly,
// not through database/sql: it is the only user of the connection, and
// database/sql's locking and argument conversion cost more than a statement
// of SQLite itself on this path. Used only by the writer goroutine.
type wconn struct {
	c    driver.Conn
	args []driver.NamedValue
	// writes counts the row-changing statements run (or tried: a failed one
	// may have written before it failed), so that the writer knows whether
	// a failed op left writes behind.
	writes int64
	// cursorResets counts the writes, tried or committed, that may leave a
	// row an update's in-place phases delete below their cursor
	// (updateStep.inPlace), which is not trusted after one: a move of rows
	// to other positions (moveSessions, a lottery) and a call-back turned
	// off (SetNotify), which leaves a row stale in the cutoff's second
	// where it lies.
	cursorResets uint64

	begin, commit, rollback *stmt

	selectGate, insertGate, updateGate, bounds  *stmt
	selectRow, rowExists, insertRow, updateRow  *stmt
	deleteRow, firstWaiters, staleSeen          *stmt
	staleSeenClaim, anyClaim, resetGateMarks    *stmt
	staleSeenAfter, staleSeenClaimAfter         *stmt
	purgeWaitingInPlace, cleanPurged            *stmt
	purgeActive, active, waitingPos, keys, idAt *stmt
	materialize, pendingGates                   *stmt
	selectMeta, insertMeta, deleteMeta          *stmt
	allSettings                                 *stmt
	checkpoint, truncate, pageSize              *stmt
	extra                                       []*stmt // prepared later (history.go)
	prio                                        priorityStmts
}

func (w *wconn) prepare(ctx context.Context) error {
	pc, ok := w.c.(driver.ConnPrepareContext)
	if !ok {
		return errors.New("driver connection cannot prepare with a context")
	}
	for _, p := range []struct {
		dst **stmt
		sql string
	}{
		{&w.begin, "BEGIN IMMEDIATE"}, {&w.commit, "COMMIT"}, {&w.rollback, "ROLLBACK"},
		{&w.selectGate, sqlSelectGate}, {&w.insertGate, sqlInsertGate}, {&w.updateGate, sqlUpdateGate}, {&w.bounds, sqlBounds},
		{&w.selectRow, sqlSelectRow}, {&w.rowExists, sqlRowExists}, {&w.insertRow, sqlInsertRow}, {&w.updateRow, sqlUpdateRow},
		{&w.deleteRow, sqlDeleteRow}, {&w.firstWaiters, sqlFirstWaiters}, {&w.staleSeen, sqlStaleSeenInMarksSecond}, {&w.staleSeenClaim, sqlStaleSeenClaimInMarksSecond}, {&w.staleSeenAfter, sqlStaleSeenAfterMarksSecond}, {&w.staleSeenClaimAfter, sqlStaleSeenClaimAfterMarksSecond}, {&w.anyClaim, sqlAnyClaim}, {&w.resetGateMarks, sqlResetGateMarks},
		{&w.purgeWaitingInPlace, sqlPurgeWaitingInPlace}, {&w.cleanPurged, sqlCleanPurged},
		{&w.purgeActive, sqlPurgeActive}, {&w.active, sqlActive}, {&w.waitingPos, sqlWaitingPos}, {&w.keys, sqlKeys}, {&w.idAt, sqlIDAt},
		{&w.materialize, sqlMaterialize}, {&w.pendingGates, sqlPendingGates},
		{&w.selectMeta, sqlSelectMeta}, {&w.insertMeta, sqlInsertMeta}, {&w.deleteMeta, sqlDeleteMeta},
		{&w.allSettings, sqlAllSettings},
		{&w.checkpoint, "PRAGMA wal_checkpoint(PASSIVE)"}, {&w.truncate, "PRAGMA wal_checkpoint(TRUNCATE)"},
		{&w.pageSize, "PRAGMA page_size"},
	} {
		st, err := pc.PrepareContext(ctx, p.sql)
		if err != nil {
			return fmt.Errorf("prepare %q: %w", p.sql, err)
		}
		s := &stmt{st: st, writes: isWrite(p.sql)}
		if s.ex, ok = st.(driver.StmtExecContext); !ok {
			return errors.New("driver statement cannot execute with a context")
		}
		if s.q, ok = st.(driver.StmtQueryContext); !ok {
			return errors.New("driver statement cannot query with a context")
		}
		*p.dst = s
	}
	return w.preparePriority(ctx, pc)
}

// isWrite reports whether the statement q changes rows.
func isWrite(q string) bool {
	for _, verb := range []string{"INSERT", "UPDATE", "DELETE"} {
		if strings.HasPrefix(q, verb) {
			return true
		}
	}
	return false
}

func (w *wconn) close() error {
	if w.c == nil {
		return nil
	}
	for _, s := range append([]*stmt{
		w.begin, w.commit, w.rollback,
		w.selectGate, w.insertGate, w.updateGate, w.bounds,
		w.selectRow, w.rowExists, w.insertRow, w.updateRow,
		w.deleteRow, w.firstWaiters, w.staleSeen, w.staleSeenClaim, w.staleSeenAfter, w.staleSeenClaimAfter, w.anyClaim, w.resetGateMarks, w.purgeWaitingInPlace, w.cleanPurged,
		w.purgeActive, w.active, w.waitingPos, w.keys, w.idAt,
		w.materialize, w.pendingGates,
		w.selectMeta, w.insertMeta, w.deleteMeta,
		w.allSettings,
		w.checkpoint, w.truncate, w.pageSize,
	}, w.extra...) {
		if s != nil {
			_ = s.st.Close()
		}
	}
	w.closePriority()
	err := w.c.Close()
	w.c = nil
	return err
}

// framesWritten returns the pages the connection wrote (to the WAL) since
// it was last asked.
func (w *wconn) framesWritten() int64 {
	st, ok := w.c.(sqlite.DBStatus)
	if !ok {
		return 0
	}
	n, _, err := st.Status(sqlite.DBStatusCacheWrite, true)
	if err != nil {
		return 0
	}
	return int64(n)
}

func (w *wconn) bind(args []any) []driver.NamedValue {
	w.args = w.args[:0]
	for i, a := range args {
		w.args = append(w.args, driver.NamedValue{Ordinal: i + 1, Value: a})
	}
	return w.args
}

// exec runs s and returns the number of rows it changed. A caller's context
// never reaches the writer's statements: the transaction is shared.
func (w *wconn) exec(s *stmt, args ...any) (int64, error) {
	if s.writes {
		w.writes++
	}
	res, err := s.ex.ExecContext(context.Background(), w.bind(args))
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// query runs s; the caller reads the rows with next and closes them.
func (w *wconn) query(s *stmt, args ...any) (driver.Rows, error) {
	if s.writes {
		w.writes++ // DELETE ... RETURNING
	}
	return s.q.QueryContext(context.Background(), w.bind(args))
}

// queryRow runs s and reads its first row into dest; it reports false when
// there is none.
func (w *wconn) queryRow(s *stmt, dest []driver.Value, args ...any) (bool, error) {
	rows, err := w.query(s, args...)
	if err != nil {
		return false, err
	}
	err = rows.Next(dest)
	cerr := rows.Close()
	if errors.Is(err, io.EOF) {
		return false, cerr
	}
	if err != nil {
		return false, err
	}
	return true, cerr
}

// sessions reads rows of (position, id, status, last_active, created_at,
// claim_deadline, notify, lane) into out and closes them.
func (w *wconn) sessions(rows driver.Rows, gate string, out []session.Session) ([]session.Session, error) {
	defer rows.Close()
	var dest [8]driver.Value
	for {
		err := rows.Next(dest[:])
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		r := rawRow{
			position:   asInt(dest[0]),
			id:         asString(dest[1]),
			status:     asInt(dest[2]),
			lastActive: asNullInt(dest[3]),
			createdAt:  asInt(dest[4]),
			claim:      asNullInt(dest[5]),
			notify:     asInt(dest[6]) != 0,
			lane:       asInt(dest[7]),
		}
		out = append(out, r.session(gate))
	}
}

// eachRow reads rows into dest and calls fn after each, then closes rows.
// It returns the first error of reading or closing.
func eachRow(rows driver.Rows, dest []driver.Value, fn func()) error {
	for {
		err := rows.Next(dest)
		if errors.Is(err, io.EOF) {
			return rows.Close()
		}
		if err != nil {
			rows.Close()
			return err
		}
		fn()
	}
}

func asInt(v driver.Value) int64 {
	n, _ := v.(int64)
	return n
}

func asNullInt(v driver.Value) sql.NullInt64 {
	n, ok := v.(int64)
	return sql.NullInt64{Int64: n, Valid: ok}
}

func asString(v driver.Value) string {
	switch v := v.(type) {
	case string:
		return v
	case []byte:
		return string(v)
	}
	return ""
}

// readerStmts are the statements of the read pool.
type readerStmts struct {
	get, rows *sql.Stmt
}

func (r *readerStmts) prepare(ctx context.Context, db *sql.DB) error {
	var err error
	if r.get, err = db.PrepareContext(ctx, sqlGetRow); err != nil {
		return err
	}
	r.rows, err = db.PrepareContext(ctx, sqlAllRows)
	return err
}

func (r *readerStmts) close() {
	for _, st := range []*sql.Stmt{r.get, r.rows} {
		if st != nil {
			_ = st.Close()
		}
	}
}

// Status values in the status column.
const (
	dbWaiting = 0
	dbActive  = 1
)

type rawRow struct {
	id         string
	position   int64
	status     int64
	lastActive sql.NullInt64
	createdAt  int64
	claim      sql.NullInt64
	notify     bool
	lane       int64
}

func (r *rawRow) session(gate string) session.Session {
	s := session.Session{
		Gate:      gate,
		ID:        r.id,
		Position:  r.position,
		Status:    session.StatusWaiting,
		CreatedAt: fromNanos(r.createdAt),
		Lane:      session.Lane(r.lane),
	}
	if r.status == dbActive {
		s.Status = session.StatusActive
	}
	if r.lastActive.Valid {
		s.LastActive = fromNanos(r.lastActive.Int64)
	}
	if r.claim.Valid {
		s.ClaimDeadline = fromNanos(r.claim.Int64)
	}
	s.Notify = r.notify
	return s
}

// scanSession scans a row of sqlSelectRow read through database/sql.
func scanSession(row *sql.Row, gate, id string, position int64) (session.Session, error) {
	r := rawRow{id: id, position: position}
	if err := row.Scan(&r.status, &r.lastActive, &r.createdAt, &r.claim, &r.notify, &r.lane); err != nil {
		return session.Session{}, err
	}
	return r.session(gate), nil
}

// Times are stored as unix nanoseconds and come back in UTC, without a
// monotonic reading; the store normalises the instants it is given the same
// way, so a session reads the same whether it comes from a write or a Get.
func fromNanos(n int64) time.Time { return time.Unix(0, n).UTC() }

func normTime(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return fromNanos(t.UnixNano())
}

func nullNanos(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UnixNano()
}

func statusValue(s session.Status) int64 {
	if s == session.StatusActive {
		return dbActive
	}
	return dbWaiting
}
