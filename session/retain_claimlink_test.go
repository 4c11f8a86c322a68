package session_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
	"github.com/anteroomhq/anteroom/session/sessiontest"
)

// A claim link memory cannot decide (its session unknown here, or of a
// promotion memory does not hold) is remembered with its session id, so
// that a visit again costs no Store read: for as long as the memo lasts
// (up to maxLinkMemo links per gate). That id is a piece of the claim's
// request (its form body, 4 KiB at most, or more where the server allows
// larger bodies): the memo must keep its own copy.
func TestTheClaimLinkMemoKeepsNoCallersMemoryOfAnID(t *testing.T) {
	ctx := context.Background()
	clock := sessiontest.NewClock(sessiontest.Epoch)
	w := retainWaitlist(t, clock, sessiontest.GateConfig("default", 10))
	_, err := w.Join(ctx, "default", "active-unpromoted")
	require.NoError(t, err)
	deadline := clock.Now().Add(time.Minute)
	for _, tc := range []struct{ name, id string }{
		{"a session memory does not know", "unknown"},
		{"an active session whose promotion memory does not hold", "active-unpromoted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sessiontest.RequireFreed(t, tc.id, func(id string) func() {
				err := w.ClaimLink(ctx, "default", id, deadline)
				require.ErrorIs(t, err, session.ErrNotActive)
				_, err = w.Update(ctx) // the Store's writer forgets its last statement's arguments
				require.NoError(t, err)
				return func() {
					err := w.ClaimLink(ctx, "default", tc.id, deadline)
					require.ErrorIs(t, err, session.ErrNotActive, "refused from the memo")
				}
			}, "the claim link memo still holds the caller's memory through the id it was given")
		})
	}
}
