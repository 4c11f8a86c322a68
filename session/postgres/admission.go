package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/anteroomhq/anteroom/session"
)

// Admission tokens (session.AdmissionStore): anteroom_admissions of
// migrations/0005 and the keyring in anteroom_meta. They need no gate row
// lock: a redeem is one UPDATE that re-checks redeemed_at under the row
// lock it takes, so of concurrent redeems on any instances exactly one
// changes the row.

var _ session.AdmissionStore = (*Store)(nil)

// keyringKey names the anteroom_meta row of the admission keyring.
const keyringKey = "admission_keyring"

const (
	sqlInsertAdmission = `INSERT INTO anteroom_admissions (jti, gate, session, position, issued_at, expires_at)
		VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING`
	sqlAdmissionBySession = `SELECT jti, issued_at, expires_at, redeemed_at FROM anteroom_admissions WHERE gate = $1 AND session = $2 AND position = $3`
	sqlAdmissionByID      = `SELECT gate, session, position, issued_at, expires_at, redeemed_at FROM anteroom_admissions WHERE jti = $1`
	// $3 is the expiry cutoff: now minus the leeway.
	sqlRedeemAdmission = `UPDATE anteroom_admissions SET redeemed_at = $2
		WHERE jti = $1 AND redeemed_at IS NULL AND expires_at > $3
		RETURNING gate, session, position, issued_at, expires_at`
	sqlPruneAdmissions = `DELETE FROM anteroom_admissions WHERE jti IN (
		SELECT a.jti FROM anteroom_admissions a WHERE a.gate = $1 AND a.expires_at < $2
		AND NOT EXISTS (SELECT 1 FROM anteroom_sessions s WHERE s.gate = a.gate AND s.position = a.position AND s.id = a.session)
		LIMIT $3)`
)

// IssueAdmission returns the admission of (a.Gate, a.Session, a.Position),
// storing a when there is none (session.AdmissionStore); instances racing
// get the one stored first.
//
// Errors: session.ErrInvalidArgument for a malformed record,
// session.ErrUnavailable after Close or when the database cannot be
// reached, a session.CodeInternal error on storage failure.
func (s *Store) IssueAdmission(ctx context.Context, a session.Admission) (session.Admission, error) {
	if err := session.ValidAdmission(a); err != nil {
		return session.Admission{}, err
	}
	if s.closed.Load() {
		return session.Admission{}, session.ErrUnavailable
	}
	if got, ok, err := s.admissionBySession(ctx, a); err != nil || ok {
		return got, err
	}
	if _, err := s.pool.Exec(ctx, sqlInsertAdmission, a.ID, a.Gate, a.Session, a.Position,
		nanos(a.IssuedAt), nanos(a.Expires)); err != nil {
		return session.Admission{}, storageErr("issue admission", err)
	}
	got, ok, err := s.admissionBySession(ctx, a)
	if err == nil && !ok {
		err = session.Errorf(session.CodeInternal, "postgres: issue admission: jti %q taken", a.ID)
	}
	return got, err
}

func (s *Store) admissionBySession(ctx context.Context, a session.Admission) (session.Admission, bool, error) {
	var jti string
	var issued, expires int64
	var redeemed *int64
	err := s.pool.QueryRow(ctx, sqlAdmissionBySession, a.Gate, a.Session, a.Position).Scan(&jti, &issued, &expires, &redeemed)
	if errors.Is(err, pgx.ErrNoRows) {
		return session.Admission{}, false, nil
	}
	if err != nil {
		return session.Admission{}, false, storageErr("issue admission", err)
	}
	return admissionOf(jti, a.Gate, a.Session, a.Position, issued, expires, redeemed), true, nil
}

// RedeemAdmission marks the admission with jti id redeemed at now
// (session.AdmissionStore): one UPDATE, so exactly one of concurrent
// redeems on any instances succeeds.
//
// Errors: session.ErrAdmissionNotFound (never issued, pruned, or expired
// more than session.AdmissionLeeway before now), session.ErrAlreadyRedeemed
// (with the record), session.ErrUnavailable after Close or when the
// database cannot be reached, a session.CodeInternal error on storage
// failure.
func (s *Store) RedeemAdmission(ctx context.Context, id string, now time.Time) (session.Admission, error) {
	if !session.ValidID(id) {
		return session.Admission{}, session.Errorf(session.CodeAdmissionNotFound, "postgres: redeem: no admission %q", id)
	}
	if s.closed.Load() {
		return session.Admission{}, session.ErrUnavailable
	}
	var gate, sess string
	var pos, issued, expires int64
	at := normTime(now)
	err := s.pool.QueryRow(ctx, sqlRedeemAdmission, id, nanos(at), nanos(at.Add(-session.AdmissionLeeway))).
		Scan(&gate, &sess, &pos, &issued, &expires)
	if err == nil {
		r := nanos(at)
		return admissionOf(id, gate, sess, pos, issued, expires, &r), nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return session.Admission{}, storageErr("redeem admission", err)
	}
	var redeemed *int64
	err = s.pool.QueryRow(ctx, sqlAdmissionByID, id).Scan(&gate, &sess, &pos, &issued, &expires, &redeemed)
	if errors.Is(err, pgx.ErrNoRows) {
		return session.Admission{}, session.Errorf(session.CodeAdmissionNotFound, "postgres: redeem: no admission %q", id)
	}
	if err != nil {
		return session.Admission{}, storageErr("redeem admission", err)
	}
	a := admissionOf(id, gate, sess, pos, issued, expires, redeemed)
	if !at.Before(a.Expires.Add(session.AdmissionLeeway)) {
		return session.Admission{}, session.Errorf(session.CodeAdmissionNotFound, "postgres: redeem: admission %q expired", id)
	}
	return a, session.Errorf(session.CodeAlreadyRedeemed, "postgres: redeem: admission %q already redeemed", id)
}

// AdmissionKeyring runs update on the stored keyring in one transaction
// holding its row lock, so instances rotating at once agree on one ring
// (session.AdmissionStore).
//
// Errors: update's (session.CodeInternal), session.ErrUnavailable after
// Close or when the database cannot be reached, a session.CodeInternal
// error on storage failure.
func (s *Store) AdmissionKeyring(ctx context.Context, update func(old []byte) ([]byte, bool, error)) ([]byte, error) {
	if update == nil {
		return nil, session.Errorf(session.CodeInvalidArgument, "postgres: admission keyring: nil update")
	}
	if s.closed.Load() {
		return nil, session.ErrUnavailable
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return nil, storageErr("admission keyring", err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(ctx, `INSERT INTO anteroom_meta (key, value) VALUES ($1, ''::bytea) ON CONFLICT (key) DO NOTHING`, keyringKey); err != nil {
		return nil, storageErr("admission keyring", err)
	}
	var old []byte
	if err := tx.QueryRow(ctx, `SELECT value FROM anteroom_meta WHERE key = $1 FOR UPDATE`, keyringKey).Scan(&old); err != nil {
		return nil, storageErr("admission keyring", err)
	}
	if len(old) == 0 {
		old = nil
	}
	next, changed, err := update(old)
	if err != nil {
		return nil, session.Errorf(session.CodeInternal, "postgres: admission keyring: %w", err)
	}
	if changed {
		if _, err := tx.Exec(ctx, `UPDATE anteroom_meta SET value = $2 WHERE key = $1`, keyringKey, next); err != nil {
			return nil, storageErr("admission keyring", err)
		}
		old = next
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, storageErr("admission keyring", err)
	}
	return old, nil
}

// pruneAdmissions deletes gate's admissions expired more than
// session.AdmissionLeeway before now whose session is gone, chunk rows per
// statement, until none is left. Called by Update (under its advisory
// lock); a failure is logged, not the update's.
func (s *Store) pruneAdmissions(ctx context.Context, gate string, now time.Time, chunk int) {
	cutoff := nanos(now.Add(-session.AdmissionLeeway))
	for {
		tag, err := s.pool.Exec(ctx, sqlPruneAdmissions, gate, cutoff, chunk)
		if err != nil {
			s.log.Warn("anteroom: pruning admissions failed", "gate", gate, "err", err)
			return
		}
		if tag.RowsAffected() < int64(chunk) {
			return
		}
	}
}

func admissionOf(jti, gate, sess string, pos, issued, expires int64, redeemed *int64) session.Admission {
	a := session.Admission{ID: jti, Gate: gate, Session: sess, Position: pos,
		IssuedAt: fromNanos(issued), Expires: fromNanos(expires)}
	if redeemed != nil {
		a.Redeemed = fromNanos(*redeemed)
	}
	return a
}
