package sqlite_test

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
	"github.com/anteroomhq/anteroom/session/sessiontest"
	"github.com/anteroomhq/anteroom/session/sqlite"
)

func allHistory(t *testing.T, s *sqlite.Store, gate string) []session.HistoryRecord {
	t.Helper()
	var out []session.HistoryRecord
	q := session.HistoryQuery{Gate: gate, Limit: session.MaxHistoryLimit}
	for {
		page, err := s.History(context.Background(), q)
		require.NoError(t, err)
		out = append(out, page.Records...)
		if page.Next == nil {
			return out
		}
		q.Before = page.Next
	}
}

// DisableHistory writes nothing; what was written before stays readable.
func TestHistoryDisabled(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "a.db")
	cfg := sessiontest.GateConfig("g", 1)
	now := sessiontest.Epoch

	s, err := sqlite.Open(path, sqlite.Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	_, err = s.Join(ctx, cfg, "before", now)
	require.NoError(t, err)
	require.NoError(t, s.Close())

	s, err = sqlite.Open(path, sqlite.Options{Logger: slog.New(slog.DiscardHandler), DisableHistory: true})
	require.NoError(t, err)
	defer s.Close()
	_, err = s.Join(ctx, cfg, "a", now)
	require.NoError(t, err)
	_, err = s.Leave(ctx, cfg, "a", now)
	require.NoError(t, err)
	_, err = s.Release(ctx, cfg, "before", now) // a is promoted
	require.NoError(t, err)
	got := allHistory(t, s, "g")
	require.Len(t, got, 1)
	assert.Equal(t, "before", got[0].Session)
}

// Concurrent joins are group-committed with their records: every join has
// exactly one record, in fewer transactions than joins (multi-row INSERTs
// of the records of a whole batch).
func TestHistoryGroupCommit(t *testing.T) {
	ctx := context.Background()
	s, err := sqlite.Open(filepath.Join(t.TempDir(), "a.db"), sqlite.Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	defer s.Close()
	cfg := sessiontest.GateConfig("g", 100)
	const n = 600
	before := s.Transactions()
	var wg sync.WaitGroup
	for w := range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 12 {
				_, err := s.Join(ctx, cfg, fmt.Sprintf("s%03d", i), sessiontest.Epoch.Add(time.Duration(i)))
				assert.NoError(t, err)
			}
		}()
	}
	wg.Wait()
	recs := allHistory(t, s, "g")
	require.Len(t, recs, n)
	seen := map[string]int{}
	active := 0
	for _, r := range recs {
		assert.Equal(t, session.HistoryJoined, r.Kind)
		seen[r.Session]++
		if r.Status == session.StatusActive {
			active++
		}
	}
	assert.Len(t, seen, n, "one record per join")
	assert.Equal(t, 100, active, "the first 100 were admitted")
	assert.Less(t, s.Transactions()-before, int64(n), "batched")
}

// BenchmarkJoinHistory: concurrent joins (group-committed), with history
// and without. cpu-ns/op is the process's CPU time per join (user and
// system), which a loaded machine disturbs less than the wall clock.
func BenchmarkJoinHistory(b *testing.B) {
	for _, off := range []bool{false, true} {
		name := "on"
		if off {
			name = "off"
		}
		b.Run(name, func(b *testing.B) {
			s, err := sqlite.Open(filepath.Join(b.TempDir(), "a.db"), sqlite.Options{Logger: slog.New(slog.DiscardHandler), DisableHistory: off})
			require.NoError(b, err)
			defer s.Close()
			cfg := sessiontest.GateConfig("g", 1000)
			var next atomic.Int64
			b.SetParallelism(64)
			cpu0 := cpuTime()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					i := next.Add(1)
					if _, err := s.Join(context.Background(), cfg, "s"+strconv.FormatInt(i, 36), sessiontest.Epoch); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}
