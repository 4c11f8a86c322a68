package session_test

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
	"github.com/anteroomhq/anteroom/session/sessiontest"
	"github.com/anteroomhq/anteroom/session/sqlite"
)

// admittedPerMinute counts promotions over the last five minutes: what the
// snippet turns into an estimated wait.
func TestAdmittedPerMinuteCountsPromotionsOverFiveMinutes(t *testing.T) {
	store, err := sqlite.Open(filepath.Join(t.TempDir(), "anteroom.db"), sqlite.Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	defer store.Close()
	clock := sessiontest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	cfg := session.GateConfig{Name: "default", ActiveLimit: 1, ActiveTimeout: time.Hour, WaitingTimeout: time.Hour}
	w, err := session.New(context.Background(), store, []session.GateConfig{cfg}, session.Options{Clock: clock, TouchInterval: -1})
	require.NoError(t, err)
	defer w.Close()
	ctx := context.Background()
	for _, id := range []string{"a", "b", "c", "d"} {
		_, err := w.Join(ctx, "default", id)
		require.NoError(t, err)
	}
	rate := func() float64 {
		v, err := w.Global("default")
		require.NoError(t, err)
		return v.AdmittedPerMinute
	}
	assert.Zero(t, rate(), "nobody promoted yet")

	require.NoError(t, w.Release(ctx, "default", "a")) // promotes b
	assert.InDelta(t, 1.0/5, rate(), 1e-9)
	clock.Advance(time.Minute)
	require.NoError(t, w.Release(ctx, "default", "b")) // promotes c
	assert.InDelta(t, 2.0/5, rate(), 1e-9, "two promotions in the window")

	// Past the window, old promotions no longer count (the view is recomputed
	// at the next change): 5m30s after the first, 4m30s after the second.
	clock.Advance(4*time.Minute + 30*time.Second)
	_, err = w.Join(ctx, "default", "e")
	require.NoError(t, err)
	assert.InDelta(t, 1.0/5, rate(), 1e-9, "the first promotion left the window")
	clock.Advance(time.Minute)
	_, err = w.Join(ctx, "default", "f")
	require.NoError(t, err)
	assert.Zero(t, rate(), "both left the window")
}
