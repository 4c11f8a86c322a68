package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/anteroomhq/anteroom/session"
)

// Priority codes and the priority lane (migrations/0009): the SQL, the
// writer's steps and the Store's methods of session.CodeStore.

var _ session.CodeStore = (*Store)(nil)

const (
	sqlPriorityWaiters = `SELECT ` + sqlCols + ` FROM anteroom_sessions WHERE gate = $1 AND status = 0 AND lane = 1 ORDER BY position LIMIT $2`
	sqlPriorityPos     = `SELECT position FROM anteroom_sessions WHERE gate = $1 AND status = 0 AND lane = 1 ORDER BY position`
	sqlSelectCode      = `SELECT hint, label, max_uses, used, expires_at, created_at FROM anteroom_priority_codes WHERE gate = $1 AND id = $2 FOR UPDATE`
	sqlUseCode         = `UPDATE anteroom_priority_codes SET used = used + 1 WHERE gate = $1 AND id = $2 AND used < max_uses`
	sqlInsertCode      = `INSERT INTO anteroom_priority_codes (gate, id, hint, label, max_uses, used, expires_at, created_at)
		SELECT $1, $2, $3, $4, $5, 0, $6, $7 WHERE (SELECT count(*) FROM anteroom_priority_codes WHERE gate = $1) < $8
		ON CONFLICT (gate, id) DO NOTHING`
	sqlCodeExists = `SELECT EXISTS (SELECT 1 FROM anteroom_priority_codes WHERE gate = $1 AND id = $2)`
	sqlListCodes  = `SELECT id, hint, label, max_uses, used, expires_at, created_at FROM anteroom_priority_codes WHERE gate = $1 ORDER BY created_at DESC, id`
	sqlDeleteCode = `DELETE FROM anteroom_priority_codes WHERE gate = $1 AND id = $2`
)

// codeOp is the code's answer of a join that gave one.
type codeOp struct {
	codeErr error
}

// applyCode runs session.DecideCode for a join's outcome out under the
// gate's row lock: it reads the code's row, returns out in the lane decided
// and writes the code's use when one is decided, in the join's transaction.
func (s *Store) applyCode(ctx context.Context, b *batch, g *gateTx, o *op, out session.Outcome) (session.Outcome, error) {
	id := session.CodeID(o.code)
	var c *session.PriorityCode
	var hint, label string
	var maxUses, used, exp, created int64
	err := b.tx.QueryRow(ctx, sqlSelectCode, g.name, id).Scan(&hint, &label, &maxUses, &used, &exp, &created)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return out, fmt.Errorf("read code: %w", err)
	default:
		c = &session.PriorityCode{Gate: g.name, ID: id, Hint: hint, Label: label, MaxUses: maxUses, Used: used,
			ExpiresAt: fromNanos(exp), CreatedAt: fromNanos(created)}
	}
	d := session.DecideCode(c, out, o.now)
	if o.codes != nil {
		o.codes.codeErr = d.Err
	}
	if d.Use {
		tag, err := b.tx.Exec(ctx, sqlUseCode, g.name, id)
		if err != nil {
			return out, fmt.Errorf("use code: %w", err)
		}
		if tag.RowsAffected() != 1 {
			return out, fmt.Errorf("use code: %d rows changed, want 1", tag.RowsAffected())
		}
	}
	return session.ApplyCode(out, d), nil
}

// promotePriority promotes up to n waiters of the priority lane in position
// order (the database's merged with the transaction's copies, which
// override them) and returns how many. The lower bound of the first waiter
// (Store.lb) is left alone: normal waiters below them still wait.
func (s *Store) promotePriority(ctx context.Context, b *batch, g *gateTx, cfg session.GateConfig, n int64, now time.Time, below int64) (int64, error) {
	limit := n + int64(len(b.rows))
	rows, err := b.tx.Query(ctx, sqlPriorityWaiters, g.name, limit)
	if err != nil {
		return 0, fmt.Errorf("read priority waiters: %w", err)
	}
	fromDB, err := scanSessions(rows, nil)
	if err != nil {
		return 0, fmt.Errorf("read priority waiters: %w", err)
	}
	cands := b.waiters(g, fromDB, limit, session.LanePriority)
	var done int64
	for _, e := range cands {
		if done == n || !session.Promotable(e.s, below) {
			break
		}
		out := session.Promote(cfg, e.s, now)
		b.write(g, e, out)
		b.event(g, session.EventPromoted, out.Session)
		done++
	}
	return done, nil
}

// priorityPositions reads the positions of the gate's priority lane,
// ascending; nil when empty.
func priorityPositions(ctx context.Context, q pgx.Tx, gate string) ([]int64, error) {
	rows, err := q.Query(ctx, sqlPriorityPos, gate)
	if err != nil {
		return nil, fmt.Errorf("read priority positions: %w", err)
	}
	defer rows.Close()
	var out []int64
	for rows.Next() {
		var p int64
		if err := rows.Scan(&p); err != nil {
			return nil, fmt.Errorf("read priority positions: %w", err)
		}
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read priority positions: %w", err)
	}
	return out, nil
}

// JoinWithCode is Join where the join gives a priority code: see
// session.CodeStore. codeErr is session.ErrCodeUnknown or
// session.ErrCodeUsed (wrapped) when the code gave no priority; the join
// happened when err is nil.
//
// Errors: those of Join, and session.ErrInvalidArgument for a malformed
// code.
func (s *Store) JoinWithCode(ctx context.Context, cfg session.GateConfig, id, code string, now time.Time) (session.Session, error, error) {
	if err := cfg.Validate(); err != nil {
		return session.Session{}, nil, err
	}
	if !session.ValidID(id) {
		return session.Session{}, nil, session.Errorf(session.CodeInvalidArgument, "postgres: join: invalid session id %q", id)
	}
	if !session.ValidCode(code) {
		return session.Session{}, nil, session.Errorf(session.CodeInvalidArgument, "postgres: join: malformed code")
	}
	co := &codeOp{}
	o := &op{kind: opJoin, ctx: ctx, cfg: cfg, id: id, now: normTime(now), code: code, codes: co}
	if err := s.do(o); err != nil {
		return session.Session{}, nil, err
	}
	return o.sess, co.codeErr, nil
}

// CreateCode stores c (see session.CodeStore).
//
// Errors: session.ErrInvalidArgument for a malformed code row or a gate
// holding session.MaxCodesPerGate codes, session.ErrCodeExists,
// session.ErrUnavailable after Close or when the database cannot be
// reached, a session.CodeInternal error on storage failure.
func (s *Store) CreateCode(ctx context.Context, c session.PriorityCode) error {
	if !session.ValidGateName(c.Gate) || !session.ValidCodeID(c.ID) || c.MaxUses < 1 || c.MaxUses > session.MaxCodeUses || c.Used != 0 {
		return session.Errorf(session.CodeInvalidArgument, "postgres: create code: malformed code row")
	}
	if s.closed.Load() {
		return session.ErrUnavailable
	}
	tag, err := s.pool.Exec(ctx, sqlInsertCode, c.Gate, c.ID, c.Hint, c.Label, c.MaxUses, c.ExpiresAt.UnixNano(), c.CreatedAt.UnixNano(), session.MaxCodesPerGate)
	if err != nil {
		return storageErr("create code", err)
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	var exists bool
	if err := s.pool.QueryRow(ctx, sqlCodeExists, c.Gate, c.ID).Scan(&exists); err != nil {
		return storageErr("create code", err)
	}
	if exists {
		return session.Errorf(session.CodeCodeExists, "postgres: gate %q has that code already", c.Gate)
	}
	return session.Errorf(session.CodeInvalidArgument, "postgres: gate %q holds %d codes already; delete some first", c.Gate, session.MaxCodesPerGate)
}

// ListCodes returns the gate's codes, newest first.
//
// Errors: session.ErrUnavailable after Close or when the database cannot be
// reached, a session.CodeInternal error on storage failure.
func (s *Store) ListCodes(ctx context.Context, gate string) ([]session.PriorityCode, error) {
	if s.closed.Load() {
		return nil, session.ErrUnavailable
	}
	rows, err := s.pool.Query(ctx, sqlListCodes, gate)
	if err != nil {
		return nil, storageErr("list codes", err)
	}
	defer rows.Close()
	var out []session.PriorityCode
	for rows.Next() {
		c := session.PriorityCode{Gate: gate}
		var exp, created int64
		if err := rows.Scan(&c.ID, &c.Hint, &c.Label, &c.MaxUses, &c.Used, &exp, &created); err != nil {
			return nil, storageErr("list codes", err)
		}
		c.ExpiresAt, c.CreatedAt = fromNanos(exp), fromNanos(created)
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, storageErr("list codes", err)
	}
	return out, nil
}

// DeleteCode deletes the gate's code with that id.
//
// Errors: session.ErrCodeUnknown when absent, session.ErrUnavailable after
// Close or when the database cannot be reached, a session.CodeInternal
// error on storage failure.
func (s *Store) DeleteCode(ctx context.Context, gate, id string) error {
	if s.closed.Load() {
		return session.ErrUnavailable
	}
	tag, err := s.pool.Exec(ctx, sqlDeleteCode, gate, id)
	if err != nil {
		return storageErr("delete code", err)
	}
	if tag.RowsAffected() == 0 {
		return session.Errorf(session.CodeCodeUnknown, "postgres: no code %s in gate %q", id, gate)
	}
	return nil
}
