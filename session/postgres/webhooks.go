package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/anteroomhq/anteroom/session"
)

// The webhook outbox (migrations/0006) and notify sessions. Outbox rows are
// written by queueOutbox inside the writer's transaction, from its events,
// so they commit with the change they report. Any instance's delivery worker
// leases due rows with SELECT ... FOR UPDATE SKIP LOCKED and a lease, so
// exactly one instance delivers a given row at a time.

var (
	_ session.OutboxStore = (*Store)(nil)
	_ session.NotifyStore = (*Store)(nil)
)

// outboxKeep is how long delivered rows are kept (for Dedup).
const outboxKeep = 24 * time.Hour

const (
	sqlInsertWebhooks = `INSERT INTO anteroom_webhook_outbox (target, event, gate, dedup, payload, created_at, next_at)
		SELECT t, e, g, d, p, c, 0 FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bytea[], $6::bigint[]) AS u(t, e, g, d, p, c)
		ON CONFLICT (target, dedup) WHERE dedup IS NOT NULL DO NOTHING`
	sqlClaimWebhooks = `UPDATE anteroom_webhook_outbox SET lease = $1, lease_until = $2
		WHERE id IN (SELECT id FROM anteroom_webhook_outbox
			WHERE state = 0 AND next_at <= $3 AND (lease_until IS NULL OR lease_until <= $3)
				AND (target = $5 OR $5 = '' AND target <> ALL(coalesce($6::text[], '{}')))
			ORDER BY id LIMIT $4 FOR UPDATE SKIP LOCKED)
		RETURNING id, target, event, gate, coalesce(dedup, ''), payload, created_at, attempts`
	sqlPruneWebhooks = `DELETE FROM anteroom_webhook_outbox WHERE id IN (
		SELECT id FROM anteroom_webhook_outbox WHERE state = 1 AND done_at < $1 LIMIT 256 FOR UPDATE SKIP LOCKED)`
)

// SetOutbox installs the routing of commit events to webhook targets
// (session.OutboxStore); nil writes no row.
func (s *Store) SetOutbox(r *session.OutboxRouting) { s.outbox.Store(r) }

func insertWebhooks(ctx context.Context, tx pgx.Tx, msgs []session.OutboxMessage) (int64, error) {
	if len(msgs) == 0 {
		return 0, nil
	}
	tag, err := tx.Exec(ctx, sqlInsertWebhooks, webhookArgs(msgs)...)
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

// queueOutbox queues the INSERT of the webhook outbox rows of the
// transaction's events in pb (the batch that commits it).
func (s *Store) queueOutbox(pb *pgx.Batch, events []session.Event) {
	r := s.outbox.Load()
	if r.Empty() || len(events) == 0 {
		return
	}
	if msgs := r.Messages(events, time.Now()); len(msgs) > 0 {
		pb.Queue(sqlInsertWebhooks, webhookArgs(msgs)...)
	}
}

// webhookArgs are the arguments of sqlInsertWebhooks for msgs.
func webhookArgs(msgs []session.OutboxMessage) []any {
	n := len(msgs)
	targets, events, gates := make([]string, n), make([]string, n), make([]string, n)
	dedups, payloads, created := make([]*string, n), make([][]byte, n), make([]int64, n)
	for i, m := range msgs {
		targets[i], events[i], gates[i] = m.Target, m.Event, m.Gate
		if m.Dedup != "" {
			d := m.Dedup
			dedups[i] = &d
		}
		payloads[i], created[i] = m.Payload, m.CreatedAt.UnixNano()
	}
	return []any{targets, events, gates, dedups, payloads, created}
}

// EnqueueOutbox writes the rows of a named webhook event for every target
// the routing names, in a transaction of its own (session.OutboxStore).
//
// Errors: session.ErrInvalidArgument for an invalid gate name,
// session.ErrUnavailable after Close or when the database cannot be
// reached, a session.CodeInternal error on storage failure.
func (s *Store) EnqueueOutbox(ctx context.Context, event, gate, dedup string, payload []byte, now time.Time) (int, error) {
	if !session.ValidGateName(gate) {
		return 0, session.Errorf(session.CodeInvalidArgument, "postgres: enqueue webhook: gate name %q", gate)
	}
	if s.closed.Load() {
		return 0, session.ErrUnavailable
	}
	msgs := s.outbox.Load().Custom(event, gate, dedup, payload, now)
	if len(msgs) == 0 {
		return 0, nil
	}
	var n int64
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) (err error) {
		n, err = insertWebhooks(ctx, tx, msgs)
		return err
	})
	if err != nil {
		return 0, storageErr("enqueue webhook", err)
	}
	return int(n), nil
}

// ClaimOutbox leases up to n due pending rows of the targets which selects
// for lease (session.OutboxStore) and forgets delivered rows older than a
// day. Rows locked by another
// instance's claim are skipped, not waited for.
//
// Errors: session.ErrInvalidArgument for n < 1 or lease <= 0,
// session.ErrUnavailable after Close or when the database cannot be
// reached, a session.CodeInternal error on storage failure.
func (s *Store) ClaimOutbox(ctx context.Context, which session.OutboxTargets, now time.Time, lease time.Duration, n int) ([]session.OutboxMessage, error) {
	if n < 1 || lease <= 0 {
		return nil, session.Errorf(session.CodeInvalidArgument, "postgres: claim outbox: n %d, lease %v", n, lease)
	}
	if s.closed.Load() {
		return nil, session.ErrUnavailable
	}
	var b [12]byte
	_, _ = rand.Read(b[:])
	token := hex.EncodeToString(b[:])
	var out []session.OutboxMessage
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		out = out[:0]
		if _, err := tx.Exec(ctx, sqlPruneWebhooks, now.Add(-outboxKeep).UnixNano()); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, sqlClaimWebhooks, token, now.Add(lease).UnixNano(), now.UnixNano(), n, which.Only, append([]string{}, which.Not...))
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var m session.OutboxMessage
			var created int64
			if err := rows.Scan(&m.ID, &m.Target, &m.Event, &m.Gate, &m.Dedup, &m.Payload, &created, &m.Attempts); err != nil {
				return err
			}
			m.CreatedAt, m.Lease = fromNanos(created), token
			out = append(out, m)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, storageErr("claim webhooks", err)
	}
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j].ID < out[j-1].ID; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out, nil
}

// AckOutbox marks m delivered (session.OutboxStore).
//
// Errors: session.ErrUnavailable after Close or when the database cannot be
// reached, a session.CodeInternal error on storage failure.
func (s *Store) AckOutbox(ctx context.Context, m session.OutboxMessage, now time.Time) error {
	return s.answerWebhook(ctx, `UPDATE anteroom_webhook_outbox SET state = 1, done_at = $1, lease = NULL, lease_until = NULL, last_error = NULL WHERE id = $2 AND lease = $3`,
		now.UnixNano(), m.ID, m.Lease)
}

// RetryOutbox counts a failed attempt of m and makes it due at next
// (session.OutboxStore).
//
// Errors: as AckOutbox.
func (s *Store) RetryOutbox(ctx context.Context, m session.OutboxMessage, next time.Time, lastErr string) error {
	return s.answerWebhook(ctx, `UPDATE anteroom_webhook_outbox SET attempts = attempts + 1, next_at = $1, lease = NULL, lease_until = NULL, last_error = $2 WHERE id = $3 AND lease = $4`,
		next.UnixNano(), cutError(lastErr), m.ID, m.Lease)
}

// DeadOutbox dead-letters m (session.OutboxStore).
//
// Errors: as AckOutbox.
func (s *Store) DeadOutbox(ctx context.Context, m session.OutboxMessage, lastErr string) error {
	return s.answerWebhook(ctx, `UPDATE anteroom_webhook_outbox SET state = 2, attempts = attempts + 1, lease = NULL, lease_until = NULL, last_error = $1 WHERE id = $2 AND lease = $3`,
		cutError(lastErr), m.ID, m.Lease)
}

// ReleaseOutbox gives m back unattempted (session.OutboxStore).
//
// Errors: as AckOutbox.
func (s *Store) ReleaseOutbox(ctx context.Context, m session.OutboxMessage) error {
	return s.answerWebhook(ctx, `UPDATE anteroom_webhook_outbox SET lease = NULL, lease_until = NULL WHERE id = $1 AND lease = $2 AND state = 0`, m.ID, m.Lease)
}

func (s *Store) answerWebhook(ctx context.Context, q string, args ...any) error {
	if s.closed.Load() {
		return session.ErrUnavailable
	}
	if _, err := s.pool.Exec(ctx, q, args...); err != nil {
		return storageErr("webhook outbox", err)
	}
	return nil
}

func cutError(s string) string {
	if len(s) > 512 {
		return s[:512]
	}
	return s
}

// OutboxCounts counts the outbox rows by state (session.OutboxStore).
//
// Errors: as AckOutbox.
func (s *Store) OutboxCounts(ctx context.Context) (session.OutboxCounts, error) {
	var c session.OutboxCounts
	if s.closed.Load() {
		return c, session.ErrUnavailable
	}
	rows, err := s.pool.Query(ctx, `SELECT state, count(*) FROM anteroom_webhook_outbox GROUP BY state`)
	if err != nil {
		return c, storageErr("webhook outbox counts", err)
	}
	defer rows.Close()
	for rows.Next() {
		var state int16
		var n int64
		if err := rows.Scan(&state, &n); err != nil {
			return c, storageErr("webhook outbox counts", err)
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
		return c, storageErr("webhook outbox counts", err)
	}
	return c, nil
}

// SetNotify runs session.DecideNotify for id in gate cfg.Name at now, under
// the gate's lock (session.NotifyStore).
//
// Errors: session.ErrInvalidArgument for an invalid gate config or id,
// session.ErrNotFound, session.ErrUnavailable after Close or when the
// database cannot be reached, a session.CodeInternal error on storage
// failure.
func (s *Store) SetNotify(ctx context.Context, cfg session.GateConfig, id string, notify bool, now time.Time) (session.Session, error) {
	if err := cfg.Validate(); err != nil {
		return session.Session{}, err
	}
	if !session.ValidID(id) {
		return session.Session{}, session.Errorf(session.CodeInvalidArgument, "postgres: notify: invalid session id")
	}
	o := &op{kind: opNotify, ctx: ctx, cfg: cfg, id: id, now: normTime(now), notify: notify}
	if err := s.do(o); err != nil {
		return session.Session{}, err
	}
	return o.sess, nil
}

func (s *Store) applyNotify(ctx context.Context, b *batch, o *op) error {
	g := b.gates[o.cfg.Name]
	e, err := s.find(ctx, b, g.name, o.id)
	if err != nil {
		return err
	}
	if !e.live {
		return session.NotFoundError(g.name, o.id)
	}
	out := session.DecideNotify(&e.s, o.notify, o.now)
	b.write(g, e, out)
	o.sess = out.Session
	return nil
}

// claimEvent records an EventRefreshed, Claimed when it claimed a
// promoted slot.
func (b *batch) claimEvent(g *gateTx, s session.Session, claimed bool) {
	ev := session.Event{Kind: session.EventRefreshed, Session: s, Claimed: claimed}
	b.events = append(b.events, ev)
	g.events = append(g.events, ev)
}
