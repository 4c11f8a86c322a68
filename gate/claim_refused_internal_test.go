package gate

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/assert"

	"github.com/anteroomhq/anteroom/gate/token"
	"github.com/anteroomhq/anteroom/gate/wire"
	"github.com/anteroomhq/anteroom/session"
	"github.com/anteroomhq/anteroom/static"
)

// The page of a refused claim link names its reason from the error's
// code (and its status, from the one code → status table): expired only
// for a genuine ticket too late, used for a slot gone, busy when the same
// link may work in a moment, and not valid for everything else.
func TestClaimRefusal(t *testing.T) {
	expired := &session.Error{Code: codeInvalidTicket, Message: "claim link invalid or expired", Err: token.ErrTicketExpired}
	for _, tc := range []struct {
		name string
		err  error
		want static.ClaimRefusal
	}{
		{"expired", expired, static.ClaimExpired},
		{"expired, wrapped again", fmt.Errorf("claim: %w", expired), static.ClaimExpired},
		{"invalid", &session.Error{Code: codeInvalidTicket, Message: "m", Err: token.ErrTicketInvalid}, static.ClaimInvalid},
		{"no ticket", apiError(codeInvalidTicket, "claim link without a ticket"), static.ClaimInvalid},
		{"unknown gate", session.Errorf(session.CodeUnknownGate, "no gate"), static.ClaimInvalid},
		{"a bad argument", apiError(session.CodeInvalidArgument, "m"), static.ClaimInvalid},
		{"already claimed", apiError(wire.CodeAlreadyClaimed, "m"), static.ClaimUsed},
		{"not active", session.Errorf(session.CodeNotActive, "m"), static.ClaimUsed},
		{"rate limited", apiError(codeRateLimited, "m"), static.ClaimBusy},
		{"unavailable", session.Errorf(session.CodeUnavailable, "m"), static.ClaimBusy},
		{"internal", errors.New("disk on fire"), static.ClaimBusy},
		{"echo's 500", echo.NewHTTPError(500, "x"), static.ClaimBusy},
		{"echo's 404", echo.NewHTTPError(404, "x"), static.ClaimInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, claimRefusal(tc.err, errorDetail(tc.err).Code))
		})
	}
}

// A claim link leads to its next (the claim page, its 303, the page of a
// refusal) only when it is a local path of at most maxClaimNext bytes
// without the ticket, escaped or not.
func TestClaimNext(t *testing.T) {
	const ticket = "1700000000000000000.b.mac"
	const mac = "n8CrLhuKzidQASauAovJUESqGFLCkes3-Q5-TKVaskg"
	edge := "/" + strings.Repeat("a", maxClaimNext-3) // "/" is "%2F" form-encoded
	for _, tc := range []struct {
		name, ticket, next, want string
	}{
		{"a local path", ticket, "/welcome?x=1", "/welcome?x=1"},
		{"no ticket to hide", "", "/welcome", "/welcome"},
		{"the longest", ticket, edge, edge},
		{"one byte longer", ticket, edge + "a", ""},
		{"empty", ticket, "", ""},
		{"relative", ticket, "welcome", ""},
		{"protocol-relative", ticket, "//evil.example", ""},
		{"backslash", ticket, `/\evil.example`, ""},
		{"absolute", ticket, "https://evil.example/", ""},
		{"a control character", ticket, "/\t/evil.example", ""},
		{"the ticket", ticket, "/x?t=" + ticket, ""},
		{"the ticket escaped", "1700000000000000000.user:42." + mac, "/x?t=" + url.QueryEscape("1700000000000000000.user:42."+mac), ""},
		{"its MAC alone", "1700000000000000000.b." + mac, "/x#" + mac, ""},
		{"a short last part is no MAC", "1.b.mac", "/mac", "/mac"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, claimNext(tc.ticket, tc.next))
		})
	}
}
