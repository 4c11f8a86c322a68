package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The cleaner deletes the rows of the waiters and active sessions an update
// purged by raising its gate's purge marks (migrations/0011, 0012,
// update.go's purgeSeen). Those
// rows are gone for every reader already, counted out and reported; the
// cleaner only gives their space back. It runs beside the writer, a few
// rows an op, so that a join waits behind it for a millisecond or two,
// never for the thousands of scattered pages an update's purge used to
// write in its own transactions. Close finishes what it left, and so does
// Open, for a process that stopped first.

// cleanChunk is how many rows one op of the cleaner deletes: scattered
// over the line, each writes a page of its own (about 55 µs a row at a
// million sessions), so a chunk holds the writer for 2 ms or so. A
// variable for the tests.
var cleanChunk int64 = 32

// cleanPause is how long the cleaner waits after each op before it sends
// the next. Without it the cleaner and the writer hand the P they run on
// back and forth (each wakes the other into the P's runnext slot, which
// inherits the time slice), and that P never polls the network or runs
// another P's timers: while the other P was held in a long syscall (the
// checkpointer's fsync of the WAL, at an update's end), a join arriving
// then waited until the runtime's monitor took that P back, 10 ms and
// more. A moment with nothing to run makes the P look. Sleeping on an idle
// P takes about half a millisecond whatever is asked, so the cleaner's
// pass takes about 1.7 times as long; what it deletes is gone for every
// reader already (docs/performance.md, the thirteenth round). A variable
// for the tests.
var cleanPause = 50 * time.Microsecond

// testHookClean, set only by this package's tests, runs before the
// cleaner starts on what it was given.
var testHookClean atomic.Pointer[func()]

// cleanRetry is how long the cleaner waits after a failed op before it
// tries the gate again, doubled while it keeps failing, up to
// cleanRetryMax. Variables for the tests.
var (
	cleanRetry    = time.Second
	cleanRetryMax = time.Minute
)

// cleaner is the Store's cleaner: the gates with purged rows to delete,
// and its goroutine.
type cleaner struct {
	ctx    context.Context // canceled by Close (halt)
	cancel context.CancelFunc

	mu sync.Mutex
	// gates are the gates to clean; true for one with a pending promotion
	// to write first (promoted.go).
	gates map[string]bool
	kick  chan struct{} // 1-buffered: something to clean
	done  chan struct{} // closed when the goroutine ends
	// busy: gates were given and not all cleaned yet; idle is closed, and
	// replaced, whenever that ends (WaitClean).
	busy bool
	idle chan struct{}
}

func newCleaner() *cleaner {
	c := &cleaner{gates: map[string]bool{}, kick: make(chan struct{}, 1), done: make(chan struct{}), idle: make(chan struct{})}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	return c
}

// halt stops the cleaner's goroutine and waits for it.
func (c *cleaner) halt() {
	c.cancel()
	<-c.done
}

// cleanJob is a gate given to the cleaner, and whether it had a pending
// promotion when it was given.
type cleanJob struct {
	gate     string
	promoted bool
}

// take returns the gates given since the last take and forgets them; with
// none, the cleaner is idle.
func (c *cleaner) take() []cleanJob {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.gates) == 0 {
		if c.busy {
			c.busy = false
			close(c.idle)
			c.idle = make(chan struct{})
		}
		return nil
	}
	gates := make([]cleanJob, 0, len(c.gates))
	for g, promoted := range c.gates {
		gates = append(gates, cleanJob{g, promoted})
	}
	clear(c.gates)
	return gates
}

// cleanWanted tells the cleaner that gate has purged rows to delete, or
// with promoted a pending promotion to write. The
// writer calls it once the transaction that raised the mark committed; the
// cleaner is kicked when the Update ends (cleanStart), or picks the gate
// up sooner when it is already running. Its ops delete only what the
// stored mark covers, which never runs ahead of what was counted out; an
// op that runs in a later transaction of the update sees the mark as
// committed.
func (s *Store) cleanWanted(gate string, promoted bool) {
	c := s.clean
	c.mu.Lock()
	c.gates[gate] = c.gates[gate] || promoted
	c.busy = true
	c.mu.Unlock()
}

// cleanStart starts the cleaner on what it was given, if anything: at the
// end of an Update, so that it does not compete with the update's own
// transactions (it may, when it was already running for another gate).
func (s *Store) cleanStart() {
	c := s.clean
	c.mu.Lock()
	wanted := len(c.gates) > 0
	c.mu.Unlock()
	if !wanted {
		return
	}
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// runCleaner is the cleaner's goroutine, until Close stops it: once
// kicked, it cleans the gates it was given until none is left, and waits
// between passes while one keeps failing.
func (s *Store) runCleaner() {
	c := s.clean
	defer close(c.done)
	ctx := c.ctx
	retry := cleanRetry
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.kick:
		}
		if h := testHookClean.Load(); h != nil {
			(*h)()
		}
		for gates := c.take(); len(gates) > 0; gates = c.take() {
			failed := false
			for _, g := range gates {
				err := s.cleanGate(ctx, g.gate, g.promoted)
				if err == nil {
					continue
				}
				if ctx.Err() != nil {
					return // closing: Close deletes what is left
				}
				s.log.Warn("anteroom: writing promotions or deleting purged sessions failed; retrying", "path", s.path, "gate", g.gate, "err", err, "retry_in", retry)
				s.cleanWanted(g.gate, g.promoted)
				failed = true
			}
			if !failed {
				retry = cleanRetry
				continue
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(retry):
			}
			retry = min(2*retry, cleanRetryMax)
		}
	}
}

// cleanGate writes the rows of gate's pending promotion, with promoted,
// materializeChunk rows an op (promoted.go), then deletes its purged rows,
// cleanChunk an op, until none is left, and lowers the gate's marks in its
// last op (resetMarks). It pauses for cleanPause between its ops. It
// writes as an update does (many pages), and is held back as one: it
// waits for room in the WAL before each op (waitForRoom), and background
// checkpoint passes and the identity record wait for it.
//
// Errors: ctx's, when the cleaner is stopped; the op's.
func (s *Store) cleanGate(ctx context.Context, gate string, promoted bool) error {
	s.updating.Add(1)
	s.updates.Add(1)
	defer func() {
		s.updates.Add(-1)
		s.updating.Add(-1)
		s.ck.kick()
	}()
	waitBudget := updateWaitLimit
	pause := time.NewTimer(time.Hour)
	defer pause.Stop()
	for {
		if err := s.waitForRoom(ctx, &waitBudget); err != nil {
			return err
		}
		var n int64
		var more bool
		o := newOp(ctx, opFunc)
		o.fn = func(b *batch) error {
			if promoted {
				var err error
				more, err = s.materialize(b, gate, materializeChunk)
				return err
			}
			var err error
			n, err = s.wc.exec(s.wc.cleanPurged, gate, cleanChunk)
			if err != nil {
				return fmt.Errorf("delete purged sessions of gate %q: %w", gate, err)
			}
			if n < cleanChunk {
				return s.resetMarks(b, gate)
			}
			return nil
		}
		err := s.do(o)
		putOp(o)
		if err != nil {
			return err
		}
		switch {
		case promoted:
			promoted = more
		case n < cleanChunk:
			return nil
		}
		pause.Reset(cleanPause)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-pause.C:
		}
	}
}

// resetMarks lowers the purge marks of gate back to noMark once the
// cleaner deleted every row below them (in the op whose statement found
// fewer than a chunk): they then cover nothing, and a mark left where it
// was would date every session written below it just above it (keepLive).
// That matters when the mark lies ahead of the clock: a session purged
// after it was seen on a clock that ran ahead raises the mark there, and
// every active session written once the clock is right would then be dated
// in the future, and keep its slot, idle, until the clock caught up. With
// the reset, only the sessions written before the cleaner ran are.
//
// Only marks as stored are lowered (the statement's condition): one an
// update raised earlier in this transaction covers rows the statement did
// not see (it reads the stored marks), and is left for the cleaner's next
// pass. The lowered marks are stored at once, not at the transaction's
// end: a later cleaner op of the same transaction deletes by the stored
// marks, and keepLive dates by the held ones, so a stored mark above the
// held one would delete a row written below it in between.
func (s *Store) resetMarks(b *batch, gate string) error {
	e, err := s.gate(b, gate)
	if err != nil {
		return err
	}
	if e.mark == noMark && e.activeMark == noMark {
		return nil
	}
	n, err := s.wc.exec(s.wc.resetGateMarks, gate, e.mark.seen, e.mark.pos, e.activeMark.seen, e.activeMark.pos)
	if err != nil {
		return fmt.Errorf("reset the purge marks of gate %q: %w", gate, err)
	}
	if n > 0 {
		e.mark, e.activeMark = noMark, noMark
	}
	return nil
}

// WaitClean waits until the rows of every purged session (waiting or
// active) are deleted (or ctx is done, or the Store closes, whose Close
// deletes what is left): what an update purged is gone for every reader at
// its commit, and its rows a moment later. For tests and benchmarks.
// Errors: ctx's error.
func (s *Store) WaitClean(ctx context.Context) error {
	c := s.clean
	c.mu.Lock()
	busy, idle := c.busy, c.idle
	c.mu.Unlock()
	if !busy {
		return nil
	}
	select {
	case <-idle:
		return nil
	case <-c.done: // closed: Close deletes what is left
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close's share of the cleaning is bounded: what is left past the budget
// is deleted by the next Open. Variables for the tests.
var (
	closeCleanBudget = 5 * time.Second
	restChunk        = int64(1024) // rows a statement of cleanRest or purgedDelete deletes
)

// cleanRest deletes, once the writer stopped (Close), the purged rows the
// cleaner left, of every gate whose mark was ever raised (the table says
// which: the writer's cache may have been dropped by a failed transaction,
// and the cleaner forgets a gate when it starts on it), restChunk rows a
// statement with a passive checkpoint between statements, until none is
// left or closeCleanBudget is spent; then, when none is left, it lowers
// every gate's marks to noMark (sqlResetMarks), before the snapshot is
// taken. It returns how many rows it deleted, and whether it stopped for
// the budget (rows may be left, and the marks stay).
func (s *Store) cleanRest() (deleted int64, stopped bool, err error) {
	st, err := prepareOn(s.wc.c, `SELECT name FROM gates WHERE `+marksRaised)
	if err != nil {
		return 0, false, fmt.Errorf("delete purged sessions: %w", err)
	}
	defer st.st.Close()
	rows, err := s.wc.query(st)
	if err != nil {
		return 0, false, fmt.Errorf("delete purged sessions: %w", err)
	}
	var names []string
	var dest [1]driver.Value
	if err := eachRow(rows, dest[:], func() { names = append(names, asString(dest[0])) }); err != nil {
		return 0, false, fmt.Errorf("delete purged sessions: %w", err)
	}
	deleted, stopped, err = deleteInChunks(names, time.Now().Add(closeCleanBudget),
		func(gate string) (int64, error) { return s.wc.exec(s.wc.cleanPurged, gate, restChunk) },
		func() error {
			_, _, _, _ = checkpoint(&s.wc, s.wc.checkpoint) // the final checkpoint reports failures
			return nil
		})
	if err != nil || stopped || len(names) == 0 {
		return deleted, stopped, err
	}
	// Nothing is left below any mark: they go back to covering nothing
	// (resetMarks), before the snapshot is taken.
	reset, err := prepareOn(s.wc.c, sqlResetMarks)
	if err != nil {
		return deleted, false, fmt.Errorf("reset purge marks: %w", err)
	}
	defer reset.st.Close()
	if _, err := s.wc.exec(reset); err != nil {
		return deleted, false, fmt.Errorf("reset purge marks: %w", err)
	}
	return deleted, false, nil
}

// sqlResetMarks lowers every gate's purge marks back to noMark: once no
// row is left below them (Close after its deletion, Open after its own),
// they cover nothing. See resetMarks.
const sqlResetMarks = `UPDATE gates SET ` + setNoMarks + ` WHERE ` + marksRaised

// deleteInChunks deletes the purged rows of gates with del (restChunk rows
// a call, returning how many it deleted) until none is left, running
// ckpt between calls to keep the WAL short, and stops at deadline (zero:
// none). It returns how many rows it deleted and whether the deadline
// stopped it.
func deleteInChunks(gates []string, deadline time.Time, del func(gate string) (int64, error), ckpt func() error) (deleted int64, stopped bool, err error) {
	for _, g := range gates {
		for {
			if !deadline.IsZero() && !time.Now().Before(deadline) {
				return deleted, true, nil
			}
			n, err := del(g)
			if err != nil {
				return deleted, false, fmt.Errorf("delete purged sessions of gate %q: %w", g, err)
			}
			deleted += n
			if n < restChunk {
				break
			}
			if err := ckpt(); err != nil {
				return deleted, false, fmt.Errorf("delete purged sessions of gate %q: %w", g, err)
			}
		}
	}
	return deleted, false, nil
}

// purgedToDelete checks the purge marks of every gate on conn before the
// writer starts (Open), compared with the rows in order o, and returns the
// gates with purged rows that a process that stopped first left;
// purgedDelete deletes them.
//
// The marks decide which rows go, so they are checked first, as the
// counters are: a mark that is not an integer, lies more than markHorizon
// ahead of the clock, or covers rows the counters still count (a value
// edited or damaged on disk: the counters and the marks are written in the
// same transaction, so after any crash the counters count exactly the rows
// the marks leave live), refuses the file with ErrDamaged.
func purgedToDelete(ctx context.Context, conn queryer, path string, o markOrder) ([]string, error) {
	rows, err := conn.QueryContext(ctx, `SELECT name, `+
		`typeof(purged_seen) = 'integer' AND typeof(purged_position) = 'integer' AND typeof(active_purged_seen) = 'integer' AND typeof(active_purged_position) = 'integer', `+
		`waiting, active, purged_seen > ?1 OR active_purged_seen > ?1 FROM gates WHERE `+marksRaised, wallNow().Add(markHorizon).UnixNano())
	if err != nil {
		return nil, fmt.Errorf("check purge marks: %w", err)
	}
	type gateMark struct {
		name            string
		ok              bool
		waiting, active int64
		future          bool
	}
	var gates []gateMark
	for rows.Next() {
		var g gateMark
		if err := rows.Scan(&g.name, &g.ok, &g.waiting, &g.active, &g.future); err != nil {
			rows.Close()
			return nil, fmt.Errorf("check purge marks: %w", err)
		}
		gates = append(gates, g)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return nil, fmt.Errorf("check purge marks: %w", err)
	}
	var out []string
	for _, g := range gates {
		if !g.ok || g.future {
			return nil, damaged("database %s: a purge mark of gate %q (purged_seen, purged_position or active_purged_seen, active_purged_position in table gates) is not a number or lies more than a year ahead, so which rows it purged is unknown. %s",
				path, g.name, markAdvice(g.name))
		}
		anyCovered := false
		for _, k := range []struct {
			status  int64
			what    string
			covered string // the condition of a row the mark covers
			counted int64
		}{
			{dbWaiting, "waiting", o.covered("0", "purged_seen", "purged_position"), g.waiting},
			{dbActive, "active", o.covered("1", "active_purged_seen", "active_purged_position"), g.active},
		} {
			var covered int64
			if err := conn.QueryRowContext(ctx, `SELECT count(*) FROM sessions INDEXED BY sessions_seen WHERE `+k.covered, g.name).Scan(&covered); err != nil {
				return nil, fmt.Errorf("check the purge marks of gate %q: %w", g.name, err)
			}
			if covered == 0 {
				continue // nothing to delete
			}
			anyCovered = true
			var stored int64
			if err := conn.QueryRowContext(ctx, `SELECT count(*) FROM sessions WHERE gate = ? AND status = ?`, g.name, k.status).Scan(&stored); err != nil {
				return nil, fmt.Errorf("check the purge marks of gate %q: %w", g.name, err)
			}
			if stored-covered != k.counted {
				return nil, damaged("database %s: the %s purge mark of gate %q covers %d of its %d %s rows, but its counter counts %d %s sessions, not %d: the mark or the counter was edited or damaged, and deleting the rows it covers could lose live sessions. %s",
					path, k.what, g.name, covered, stored, k.what, k.counted, k.what, stored-covered, markAdvice(g.name))
			}
		}
		if anyCovered {
			out = append(out, g.name) // else the file is not written
		}
	}
	return out, nil
}

// settlePurged checks the purge marks on conn in order o (purgedToDelete)
// and deletes the rows they cover (purgedDelete), returning how many. When
// the check found rows to delete, or failed, it first waits for verdict,
// quick_check's (a damaged file: say so, whatever the check of the marks
// met): nothing is deleted before the file is known sound.
func settlePurged(ctx context.Context, conn *sql.Conn, path string, o markOrder, verdict func() error) (int64, error) {
	purged, err := purgedToDelete(ctx, conn, path, o)
	if err != nil || len(purged) > 0 {
		if verr := verdict(); verr != nil {
			return 0, verr
		}
	}
	if err != nil {
		return 0, err
	}
	return purgedDelete(ctx, conn, purged, o)
}

// purgedDelete deletes the purged rows of gates on conn (Open, after
// purgedToDelete and the quick_check verdict), below the marks in order o,
// restChunk rows a statement with a passive checkpoint between statements,
// and returns how many.
func purgedDelete(ctx context.Context, conn *sql.Conn, gates []string, o markOrder) (int64, error) {
	clean := cleanPurgedSQL(o)
	n, _, err := deleteInChunks(gates, time.Time{},
		func(gate string) (int64, error) {
			res, err := conn.ExecContext(ctx, clean, gate, restChunk)
			if err != nil {
				return 0, err
			}
			return res.RowsAffected()
		},
		func() error {
			_, err := conn.ExecContext(ctx, "PRAGMA wal_checkpoint(PASSIVE)")
			return err
		})
	return n, err
}

// queryer is a *sql.Conn or a *sql.Tx: purgedToDelete runs on either
// (settlePromoted checks the marks inside its transaction).
type queryer interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// markHorizon is how far ahead of the clock a purge mark may lie before
// Open calls it damaged: a mark is a purged session's last sign of life, in
// the past when it was written; the year leaves room for a clock that was
// wrong.
const markHorizon = 365 * 24 * time.Hour

// wallNow is the clock of Open's check of the marks; a variable for the
// tests.
var wallNow = time.Now

// markAdvice says how to go on from a damaged purge mark of gate.
func markAdvice(gate string) string {
	return fmt.Sprintf("Restore it from a backup; to keep every row and let the next updates purge again whoever is stale (some departures are then reported twice), reset the marks: "+
		"UPDATE gates SET "+setNoMarks+" WHERE name = '%s'",
		strings.ReplaceAll(gate, "'", "''"))
}
