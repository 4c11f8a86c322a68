package main

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"
)

// The update scenario's floor: the least SQLite work that makes the change
// an update makes, timed on a copy of the same file in the same run. Three
// bare statements (delete the stale waiters, delete the stale active
// sessions, promote as many waiters as slots were freed), each in a
// transaction of its own so that each part is timed with the WAL frames its
// commit writes, the gate's counters in the last; no events, checks,
// history, yields or memory: what any update on this schema and this driver
// pays for the rows it writes. Waitlist.Update against it says how much is
// ours; the floor against the 100 ms goal says what a row-at-a-time update
// can reach, and its parts say which rows cost it (the stale waiters sit
// scattered over the line, the stale active sessions and the promoted
// waiters at its front).

// floorResult is the floor's wall and process CPU time, the wall time of
// each of its three parts (commit included), and the rows each statement
// changed.
type floorResult struct {
	wall, cpu                            time.Duration
	waitingWall, activeWall, promoteWall time.Duration
	purgedWaiting, purgedActive, moved   int64
}

// updateFloor copies the database at src into dir and runs the bare change
// on the copy, with the store's writer settings (WAL, synchronous=NORMAL,
// its page cache). waitingCutoff and activeCutoff are the update's
// session.StaleCutoffs; promote is how many waiters it promotes; now is
// the promotion time. Errors: the copy's or SQLite's.
func updateFloor(ctx context.Context, src, dir string, waitingCutoff, activeCutoff time.Time, promote int64, now time.Time) (floorResult, error) {
	var r floorResult
	dst := filepath.Join(dir, "floor.db")
	if err := copyFile(src, dst); err != nil {
		return r, err
	}
	db, err := sql.Open("sqlite", storeWriterDSN(dst))
	if err != nil {
		return r, err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	conn, err := db.Conn(ctx)
	if err != nil {
		return r, err
	}
	defer conn.Close()
	type stmt struct {
		n    *int64
		sql  string
		args []any
	}
	// part runs stmts in one transaction and returns its wall time.
	part := func(stmts ...stmt) (time.Duration, error) {
		t0 := time.Now()
		tx, err := conn.BeginTx(ctx, nil)
		if err != nil {
			return 0, fmt.Errorf("floor: %w", err)
		}
		defer tx.Rollback() //nolint:errcheck // after Commit, a no-op
		for _, st := range stmts {
			res, err := tx.ExecContext(ctx, st.sql, st.args...)
			if err != nil {
				return 0, fmt.Errorf("floor: %w", err)
			}
			if *st.n, err = res.RowsAffected(); err != nil {
				return 0, fmt.Errorf("floor: %w", err)
			}
		}
		if err := tx.Commit(); err != nil {
			return 0, fmt.Errorf("floor: commit: %w", err)
		}
		return time.Since(t0), nil
	}
	t0, cpu0 := time.Now(), cpuTime()
	// The stale rows are a range of sessions_seen, whose order begins with
	// the second of the last sign of life (migrations/0013), the rows not to
	// be called back first (every row of the bulk-loaded file: notify = 0,
	// so the active statement deletes the same rows as it did without it).
	if r.waitingWall, err = part(stmt{&r.purgedWaiting, `DELETE FROM sessions WHERE gate = ?1 AND position IN (SELECT position FROM sessions WHERE gate = ?1 AND status = 0 AND notify = 0 AND last_active / 1000000000 <= ?2 / 1000000000 AND last_active < ?2)`,
		[]any{gateName, waitingCutoff.UnixNano()}}); err != nil {
		return r, err
	}
	if r.activeWall, err = part(stmt{&r.purgedActive, `DELETE FROM sessions WHERE gate = ?1 AND position IN (SELECT position FROM sessions WHERE gate = ?1 AND status = 1 AND notify = 0 AND last_active / 1000000000 <= ?2 / 1000000000 AND last_active < ?2)`,
		[]any{gateName, activeCutoff.UnixNano()}}); err != nil {
		return r, err
	}
	var one int64
	if r.promoteWall, err = part(
		stmt{&r.moved, `UPDATE sessions SET status = 1, last_active = ?3 WHERE gate = ?1 AND position IN (SELECT position FROM sessions WHERE gate = ?1 AND status = 0 ORDER BY position LIMIT ?2)`,
			[]any{gateName, promote, now.UnixNano()}},
		// The counters, with what the three statements changed: the
		// pointers are read when this statement runs, after the others.
		stmt{&one, `UPDATE gates SET active = active - ?2 + ?4, waiting = waiting - ?3 - ?4 WHERE name = ?1`,
			[]any{gateName, &r.purgedActive, &r.purgedWaiting, &r.moved}},
	); err != nil {
		return r, err
	}
	r.wall, r.cpu = time.Since(t0), cpuTime()-cpu0
	return r, os.Remove(dst)
}

// copyFile copies the file at src to dst (created, 0600).
func copyFile(src, dst string) (err error) {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := out.Close(); err == nil {
			err = cerr
		}
	}()
	_, err = io.Copy(out, in)
	return err
}
