package sqlite

import (
	"context"
	"crypto/rand"
	"database/sql/driver"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/anteroomhq/anteroom/session"
)

// The webhook outbox (migrations/0005) and notify sessions. Outbox rows are
// written by writeOutbox at the end of each writer transaction, from the
// transaction's events, so they commit with the change they report. The
// delivery worker's claims and answers are writer ops (opFunc), batched with
// everything else.

var (
	_ session.OutboxStore = (*Store)(nil)
	_ session.NotifyStore = (*Store)(nil)
)

// outboxKeep is how long delivered rows are kept (for Dedup).
const outboxKeep = 24 * time.Hour

// outboxInsertChunk bounds the rows of one INSERT.
const outboxInsertChunk = 64

// SetOutbox installs the routing of commit events to webhook targets
// (session.OutboxStore); nil writes no row.
func (s *Store) SetOutbox(r *session.OutboxRouting) { s.outbox.Store(r) }

// writeOutbox writes the outbox rows of the transaction's events. It runs
// in the writer, inside the transaction, before COMMIT.
func (s *Store) writeOutbox(events []session.Event) error {
	r := s.outbox.Load()
	if r.Empty() || len(events) == 0 {
		return nil
	}
	msgs := r.Messages(events, time.Now())
	if _, err := s.insertOutbox(msgs); err != nil {
		return fmt.Errorf("outbox: %w", err)
	}
	return nil
}

// insertOutbox inserts msgs, skipping those whose (target, dedup) is kept,
// and returns how many it wrote.
func (s *Store) insertOutbox(msgs []session.OutboxMessage) (int, error) {
	written := 0
	for len(msgs) > 0 {
		n := min(len(msgs), outboxInsertChunk)
		chunk := msgs[:n]
		msgs = msgs[n:]
		var q strings.Builder
		q.WriteString(`INSERT OR IGNORE INTO webhook_outbox (target, event, gate, dedup, payload, created_at, next_at) VALUES `)
		args := make([]any, 0, 7*len(chunk))
		for i, m := range chunk {
			if i > 0 {
				q.WriteString(", ")
			}
			q.WriteString("(?, ?, ?, ?, ?, ?, ?)")
			var dedup any
			if m.Dedup != "" {
				dedup = m.Dedup
			}
			// Due at once (next_at 0): created_at is the writer's wall
			// clock, which a caller's (fake) clock need not follow.
			args = append(args, m.Target, m.Event, m.Gate, dedup, m.Payload, m.CreatedAt.UnixNano(), int64(0))
		}
		k, err := s.wc.direct(q.String(), args...)
		if err != nil {
			return written, err
		}
		written += int(k)
	}
	return written, nil
}

// direct runs a statement that is not prepared at Open on the writer's
// connection (the outbox's, rarely run) and returns the rows it changed.
func (w *wconn) direct(q string, args ...any) (int64, error) {
	ex, ok := w.c.(driver.ExecerContext)
	if !ok {
		return 0, errors.New("driver connection cannot execute directly")
	}
	w.writes++
	res, err := ex.ExecContext(context.Background(), q, w.bind(args))
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// directQuery runs a query (or a statement with RETURNING) that is not
// prepared at Open; the caller closes the rows.
func (w *wconn) directQuery(q string, args ...any) (driver.Rows, error) {
	qc, ok := w.c.(driver.QueryerContext)
	if !ok {
		return nil, errors.New("driver connection cannot query directly")
	}
	w.writes++
	return qc.QueryContext(context.Background(), q, w.bind(args))
}

// runExt runs fn in the writer, in a transaction it may share with other
// ops. fn may run more than once (a batch is run again without an op that
// failed): it must set its results afresh each time.
func (s *Store) runExt(ctx context.Context, cfg session.GateConfig, fn func(b *batch, o *op) error) error {
	o := newOp(ctx, opFunc)
	o.cfg = cfg
	o.fn = func(b *batch) error { return fn(b, o) }
	err := s.do(o)
	putOp(o)
	return err
}

// EnqueueOutbox writes the rows of a named webhook event for every target
// the routing names, in a transaction of its own (session.OutboxStore).
//
// Errors: session.ErrInvalidArgument for an invalid gate name,
// session.ErrUnavailable after Close, a session.CodeInternal error on
// storage failure.
func (s *Store) EnqueueOutbox(ctx context.Context, event, gate, dedup string, payload []byte, now time.Time) (int, error) {
	if !session.ValidGateName(gate) {
		return 0, session.Errorf(session.CodeInvalidArgument, "sqlite: enqueue webhook: gate name %q", gate)
	}
	msgs := s.outbox.Load().Custom(event, gate, dedup, payload, now)
	if len(msgs) == 0 {
		return 0, nil
	}
	var n int
	err := s.runExt(ctx, session.GateConfig{}, func(*batch, *op) (err error) {
		n, err = s.insertOutbox(msgs)
		return err
	})
	return n, err
}

const sqlClaimOutbox = `UPDATE webhook_outbox SET lease = ?1, lease_until = ?2
 WHERE id IN (SELECT id FROM webhook_outbox WHERE state = 0 AND next_at <= ?3 AND (lease_until IS NULL OR lease_until <= ?3)
   AND (target = ?5 OR ?5 = '' AND target NOT IN (SELECT value FROM json_each(?6))) ORDER BY id LIMIT ?4)
 RETURNING id, target, event, gate, coalesce(dedup, ''), payload, created_at, attempts`

const sqlPruneOutbox = `DELETE FROM webhook_outbox WHERE id IN (SELECT id FROM webhook_outbox WHERE state = 1 AND done_at < ?1 LIMIT 256)`

// ClaimOutbox leases up to n due pending rows of the targets which selects
// for lease (session.OutboxStore) and forgets delivered rows older than a
// day.
//
// Errors: session.ErrInvalidArgument for n < 1 or lease <= 0,
// session.ErrUnavailable after Close, a session.CodeInternal error on
// storage failure.
func (s *Store) ClaimOutbox(ctx context.Context, which session.OutboxTargets, now time.Time, lease time.Duration, n int) ([]session.OutboxMessage, error) {
	if n < 1 || lease <= 0 {
		return nil, session.Errorf(session.CodeInvalidArgument, "sqlite: claim outbox: n %d, lease %v", n, lease)
	}
	not, err := json.Marshal(append([]string{}, which.Not...))
	if err != nil {
		return nil, session.Errorf(session.CodeInvalidArgument, "sqlite: claim outbox: targets: %w", err)
	}
	token := newLease()
	var out []session.OutboxMessage
	err = s.runExt(ctx, session.GateConfig{}, func(*batch, *op) error {
		out = out[:0]
		if _, err := s.wc.direct(sqlPruneOutbox, now.Add(-outboxKeep).UnixNano()); err != nil {
			return fmt.Errorf("outbox prune: %w", err)
		}
		rows, err := s.wc.directQuery(sqlClaimOutbox, token, now.Add(lease).UnixNano(), now.UnixNano(), int64(n), which.Only, string(not))
		if err != nil {
			return fmt.Errorf("outbox claim: %w", err)
		}
		defer rows.Close()
		var dest [8]driver.Value
		for {
			err := rows.Next(dest[:])
			if errors.Is(err, io.EOF) {
				return nil
			}
			if err != nil {
				return fmt.Errorf("outbox claim: %w", err)
			}
			payload, _ := dest[5].([]byte)
			out = append(out, session.OutboxMessage{
				ID: asInt(dest[0]), Target: asString(dest[1]), Event: asString(dest[2]), Gate: asString(dest[3]),
				Dedup: asString(dest[4]), Payload: append([]byte(nil), payload...), CreatedAt: fromNanos(asInt(dest[6])),
				Attempts: int(asInt(dest[7])), Lease: token,
			})
		}
	})
	if err != nil {
		return nil, err
	}
	// RETURNING gives no order.
	sortOutbox(out)
	return out, nil
}

func sortOutbox(ms []session.OutboxMessage) {
	for i := 1; i < len(ms); i++ {
		for j := i; j > 0 && ms[j].ID < ms[j-1].ID; j-- {
			ms[j], ms[j-1] = ms[j-1], ms[j]
		}
	}
}

func newLease() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// AckOutbox marks m delivered (session.OutboxStore).
//
// Errors: session.ErrUnavailable after Close, a session.CodeInternal error
// on storage failure.
func (s *Store) AckOutbox(ctx context.Context, m session.OutboxMessage, now time.Time) error {
	return s.answerOutbox(ctx, `UPDATE webhook_outbox SET state = 1, done_at = ?1, lease = NULL, lease_until = NULL, last_error = NULL WHERE id = ?2 AND lease = ?3`,
		now.UnixNano(), m.ID, m.Lease)
}

// RetryOutbox counts a failed attempt of m and makes it due at next
// (session.OutboxStore).
//
// Errors: as AckOutbox.
func (s *Store) RetryOutbox(ctx context.Context, m session.OutboxMessage, next time.Time, lastErr string) error {
	return s.answerOutbox(ctx, `UPDATE webhook_outbox SET attempts = attempts + 1, next_at = ?1, lease = NULL, lease_until = NULL, last_error = ?2 WHERE id = ?3 AND lease = ?4`,
		next.UnixNano(), cutError(lastErr), m.ID, m.Lease)
}

// DeadOutbox dead-letters m (session.OutboxStore).
//
// Errors: as AckOutbox.
func (s *Store) DeadOutbox(ctx context.Context, m session.OutboxMessage, lastErr string) error {
	return s.answerOutbox(ctx, `UPDATE webhook_outbox SET state = 2, attempts = attempts + 1, lease = NULL, lease_until = NULL, last_error = ?1 WHERE id = ?2 AND lease = ?3`,
		cutError(lastErr), m.ID, m.Lease)
}

// ReleaseOutbox gives m back unattempted (session.OutboxStore).
//
// Errors: as AckOutbox.
func (s *Store) ReleaseOutbox(ctx context.Context, m session.OutboxMessage) error {
	return s.answerOutbox(ctx, `UPDATE webhook_outbox SET lease = NULL, lease_until = NULL WHERE id = ?1 AND lease = ?2 AND state = 0`, m.ID, m.Lease)
}

func (s *Store) answerOutbox(ctx context.Context, q string, args ...any) error {
	return s.runExt(ctx, session.GateConfig{}, func(*batch, *op) error {
		if _, err := s.wc.direct(q, args...); err != nil {
			return fmt.Errorf("outbox: %w", err)
		}
		return nil
	})
}

// cutError bounds the error text kept with a row.
func cutError(s string) string {
	if len(s) > 512 {
		return s[:512]
	}
	return s
}

// OutboxCounts counts the outbox rows by state, from the read pool
// (session.OutboxStore).
//
// Errors: session.ErrUnavailable after Close, a session.CodeInternal error
// on storage failure.
func (s *Store) OutboxCounts(ctx context.Context) (session.OutboxCounts, error) {
	var c session.OutboxCounts
	if s.closed.Load() {
		return c, session.ErrUnavailable
	}
	rows, err := s.readDB.QueryContext(ctx, `SELECT state, count(*) FROM webhook_outbox GROUP BY state`)
	if err != nil {
		return c, s.readErr("outbox counts", err)
	}
	defer rows.Close()
	for rows.Next() {
		var state, n int64
		if err := rows.Scan(&state, &n); err != nil {
			return c, s.readErr("outbox counts", err)
		}
		switch state {
		case session.OutboxPending:
			c.Pending = n
		case session.OutboxDelivered:
			c.Delivered = n
		case session.OutboxDead:
			c.Dead = n
		}
	}
	if err := rows.Err(); err != nil {
		return c, s.readErr("outbox counts", err)
	}
	return c, nil
}

// SetNotify runs session.DecideNotify for id in gate cfg.Name at now
// (session.NotifyStore).
//
// Errors: session.ErrInvalidArgument for an invalid gate config or id,
// session.ErrNotFound, session.ErrUnavailable after Close, a
// session.CodeInternal error on storage failure.
func (s *Store) SetNotify(ctx context.Context, cfg session.GateConfig, id string, notify bool, now time.Time) (session.Session, error) {
	if err := cfg.Validate(); err != nil {
		return session.Session{}, err
	}
	if !session.ValidID(id) {
		return session.Session{}, session.Errorf(session.CodeInvalidArgument, "sqlite: notify: invalid session id")
	}
	var out session.Session
	err := s.runExt(ctx, cfg, func(b *batch, o *op) error {
		o.id = id
		e, existing, sl, err := s.existing(b, o)
		if err != nil {
			return err
		}
		dec := session.DecideNotify(existing, notify, normTime(now))
		if err := s.write(e, &dec, sl); err != nil {
			return err
		}
		if existing.Notify && !notify {
			// The row may now be stale in the cutoff's second below an
			// update's in-place cursor (updateStep.inPlace).
			s.wc.cursorResets++
		}
		out = dec.Session
		return nil
	})
	return out, err
}

func boolValue(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
