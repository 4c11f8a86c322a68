package sqlite

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/anteroomhq/anteroom/session"
)

// Priority codes and the priority lane (migrations/0008): the SQL, the
// writer's steps and the Store's methods of session.CodeStore.

var _ session.CodeStore = (*Store)(nil)

var (
	// INDEXED BY: without it SQLite walks the primary key (gate, position)
	// to skip the sort, stepping over the whole normal lane at each
	// promotion (5 s of an update at 1M sessions).
	// Both leave out the waiters the update purged (sqlBounds).
	sqlFirstPriority = `SELECT position, id, status, last_active, created_at, claim_deadline, notify, lane FROM sessions INDEXED BY sessions_priority WHERE gate = ?1 AND status = 0 AND lane = 1 AND ` + liveWaiter3 + ` ORDER BY position LIMIT ?2`
	sqlPriorityPos   = `SELECT position FROM sessions INDEXED BY sessions_priority WHERE gate = ?1 AND status = 0 AND lane = 1 AND ` + liveWaiter2 + ` ORDER BY position`
	sqlSelectCode    = `SELECT hint, label, max_uses, used, expires_at, created_at FROM priority_codes WHERE gate = ? AND id = ?`
	sqlUseCode       = `UPDATE priority_codes SET used = used + 1 WHERE gate = ? AND id = ? AND used < max_uses`
	sqlInsertCode    = `INSERT INTO priority_codes (gate, id, hint, label, max_uses, used, expires_at, created_at) VALUES (?, ?, ?, ?, ?, 0, ?, ?)`
	sqlCountCodes    = `SELECT count(*) FROM priority_codes WHERE gate = ?`
	sqlListCodes     = `SELECT id, hint, label, max_uses, used, expires_at, created_at FROM priority_codes WHERE gate = ? ORDER BY created_at DESC, id`
	sqlDeleteCode    = `DELETE FROM priority_codes WHERE gate = ? AND id = ?`
)

// priorityStmts are the writer's statements of this file, prepared with the
// others at Open.
type priorityStmts struct {
	firstPriority, priorityPos, selectCode, useCode *stmt
	insertCode, countCodes, listCodes, deleteCode   *stmt
}

func (w *wconn) preparePriority(ctx context.Context, pc driver.ConnPrepareContext) error {
	p := &w.prio
	for _, q := range []struct {
		dst **stmt
		sql string
	}{
		{&p.firstPriority, sqlFirstPriority}, {&p.priorityPos, sqlPriorityPos}, {&p.selectCode, sqlSelectCode},
		{&p.useCode, sqlUseCode}, {&p.insertCode, sqlInsertCode}, {&p.countCodes, sqlCountCodes},
		{&p.listCodes, sqlListCodes}, {&p.deleteCode, sqlDeleteCode},
	} {
		st, err := pc.PrepareContext(ctx, q.sql)
		if err != nil {
			return fmt.Errorf("prepare %q: %w", q.sql, err)
		}
		s := &stmt{st: st, writes: isWrite(q.sql)}
		var ok bool
		if s.ex, ok = st.(driver.StmtExecContext); !ok {
			return errors.New("driver statement cannot execute with a context")
		}
		if s.q, ok = st.(driver.StmtQueryContext); !ok {
			return errors.New("driver statement cannot query with a context")
		}
		*q.dst = s
	}
	return nil
}

func (w *wconn) closePriority() {
	p := &w.prio
	for _, s := range []*stmt{p.firstPriority, p.priorityPos, p.selectCode, p.useCode, p.insertCode, p.countCodes, p.listCodes, p.deleteCode} {
		if s != nil {
			_ = s.st.Close()
		}
	}
	w.prio = priorityStmts{}
}

// codeOp is the request and answer of an opCodes op, and the code's answer
// of a join that gave one.
type codeOp struct {
	what    codeWhat
	code    session.PriorityCode // create
	gate    string               // list, delete
	id      string               // delete
	list    []session.PriorityCode
	codeErr error // a join's code_unknown or code_used
}

type codeWhat uint8

const (
	codeCreate codeWhat = iota + 1
	codeList
	codeDelete
)

// readCode reads the gate's code with that id inside the transaction; nil
// when there is none.
func (s *Store) readCode(gate, id string) (*session.PriorityCode, error) {
	var dest [6]driver.Value
	found, err := s.wc.queryRow(s.wc.prio.selectCode, dest[:], gate, id)
	if err != nil || !found {
		return nil, err
	}
	return &session.PriorityCode{
		Gate: gate, ID: id, Hint: asString(dest[0]), Label: asString(dest[1]),
		MaxUses: asInt(dest[2]), Used: asInt(dest[3]),
		ExpiresAt: fromNanos(asInt(dest[4])), CreatedAt: fromNanos(asInt(dest[5])),
	}, nil
}

// applyCode runs session.DecideCode for a join's outcome out, inside the
// join's transaction: it returns out in the lane decided, and writes the
// code's use when one is decided. The code's error goes to o.codes.
func (s *Store) applyCode(e *gateEntry, o *op, out session.Outcome) (session.Outcome, error) {
	c, err := s.readCode(e.name, session.CodeID(o.code))
	if err != nil {
		return out, fmt.Errorf("read code: %w", err)
	}
	d := session.DecideCode(c, out, normTime(o.now))
	if o.codes != nil {
		o.codes.codeErr = d.Err
	}
	if d.Use {
		n, err := s.wc.exec(s.wc.prio.useCode, e.name, c.ID)
		if err != nil {
			return out, fmt.Errorf("use code: %w", err)
		}
		if n != 1 {
			return out, fmt.Errorf("use code: %d rows changed, want 1", n)
		}
	}
	return session.ApplyCode(out, d), nil
}

// promotePriority promotes up to n waiters of the priority lane in position
// order and returns how many. The gate's lower bound of its first waiter
// (gateEntry.lb) is left alone: normal waiters below them still wait.
func (s *Store) promotePriority(b *batch, e *gateEntry, cfg session.GateConfig, n int64, now time.Time, below int64) (int64, error) {
	rows, err := s.wc.query(s.wc.prio.firstPriority, e.name, n, e.mark.seen, e.mark.pos)
	if err != nil {
		return 0, fmt.Errorf("read priority waiters: %w", err)
	}
	waiters, err := s.wc.sessions(rows, e.name, nil)
	if err != nil {
		return 0, fmt.Errorf("read priority waiters: %w", err)
	}
	var promoted int64
	for _, w := range waiters {
		if !session.Promotable(w, below) {
			break
		}
		out := session.Promote(cfg, w, now)
		if err := s.write(e, &out, slot{}); err != nil {
			return 0, err
		}
		b.event(session.EventPromoted, out.Session)
		promoted++
	}
	_, e.pace = e.pace.Allow(cfg, promoted, now)
	return promoted, nil
}

// priorityPositions reads the positions of the gate's priority lane,
// ascending, that the purge mark m leaves live; nil when empty.
func (s *Store) priorityPositions(gate string, m purgeMark) ([]int64, error) {
	rows, err := s.wc.query(s.wc.prio.priorityPos, gate, m.seen, m.pos)
	if err != nil {
		return nil, fmt.Errorf("read priority positions: %w", err)
	}
	defer rows.Close()
	var out []int64
	var dest [1]driver.Value
	for {
		err := rows.Next(dest[:])
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read priority positions: %w", err)
		}
		out = append(out, asInt(dest[0]))
	}
}

func (s *Store) applyCodes(o *op) error {
	c := o.codes
	switch c.what {
	case codeCreate:
		var dest [1]driver.Value
		if _, err := s.wc.queryRow(s.wc.prio.countCodes, dest[:], c.code.Gate); err != nil {
			return fmt.Errorf("count codes: %w", err)
		}
		if asInt(dest[0]) >= session.MaxCodesPerGate {
			return session.Errorf(session.CodeInvalidArgument, "sqlite: gate %q holds %d codes already; delete some first", c.code.Gate, session.MaxCodesPerGate)
		}
		old, err := s.readCode(c.code.Gate, c.code.ID)
		if err != nil {
			return fmt.Errorf("read code: %w", err)
		}
		if old != nil {
			return session.Errorf(session.CodeCodeExists, "sqlite: gate %q has that code already", c.code.Gate)
		}
		if _, err := s.wc.exec(s.wc.prio.insertCode, c.code.Gate, c.code.ID, c.code.Hint, c.code.Label, c.code.MaxUses,
			c.code.ExpiresAt.UnixNano(), c.code.CreatedAt.UnixNano()); err != nil {
			return fmt.Errorf("insert code: %w", err)
		}
	case codeList:
		rows, err := s.wc.query(s.wc.prio.listCodes, c.gate)
		if err != nil {
			return fmt.Errorf("list codes: %w", err)
		}
		defer rows.Close()
		var dest [7]driver.Value
		for {
			err := rows.Next(dest[:])
			if errors.Is(err, io.EOF) {
				return nil
			}
			if err != nil {
				return fmt.Errorf("list codes: %w", err)
			}
			c.list = append(c.list, session.PriorityCode{
				Gate: c.gate, ID: asString(dest[0]), Hint: asString(dest[1]), Label: asString(dest[2]),
				MaxUses: asInt(dest[3]), Used: asInt(dest[4]),
				ExpiresAt: fromNanos(asInt(dest[5])), CreatedAt: fromNanos(asInt(dest[6])),
			})
		}
	case codeDelete:
		old, err := s.readCode(c.gate, c.id)
		if err != nil {
			return fmt.Errorf("read code: %w", err)
		}
		if old == nil {
			return session.Errorf(session.CodeCodeUnknown, "sqlite: no code %s in gate %q", c.id, c.gate)
		}
		if _, err := s.wc.exec(s.wc.prio.deleteCode, c.gate, c.id); err != nil {
			return fmt.Errorf("delete code: %w", err)
		}
	}
	return nil
}

// JoinWithCode is Join where the join gives a priority code: see
// session.CodeStore. codeErr is session.ErrCodeUnknown or
// session.ErrCodeUsed (wrapped) when the code gave no priority; the join
// happened when err is nil.
//
// Errors: those of Join.
func (s *Store) JoinWithCode(ctx context.Context, cfg session.GateConfig, id, code string, now time.Time) (session.Session, error, error) {
	if err := cfg.Validate(); err != nil {
		return session.Session{}, nil, err
	}
	if !session.ValidID(id) {
		return session.Session{}, nil, session.Errorf(session.CodeInvalidArgument, "sqlite: join: invalid session id %q", id)
	}
	if !session.ValidCode(code) {
		return session.Session{}, nil, session.Errorf(session.CodeInvalidArgument, "sqlite: join: malformed code")
	}
	o := newOp(ctx, opJoin)
	o.cfg, o.id, o.now, o.code = cfg, id, now, code
	co := &codeOp{}
	o.codes = co
	err := s.do(o)
	sess := o.sess
	putOp(o)
	if err != nil {
		return session.Session{}, nil, err
	}
	return sess, co.codeErr, nil
}

func (s *Store) codesOp(ctx context.Context, c *codeOp) error {
	o := newOp(ctx, opCodes)
	o.codes = c
	err := s.do(o)
	putOp(o)
	return err
}

// CreateCode stores c (see session.CodeStore).
//
// Errors: session.ErrInvalidArgument for a malformed code row or a gate
// holding session.MaxCodesPerGate codes, session.ErrCodeExists,
// session.ErrUnavailable after Close, a session.CodeInternal error on
// storage failure.
func (s *Store) CreateCode(ctx context.Context, c session.PriorityCode) error {
	if !session.ValidGateName(c.Gate) || !session.ValidCodeID(c.ID) || c.MaxUses < 1 || c.MaxUses > session.MaxCodeUses || c.Used != 0 {
		return session.Errorf(session.CodeInvalidArgument, "sqlite: create code: malformed code row")
	}
	return s.codesOp(ctx, &codeOp{what: codeCreate, code: c})
}

// ListCodes returns the gate's codes, newest first.
//
// Errors: session.ErrUnavailable after Close, a session.CodeInternal error
// on storage failure.
func (s *Store) ListCodes(ctx context.Context, gate string) ([]session.PriorityCode, error) {
	c := &codeOp{what: codeList, gate: gate}
	if err := s.codesOp(ctx, c); err != nil {
		return nil, err
	}
	return c.list, nil
}

// DeleteCode deletes the gate's code with that id.
//
// Errors: session.ErrCodeUnknown when absent, session.ErrUnavailable after
// Close, a session.CodeInternal error on storage failure.
func (s *Store) DeleteCode(ctx context.Context, gate, id string) error {
	return s.codesOp(ctx, &codeOp{what: codeDelete, gate: gate, id: id})
}
