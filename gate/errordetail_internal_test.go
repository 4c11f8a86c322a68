package gate

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/anteroomhq/anteroom/session"
)

// What a client reads of an error: a domain error's own message; nothing
// of an internal error, nor of the cause an unavailable store wraps (a
// database path or host, a driver's words), which the log keeps.
func TestErrorDetailSaysNothingOfTheStoresInsides(t *testing.T) {
	disk := errors.New("write /var/lib/anteroom/anteroom.db-wal: no space left on device")
	for _, tc := range []struct {
		name string
		err  error
		code session.Code
		msg  string
	}{
		{"a domain error", session.NotFoundError("default", "abc"), session.CodeNotFound, `session "abc" of gate "default" not found`},
		{"unavailable, said plainly", session.ErrUnavailable, session.CodeUnavailable, "service unavailable"},
		{"unavailable, no cause", session.Errorf(session.CodeUnavailable, "gate %q: next position 0 is out of range", "g"), session.CodeUnavailable, `gate "g": next position 0 is out of range`},
		{"a store that cannot write", session.Errorf(session.CodeUnavailable, "sqlite: database %s cannot write: %w", "/var/lib/anteroom/anteroom.db", disk), session.CodeUnavailable, "service unavailable"},
		{"wrapped again", fmt.Errorf("join: %w", session.Errorf(session.CodeUnavailable, "postgres: connect: %w", errors.New("dial tcp 10.0.0.5:5432: connection refused"))), session.CodeUnavailable, "service unavailable"},
		{"internal", session.Errorf(session.CodeInternal, "sqlite: %w", disk), session.CodeInternal, "internal error"},
		{"not ours", disk, session.CodeInternal, "internal error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := errorDetail(tc.err)
			assert.Equal(t, tc.code, d.Code)
			assert.Equal(t, tc.msg, d.Message)
		})
	}
}
