package sqlite

import (
	"context"
	"database/sql/driver"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"time"

	"github.com/anteroomhq/anteroom/session"
)

// History (migrations/0006): the writer turns each transaction's events
// into records (session.HistoryOf) and, just before COMMIT, writes one row
// per gate holding all of them, packed: a transaction of 256 joins adds one
// row, not 256 b-tree inserts (history costs the join path that little).
// The records are numbered from the meta row history_seq, read and written
// in the transaction. Reads use the read pool and go newest first in commit
// order; pruning goes through the writer, one bounded chunk per op.

// histSeqKey is the meta row holding the number of the last record.
const histSeqKey = "history_seq"

const (
	sqlHistInsert = `INSERT INTO history (gate, first, n, min_at, max_at, data) VALUES (?, ?, ?, ?, ?, ?)`
	// A gate's rows newest first, from the one holding the cursor, whose
	// span meets [since, until).
	sqlHistSelect = `SELECT first, n, data FROM history
		WHERE gate = ?1 AND first < ?2 AND max_at >= ?3 AND min_at < ?4 ORDER BY first DESC`
	// A gate's oldest rows, for pruning: the first ?2 of them.
	sqlHistOldest = `SELECT first, n, max_at FROM history WHERE gate = ?1 ORDER BY first LIMIT ?2`
	sqlHistDelete = `DELETE FROM history WHERE gate = ?1 AND first <= ?2`
	sqlHistGates  = `SELECT name FROM gates`
)

// historyState is the writer's history: off when Options.DisableHistory,
// its statements prepared at the first use on the writer goroutine.
type historyState struct {
	off                        bool
	insert, oldest, del, gates *stmt
	records                    []session.HistoryRecord
	buf                        []byte
	prepareErr                 error
	seqBuf                     [8]byte
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
	if h.insert != nil || h.prepareErr != nil {
		return h.prepareErr
	}
	for _, p := range []struct {
		dst **stmt
		q   string
	}{{&h.oldest, sqlHistOldest}, {&h.del, sqlHistDelete}, {&h.gates, sqlHistGates}, {&h.insert, sqlHistInsert}} {
		st, err := w.prepareExtra(p.q)
		if err != nil {
			h.insert, h.prepareErr = nil, err
			return err
		}
		*p.dst = st
	}
	return nil
}

// recordHistory writes the history records of the transaction's events. It
// runs on the writer goroutine, inside the transaction, before COMMIT.
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
	// The records name sessions by the ids the ops were given, which may
	// be pieces of their requests: the scratch slice keeps none of them
	// past this transaction (a later, shorter one would leave them in the
	// slots it does not reach).
	defer clear(recs)
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
	// One row per gate, its records in event order (almost always one gate).
	for len(recs) > 0 {
		gate := recs[0].Gate
		data := h.buf[:0]
		minAt, maxAt := recs[0].At.UnixNano(), recs[0].At.UnixNano()
		first, n := seq+1, int64(0)
		rest := recs[:0]
		for _, r := range recs {
			if r.Gate != gate {
				rest = append(rest, r)
				continue
			}
			at := r.At.UnixNano()
			minAt, maxAt = min(minAt, at), max(maxAt, at)
			data = appendRecord(data, r)
			n++
		}
		seq += n
		h.buf = data
		if _, err := s.wc.exec(h.insert, gate, first, n, minAt, maxAt, data); err != nil {
			return fmt.Errorf("history: insert: %w", err)
		}
		recs = rest
	}
	binary.BigEndian.PutUint64(h.seqBuf[:], uint64(seq))
	if _, err := s.wc.exec(s.wc.insertMeta, histSeqKey, h.seqBuf[:]); err != nil {
		return fmt.Errorf("history: save %s: %w", histSeqKey, err)
	}
	return nil
}

// A packed record: at (varint), kind, status, reason (one byte each),
// position (varint), wait+1 (uvarint, 0 without a wait), the session id
// (uvarint length, bytes).
func appendRecord(b []byte, r session.HistoryRecord) []byte {
	b = binary.AppendVarint(b, r.At.UnixNano())
	b = append(b, byte(kindValue(r.Kind)), byte(statusValue(r.Status)), byte(r.Reason))
	b = binary.AppendVarint(b, r.Position)
	b = binary.AppendUvarint(b, uint64(max(r.Wait, -1)+1))
	b = binary.AppendUvarint(b, uint64(len(r.Session)))
	return append(b, r.Session...)
}

var errBadRecord = errors.New("malformed history record")

// decodeRecords unpacks the n records of a row (numbered from first).
func decodeRecords(gate string, first, n int64, data []byte) ([]session.HistoryRecord, error) {
	out := make([]session.HistoryRecord, 0, n)
	for i := range n {
		var r session.HistoryRecord
		at, k := binary.Varint(data)
		if k <= 0 || len(data) < k+3 {
			return nil, errBadRecord
		}
		kind, status, reason := data[k], data[k+1], data[k+2]
		data = data[k+3:]
		pos, k := binary.Varint(data)
		if k <= 0 {
			return nil, errBadRecord
		}
		data = data[k:]
		wait, k := binary.Uvarint(data)
		if k <= 0 {
			return nil, errBadRecord
		}
		data = data[k:]
		l, k := binary.Uvarint(data)
		if k <= 0 || uint64(len(data)-k) < l {
			return nil, errBadRecord
		}
		r.Session = string(data[k : k+int(l)])
		data = data[k+int(l):]
		r.ID, r.At, r.Gate, r.Kind, r.Position = first+i, fromNanos(at), gate, kindOf(int64(kind)), pos
		r.Status, r.Reason, r.Wait = session.StatusWaiting, session.PurgeReason(reason), time.Duration(wait)-1
		if status == dbActive {
			r.Status = session.StatusActive
		}
		out = append(out, r)
	}
	return out, nil
}

// History returns the records of q.Gate that q selects, newest first (in
// commit order), read from the read pool (it sees every commit whose caller
// was answered). A cursor names the last record of the previous page.
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
	before := int64(math.MaxInt64)
	if q.Before != nil {
		before = q.Before.ID
	}
	rows, err := s.readDB.QueryContext(ctx, sqlHistSelect, q.Gate, before, since, until)
	if err != nil {
		return session.HistoryPage{}, s.readErr("history", err)
	}
	defer rows.Close()
	page := session.HistoryPage{Records: make([]session.HistoryRecord, 0, min(q.Limit, 64))}
	more := false
scan:
	for rows.Next() {
		var first, n int64
		var data []byte
		if err := rows.Scan(&first, &n, &data); err != nil {
			return session.HistoryPage{}, s.readErr("history", err)
		}
		recs, err := decodeRecords(q.Gate, first, n, data)
		if err != nil {
			return session.HistoryPage{}, session.Errorf(session.CodeInternal, "sqlite: history: gate %q, records from %d: %w", q.Gate, first, err)
		}
		for i := len(recs) - 1; i >= 0; i-- {
			r := recs[i]
			at := r.At.UnixNano()
			if r.ID >= before || at < since || at >= until || q.Session != "" && r.Session != q.Session {
				continue
			}
			if len(page.Records) == q.Limit {
				more = true
				break scan
			}
			page.Records = append(page.Records, r)
		}
	}
	if err := rows.Err(); err != nil {
		return session.HistoryPage{}, s.readErr("history", err)
	}
	if more {
		last := page.Records[len(page.Records)-1]
		page.Next = &session.HistoryCursor{At: last.At, ID: last.ID}
	}
	return page, nil
}

// PruneHistory deletes, in one transaction through the writer, history
// rows whose records are all older than before, each gate's oldest first,
// at most limit rows (a row holds the records one transaction wrote for one
// gate), and returns how many rows it deleted. limit <= 0 means
// session.DefaultUpdateChunk. A row is looked at only once every older row
// of its gate is gone, so a record written while the clock stood far ahead
// holds back those after it until it is old enough itself.
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
	n := o.upd.purgedActive
	putOp(o)
	return n, err
}

// applyPruneHistory runs one chunk of PruneHistory.
func (s *Store) applyPruneHistory(o *op) error {
	h := &s.hist
	if err := h.prepare(&s.wc); err != nil {
		return fmt.Errorf("history: %w", err)
	}
	rows, err := s.wc.query(h.gates)
	if err != nil {
		return fmt.Errorf("history: prune: %w", err)
	}
	var gates []string
	var dest [3]driver.Value
	for {
		err := rows.Next(dest[:1])
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			rows.Close()
			return fmt.Errorf("history: prune: %w", err)
		}
		gates = append(gates, asString(dest[0]))
	}
	rows.Close()
	cutoff, budget := o.now.UnixNano(), int64(o.updIn.chunk)
	for _, gate := range gates {
		if budget == 0 {
			break
		}
		rows, err := s.wc.query(h.oldest, gate, budget)
		if err != nil {
			return fmt.Errorf("history: prune: %w", err)
		}
		last, records, taken := int64(-1), int64(0), int64(0)
		for {
			err := rows.Next(dest[:])
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				rows.Close()
				return fmt.Errorf("history: prune: %w", err)
			}
			if asInt(dest[2]) >= cutoff {
				break // the oldest not old enough: the rest of the gate waits
			}
			last, records, taken = asInt(dest[0]), records+asInt(dest[1]), taken+1
		}
		rows.Close()
		if taken == 0 {
			continue
		}
		if _, err := s.wc.exec(h.del, gate, last); err != nil {
			return fmt.Errorf("history: prune: %w", err)
		}
		budget -= taken
		o.upd.purgedWaiting += records
		o.upd.purgedActive += taken
	}
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
