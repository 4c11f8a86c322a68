package session

import (
	"context"
	"time"
)

// "Leave, we'll call you": a waiter's backend marks its session Notify; the
// waiter may then close its tab without losing its place. When it reaches
// the front, the promoted webhook fires and its claim window is the gate's
// NotifyClaimTimeout, long enough for a mail or a push with a claim link.

// DefaultNotifyClaimTimeout is the claim window of a called-back session
// when the gate sets none (seed 001's offer window).
const DefaultNotifyClaimTimeout = 15 * time.Minute

// ClaimWindow is how long a session promoted now has to claim its slot: the
// gate's NotifyClaimTimeout (DefaultNotifyClaimTimeout when zero) for a
// session with Notify set, else its ClaimTimeout (zero: no claim needed).
func ClaimWindow(cfg GateConfig, s Session) time.Duration {
	if s.Notify {
		if cfg.NotifyClaimTimeout > 0 {
			return cfg.NotifyClaimTimeout
		}
		return DefaultNotifyClaimTimeout
	}
	return cfg.ClaimTimeout
}

// DecideNotify decides setting a session's Notify flag: the row keeps its
// place and status, and the call is a sign of life (its LastActive moves
// forward to now), so a waiter that stops being called back is judged by
// the waiting timeout from now on. An absent session is left alone (the
// Store answers ErrNotFound).
func DecideNotify(existing *Session, notify bool, now time.Time) Outcome {
	if existing == nil {
		return Outcome{Action: ActionNone}
	}
	s := *existing
	s.Notify = notify
	if now.After(s.LastActive) {
		s.LastActive = now
	}
	return Outcome{Action: ActionUpdate, Session: s}
}

// NotifyStore is implemented by a Store that persists Session.Notify.
type NotifyStore interface {
	// SetNotify runs DecideNotify for id in gate cfg.Name at now and returns
	// the session as stored afterwards. It returns ErrNotFound when the
	// session does not exist.
	SetNotify(ctx context.Context, cfg GateConfig, id string, notify bool, now time.Time) (Session, error)
}

// SetNotify marks a session to be called back (notify true) or not: a
// waiting session so marked is not purged for absence, and when promoted its
// claim window is the gate's NotifyClaimTimeout. Errors: ErrUnknownGate,
// ErrInvalidArgument, ErrNotFound, ErrUnavailable (also when the Store does
// not persist the flag), or the Store's.
func (w *Waitlist) SetNotify(ctx context.Context, gate, id string, notify bool) (SessionView, error) {
	g, err := w.writable(gate, id)
	if err != nil {
		return SessionView{}, err
	}
	ns, ok := w.store.(NotifyStore)
	if !ok {
		return SessionView{}, Errorf(CodeUnavailable, "this store cannot keep notify sessions")
	}
	s, err := ns.SetNotify(ctx, g.config(), id, notify, w.clock.Now())
	if err != nil {
		return SessionView{}, err
	}
	v := g.sessionView(s, w.clock.Now())
	v.Notify = s.Notify
	return v, nil
}
