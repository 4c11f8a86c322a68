package session_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session/sessiontest"
)

// The ids callers pass are often pieces of a request (a token in the query
// string or a cookie header, up to the server's 64 KB header limit). What
// the Waitlist keeps of an id for longer than the call (an open socket's
// presence, a waiter's sign of life until it is persisted) must be its own
// copy: else a client padding its request would pin that much memory per
// socket, for as long as the socket is open.
func TestTheWaitlistKeepsNoCallersMemoryOfAnID(t *testing.T) {
	ctx := context.Background()
	w := retainWaitlist(t, sessiontest.NewClock(sessiontest.Epoch), sessiontest.GateConfig("default", 1))
	for _, id := range []string{"front", "waiter1", "waiter2"} {
		_, err := w.Join(ctx, "default", id)
		require.NoError(t, err)
	}

	for _, tc := range []struct {
		name, id string
		use      func(id string) (keep func())
	}{
		{"an open socket", "waiter1", func(id string) func() {
			disconnect, err := w.Connect("default", id)
			require.NoError(t, err)
			return disconnect // called once the buffer is collected: the socket stays open until then
		}},
		{"a waiter's status read, a sign of life not yet persisted", "waiter2", func(id string) func() {
			_, err := w.Status(ctx, "default", id)
			require.NoError(t, err)
			return func() {}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sessiontest.RequireFreed(t, tc.id, tc.use, "the Waitlist still holds the caller's memory through the id it was given")
		})
	}
}
