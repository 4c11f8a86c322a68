package postgres

import (
	"context"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
	"github.com/anteroomhq/anteroom/session/postgres/pgtest"
)

// A database of schema 1 (before presence) migrates to 2: waiters that had
// not left are seen at the upgrade (none is purged by the upgrade itself),
// the others keep their rows; claim deadlines are stored, and a resync
// snapshot carries them and the waiting positions.
func TestMigrateFrom0001(t *testing.T) {
	url := pgtest.DB(t)
	ctx := context.Background()
	ms, err := migrations()
	require.NoError(t, err)
	require.Equal(t, 1, ms[0].version)
	c, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	_, err = c.Exec(ctx, `CREATE TABLE anteroom_schema_migrations (
		version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`)
	require.NoError(t, err)
	_, err = c.Exec(ctx, ms[0].sql)
	require.NoError(t, err)
	_, err = c.Exec(ctx, `INSERT INTO anteroom_schema_migrations (version, name) VALUES (1, $1)`, ms[0].name)
	require.NoError(t, err)
	created := time.Now().Add(-2 * time.Hour).UnixNano()
	left := created + int64(time.Minute)
	seen := time.Now().Add(-time.Minute).UnixNano()
	_, err = c.Exec(ctx, `INSERT INTO anteroom_gates (name, next_position, active, waiting) VALUES ('g', 4, 1, 2);
		INSERT INTO anteroom_sessions (gate, position, id, status, last_active, created_at) VALUES
		('g', 1, 'act', 1, `+itoa(seen)+`, `+itoa(created)+`),
		('g', 2, 'stays', 0, NULL, `+itoa(created)+`),
		('g', 3, 'left', 0, `+itoa(left)+`, `+itoa(created)+`)`)
	require.NoError(t, err)
	require.NoError(t, c.Close(ctx))

	s, err := Open(ctx, url, Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	rows, err := s.Rows(ctx, "g")
	require.NoError(t, err)
	require.Len(t, rows, 3)
	assert.Equal(t, seen, rows[0].LastActive.UnixNano(), "an active session's last_active is kept")
	assert.WithinDuration(t, time.Now(), rows[1].LastActive, time.Minute, "a waiter that had not left is seen at the upgrade")
	assert.Equal(t, left, rows[2].LastActive.UnixNano(), "a waiter that had left keeps its mark")
	for _, r := range rows {
		assert.True(t, r.ClaimDeadline.IsZero())
		assert.Equal(t, created, r.CreatedAt.UnixNano())
	}
	cfg := session.GateConfig{Name: "g", ActiveLimit: 1, ActiveTimeout: time.Hour, WaitingTimeout: time.Hour}
	rep, err := s.Update(ctx, cfg, time.Now(), 0)
	require.NoError(t, err)
	assert.Equal(t, int64(1), rep.PurgedWaiting, "only the waiter that had left long ago goes")
	assert.Zero(t, rep.PurgedActive, "the active one was seen less than an hour before")

	// A promotion's claim deadline is stored and read back by a resync.
	cfg.ClaimTimeout = time.Minute
	now := time.Now()
	_, err = s.Release(ctx, cfg, "act", now)
	require.NoError(t, err)
	got, err := s.Get(ctx, "g", "stays")
	require.NoError(t, err)
	require.Equal(t, session.StatusActive, got.Status)
	assert.Equal(t, now.Add(time.Minute).UnixNano(), got.ClaimDeadline.UnixNano())
	_, err = s.Join(ctx, cfg, "w1", now)
	require.NoError(t, err)
	_, err = s.Join(ctx, cfg, "w2", now)
	require.NoError(t, err)
	conn, err := s.pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	snap, _, err := readSnapshot(ctx, conn.Conn(), "g")
	require.NoError(t, err)
	require.Len(t, snap.Active, 1)
	assert.Equal(t, got.ClaimDeadline.UnixNano(), snap.Active[0].ClaimDeadline.UnixNano(), "the resync carries the claim deadline")
	assert.Equal(t, []int64{4, 5}, snap.Waiting, "the resync carries the waiting positions")
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
