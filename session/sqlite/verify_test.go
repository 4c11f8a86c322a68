package sqlite_test

import (
	"context"
	"database/sql"
	"github.com/anteroomhq/anteroom/session/sessiontest"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
	"github.com/anteroomhq/anteroom/session/sqlite"
)

// On open the store checks every gate's counters against its rows and
// next_position against the largest position, repairs a mismatch and says so
// with the numbers.
func TestOpenRepairsCountersThatDisagreeWithTheRows(t *testing.T) {
	path := filepath.Join(t.TempDir(), "anteroom.db")
	cfg := session.GateConfig{Name: "default", ActiveLimit: 2, ActiveTimeout: time.Hour, WaitingTimeout: time.Hour}
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	ctx := context.Background()

	st, err := sqlite.Open(path, sqlite.Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	for _, id := range []string{"a", "b", "c", "d", "e"} { // 2 active, 3 waiting, positions 1-5
		_, err := st.Join(ctx, cfg, id, now)
		require.NoError(t, err)
	}
	require.NoError(t, st.Close())

	// A clean open says nothing.
	var log sessiontest.LogBuffer
	st, err = sqlite.Open(path, sqlite.Options{Logger: slog.New(slog.NewTextHandler(&log, nil))})
	require.NoError(t, err)
	require.NoError(t, st.Close())
	assert.NotContains(t, log.String(), "repaired")

	// Damage the counters behind the store's back.
	db, err := sql.Open("sqlite", path)
	require.NoError(t, err)
	_, err = db.Exec(`UPDATE gates SET active = 9, waiting = 0, next_position = 3 WHERE name = 'default'`)
	require.NoError(t, err)
	require.NoError(t, db.Close())

	st, err = sqlite.Open(path, sqlite.Options{Logger: slog.New(slog.NewTextHandler(&log, nil))})
	require.NoError(t, err)
	defer st.Close()
	out := log.String()
	assert.Contains(t, out, "level=WARN")
	assert.Contains(t, out, "repaired")
	for _, kv := range []string{"gate=default", "active_stored=9", "active_rows=2", "waiting_stored=0", "waiting_rows=3", "next_position_stored=3", "largest_position=5"} {
		assert.Contains(t, out, kv)
	}

	snaps, err := st.Load(ctx, []string{"default"})
	require.NoError(t, err)
	got := snaps["default"].State
	assert.Equal(t, session.Counters{NextPosition: 6, Active: 2, Waiting: 3}, got.Counters)
	s, err := st.Join(ctx, cfg, "f", now)
	require.NoError(t, err)
	assert.EqualValues(t, 6, s.Position, "no position is handed out twice")
}
