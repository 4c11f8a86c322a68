package session

import (
	"context"
	"strings"
	"sync"
	"time"
)

// A claim link (the promoted webhook of a called-back session) claims its
// slot exactly once across every instance sharing a Store: the Store
// decides it in its transaction, under the gate's lock (DecideClaimLink),
// not memory, which only spares the Store a link clicked twice on one
// instance.

// LinkClaimer is the part of a Store that claims a slot for a claim link.
type LinkClaimer interface {
	// ClaimLink runs DecideClaimLink for id in gate, the link's deadline
	// and now, on the row read under the gate's lock, and when it allows,
	// claims the slot as a Touch with that ClaimDeadline does (the same
	// events: an EventRefreshed with Claimed, history and webhook rows), in
	// that one transaction. It returns the session as stored afterwards.
	// Errors: ErrNotActive (the slot was claimed already, is gone, was never
	// promoted, or is of another promotion than the link's; nothing
	// changed), ErrInvalidArgument, ErrUnavailable, or a CodeInternal error.
	ClaimLink(ctx context.Context, gate, id string, deadline, now time.Time) (Session, error)
}

// LinkOnly reports whether only a claim link may claim s's slot: a
// called-back session (Notify) promoted and not yet claimed. A join of it
// (a backend naming it) is a sign of life that leaves the slot unclaimed.
func LinkOnly(s Session) bool {
	return s.Notify && s.Status == StatusActive && !s.ClaimDeadline.IsZero()
}

// DecideClaimLink decides a claim link's visit at now for the stored row
// (nil when absent): only an active session whose slot waits to be claimed
// (ClaimDeadline set, not past) may be claimed, and only by the link of
// that promotion: deadline, the one the link carries, must be the
// session's ClaimDeadline to the nanosecond (awaitsClaim, the rule a
// Touch's claim follows too; a link of an earlier promotion of the same
// session id is refused as a used one). Else ErrNotActive. The claim
// itself is DecideTouch's with that ClaimDeadline.
func DecideClaimLink(existing *Session, deadline, now time.Time) (Outcome, error) {
	if existing == nil || !awaitsClaim(*existing, deadline) || !now.Before(existing.ClaimDeadline) {
		return Outcome{Action: ActionNone}, ErrNotActive
	}
	return DecideTouch(existing, Touch{ID: existing.ID, LastActive: now, ClaimDeadline: deadline}), nil
}

// ClaimLink claims a promoted, unclaimed slot on behalf of a claim link's
// first visit; deadline is the claim deadline the link carries, which binds
// it to one promotion. It returns nil to exactly one caller per promotion,
// across every instance sharing the Store: the Store decides in its
// transaction (LinkClaimer), and the claim is written at once (so it
// survives a crash and the claimed webhook goes out).
//
// Memory only spares the Store repeated visits on this instance. When it
// holds the link's promotion, the first visit takes memory's claim deadline
// and asks the Store; later ones are refused from memory, and so is a link
// whose slot a sign of life claimed here. When it cannot confirm the link
// (it has not applied the promotion yet, as an instance of a shared Store
// following another's commit may not have, or it holds another promotion
// of the session), the Store decides, once per link on this instance. A
// link whose deadline has passed by the Waitlist's clock is refused at
// once: no promotion can be claimed with it.
//
// Errors: ErrUnknownGate, ErrInvalidArgument, ErrNotActive when the session
// is not active, was already claimed (on any instance), or its slot is of
// another promotion than the link's, ErrUnavailable, or the Store's (then
// nothing was claimed and the link may be visited again).
func (w *Waitlist) ClaimLink(ctx context.Context, gate, id string, deadline time.Time) error {
	g, err := w.writable(gate, id)
	if err != nil {
		return err
	}
	if err := w.following(); err != nil {
		return err
	}
	now := w.clock.Now()
	want := deadline.UnixNano()
	if deadline.IsZero() || !now.Before(deadline) {
		return Errorf(CodeNotActive, "session %q of gate %q: this claim link has expired", id, gate)
	}
	g.mu.RLock()
	e := g.active.get(id)
	g.mu.RUnlock()
	var undo func()
	switch {
	case e != nil && e.promotion.Load() == want:
		// Memory holds this promotion: one visit of this instance takes
		// its deadline and asks the Store; a slot claimed already (by this
		// link or a sign of life seen here) is refused without I/O.
		if !e.claimDeadline.CompareAndSwap(want, 0) {
			return Errorf(CodeNotActive, "session %q of gate %q has no slot waiting to be claimed by this link", id, gate)
		}
		undo = func() { e.claimDeadline.CompareAndSwap(0, want) }
	default:
		// Memory cannot confirm the link: not applied yet, or another
		// promotion. The Store decides, once per link on this instance.
		key := linkKey{id: id, deadline: want}
		if !g.links.begin(key) {
			return Errorf(CodeNotActive, "session %q of gate %q: this claim link was used already", id, gate)
		}
		undo = func() { g.links.forget(key) }
	}
	if _, err := w.store.ClaimLink(ctx, gate, id, deadline, now); err != nil {
		if CodeOf(err) != CodeNotActive {
			undo() // not claimed: the link may be visited again
		}
		return err
	}
	// The commit reached memory before the Store answered: the entry is
	// there now, even when it was not above.
	g.mu.RLock()
	e = g.active.get(id)
	g.mu.RUnlock()
	if e != nil {
		for {
			old := e.lastActive.Load()
			if old >= now.UnixNano() || e.lastActive.CompareAndSwap(old, now.UnixNano()) {
				break
			}
		}
	}
	return nil
}

// linkKey names one claim link: the session and its promotion's deadline.
type linkKey struct {
	id       string
	deadline int64
}

// maxLinkMemo bounds the links a gate remembers; past it the memo starts
// over (a forgotten link costs one more Store read, never a second claim).
const maxLinkMemo = 4096

// linkMemo remembers the claim links the Store was asked about on this
// instance while memory could not decide them: the Store's answer (claimed
// or refused) stands, so a visit again needs no I/O.
type linkMemo struct {
	mu   sync.Mutex
	seen map[linkKey]struct{}
}

// begin records key and reports whether it was new. The memo keeps a copy
// of key's id: the caller's is a piece of the claim's request.
func (m *linkMemo) begin(key linkKey) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.seen[key]; ok {
		return false
	}
	if m.seen == nil || len(m.seen) >= maxLinkMemo {
		m.seen = make(map[linkKey]struct{})
	}
	key.id = strings.Clone(key.id)
	m.seen[key] = struct{}{}
	return true
}

// forget removes key: its visit claimed nothing and may be made again.
func (m *linkMemo) forget(key linkKey) {
	m.mu.Lock()
	delete(m.seen, key)
	m.mu.Unlock()
}
