package sqlite

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The update finds stale sessions through indexes on their expiry
// (migrations/0009), never by sweeping the gate's rows: its cost follows
// what is stale, not the length of the line (issue 14). Also the start-up
// statements read what they need without a sort.
func TestPurgeStatementsSearchAnIndex(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.db")
	s, err := Open(path, Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	require.NoError(t, s.Close())
	db, err := sqlOpen(path)
	require.NoError(t, err)
	defer db.Close()
	for name, q := range map[string]string{"purge waiting": sqlPurgeWaiting, "purge active": sqlPurgeActive} {
		rows, err := db.QueryContext(context.Background(), "EXPLAIN QUERY PLAN "+q, "default", 1, 10, 1)
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
		assert.NotContains(t, joined, "SCAN sessions", "%s sweeps the table:\n%s", name, joined)
		assert.NotContains(t, joined, "TEMP B-TREE", "%s sorts:\n%s", name, joined)
		assert.Contains(t, joined, "sessions_last_active", name)
	}
}
