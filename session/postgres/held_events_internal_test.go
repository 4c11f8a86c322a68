package postgres

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
	"github.com/anteroomhq/anteroom/session/postgres/pgtest"
	"github.com/anteroomhq/anteroom/session/sessiontest"
)

// The writer reads the versions of a gate's events under its lock
// (decisions apply them over the runtime settings, and promotions stop at
// an open pre-queue), and reads an event's row whole (without its drawn
// line) only when the row changed: a started launch keeps megabytes of
// positions in its row, which every join would otherwise read.
func TestHeldEventsAreReadOncePerChange(t *testing.T) {
	url := pgtest.DB(t)
	ctx := context.Background()
	s, err := Open(ctx, url, Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	cfg := sessiontest.GateConfig("g", 1<<30)
	_, err = s.Load(ctx, []string{"g"})
	require.NoError(t, err)
	admin, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer admin.Close(ctx)

	pos := make([]int64, 50_000)
	for i := range pos {
		pos[i] = int64(1_000 + i)
	}
	ev := session.ScheduledEvent{Gate: "g", ID: "drop", PrequeueAt: sessiontest.Epoch.Add(-2 * time.Hour),
		StartsAt: sessiontest.Epoch.Add(-time.Hour), Phase: session.EventStarted, FirstPosition: 1_000, Positions: pos,
		Seed: make([]byte, session.LotterySeedSize), StartedAt: sessiontest.Epoch.Add(-time.Hour)}
	raw, err := session.EncodeStoredEvent(ev)
	require.NoError(t, err)
	_, err = admin.Exec(ctx, `INSERT INTO anteroom_events (gate, id, event) VALUES ('g', 'drop', $1)`, raw)
	require.NoError(t, err)
	joins := func(tag string) {
		for i := range 5 {
			_, err := s.Join(ctx, cfg, fmt.Sprint(tag, i), sessiontest.Epoch)
			require.NoError(t, err)
		}
	}
	inWriter := func(fn func()) { // the writer's fields, read on its goroutine
		require.NoError(t, s.eventOp(ctx, "g", func(context.Context, *batch, *gateTx) error { fn(); return nil }))
	}
	reads := func() (n int64) {
		inWriter(func() { n = s.eventReads })
		return n
	}

	joins("plain")
	assert.Equal(t, int64(1), reads(), "read once, then known by its version")

	require.NoError(t, s.SaveGateSettings(ctx, "g", &cfg))
	joins("held")
	assert.Equal(t, int64(1), reads(), "runtime settings need no read of their own")

	_, err = admin.Exec(ctx, `UPDATE anteroom_events SET event = event WHERE gate = 'g'`)
	require.NoError(t, err)
	joins("changed")
	assert.Equal(t, int64(2), reads(), "read again once the row changed")

	_, err = admin.Exec(ctx, `DELETE FROM anteroom_events WHERE gate = 'g'`)
	require.NoError(t, err)
	joins("gone")
	inWriter(func() { assert.Empty(t, s.heldEvents["g"], "the cache keeps only the events stored") })
}
