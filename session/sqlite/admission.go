package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"time"

	"github.com/anteroomhq/anteroom/session"
)

// Admission tokens (session.AdmissionStore): the admissions table of
// migrations/0004 and the keyring in meta. Writes go through the writer
// (opFunc), so a redeem is serialised with every other write: of
// concurrent redeems of one jti exactly one finds it unredeemed.

var _ session.AdmissionStore = (*Store)(nil)

// keyringKey names the meta row of the admission keyring.
const keyringKey = "admission_keyring"

var (
	sqlAdmissionBySession = `SELECT jti, issued_at, expires_at, redeemed_at FROM admissions WHERE gate = ? AND session = ? AND position = ?`
	sqlAdmissionByID      = `SELECT gate, session, position, issued_at, expires_at, redeemed_at FROM admissions WHERE jti = ?`
	sqlInsertAdmission    = `INSERT INTO admissions (jti, gate, session, position, issued_at, expires_at) VALUES (?, ?, ?, ?, ?, ?)`
	sqlRedeemAdmission    = `UPDATE admissions SET redeemed_at = ? WHERE jti = ? AND redeemed_at IS NULL`
	// The prune deletes, in chunks, the admissions of a gate expired before
	// ?2 whose session incarnation (gate, position, id) is gone: while the
	// session lives its admission stays, so it is never issued twice. A row
	// below a purge mark is gone already (liveStored), though the cleaner
	// has not deleted it yet; positions are never reused.
	sqlPruneAdmissions = `DELETE FROM admissions WHERE jti IN (SELECT a.jti FROM admissions a WHERE a.gate = ?1 AND a.expires_at < ?2 AND NOT EXISTS (SELECT 1 FROM sessions s WHERE s.gate = a.gate AND s.position = a.position AND s.id = a.session AND ` + liveStored + `) LIMIT ?3)`
)

// adhoc prepares q on the writer connection for one use; the caller closes
// it. The admission statements are few and rare next to joins, so they are
// not kept prepared.
func (w *wconn) adhoc(q string) (*stmt, error) {
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
		_ = st.Close()
		return nil, errors.New("driver statement cannot execute with a context")
	}
	if s.q, ok = st.(driver.StmtQueryContext); !ok {
		_ = st.Close()
		return nil, errors.New("driver statement cannot query with a context")
	}
	return s, nil
}

// adhocExec runs q once on the writer connection.
func (w *wconn) adhocExec(q string, args ...any) (int64, error) {
	st, err := w.adhoc(q)
	if err != nil {
		return 0, err
	}
	defer st.st.Close()
	return w.exec(st, args...)
}

// adhocRow runs q once and reads its first row into dest.
func (w *wconn) adhocRow(q string, dest []driver.Value, args ...any) (bool, error) {
	st, err := w.adhoc(q)
	if err != nil {
		return false, err
	}
	defer st.st.Close()
	return w.queryRow(st, dest, args...)
}

// runAdmission runs fn on the writer, in its transaction.
func (s *Store) runAdmission(ctx context.Context, fn func() error) error {
	o := newOp(ctx, opFunc)
	o.fn = func(*batch) error { return fn() }
	err := s.do(o)
	putOp(o)
	return err
}

// IssueAdmission returns the admission of (a.Gate, a.Session, a.Position),
// storing a when there is none (session.AdmissionStore). It reads the read
// pool first and writes only for a new admission.
//
// Errors: session.ErrInvalidArgument for a malformed record,
// session.ErrUnavailable after Close, the context's error, a
// session.CodeInternal error on storage failure.
func (s *Store) IssueAdmission(ctx context.Context, a session.Admission) (session.Admission, error) {
	if err := session.ValidAdmission(a); err != nil {
		return session.Admission{}, err
	}
	if s.closed.Load() {
		return session.Admission{}, session.ErrUnavailable
	}
	var jti string
	var issued, expires int64
	var redeemed sql.NullInt64
	err := s.readDB.QueryRowContext(ctx, sqlAdmissionBySession, a.Gate, a.Session, a.Position).Scan(&jti, &issued, &expires, &redeemed)
	switch {
	case err == nil:
		return admissionOf(jti, a.Gate, a.Session, a.Position, issued, expires, redeemed), nil
	case !errors.Is(err, sql.ErrNoRows):
		return session.Admission{}, s.readErr("issue admission", err)
	}
	var out session.Admission
	err = s.runAdmission(ctx, func() error {
		var dest [4]driver.Value
		found, err := s.wc.adhocRow(sqlAdmissionBySession, dest[:], a.Gate, a.Session, a.Position)
		if err != nil {
			return fmt.Errorf("read admission: %w", err)
		}
		if found {
			out = admissionOf(asString(dest[0]), a.Gate, a.Session, a.Position, asInt(dest[1]), asInt(dest[2]), asNullInt(dest[3]))
			return nil
		}
		issued, expires := normTime(a.IssuedAt).UnixNano(), normTime(a.Expires).UnixNano()
		if _, err := s.wc.adhocExec(sqlInsertAdmission, a.ID, a.Gate, a.Session, a.Position, issued, expires); err != nil {
			return fmt.Errorf("insert admission: %w", err)
		}
		out = admissionOf(a.ID, a.Gate, a.Session, a.Position, issued, expires, sql.NullInt64{})
		return nil
	})
	return out, err
}

// RedeemAdmission marks the admission with jti id redeemed at now
// (session.AdmissionStore); it runs on the writer, so of concurrent
// redeems exactly one succeeds.
//
// Errors: session.ErrAdmissionNotFound (never issued, pruned, or expired
// more than session.AdmissionLeeway before now), session.ErrAlreadyRedeemed
// (with the record), session.ErrUnavailable after Close, the context's
// error, a session.CodeInternal error on storage failure.
func (s *Store) RedeemAdmission(ctx context.Context, id string, now time.Time) (session.Admission, error) {
	if !session.ValidID(id) {
		return session.Admission{}, session.Errorf(session.CodeAdmissionNotFound, "sqlite: redeem: no admission %q", id)
	}
	var out session.Admission
	err := s.runAdmission(ctx, func() error {
		var dest [6]driver.Value
		found, err := s.wc.adhocRow(sqlAdmissionByID, dest[:], id)
		if err != nil {
			return fmt.Errorf("read admission: %w", err)
		}
		if !found {
			return session.Errorf(session.CodeAdmissionNotFound, "sqlite: redeem: no admission %q", id)
		}
		out = admissionOf(id, asString(dest[0]), asString(dest[1]), asInt(dest[2]), asInt(dest[3]), asInt(dest[4]), asNullInt(dest[5]))
		if !now.Before(out.Expires.Add(session.AdmissionLeeway)) {
			return session.Errorf(session.CodeAdmissionNotFound, "sqlite: redeem: admission %q expired", id)
		}
		if !out.Redeemed.IsZero() {
			return session.Errorf(session.CodeAlreadyRedeemed, "sqlite: redeem: admission %q already redeemed", id)
		}
		at := normTime(now)
		n, err := s.wc.adhocExec(sqlRedeemAdmission, at.UnixNano(), id)
		if err != nil {
			return fmt.Errorf("redeem admission: %w", err)
		}
		if n != 1 {
			return fmt.Errorf("redeem admission %q: %d rows changed", id, n)
		}
		out.Redeemed = at
		return nil
	})
	return out, err
}

// AdmissionKeyring runs update on the stored keyring in the writer's
// transaction and returns what is stored afterwards
// (session.AdmissionStore).
//
// Errors: update's (session.CodeInternal), session.ErrUnavailable after
// Close, the context's error, a session.CodeInternal error on storage
// failure.
func (s *Store) AdmissionKeyring(ctx context.Context, update func(old []byte) ([]byte, bool, error)) ([]byte, error) {
	if update == nil {
		return nil, session.Errorf(session.CodeInvalidArgument, "sqlite: admission keyring: nil update")
	}
	var out []byte
	err := s.runAdmission(ctx, func() error {
		var dest [1]driver.Value
		found, err := s.wc.queryRow(s.wc.selectMeta, dest[:], keyringKey)
		if err != nil {
			return fmt.Errorf("read admission keyring: %w", err)
		}
		var old []byte
		if found {
			old = append([]byte(nil), asBytes(dest[0])...)
		}
		next, changed, err := update(old)
		if err != nil {
			return session.Errorf(session.CodeInternal, "sqlite: admission keyring: %w", err)
		}
		if changed {
			if _, err := s.wc.exec(s.wc.insertMeta, keyringKey, next); err != nil {
				return fmt.Errorf("store admission keyring: %w", err)
			}
			old = next
		}
		out = append([]byte(nil), old...)
		return nil
	})
	return out, err
}

// pruneAdmissions deletes gate's admissions expired more than
// session.AdmissionLeeway before now whose session is gone, chunk rows per
// transaction, until none is left. Called by Update; a failure is logged,
// not the update's.
func (s *Store) pruneAdmissions(ctx context.Context, gate string, now time.Time, chunk int) {
	cutoff := normTime(now).Add(-session.AdmissionLeeway).UnixNano()
	for {
		var n int64
		err := s.runAdmission(ctx, func() error {
			var err error
			n, err = s.wc.adhocExec(sqlPruneAdmissions, gate, cutoff, int64(chunk))
			if err != nil {
				return fmt.Errorf("prune admissions: %w", err)
			}
			return nil
		})
		if err != nil {
			s.log.Warn("anteroom: pruning admissions failed", "gate", gate, "err", err)
			return
		}
		if n < int64(chunk) {
			return
		}
	}
}

func admissionOf(jti, gate, sess string, pos, issued, expires int64, redeemed sql.NullInt64) session.Admission {
	a := session.Admission{ID: jti, Gate: gate, Session: sess, Position: pos, IssuedAt: fromNanos(issued), Expires: fromNanos(expires)}
	if redeemed.Valid {
		a.Redeemed = fromNanos(redeemed.Int64)
	}
	return a
}
