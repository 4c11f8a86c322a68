package postgres

import (
	"context"
	"math"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/anteroomhq/anteroom/session"
)

// History (migrations/0007): the writer turns each transaction's events into
// records (session.HistoryOf) and queues one INSERT of them all in the
// batch that saves the gates and writes the outbox, so history costs no
// round trip of its own. Reads and pruning use the pool.

const (
	sqlHistInsert = `INSERT INTO anteroom_history (at, gate, session, kind, status, position, reason, wait)
		SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[], $5::smallint[], $6::bigint[], $7::smallint[], $8::bigint[])`
	sqlHistCols   = `SELECT id, at, session, kind, status, position, reason, wait FROM anteroom_history `
	sqlHistSelect = sqlHistCols + `WHERE gate = $1 AND at >= $2 AND at < $3 AND id < $4
		ORDER BY id DESC LIMIT $5`
	sqlHistSession = sqlHistCols + `WHERE gate = $1 AND at >= $2 AND at < $3 AND id < $4 AND session = $6
		ORDER BY id DESC LIMIT $5`
	// The oldest records by id among the first $2, those of them older than
	// $1: the statement looks at $2 rows at most, whatever the table holds.
	sqlHistPrune = `DELETE FROM anteroom_history WHERE id IN (
		SELECT id FROM (SELECT id, at FROM anteroom_history ORDER BY id LIMIT $2) o WHERE at < $1)`
)

// queueHistory queues the INSERT of the history records of events in pb.
func (s *Store) queueHistory(pb *pgx.Batch, events []session.Event) {
	if s.noHistory || len(events) == 0 {
		return
	}
	var at, pos, wait []int64
	var gate, id, kind []string
	var status, reason []int16
	for _, ev := range events {
		r, ok := session.HistoryOf(ev)
		if !ok {
			continue
		}
		st := int16(dbWaiting)
		if r.Status == session.StatusActive {
			st = dbActive
		}
		at, gate, id, kind = append(at, r.At.UnixNano()), append(gate, r.Gate), append(id, r.Session), append(kind, string(r.Kind))
		status, pos, reason = append(status, st), append(pos, r.Position), append(reason, int16(r.Reason))
		wait = append(wait, int64(r.Wait))
	}
	if len(at) == 0 {
		return
	}
	// A negative wait (not an admission) is stored as NULL.
	waits := make([]*int64, len(wait))
	for i := range wait {
		if wait[i] >= 0 {
			waits[i] = &wait[i]
		}
	}
	pb.Queue(sqlHistInsert, at, gate, id, kind, status, pos, reason, waits)
}

// note reports the lifecycle event a rule decided beyond the changes
// (session.Outcome.Note).
func (b *batch) note(g *gateTx, out session.Outcome) {
	if out.Note != 0 {
		b.event(g, out.Note, out.Session)
	}
}

// History returns the records of q.Gate that q selects, newest first (by
// id: the order of the identity's numbers, commit order on one instance).
//
// Errors: session.ErrInvalidArgument for a query out of range
// (session.HistoryQuery.Normalize), session.ErrUnavailable after Close or
// when the database cannot be reached, a session.CodeInternal error on
// storage failure.
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
	if c := q.Before; c != nil {
		before = c.ID
	}
	// One more than asked says whether there is a next page.
	args := []any{q.Gate, since, until, before, q.Limit + 1}
	sql := sqlHistSelect
	if q.Session != "" {
		sql, args = sqlHistSession, append(args, q.Session)
	}
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return session.HistoryPage{}, storageErr("history", err)
	}
	defer rows.Close()
	page := session.HistoryPage{Records: make([]session.HistoryRecord, 0, min(q.Limit, 64))}
	for rows.Next() {
		var r session.HistoryRecord
		var at int64
		var status, reason int16
		var kind string
		var wait *int64
		if err := rows.Scan(&r.ID, &at, &r.Session, &kind, &status, &r.Position, &reason, &wait); err != nil {
			return session.HistoryPage{}, storageErr("history", err)
		}
		r.At, r.Gate, r.Kind, r.Reason = fromNanos(at), q.Gate, session.HistoryKind(kind), session.PurgeReason(reason)
		r.Status = session.StatusWaiting
		if status == dbActive {
			r.Status = session.StatusActive
		}
		r.Wait = -1
		if wait != nil {
			r.Wait = time.Duration(*wait)
		}
		page.Records = append(page.Records, r)
	}
	if err := rows.Err(); err != nil {
		return session.HistoryPage{}, storageErr("history", err)
	}
	if len(page.Records) > q.Limit {
		page.Records = page.Records[:q.Limit]
		last := page.Records[q.Limit-1]
		page.Next = &session.HistoryCursor{At: last.At, ID: last.ID}
	}
	return page, nil
}

// PruneHistory deletes, in one statement, those of the oldest limit
// records (by id) that are older than before, and returns how many it
// deleted. limit <= 0 means session.DefaultUpdateChunk. Instances sharing
// the database may prune at once: a record is deleted once.
//
// Errors: session.ErrUnavailable after Close or when the database cannot
// be reached, a session.CodeInternal error on storage failure.
func (s *Store) PruneHistory(ctx context.Context, before time.Time, limit int) (int64, error) {
	if s.closed.Load() {
		return 0, session.ErrUnavailable
	}
	if limit <= 0 {
		limit = session.DefaultUpdateChunk
	}
	tag, err := s.pool.Exec(ctx, sqlHistPrune, before.UnixNano(), limit)
	if err != nil {
		return 0, storageErr("prune history", err)
	}
	return tag.RowsAffected(), nil
}
