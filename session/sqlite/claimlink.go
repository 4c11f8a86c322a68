package sqlite

import (
	"context"
	"time"

	"github.com/anteroomhq/anteroom/session"
)

var _ session.LinkClaimer = (*Store)(nil)

// ClaimLink claims the promoted slot of id in gate for a claim link, when
// session.DecideClaimLink allows it (the link's deadline is the row's claim
// deadline) on the row as the writer has it, as a Touch with that
// ClaimDeadline (the same events), in one writer transaction. It returns the session as
// stored afterwards.
//
// Errors: session.ErrNotActive (claimed already, gone, never promoted, or
// of another promotion than the link's);
// session.ErrInvalidArgument for a malformed gate or id;
// session.ErrUnavailable after Close; the context's error when it is done
// before the claim ran; a session.CodeInternal error on storage failure.
func (s *Store) ClaimLink(ctx context.Context, gate, id string, deadline, now time.Time) (session.Session, error) {
	if !session.ValidID(id) {
		return session.Session{}, session.Errorf(session.CodeInvalidArgument, "sqlite: claim link: session id %q", id)
	}
	now, deadline = normTime(now), normTime(deadline)
	var out session.Session
	err := s.gateOp(ctx, gate, func(b *batch, e *gateEntry) error { // the row by its id, as a touch: beside a pending promotion
		existing, _, err := s.find(e, id)
		if err != nil {
			return err
		}
		if _, err := session.DecideClaimLink(existing, deadline, now); err != nil {
			return err
		}
		t := &op{cfg: session.GateConfig{Name: gate}, touches: []session.Touch{{ID: id, LastActive: now, ClaimDeadline: deadline}}}
		if err := s.applyTouch(b, t); err != nil {
			return err
		}
		row, _, err := s.find(e, id)
		if err != nil {
			return err
		}
		if row != nil {
			out = *row
		}
		return nil
	})
	return out, err
}
