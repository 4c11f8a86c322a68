package guard

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/anteroomhq/anteroom/gate/token"
	"github.com/anteroomhq/anteroom/session"
)

// InProcessOptions configure an InProcess checker.
type InProcessOptions struct {
	// Gate is the gate to check. Default DefaultGate. It is fixed here, never
	// taken from the request, so that a client cannot pick a shorter line.
	Gate string
}

// InProcess is the Checker of an app that embeds anteroom: it asks the
// *session.Waitlist directly. An active session is answered from memory
// without I/O; a session that is not active costs one Store read, to tell a
// waiting session (403) from one that no longer exists (401), as the
// sidecar's /check does. Safe for concurrent use.
type InProcess struct {
	waitlist *session.Waitlist
	signer   *token.Signer
	gate     string
}

var _ Checker = (*InProcess)(nil)

// NewInProcess returns a Checker over w that verifies tokens with signer. It
// returns a session.ErrInvalidArgument error when w or signer is nil, and a
// session.ErrUnknownGate error when w has no such gate.
func NewInProcess(w *session.Waitlist, signer *token.Signer, opts InProcessOptions) (*InProcess, error) {
	switch {
	case w == nil:
		return nil, session.Errorf(session.CodeInvalidArgument, "guard: NewInProcess: nil Waitlist")
	case signer == nil:
		return nil, session.Errorf(session.CodeInvalidArgument, "guard: NewInProcess: nil Signer")
	}
	if opts.Gate == "" {
		opts.Gate = DefaultGate
	}
	if _, err := w.GateConfig(opts.Gate); err != nil {
		return nil, err
	}
	return &InProcess{waitlist: w, signer: signer, gate: opts.Gate}, nil
}

// Gate returns the gate checked.
func (c *InProcess) Gate() string { return c.gate }

// ValidateSessionIsActive returns nil when r's session is active, without
// refreshing it; the first request of a promoted session whose slot waits
// to be claimed claims it (session.Waitlist.ValidateSessionIsActive), so
// the person it serves keeps the slot. Errors: ErrNoSession (no token verifies, or the session is
// gone), *NotActiveError (waiting), session.ErrUnavailable (the Waitlist is
// closed and the session is not active), or the Store's error.
func (c *InProcess) ValidateSessionIsActive(r *http.Request) error {
	return c.check(r, c.waitlist.ValidateSessionIsActive)
}

// ValidateSessionAndRefreshLastActive is ValidateSessionIsActive that also
// sets the session's last activity to now (in memory at once, persisted by
// the Waitlist every few seconds). Same errors.
func (c *InProcess) ValidateSessionAndRefreshLastActive(r *http.Request) error {
	return c.check(r, c.waitlist.ValidateSessionAndRefreshLastActive)
}

func (c *InProcess) check(r *http.Request, validate func(gate, id string) error) error {
	id, ok := SessionID(r, c.signer)
	if !ok {
		return ErrNoSession
	}
	err := validate(c.gate, id)
	if err == nil || !errors.Is(err, session.ErrNotActive) {
		return err
	}
	// Not in the active set: waiting, or gone? Ask the Store.
	view, err := c.waitlist.Status(r.Context(), c.gate, id)
	switch {
	case errors.Is(err, session.ErrNotFound):
		return errNoSessionExpired
	case err != nil:
		return err
	case view.Status == session.StatusActive: // promoted between the two reads
		_ = validate(c.gate, id)
		return nil
	}
	var waitingTimeout time.Duration
	if cfg, err := c.waitlist.GateConfig(c.gate); err == nil {
		waitingTimeout = cfg.WaitingTimeout
	}
	return &NotActiveError{Gate: c.gate, RetryAfter: RetryAfterWithin(view, c.waitlist.Now(), waitingTimeout)}
}

var errNoSessionExpired = fmt.Errorf("%w: session expired or released, join again", ErrNoSession)
