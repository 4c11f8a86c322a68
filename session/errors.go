package session

import (
	"errors"
	"fmt"
)

// Code is a stable, snake_case name for a class of error. The HTTP layer maps
// each Code to a status in one place; clients may rely on the code strings.
type Code string

// The codes the domain produces.
const (
	CodeInvalidArgument Code = "invalid_argument"   // the caller sent something malformed
	CodeUnknownGate     Code = "unknown_gate"       // the gate is not configured
	CodeNotFound        Code = "session_not_found"  // no such session (never joined, purged or released)
	CodeNotActive       Code = "session_not_active" // the session exists but is waiting
	CodeUnavailable     Code = "unavailable"        // the service is closed or the store cannot be reached
	CodeGateClosed      Code = "gate_closed"        // the gate is in reject mode: no new session gets in
	CodeGateExists      Code = "gate_exists"        // a gate of that name is already configured
	CodeGateInUse       Code = "gate_in_use"        // the gate has sessions and is not in reject mode
	CodeInternal        Code = "internal"           // anything else; a bug or a storage failure
)

// Error is the error type every exported function of this package returns (or
// wraps). It carries a Code, a human-readable message, and optionally the
// underlying cause.
type Error struct {
	Code    Code
	Message string
	Err     error
	// said: Message already says Err (Errorf formats it in), so Error does
	// not add it again (a damaged file's long explanation appeared twice in
	// /readyz).
	said bool
}

// Error implements error.
func (e *Error) Error() string {
	if e.Err != nil && !e.said {
		return fmt.Sprintf("%s: %s: %v", e.Code, e.Message, e.Err)
	}
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}

// Unwrap returns the underlying cause, if any.
func (e *Error) Unwrap() error { return e.Err }

// Is reports whether target is an *Error with the same Code, so that
// errors.Is(err, ErrNotFound) matches any not-found error whatever its message.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// Sentinel errors, for use with errors.Is.
var (
	ErrInvalidArgument = &Error{Code: CodeInvalidArgument, Message: "invalid argument"}
	ErrUnknownGate     = &Error{Code: CodeUnknownGate, Message: "unknown gate"}
	ErrNotFound        = &Error{Code: CodeNotFound, Message: "no such session"}
	ErrNotActive       = &Error{Code: CodeNotActive, Message: "session is not active"}
	ErrUnavailable     = &Error{Code: CodeUnavailable, Message: "service unavailable"}
	ErrGateClosed      = &Error{Code: CodeGateClosed, Message: "the gate is closed to new sessions"}
	ErrInternal        = &Error{Code: CodeInternal, Message: "internal error"}
)

// NotFoundError is the error of every Store for a session (gate, id) that
// does not exist: its message is the one a client reads, the same whatever
// the store (no store name, no operation).
func NotFoundError(gate, id string) error {
	return Errorf(CodeNotFound, "session %q of gate %q not found", id, gate)
}

// Errorf returns an *Error with the given code and a formatted message. A
// %w verb in format is honoured: the wrapped error becomes the cause.
func Errorf(code Code, format string, args ...any) error {
	wrapped := fmt.Errorf(format, args...)
	return &Error{Code: code, Message: wrapped.Error(), Err: errors.Unwrap(wrapped), said: true}
}

// CodeOf returns the Code of the first *Error in err's chain, CodeInternal for
// any other non-nil error, and "" for nil.
func CodeOf(err error) Code {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return CodeInternal
}
