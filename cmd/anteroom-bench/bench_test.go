package main

import (
	"context"
	"database/sql"
	"path/filepath"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
	"github.com/anteroomhq/anteroom/session/sessiontest"
)

// The join baseline does the store's work: rows in position order in the
// store's own sessions table, the gate's counters kept, in batches.
func TestRawJoinBaselineWritesTheStoresRowsInOrder(t *testing.T) {
	path := filepath.Join(t.TempDir(), "raw.db")
	rate, err := rawJoinRate(context.Background(), path, 50*time.Millisecond, 7, 10)
	require.NoError(t, err)
	assert.Positive(t, rate)

	db, err := sql.Open("sqlite", path)
	require.NoError(t, err)
	defer db.Close()
	var n, minPos, maxPos, active, nextPos, gActive, gWaiting int64
	require.NoError(t, db.QueryRow(`SELECT count(*), min(position), max(position), sum(status) FROM sessions WHERE gate = ?`, gateName).Scan(&n, &minPos, &maxPos, &active))
	require.NoError(t, db.QueryRow(`SELECT next_position, active, waiting FROM gates WHERE name = ?`, gateName).Scan(&nextPos, &gActive, &gWaiting))
	assert.Zero(t, n%7, "whole batches of 7: %d rows", n)
	assert.Equal(t, []int64{1, n, n + 1, 10, n - 10}, []int64{minPos, maxPos, nextPos, gActive, gWaiting})
	assert.EqualValues(t, 10, active)
}

// The tick runs on a file built by joins, with the fresh active sessions'
// LastActive refreshed in memory and not yet written.
func TestTickSeedLeavesRefreshesPending(t *testing.T) {
	ctx := context.Background()
	clock := sessiontest.NewClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	now := clock.Now()
	l := tickLayout{sessions: 300, active: 40, staleActive: 10, staleWaiting: 20}
	cfg := session.GateConfig{Name: gateName, ActiveLimit: int64(l.active), ActiveTimeout: 5 * time.Minute, WaitingTimeout: time.Minute}
	in, err := startInstance(ctx, instanceConfig{dir: t.TempDir(), limit: cfg.ActiveLimit, activeTimeout: cfg.ActiveTimeout,
		waitingTimeout: cfg.WaitingTimeout, interval: time.Second, clock: clock, touchInterval: -1})
	require.NoError(t, err)
	defer in.Close()
	ids, err := seedTick(ctx, in, l, clock, cfg)
	require.NoError(t, err)
	require.Len(t, ids, l.sessions)

	fresh := ids[l.staleActive:l.active]
	for _, id := range fresh {
		s, err := in.store.Get(ctx, gateName, id)
		require.NoError(t, err)
		assert.Equal(t, now.Add(-time.Second), s.LastActive.UTC(), "written when it joined, the refresh pending")
	}
	require.NoError(t, in.wl.FlushTouches(ctx))
	for _, id := range fresh {
		s, err := in.store.Get(ctx, gateName, id)
		require.NoError(t, err)
		assert.Equal(t, now, s.LastActive.UTC())
	}
	r, err := in.wl.Update(ctx)
	require.NoError(t, err)
	require.Len(t, r, 1)
	assert.Equal(t, []int64{10, 20, 10}, []int64{r[0].PurgedActive, r[0].PurgedWaiting, r[0].Promoted})
}

// Memory is read as the server holds it: reading it collects nothing.
func TestReadMemDoesNotCollectGarbage(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	cycles := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(cycles)
	before := cycles[0].Value.Uint64()
	m := readMem()
	metrics.Read(cycles)
	assert.Equal(t, before, cycles[0].Value.Uint64(), "readMem ran a GC")
	assert.Positive(t, m.HeapInuse)
	assert.Positive(t, m.StackInuse)
	assert.Positive(t, m.Goroutines)
}

// validate-inproc times what /check does, which refreshes LastActive.
func TestValidateTimesTheCallThatRefreshesLastActive(t *testing.T) {
	ctx := context.Background()
	clock := sessiontest.NewClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	in, err := startInstance(ctx, instanceConfig{dir: t.TempDir(), limit: 5, interval: time.Second, clock: clock, touchInterval: -1})
	require.NoError(t, err)
	defer in.Close()
	ids, err := seedActive(ctx, in, 5)
	require.NoError(t, err)
	clock.Set(clock.Now().Add(time.Minute))
	require.NoError(t, checkCall(in.wl, gateName, ids[2]))
	require.NoError(t, in.wl.FlushTouches(ctx))
	s, err := in.store.Get(ctx, gateName, ids[2])
	require.NoError(t, err)
	assert.Equal(t, clock.Now(), s.LastActive.UTC())
	assert.ErrorIs(t, checkCall(in.wl, gateName, "no-such-session-0000000"), session.ErrNotActive)
}
