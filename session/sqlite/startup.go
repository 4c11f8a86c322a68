package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/anteroomhq/anteroom/session"
)

// Start-up reads the sessions table once (issue 14). One pass over each
// gate's rows, in position order, builds the id index, counts the gate's
// active and waiting rows (which verifyCounters compares with the stored
// counters), finds its largest position, and collects its waiting
// positions, which the Waitlist's first Load takes instead of reading them
// again. It used to take three passes (a GROUP BY for the counters, the
// id scan, the waiting positions), about half of the start-up.

const (
	// The gates that have rows, one index seek each (not a scan of every
	// row, as DISTINCT would be).
	sqlScanGates = `WITH RECURSIVE g(name) AS (
		SELECT (SELECT gate FROM sessions ORDER BY gate LIMIT 1)
		UNION ALL
		SELECT (SELECT gate FROM sessions WHERE gate > g.name ORDER BY gate LIMIT 1) FROM g WHERE g.name IS NOT NULL)
	SELECT name FROM g WHERE name IS NOT NULL`
	sqlScanGate   = `SELECT position, id, status FROM sessions WHERE gate = ? ORDER BY position`
	sqlGateCounts = `SELECT active + waiting FROM gates WHERE name = ?`
)

// gateScan is what the start-up scan found in one gate's rows.
type gateScan struct {
	active, waiting int64
	maxPos          int64
	waitingPos      []int64 // ascending
}

// scanSessions reads every session row on c (a driver connection, before
// the writer starts) into the index x and returns what it counted per gate.
// A scan that fails part way (a damaged page) is an error, never a partial
// count.
func scanSessions(ctx context.Context, c driver.Conn, x *idIndex) (map[string]*gateScan, error) {
	w := &wconn{c: c}
	var stmts []*stmt
	defer func() {
		for _, s := range stmts {
			s.st.Close()
		}
	}()
	var gatesSt, scanSt, countSt, idAtSt *stmt
	for _, p := range []struct {
		dst **stmt
		q   string
	}{{&gatesSt, sqlScanGates}, {&scanSt, sqlScanGate}, {&countSt, sqlGateCounts}, {&idAtSt, sqlIDAt}} {
		s, err := prepareOn(c, p.q)
		if err != nil {
			return nil, err
		}
		stmts = append(stmts, s)
		*p.dst = s
	}

	rows, err := w.query(gatesSt)
	if err != nil {
		return nil, err
	}
	var names []string
	var dest [3]driver.Value
	for {
		err := rows.Next(dest[:1])
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			rows.Close()
			return nil, err
		}
		names = append(names, asString(dest[0]))
	}
	if err := rows.Close(); err != nil {
		return nil, err
	}

	out := make(map[string]*gateScan, len(names))
	for _, gate := range names {
		// The stored counters size the maps: growing a map of millions
		// costs more than filling it.
		var hint int64
		if _, err := w.queryRow(countSt, dest[:1], gate); err != nil {
			return nil, err
		}
		hint = max(asInt(dest[0]), 0)
		g := x.gate(gate)
		if len(g.h) == 0 && hint > 0 {
			g.h = make(map[uint64]int64, min(hint, 1<<28))
		}
		sc := &gateScan{}
		sc.waitingPos = make([]int64, 0, min(hint, 1<<28))
		out[gate] = sc
		if err := scanGate(w, scanSt, idAtSt, x, g, gate, sc); err != nil {
			return nil, fmt.Errorf("gate %q: %w", gate, err)
		}
	}
	return out, nil
}

func scanGate(w *wconn, scanSt, idAtSt *stmt, x *idIndex, g *gateIDs, gate string, sc *gateScan) error {
	rows, err := w.query(scanSt, gate)
	if err != nil {
		return err
	}
	defer rows.Close()
	var dest [3]driver.Value
	for {
		err := rows.Next(dest[:])
		if errors.Is(err, io.EOF) {
			return rows.Close()
		}
		if err != nil {
			return err
		}
		pos, status := asInt(dest[0]), asInt(dest[2])
		sc.maxPos = max(sc.maxPos, pos)
		if status == 1 { // status: 0 waiting, 1 active (migrations/0001)
			sc.active++
		} else {
			sc.waiting++
			sc.waitingPos = append(sc.waitingPos, pos)
		}
		// The id is hashed from the driver's bytes: no string is made for
		// the (usual) row whose hash is free.
		var h uint64
		var id string
		switch v := dest[1].(type) {
		case []byte:
			h = x.hashBytes(v)
		default:
			id = asString(v)
			h = x.hash(id)
		}
		other, taken := g.h[h]
		if !taken {
			g.h[h] = pos
			continue
		}
		if id == "" {
			id = asString(dest[1])
		}
		// Another row has the hash: another id (then this one goes to
		// long), or the same id twice, which the writer never writes.
		var key [1]driver.Value
		if _, err := w.queryRow(idAtSt, key[:], gate, other); err != nil {
			return err
		}
		if _, dup := g.long[id]; dup || asString(key[0]) == id {
			return fmt.Errorf("session %q of gate %q is stored twice", id, gate)
		}
		g.long[id] = pos
	}
}

// quickCheckAsync runs PRAGMA quick_check on a connection of its own and
// sends its result: the check reads every page, and runs beside the
// start-up scan instead of before it.
func quickCheckAsync(ctx context.Context, dsn, path string) <-chan error {
	done := make(chan error, 1)
	go func() {
		db, err := sql.Open("sqlite", dsn)
		if err != nil {
			done <- err
			return
		}
		defer db.Close()
		db.SetMaxOpenConns(1)
		conn, err := db.Conn(ctx)
		if err != nil {
			done <- err
			return
		}
		defer conn.Close()
		done <- quickCheck(ctx, conn, path)
	}()
	return done
}

// loadRows reads the gate's live active sessions (below its first waiting
// position, where every normal-lane active session is, and the priority
// lane's above it: sqlActive; those the active mark am leaves live) and
// its waiting positions (those the purge mark m leaves live), which Open's
// scan found when nothing changed the gate's rows since (once: Load's
// caller keeps them). The rows of the gate's pending promotion p
// (promoted.go) are active sessions, not waiters.
func (s *Store) loadRows(gate string, m, am purgeMark, p pendingPromotion, st session.GateState) ([]session.Session, []int64, error) {
	rows, err := s.wc.query(s.wc.active, gate, st.FirstWaitingPosition, am.seen, am.pos)
	if err != nil {
		return nil, nil, fmt.Errorf("read active sessions: %w", err)
	}
	active, err := s.wc.sessions(rows, gate, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("read active sessions: %w", err)
	}
	if p.active() {
		if active, err = s.withPending(gate, m, p, active); err != nil {
			return nil, nil, err
		}
	}
	if sc := s.startScan[gate]; sc != nil && int64(len(sc.waitingPos)) == st.Waiting && !p.active() {
		delete(s.startScan, gate)
		return active, sc.waitingPos, nil
	}
	delete(s.startScan, gate)
	waiting, err := s.waitingPositions(gate, m, st.Waiting)
	if err != nil {
		return nil, nil, err
	}
	if p.active() {
		waiting = slices.DeleteFunc(waiting, func(pos int64) bool { return pos >= p.from && pos < p.to })
	}
	return active, waiting, nil
}

// withPending adds to active (in position order) the live waiting rows of
// gate's pending promotion p, as it made them, with the waiting mark m.
func (s *Store) withPending(gate string, m purgeMark, p pendingPromotion, active []session.Session) ([]session.Session, error) {
	rows, err := s.wc.query(s.wc.firstWaiters, gate, p.from, p.to-p.from, m.seen, m.pos)
	if err != nil {
		return nil, fmt.Errorf("read pending promotions: %w", err)
	}
	pending, err := s.wc.sessions(rows, gate, nil)
	if err != nil {
		return nil, fmt.Errorf("read pending promotions: %w", err)
	}
	for _, r := range pending {
		if r.Position >= p.to {
			break
		}
		p.apply(&r)
		active = append(active, r)
	}
	slices.SortFunc(active, func(a, b session.Session) int { return cmp.Compare(a.Position, b.Position) })
	return active, nil
}
