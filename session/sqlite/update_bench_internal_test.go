package sqlite

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
)

// BenchmarkUpdateAtAMillion times one Update on a copy of a file of a
// million sessions where 1% are stale (5,000 idle active sessions at the
// front, 5,000 gone waiters spread over the line; anteroom-bench's update
// scenario without its joins), the store alone: what the update's own
// statements and bookkeeping cost, with less noise than the scenario. The
// live sessions were last seen at random over the 15 s before, a quarter
// of the waiting timeout, as on a live file (the flusher's spread).
// Each iteration opens a fresh copy; only the Update is timed.
//
//	go test ./session/sqlite/ -run '^$' -bench UpdateAtAMillion -benchtime 8x
func BenchmarkUpdateAtAMillion(b *testing.B) {
	const n, active, staleActive, staleWaiting = 1_000_000, 10_000, 5_000, 5_000
	tmpl := filepath.Join(b.TempDir(), "t.db")
	s, err := Open(tmpl, Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(b, err)
	require.NoError(b, s.Close())
	now := epoch.Add(time.Hour)
	old, seen := now.Add(-50*time.Minute).UnixNano(), now.Add(-time.Second).UnixNano()
	stride := (n - active) / staleWaiting
	rawExec(b, tmpl, fmt.Sprintf(`WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < %[1]d)
INSERT INTO sessions (gate, position, id, status, last_active, created_at)
SELECT 'default', x, lower(hex(randomblob(11))), x <= %[2]d,
       CASE WHEN x <= %[3]d OR (x > %[2]d AND (x - %[2]d) %% %[4]d = 0 AND (x - %[2]d) / %[4]d <= %[5]d) THEN %[6]d ELSE %[7]d - (random() & 1099511627775) %% %[8]d END,
       %[6]d FROM c`, n, active, staleActive, stride, staleWaiting, old, seen, (15*time.Second).Nanoseconds()),
		fmt.Sprintf(`INSERT INTO gates (name, next_position, active, waiting) VALUES ('default', %d, %d, %d)`, n+1, active, n-active),
		`PRAGMA wal_checkpoint(TRUNCATE)`)
	cfg := session.GateConfig{Name: "default", ActiveLimit: active, ActiveTimeout: 5 * time.Minute, WaitingTimeout: time.Minute}
	ctx := context.Background()
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		st, err := Open(copyFiles(b, tmpl, b.TempDir(), "", ".id"), Options{Logger: slog.New(slog.DiscardHandler)})
		require.NoError(b, err)
		_, err = st.Load(ctx, []string{cfg.Name})
		require.NoError(b, err)
		b.StartTimer()
		rep, err := st.Update(ctx, cfg, now, session.DefaultUpdateChunk)
		b.StopTimer()
		require.NoError(b, err)
		require.EqualValues(b, staleActive, rep.PurgedActive)
		require.EqualValues(b, staleWaiting, rep.PurgedWaiting)
		require.EqualValues(b, staleActive, rep.Promoted)
		require.NoError(b, st.Close())
		b.StartTimer()
	}
}
