package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"

	"github.com/anteroomhq/anteroom/session"
)

// countersRepair is one gate whose persisted counters did not match its rows.
type countersRepair struct {
	gate                  string
	active, waiting       int64 // as stored
	activeRows, waitRows  int64 // as counted
	nextPosition, maxSeen int64 // next_position as stored, largest position in a row
}

// verifyCounters checks, once at open, every gate's counters against the
// rows they count and next_position against the largest position, as the
// start-up scan found them (scanSessions), in one transaction on conn
// (before the writer starts). A mismatch is repaired (counters := counts,
// next_position := max+1 when it is not above every position) and logged as
// a warning with the numbers; a gate row missing for sessions that exist is
// recreated. It returns the repairs made, and the error of any statement.
func verifyCounters(ctx context.Context, conn *sql.Conn, actual map[string]*gateScan, log *slog.Logger) ([]countersRepair, error) {
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return nil, fmt.Errorf("verify counters: %w", err)
	}
	repairs, err := verifyCountersTx(ctx, conn, actual)
	if err == nil && len(repairs) > 0 {
		_, err = conn.ExecContext(ctx, "COMMIT")
	} else {
		_, rbErr := conn.ExecContext(ctx, "ROLLBACK")
		if err == nil {
			err = rbErr
		}
	}
	if err != nil {
		return nil, fmt.Errorf("verify counters: %w", err)
	}
	for _, r := range repairs {
		log.Warn("anteroom: gate counters did not match the stored sessions; repaired",
			"gate", r.gate,
			"active_stored", r.active, "active_rows", r.activeRows,
			"waiting_stored", r.waiting, "waiting_rows", r.waitRows,
			"next_position_stored", r.nextPosition, "largest_position", r.maxSeen)
	}
	return repairs, nil
}

func verifyCountersTx(ctx context.Context, conn *sql.Conn, actual map[string]*gateScan) ([]countersRepair, error) {
	stored := map[string]countersRepair{}
	rows, err := conn.QueryContext(ctx, `SELECT name, next_position, active, waiting FROM gates`)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var r countersRepair
		if err := rows.Scan(&r.gate, &r.nextPosition, &r.active, &r.waiting); err != nil {
			rows.Close()
			return nil, err
		}
		stored[r.gate] = r
	}
	if err := rows.Err(); err != nil { // the scan stopped early: the view is partial
		rows.Close()
		return nil, err
	}
	if err := rows.Close(); err != nil {
		return nil, err
	}

	var repairs []countersRepair
	for gate, c := range actual {
		if _, ok := stored[gate]; !ok { // sessions without their gate row
			stored[gate] = countersRepair{gate: gate, nextPosition: -1}
		}
		r := stored[gate]
		r.activeRows, r.waitRows, r.maxSeen = c.active, c.waiting, c.maxPos
		stored[gate] = r
	}
	for gate, r := range stored {
		fixed, repaired := session.RepairCounters(session.Counters{NextPosition: r.nextPosition, Active: r.active, Waiting: r.waiting}, r.activeRows, r.waitRows, r.maxSeen)
		if !repaired {
			continue
		}
		if _, err := conn.ExecContext(ctx,
			`INSERT INTO gates (name, next_position, active, waiting) VALUES (?, ?, ?, ?)
			 ON CONFLICT (name) DO UPDATE SET next_position = excluded.next_position, active = excluded.active, waiting = excluded.waiting`,
			gate, fixed.NextPosition, fixed.Active, fixed.Waiting); err != nil {
			return nil, err
		}
		repairs = append(repairs, r)
	}
	return repairs, nil
}
