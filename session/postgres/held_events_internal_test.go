package postgres

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
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

// Started events of one start (instances can each save one, as admins, at
// once): the writer decides with them in memory's order
// (session.SortEvents), whose first one EventConfig keeps, not in the
// random order of its cache's map (random once it holds more than a few).
func TestHeldEventsAreAppliedInMemorysOrder(t *testing.T) {
	url := pgtest.DB(t)
	ctx := context.Background()
	s, err := Open(ctx, url, Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	cfg := sessiontest.GateConfig("g", 1000)
	_, err = s.Load(ctx, []string{"g"})
	require.NoError(t, err)
	require.NoError(t, s.SaveGateSettings(ctx, "g", &cfg))
	admin, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer admin.Close(ctx)
	limits := map[string]int64{"a": 0}
	for _, id := range strings.Split("bcdefghijklmnop", "") {
		limits[id] = 1000
	}
	for id, limit := range limits {
		ev := session.ScheduledEvent{Gate: "g", ID: id, PrequeueAt: sessiontest.Epoch.Add(-2 * time.Hour),
			StartsAt: sessiontest.Epoch.Add(-time.Hour), Phase: session.EventStarted, ActiveLimit: &limit,
			Seed: make([]byte, session.LotterySeedSize), StartedAt: sessiontest.Epoch.Add(-time.Hour)}
		raw, err := session.EncodeStoredEvent(ev)
		require.NoError(t, err)
		_, err = admin.Exec(ctx, `INSERT INTO anteroom_events (gate, id, event) VALUES ('g', $1, $2)`, id, raw)
		require.NoError(t, err)
	}
	memory := []session.ScheduledEvent{
		{ID: "b", StartsAt: sessiontest.Epoch.Add(-time.Hour), Phase: session.EventStarted, ActiveLimit: new(int64(1000))},
		{ID: "a", StartsAt: sessiontest.Epoch.Add(-time.Hour), Phase: session.EventStarted, ActiveLimit: new(int64(0))},
	}
	session.SortEvents(memory)
	require.Zero(t, session.EventConfig(cfg, memory, sessiontest.Epoch).ActiveLimit, "memory's first of the two: a")
	for i := range 20 {
		id := fmt.Sprint("s", i)
		got, err := s.Join(ctx, cfg, id, sessiontest.Epoch)
		require.NoError(t, err)
		assert.Equal(t, session.StatusWaiting, got.Status, "round %d: joined past the limit of event a", i)
		_, err = s.Leave(ctx, cfg, id, sessiontest.Epoch)
		require.NoError(t, err)
	}
}

// The writer's decodings of a gate's settings and events go with them:
// gates added and removed (through admin calls, for as long as the
// instance runs) leave nothing behind in its caches, and a gate whose
// settings were forgotten keeps none either.
func TestTheWritersCachesForgetRemovedGates(t *testing.T) {
	url := pgtest.DB(t)
	ctx := context.Background()
	s, err := Open(ctx, url, Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	now := sessiontest.Epoch
	names := make([]string, 5)
	for i := range names {
		names[i] = fmt.Sprint("g", i)
		cfg := sessiontest.GateConfig(names[i], 10)
		_, err := s.Load(ctx, []string{names[i]})
		require.NoError(t, err)
		require.NoError(t, s.SaveGateSettings(ctx, names[i], &cfg))
		_, err = s.SaveEvent(ctx, session.ScheduledEvent{Gate: names[i], ID: "later", PrequeueAt: now.Add(time.Hour),
			StartsAt: now.Add(2 * time.Hour), Seed: make([]byte, session.LotterySeedSize)})
		require.NoError(t, err)
		_, err = s.Join(ctx, cfg, "a", now) // a batch that locks the gate: its settings and events decoded
		require.NoError(t, err)
	}
	cached := func() (held, events []string) {
		require.NoError(t, s.eventOp(ctx, names[0], func(context.Context, *batch, *gateTx) error {
			for _, n := range names {
				if _, ok := s.held[n]; ok {
					held = append(held, n)
				}
				if _, ok := s.heldEvents[n]; ok {
					events = append(events, n)
				}
			}
			return nil
		}))
		return held, events
	}
	held, events := cached()
	require.Equal(t, names, held)
	require.Equal(t, names, events)

	for _, n := range names[1:4] {
		rejecting := sessiontest.GateConfig(n, 10)
		rejecting.Mode = session.ModeReject
		require.NoError(t, s.RemoveGate(ctx, rejecting, now))
	}
	require.NoError(t, s.SaveGateSettings(ctx, names[4], nil)) // forgotten
	_, err = s.Join(ctx, sessiontest.GateConfig(names[4], 10), "b", now)
	require.NoError(t, err)
	held, events = cached()
	assert.Equal(t, names[:1], held, "settings decoded for removed or forgotten gates")
	assert.Equal(t, []string{names[0], names[4]}, events, "events decoded for removed gates")
}
