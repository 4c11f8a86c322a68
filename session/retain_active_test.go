package session_test

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
	"github.com/anteroomhq/anteroom/session/sessiontest"
	"github.com/anteroomhq/anteroom/session/sqlite"
)

// retainWaitlist is a Waitlist over a fresh SQLite store, with no
// background flusher or sweeper (the tests run them when they want).
func retainWaitlist(t *testing.T, clock session.Clock, gates ...session.GateConfig) *session.Waitlist {
	t.Helper()
	sq, err := sqlite.Open(filepath.Join(t.TempDir(), "r.db"), sqlite.Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sq.Close() })
	w, err := session.New(context.Background(), sq, gates, session.Options{Clock: clock, TouchInterval: -1, SweepInterval: -1, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = w.Close() })
	return w
}

// A session a join admits at once enters the gate's active set (memory,
// from the Store's commit) under the id the caller gave, for as long as it
// stays active. That id is often a piece of the request: the id of a
// token, still valid, whose session was released or purged, cut from a
// Cookie header a client may pad to 64 KB. The set must keep its own copy.
// (The Store's writer keeps its last transaction's events until its next
// transaction: the update tick that follows here.)
func TestTheActiveSetKeepsNoCallersMemoryOfAnID(t *testing.T) {
	ctx := context.Background()
	w := retainWaitlist(t, sessiontest.NewClock(sessiontest.Epoch), sessiontest.GateConfig("default", 10))
	for _, tc := range []struct {
		name, id string
		join     func(id string) (session.SessionView, error)
	}{
		{"Join", "joined", func(id string) (session.SessionView, error) { return w.Join(ctx, "default", id) }},
		{"JoinWithCode", "joined-with-a-code", func(id string) (session.SessionView, error) {
			v, _, err := w.JoinWithCode(ctx, "default", id, "no-such-code")
			return v, err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sessiontest.RequireFreed(t, tc.id, func(id string) func() {
				v, err := tc.join(id)
				require.NoError(t, err)
				require.Equal(t, session.StatusActive, v.Status)
				_, err = w.Update(ctx)
				require.NoError(t, err)
				return func() { require.NoError(t, w.ValidateSessionIsActive("default", tc.id), "the session stays active") }
			}, "the active set still holds the caller's memory through the id it was given")
		})
	}
}
