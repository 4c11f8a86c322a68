package postgres

import (
	"context"
	"time"

	"github.com/anteroomhq/anteroom/session"
)

var _ session.LinkClaimer = (*Store)(nil)

// ClaimLink claims the promoted slot of id in gate for a claim link, when
// session.DecideClaimLink allows it (the link's deadline is the row's claim
// deadline) on the row read under the gate's row lock, as a Touch with
// that ClaimDeadline (the same events), in one writer transaction: of two instances
// visiting the same link at the same instant, exactly one claims it. It
// returns the session as stored afterwards.
//
// Errors: session.ErrNotActive (claimed already, gone, never promoted, or
// of another promotion than the link's);
// session.ErrInvalidArgument for a malformed gate or id;
// session.ErrUnavailable when the store is closed or the database cannot be
// reached; the context's error; a session.CodeInternal error on storage
// failure.
func (s *Store) ClaimLink(ctx context.Context, gate, id string, deadline, now time.Time) (session.Session, error) {
	if !session.ValidID(id) {
		return session.Session{}, session.Errorf(session.CodeInvalidArgument, "postgres: claim link: session id %q", id)
	}
	now, deadline = normTime(now), normTime(deadline)
	var out session.Session
	err := s.eventOp(ctx, gate, func(ctx context.Context, b *batch, _ *gateTx) error {
		e, err := s.find(ctx, b, gate, id)
		if err != nil {
			return err
		}
		var existing *session.Session
		if e.live {
			existing = &e.s
		}
		if _, err := session.DecideClaimLink(existing, deadline, now); err != nil {
			return err
		}
		t := &op{kind: opTouch, ctx: ctx, cfg: session.GateConfig{Name: gate}, touches: []session.Touch{{ID: id, LastActive: now, ClaimDeadline: deadline}}}
		if err := s.applyTouch(ctx, b, t); err != nil {
			return err
		}
		out = e.s
		return nil
	})
	return out, err
}
