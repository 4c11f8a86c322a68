package sqlite

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The update finds stale sessions through indexes on their expiry
// (migrations/0009, 0011), never by sweeping the gate's rows: its cost
// follows what is stale, not the length of the line (issue 14). The
// cleaner finds purged rows the same way, and the statements that leave
// purged rows out still walk the line in position order, without a sort.
func TestPurgeStatementsSearchAnIndex(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.db")
	s, err := Open(path, Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	require.NoError(t, s.Close())
	db, err := sqlOpen(path)
	require.NoError(t, err)
	defer db.Close()
	for _, tc := range []struct {
		name, q, index string
		args           []any
	}{
		{"purge by a mark, from the index alone", sqlStaleSeenInMarksSecond, "COVERING INDEX sessions_seen", []any{"default", 1, 2, 3, 10, 0}},
		{"purge waiting without a sign of life", sqlPurgeWaitingInPlace, "sessions_unseen", []any{"default", 1, 10, 0, 2, 3, 4}},
		{"purge waiting of the cutoff's second, from a position on", sqlPurgeWaitingInPlace, "sessions_seen (gate=? AND status=? AND notify=? AND <expr>=? AND position>?)", []any{"default", 1, 10, 0, 2, 3, 4}},
		{"purge active of the cutoff's second, from a position on", sqlPurgeActive, "sessions_seen (gate=? AND status=? AND notify=? AND <expr>=? AND position>?)", []any{"default", 1, 10, 1, 2, 3, 4}},
		{"purge by a mark, the rest of the mark's second", sqlStaleSeenInMarksSecond, "COVERING INDEX sessions_seen (gate=? AND status=? AND notify=? AND <expr>=? AND position>?)", []any{"default", 1, 2, 3, 10, 0}},
		{"purge by a mark, the later seconds", sqlStaleSeenAfterMarksSecond, "COVERING INDEX sessions_seen (gate=? AND status=? AND notify=? AND <expr>>? AND <expr><?)", []any{"default", 1, 2, 3, 10, 0}},
		{"purge by a mark with claims, the later seconds", sqlStaleSeenClaimAfterMarksSecond, "sessions_seen (gate=? AND status=? AND notify=? AND <expr>>? AND <expr><?)", []any{"default", 1, 2, 3, 10, 1}},
		{"purge by a mark, claim deadlines from the rows", sqlStaleSeenClaimInMarksSecond, "sessions_seen", []any{"default", 1, 2, 3, 10, 1}},
		{"any claim deadline", sqlAnyClaim, "sessions_claim", []any{"default"}},
		{"purge active", sqlPurgeActive, "sessions_seen", []any{"default", 1, 10, 1, 2, 3, 4}},
		{"delete purged rows", sqlCleanPurged, "sessions_seen", []any{"default", 10}},
		{"first waiters", sqlFirstWaiters, "PRIMARY KEY", []any{"default", 1, 10, 1, 2}},
		{"waiting bounds", sqlBounds, "PRIMARY KEY", []any{"default", 1, 1, 2}},
		{"waiting positions", sqlWaitingPos, "PRIMARY KEY", []any{"default", 1, 2}},
	} {
		rows, err := db.QueryContext(context.Background(), "EXPLAIN QUERY PLAN "+tc.q, tc.args...)
		require.NoError(t, err)
		var plan []string
		for rows.Next() {
			var id, parent, unused int
			var detail string
			require.NoError(t, rows.Scan(&id, &parent, &unused, &detail))
			plan = append(plan, detail)
		}
		require.NoError(t, rows.Err())
		rows.Close()
		joined := strings.Join(plan, "\n")
		assert.NotContains(t, joined, "TEMP B-TREE", "%s sorts:\n%s", tc.name, joined)
		assert.Contains(t, joined, tc.index, "%s:\n%s", tc.name, joined)
		t.Logf("%s:\n%s", tc.name, joined)
		if tc.index != "PRIMARY KEY" {
			assert.NotContains(t, joined, "SCAN sessions", "%s sweeps the table:\n%s", tc.name, joined)
			// A search by the gate (or the gate, status and notify)
			// alone sweeps the gate's rows in some order.
			assert.NotContains(t, joined, "(gate=?)", "%s sweeps the gate:\n%s", tc.name, joined)
			assert.NotContains(t, joined, "notify=?)", "%s sweeps a status of the gate:\n%s", tc.name, joined)
		}
	}
}

// The priority lane's statements seek its partial indexes: on a long line
// of the normal lane, a plan through another index of the gate would step
// over every waiter at each promotion (or each load of the active set).
func TestPriorityStatementsSearchTheirIndexes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.db")
	s, err := Open(path, Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	require.NoError(t, s.Close())
	db, err := sqlOpen(path)
	require.NoError(t, err)
	defer db.Close()
	for _, tc := range []struct {
		name, q, index string
		args           []any
	}{
		{"first priority waiters", sqlFirstPriority, "sessions_priority", []any{"default", 10, 1, 2}},
		{"priority positions", sqlPriorityPos, "sessions_priority", []any{"default", 1, 2}},
		{"active set", sqlActive, "sessions_priority_active", []any{"default", 100, 1, 2}},
	} {
		rows, err := db.QueryContext(context.Background(), "EXPLAIN QUERY PLAN "+tc.q, tc.args...)
		require.NoError(t, err)
		var plan []string
		for rows.Next() {
			var id, parent, unused int
			var detail string
			require.NoError(t, rows.Scan(&id, &parent, &unused, &detail))
			plan = append(plan, detail)
		}
		require.NoError(t, rows.Err())
		rows.Close()
		joined := strings.Join(plan, "\n")
		assert.Contains(t, joined, tc.index, "%s:\n%s", tc.name, joined)
		t.Logf("%s:\n%s", tc.name, joined)
		assert.NotContains(t, joined, "SCAN sessions", "%s sweeps the table:\n%s", tc.name, joined)
	}
}

// The marks' order is written three times: in Go (seenSecondNanos), in the
// statements (sqlPerSecond) and in the index of migrations/0013, which
// SQLite uses only for the very expression the statements write.
func TestTheMarksOrderIsOneUnit(t *testing.T) {
	assert.Equal(t, fmt.Sprintf(" / %d", seenSecondNanos), sqlPerSecond)
	m, err := os.ReadFile("migrations/0013_seen_order.sql")
	require.NoError(t, err)
	assert.Contains(t, string(m), "ON sessions (gate, status, notify, "+sqlSeenSecond+", position,")
}
