package session

import (
	"context"
	"time"
)

// A claim link (the promoted webhook of a called-back session) claims its
// slot exactly once across every instance sharing a Store: the Store
// decides it in its transaction, under the gate's lock (DecideClaimLink),
// not memory, which only spares the Store a link clicked twice on one
// instance.

// LinkClaimer is the part of a Store that claims a slot for a claim link.
type LinkClaimer interface {
	// ClaimLink runs DecideClaimLink for id in gate at now, on the row read
	// under the gate's lock, and when it allows, claims the slot as a Touch
	// with Claim does (the same events: an EventRefreshed with Claimed,
	// history and webhook rows), in that one transaction. It returns the
	// session as stored afterwards. Errors: ErrNotActive (the slot was
	// claimed already, is gone, or was never promoted; nothing changed),
	// ErrInvalidArgument, ErrUnavailable, or a CodeInternal error.
	ClaimLink(ctx context.Context, gate, id string, now time.Time) (Session, error)
}

// LinkOnly reports whether only a claim link may claim s's slot: a
// called-back session (Notify) promoted and not yet claimed. A join of it
// (a backend naming it) is a sign of life that leaves the slot unclaimed.
func LinkOnly(s Session) bool {
	return s.Notify && s.Status == StatusActive && !s.ClaimDeadline.IsZero()
}

// DecideClaimLink decides a claim link's visit at now for the stored row
// (nil when absent): only an active session whose slot waits to be claimed
// (ClaimDeadline set, not past) may be claimed, else ErrNotActive. The claim
// itself is DecideTouch's with Claim.
func DecideClaimLink(existing *Session, now time.Time) (Outcome, error) {
	if existing == nil || existing.Status != StatusActive || existing.ClaimDeadline.IsZero() || !now.Before(existing.ClaimDeadline) {
		return Outcome{Action: ActionNone}, ErrNotActive
	}
	return DecideTouch(existing, Touch{ID: existing.ID, LastActive: now, Claim: true}), nil
}

// ClaimLink claims a promoted, unclaimed slot on behalf of a claim link's
// first visit. It returns nil to exactly one caller per promotion, across
// every instance sharing the Store: the Store decides in its transaction
// (LinkClaimer), and the claim is written at once (so it survives a crash
// and the claimed webhook goes out). Errors: ErrUnknownGate,
// ErrInvalidArgument, ErrNotActive when the session is not active or was
// already claimed (on any instance), ErrUnavailable, or the Store's (then
// nothing was claimed and the link may be visited again).
func (w *Waitlist) ClaimLink(ctx context.Context, gate, id string) error {
	g, err := w.writable(gate, id)
	if err != nil {
		return err
	}
	if err := w.following(); err != nil {
		return err
	}
	now := w.clock.Now()
	g.mu.RLock()
	e := g.active[id]
	g.mu.RUnlock()
	if e == nil {
		return Errorf(CodeNotActive, "session %q of gate %q has no slot waiting to be claimed", id, gate)
	}
	deadline := e.claimDeadline.Swap(0) // one visit of this instance asks the Store
	if deadline == 0 {
		return Errorf(CodeNotActive, "session %q of gate %q has no slot waiting to be claimed", id, gate)
	}
	if _, err := w.store.ClaimLink(ctx, gate, id, now); err != nil {
		if CodeOf(err) != CodeNotActive {
			e.claimDeadline.CompareAndSwap(0, deadline) // not claimed: the link may be visited again
		}
		return err
	}
	for {
		old := e.lastActive.Load()
		if old >= now.UnixNano() || e.lastActive.CompareAndSwap(old, now.UnixNano()) {
			break
		}
	}
	return nil
}
