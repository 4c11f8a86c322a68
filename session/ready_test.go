package session_test

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
	"github.com/anteroomhq/anteroom/session/sessiontest"
	"github.com/anteroomhq/anteroom/session/sqlite"
)

// plainStore hides everything but session.Store.
type plainStore struct{ session.Store }

// failingStore is a Store whose Ready fails.
type failingStore struct {
	session.Store
	err error
}

func (s failingStore) Ready(context.Context) error { return s.err }

// Waitlist.Ready is the Store's readiness: its error when it implements
// ReadyChecker, ready when it does not, unavailable after Close.
func TestWaitlistReadyAsksTheStore(t *testing.T) {
	full := session.Errorf(session.CodeUnavailable, "disk full")
	cases := []struct {
		name string
		wrap func(session.Store) session.Store
		want error
	}{
		{"a store that can write", func(s session.Store) session.Store { return s }, nil},
		{"a store that cannot", func(s session.Store) session.Store { return failingStore{s, full} }, full},
		{"a store without ReadyChecker", func(s session.Store) session.Store { return plainStore{s} }, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sq, err := sqlite.Open(filepath.Join(t.TempDir(), "r.db"), sqlite.Options{Logger: slog.New(slog.DiscardHandler)})
			require.NoError(t, err)
			t.Cleanup(func() { _ = sq.Close() })
			ctx := context.Background()
			w, err := session.New(ctx, tc.wrap(sq), []session.GateConfig{sessiontest.GateConfig("default", 1)}, session.Options{TouchInterval: -1})
			require.NoError(t, err)
			got := w.Ready(ctx)
			if tc.want == nil {
				require.NoError(t, got)
			} else {
				require.True(t, errors.Is(got, tc.want), "got %v", got)
			}
			require.NoError(t, w.Close())
			require.ErrorIs(t, w.Ready(ctx), session.ErrUnavailable)
		})
	}
}
