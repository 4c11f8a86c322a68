package sqlite_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
	"github.com/anteroomhq/anteroom/session/sessiontest"
	"github.com/anteroomhq/anteroom/session/sqlite"
)

// The ids a join or a leave is given are often pieces of the request (a
// token's id in a Cookie header a client may pad to 64 KB), and the
// transaction's history records name the session by them. Once the
// transaction is written, the writer keeps none of them: not until its
// next transaction that records history (an update that records none, or
// a shorter batch, must not leave them in its scratch).
func TestTheWriterKeepsNoCallersIDAfterItsTransaction(t *testing.T) {
	ctx := context.Background()
	now := sessiontest.Epoch
	for _, tc := range []struct {
		name  string
		limit int64
		op    func(s *sqlite.Store, cfg session.GateConfig, id string) error
	}{
		{"a join's history record", 10, func(s *sqlite.Store, cfg session.GateConfig, id string) error {
			_, err := s.Join(ctx, cfg, id, now)
			return err
		}},
		{"a leave's history record", 0, func(s *sqlite.Store, cfg session.GateConfig, id string) error {
			if _, err := s.Join(ctx, cfg, strings.Clone(id), now); err != nil {
				return err
			}
			_, err := s.Leave(ctx, cfg, id, now)
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := sqlite.Open(filepath.Join(t.TempDir(), "r.db"), quiet)
			require.NoError(t, err)
			t.Cleanup(func() { _ = s.Close() })
			cfg := sessiontest.GateConfig("default", tc.limit)
			_, err = s.Load(ctx, []string{"default"})
			require.NoError(t, err)
			sessiontest.RequireFreed(t, "session-id", func(id string) func() {
				require.NoError(t, tc.op(s, cfg, id))
				// A later transaction with no event: the writer's batch
				// starts over, its history scratch does not.
				_, err := s.Update(ctx, cfg, now, 0)
				require.NoError(t, err)
				return nil
			}, "the writer still holds the caller's memory through a history record's session id")
		})
	}
}
