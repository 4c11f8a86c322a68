package sqlite

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session/sessiontest"
)

// The index keeps no id, only its hash, but for an id whose hash another
// live session of its gate holds: that one goes to the gate's map of full
// ids, for as long as the session lives. Its key must be a copy, not the id
// the join was given (a piece of its request). Collisions of the keyed
// 64-bit hash are made here (collide); by chance they are all but
// impossible.
func TestTheIndexKeepsNoCallersMemoryOfACollidingID(t *testing.T) {
	collide(t)
	ctx := context.Background()
	cfg := sessiontest.GateConfig("default", 10)
	s, err := Open(filepath.Join(t.TempDir(), "r.db"), Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	_, err = s.Load(ctx, []string{"default"})
	require.NoError(t, err)
	_, err = s.Join(ctx, cfg, "a", epoch)
	require.NoError(t, err)

	sessiontest.RequireFreed(t, "d", func(id string) func() { // "d" hashes as "a" does
		_, err = s.Join(ctx, cfg, id, epoch)
		require.NoError(t, err)
		_, err = s.Update(ctx, cfg, epoch, 0) // the writer's next transaction: it forgets the join's
		require.NoError(t, err)
		s.idx.mu.RLock()
		_, long := s.idx.gates["default"].long["d"]
		s.idx.mu.RUnlock()
		require.True(t, long, "the id went to the map of full ids")
		return func() {
			got, err := s.Get(ctx, "default", "d")
			require.NoError(t, err)
			require.Equal(t, int64(2), got.Position)
		}
	}, "the index still holds the caller's memory through a colliding id")
}
