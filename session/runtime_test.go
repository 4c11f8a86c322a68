package session_test

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
	"github.com/anteroomhq/anteroom/session/sqlite"
)

// TestRuntimeChangesConcurrent changes settings and adds and removes gates
// while joins, validations, sweeps and updates run: with -race, it proves
// the configuration and the gate set are read safely without locks.
func TestRuntimeChangesConcurrent(t *testing.T) {
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	sq, err := sqlite.Open(filepath.Join(t.TempDir(), "anteroom.db"), sqlite.Options{Logger: log})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sq.Close() })
	w, err := session.New(ctx, sq, []session.GateConfig{cfg}, session.Options{Logger: log, TouchInterval: -1, SweepInterval: -1})
	require.NoError(t, err)
	t.Cleanup(func() { _ = w.Close() })

	var wg sync.WaitGroup
	for r := 0; r < 4; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				id := fmt.Sprintf("r%d-%d", r, i)
				_, err := w.Join(ctx, "default", id)
				assert.NoError(t, err)
				_ = w.ValidateSessionAndRefreshLastActive("default", id)
				_, _ = w.Global("added")
				_, _ = w.Stats("default")
				assert.NoError(t, w.Sweep(ctx))
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < 20; i++ {
			c := cfg
			c.ActiveLimit = int64(i % 5)
			c.NewUsersPerMinute = int64(i%3) * 60
			_, err := w.SetGateConfig(ctx, c)
			assert.NoError(t, err)
			added := c
			added.Name = "added"
			assert.NoError(t, w.AddGate(ctx, added))
			_, _ = w.Update(ctx)
			assert.NoError(t, w.RemoveGate(ctx, "added"))
		}
	}()
	wg.Wait()
	assert.Equal(t, []string{"default"}, w.Gates())
	st, err := w.Stats("default")
	require.NoError(t, err)
	assert.Equal(t, int64(4), st.Config.ActiveLimit, "the last setting is in effect")
	assert.Equal(t, int64(200), st.View.Active+st.View.Waiting, "no join lost")
}
