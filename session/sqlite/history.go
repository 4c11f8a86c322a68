package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/anteroomhq/anteroom/session"
)

// History (migrations/0004): the writer turns each transaction's events
// into records (session.HistoryOf) and inserts them just before COMMIT, in
// multi-row INSERTs of up to histRows records, so a batch of 256 joins adds
// four statements to its transaction, not a transaction per join. The
// records are numbered from the meta row history_seq, written once per
// transaction. Reads use the read pool; pruning goes through the writer,
// one bounded chunk per op.

// histRows is the most records one INSERT writes.
const histRows = 64

// histCols is the number of values of one record in an INSERT.
const histCols = 9

// histSeqKey is the meta row holding the number of the last record.
const histSeqKey = "history_seq"

const (
	sqlHistInsert = `INSERT INTO history (gate, at, id, session, kind, status, position, reason, wait) VALUES `
	sqlHistRow    = `(?, ?, ?, ?, ?, ?, ?, ?, ?)`
	// Newest first within [since, until), optionally one session's, before
	// the cursor (at, id): a range of the primary key (until is at most the
	// cursor's time + 1).
	sqlHistSelect = `SELECT id, at, session, kind, status, position, reason, wait FROM history
		WHERE gate = ?1 AND at >= ?2 AND at < ?3 AND (?4 = '' OR session = ?4) AND (at, id) < (?5, ?6)
		ORDER BY at DESC, id DESC LIMIT ?7`
	// At most ?2 records older than ?1, gate by gate from each one's oldest
	// (every gate with history has a row in gates): ranges of the primary
	// key, whatever the table holds.
	sqlHistPrune = `DELETE FROM history WHERE (gate, at, id) IN (
		SELECT h.gate, h.at, h.id FROM gates g CROSS JOIN history h ON h.gate = g.name AND h.at < ?1 LIMIT ?2)`
)

// historyState is the writer's history: off when Options.DisableHistory,
// its statements prepared at the first use on the writer goroutine.
type historyState struct {
	off        bool
	one, many  *stmt // INSERTs of 1 and histRows records
	prune      *stmt
	args       []any
	records    []session.HistoryRecord
	prepareErr error
	seqBuf     [8]byte
}

func (w *wconn) prepareExtra(q string) (*stmt, error) {
	pc, ok := w.c.(driver.ConnPrepareContext)
	if !ok {
		return nil, errors.New("driver connection cannot prepare with a context")
	}
	st, err := pc.PrepareContext(context.Background(), q)
	if err != nil {
		return nil, fmt.Errorf("prepare %q: %w", q, err)
	}
	s := &stmt{st: st, writes: isWrite(q)}
	if s.ex, ok = st.(driver.StmtExecContext); !ok {
		return nil, errors.New("driver statement cannot execute with a context")
	}
	if s.q, ok = st.(driver.StmtQueryContext); !ok {
		return nil, errors.New("driver statement cannot query with a context")
	}
	w.extra = append(w.extra, s)
	return s, nil
}

// prepare prepares the history statements once (on the writer goroutine).
func (h *historyState) prepare(w *wconn) error {
	if h.one != nil || h.prepareErr != nil {
		return h.prepareErr
	}
	many := sqlHistInsert + strings.Repeat(sqlHistRow+", ", histRows-1) + sqlHistRow
	for _, p := range []struct {
		dst **stmt
		q   string
	}{{&h.one, sqlHistInsert + sqlHistRow}, {&h.many, many}, {&h.prune, sqlHistPrune}} {
		st, err := w.prepareExtra(p.q)
		if err != nil {
			h.one, h.prepareErr = nil, err
			return err
		}
		*p.dst = st
	}
	return nil
}

// recordHistory inserts the history records of the transaction's events.
// It runs on the writer goroutine, inside the transaction, before COMMIT.
func (s *Store) recordHistory(events []session.Event) error {
	h := &s.hist
	if h.off || len(events) == 0 {
		return nil
	}
	recs := h.records[:0]
	for _, ev := range events {
		if r, ok := session.HistoryOf(ev); ok {
			recs = append(recs, r)
		}
	}
	h.records = recs[:0]
	if len(recs) == 0 {
		return nil
	}
	if err := h.prepare(&s.wc); err != nil {
		return fmt.Errorf("history: %w", err)
	}
	// The number of the last record, read in the transaction (one seek in
	// a table of a few rows): a transaction rolled back takes its numbers
	// back with it.
	var seq int64
	var dest [1]driver.Value
	found, err := s.wc.queryRow(s.wc.selectMeta, dest[:], histSeqKey)
	if err != nil {
		return fmt.Errorf("history: read %s: %w", histSeqKey, err)
	}
	if v := asBytes(dest[0]); found && len(v) == 8 {
		seq = int64(binary.BigEndian.Uint64(v))
	}
	for len(recs) > 0 {
		n, st := 1, h.one
		if len(recs) >= histRows {
			n, st = histRows, h.many
		}
		args := h.args[:0]
		for _, r := range recs[:n] {
			var wait any
			if r.Wait >= 0 {
				wait = int64(r.Wait)
			}
			seq++
			args = append(args, r.Gate, r.At.UnixNano(), seq, r.Session, kindValue(r.Kind), statusValue(r.Status), r.Position, int64(r.Reason), wait)
		}
		h.args = args
		_, err := s.wc.exec(st, args...)
		clear(args) // keep no reference to the records' strings
		if err != nil {
			return fmt.Errorf("history: insert: %w", err)
		}
		recs = recs[n:]
	}
	binary.BigEndian.PutUint64(h.seqBuf[:], uint64(seq))
	if _, err := s.wc.exec(s.wc.insertMeta, histSeqKey, h.seqBuf[:]); err != nil {
		return fmt.Errorf("history: save %s: %w", histSeqKey, err)
	}
	return nil
}

// History returns the records of q.Gate that q selects, newest first, read
// from the read pool (it sees every commit whose caller was answered).
//
// Errors: session.ErrInvalidArgument for a query out of range
// (session.HistoryQuery.Normalize), session.ErrUnavailable after Close, a
// session.CodeInternal error on storage failure.
func (s *Store) History(ctx context.Context, q session.HistoryQuery) (session.HistoryPage, error) {
	q, err := q.Normalize()
	if err != nil {
		return session.HistoryPage{}, err
	}
	if s.closed.Load() {
		return session.HistoryPage{}, session.ErrUnavailable
	}
	since, until := int64(math.MinInt64), int64(math.MaxInt64)
	if !q.Since.IsZero() {
		since = q.Since.UnixNano()
	}
	if !q.Until.IsZero() {
		until = q.Until.UnixNano()
	}
	curAt, curID := int64(math.MaxInt64), int64(math.MaxInt64)
	if c := q.Before; c != nil {
		// The key range ends at the cursor's time: a page deep in the
		// history seeks there rather than skip the pages before it.
		curAt, curID = c.At.UnixNano(), c.ID
		if curAt < math.MaxInt64 {
			until = min(until, curAt+1)
		}
	}
	// One more than asked says whether there is a next page.
	rows, err := s.readDB.QueryContext(ctx, sqlHistSelect, q.Gate, since, until, q.Session, curAt, curID, q.Limit+1)
	if err != nil {
		return session.HistoryPage{}, s.readErr("history", err)
	}
	defer rows.Close()
	page := session.HistoryPage{Records: make([]session.HistoryRecord, 0, min(q.Limit, 64))}
	for rows.Next() {
		var r session.HistoryRecord
		var at, status, reason int64
		var kind int64
		var wait sql.NullInt64
		if err := rows.Scan(&r.ID, &at, &r.Session, &kind, &status, &r.Position, &reason, &wait); err != nil {
			return session.HistoryPage{}, s.readErr("history", err)
		}
		r.At, r.Gate, r.Kind, r.Reason = fromNanos(at), q.Gate, kindOf(kind), session.PurgeReason(reason)
		r.Status = session.StatusWaiting
		if status == dbActive {
			r.Status = session.StatusActive
		}
		r.Wait = -1
		if wait.Valid {
			r.Wait = time.Duration(wait.Int64)
		}
		page.Records = append(page.Records, r)
	}
	if err := rows.Err(); err != nil {
		return session.HistoryPage{}, s.readErr("history", err)
	}
	if len(page.Records) > q.Limit {
		page.Records = page.Records[:q.Limit]
		last := page.Records[q.Limit-1]
		page.Next = &session.HistoryCursor{At: last.At, ID: last.ID}
	}
	return page, nil
}

// PruneHistory deletes, in one transaction through the writer, those of
// the oldest limit records (in commit order) that are older than before,
// and returns how many it deleted. limit <= 0 means
// session.DefaultUpdateChunk.
//
// Errors: session.ErrUnavailable after Close, the context's error when it
// is done before the op ran, a session.CodeInternal error on storage
// failure.
func (s *Store) PruneHistory(ctx context.Context, before time.Time, limit int) (int64, error) {
	if limit <= 0 {
		limit = session.DefaultUpdateChunk
	}
	o := newOp(ctx, opPruneHistory)
	o.now, o.updIn.chunk = before, limit
	err := s.do(o)
	n := o.upd.purgedWaiting
	putOp(o)
	return n, err
}

// applyPruneHistory runs one chunk of PruneHistory.
func (s *Store) applyPruneHistory(o *op) error {
	if err := s.hist.prepare(&s.wc); err != nil {
		return fmt.Errorf("history: %w", err)
	}
	n, err := s.wc.exec(s.hist.prune, o.now.UnixNano(), int64(o.updIn.chunk))
	if err != nil {
		return fmt.Errorf("history: prune: %w", err)
	}
	o.upd.purgedWaiting = n
	return nil
}

// note reports the lifecycle event a rule decided beyond the changes
// (session.Outcome.Note).
func (b *batch) note(out session.Outcome) {
	if out.Note != 0 {
		b.event(out.Note, out.Session)
	}
}

// kindValue is a kind as stored: its index in session.HistoryKinds (an
// integer binds and compares for less than a text).
func kindValue(k session.HistoryKind) int64 {
	for i, h := range session.HistoryKinds {
		if h == k {
			return int64(i)
		}
	}
	return -1
}

func kindOf(v int64) session.HistoryKind {
	if v < 0 || v >= int64(len(session.HistoryKinds)) {
		return "unknown"
	}
	return session.HistoryKinds[v]
}
