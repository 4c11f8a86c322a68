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

	_, raw := startedLaunchRow(t, 50_000, 1_000)
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

// Stored events and settings that do not decode: the shared suite's tests
// (sessiontest.RunDamagedRowSuite), the row rewritten by hand while the
// store is closed.
func TestDamagedRowSuite(t *testing.T) {
	sessiontest.RunDamagedRowSuite(t, func(tb testing.TB) (func() session.Store, func(gate, id, value string)) {
		url := pgtest.DB(tb)
		ctx := context.Background()
		open := func() session.Store {
			s, err := Open(ctx, url, Options{Logger: slog.New(slog.DiscardHandler)})
			require.NoError(tb, err)
			return s
		}
		damage := func(gate, id, value string) {
			admin, err := pgx.Connect(ctx, url)
			require.NoError(tb, err)
			defer admin.Close(ctx)
			stmt, args := `UPDATE anteroom_events SET event = $3 WHERE gate = $1 AND id = $2`, []any{gate, id, value}
			if id == "" {
				stmt, args = `UPDATE anteroom_gate_settings SET settings = $2 WHERE gate = $1`, []any{gate, value}
			}
			tag, err := admin.Exec(ctx, stmt, args...)
			require.NoError(tb, err)
			require.Equal(tb, int64(1), tag.RowsAffected())
		}
		return open, damage
	})
}

// Events (what a Waitlist over this store reads again every few seconds)
// reads the versions of the gate's rows and reads a row whole only when it
// changed: a started launch's row holds its drawn line. A damaged row is
// logged once per version and left out.
func TestEventsReadEachRowOncePerChange(t *testing.T) {
	url := pgtest.DB(t)
	ctx := context.Background()
	logs := &sessiontest.LogBuffer{}
	s, err := Open(ctx, url, Options{Logger: slog.New(slog.NewTextHandler(logs, nil))})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	admin, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer admin.Close(ctx)

	pos, raw := startedLaunchRow(t, 50_000, 1_000)
	_, err = admin.Exec(ctx, `INSERT INTO anteroom_events (gate, id, event) VALUES ('g', 'drop', $1), ('g', 'bad', '{"phase":"bogus"}')`, raw)
	require.NoError(t, err)

	list := func() []session.ScheduledEvent {
		evs, err := s.Events(ctx, "g")
		require.NoError(t, err)
		return evs
	}
	for range 3 {
		evs := list()
		require.Len(t, evs, 1, "the damaged row is left out")
		assert.Equal(t, pos, evs[0].Positions, "with its drawn line")
	}
	assert.Equal(t, int64(2), s.eventBodyReads.Load(), "each row read whole once, then known by its version")
	assert.Equal(t, 1, strings.Count(logs.String(), "stored event is damaged"), "logged once per version: %s", logs)

	_, err = admin.Exec(ctx, `UPDATE anteroom_events SET event = event WHERE gate = 'g' AND id = 'drop'`)
	require.NoError(t, err)
	require.Len(t, list(), 1)
	assert.Equal(t, int64(3), s.eventBodyReads.Load(), "read again once its row changed, and only it")

	_, err = admin.Exec(ctx, `UPDATE anteroom_events SET event = $1 WHERE gate = 'g' AND id = 'bad'`, raw)
	require.NoError(t, err)
	assert.Len(t, list(), 2, "a mended row comes back")

	_, err = admin.Exec(ctx, `DELETE FROM anteroom_events WHERE gate = 'g'`)
	require.NoError(t, err)
	assert.Empty(t, list())
	assert.Nil(t, s.readCache.of("g"), "the cache keeps only the events stored")
}

// BenchmarkEventsReloadOfALaunch is the reading of a gate's events a
// Waitlist over this store repeats every few seconds, the gate holding a
// started launch of a million entrants (its row about 8 MB).
func BenchmarkEventsReloadOfALaunch(b *testing.B) {
	url := pgtest.DB(b)
	ctx := context.Background()
	s, err := Open(ctx, url, Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(b, err)
	b.Cleanup(func() { _ = s.Close() })
	pos, raw := startedLaunchRow(b, 1_000_000, 1_000_000)
	_, err = s.pool.Exec(ctx, `INSERT INTO anteroom_events (gate, id, event) VALUES ('g', 'drop', $1)`, raw)
	require.NoError(b, err)
	b.ResetTimer()
	for b.Loop() {
		evs, err := s.Events(ctx, "g")
		if err != nil || len(evs) != 1 || len(evs[0].Positions) != len(pos) {
			b.Fatalf("events: %v, %d", err, len(evs))
		}
	}
}

// Events' cache forgets a gate nobody asked for in eventCacheIdle (a gate
// removed on another instance), and RemoveGate forgets its gate at once.
func TestEventsCacheForgetsGates(t *testing.T) {
	var c eventCache
	t0 := sessiontest.Epoch
	one := map[string]heldEvent{"e": {xmin: "1"}}
	c.set("a", one, t0)
	c.set("b", one, t0.Add(eventCacheIdle/2))
	assert.NotNil(t, c.of("a"))
	c.set("b", one, t0.Add(eventCacheIdle+time.Second))
	assert.Nil(t, c.of("a"), "not asked for since eventCacheIdle")
	assert.NotNil(t, c.of("b"))
	c.set("b", nil, t0.Add(eventCacheIdle+2*time.Second))
	assert.Nil(t, c.of("b"), "no events")

	url := pgtest.DB(t)
	ctx := context.Background()
	s, err := Open(ctx, url, Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	cfg := sessiontest.GateConfig("g", 10)
	_, err = s.SaveEvent(ctx, session.ScheduledEvent{Gate: "g", ID: "later", PrequeueAt: sessiontest.Epoch.Add(time.Hour),
		StartsAt: sessiontest.Epoch.Add(2 * time.Hour), Seed: make([]byte, session.LotterySeedSize)})
	require.NoError(t, err)
	evs, err := s.Events(ctx, "g")
	require.NoError(t, err)
	require.Len(t, evs, 1)
	require.NotNil(t, s.readCache.of("g"))
	cfg.Mode = session.ModeReject
	require.NoError(t, s.RemoveGate(ctx, cfg, sessiontest.Epoch))
	assert.Nil(t, s.readCache.of("g"))
}

// startedLaunchRow returns the positions and the stored JSON of event
// "drop" of gate "g", a launch started an hour before sessiontest.Epoch
// with n entrants from position first on.
func startedLaunchRow(tb testing.TB, n int, first int64) ([]int64, []byte) {
	tb.Helper()
	pos := make([]int64, n)
	for i := range pos {
		pos[i] = first + int64(i)
	}
	ev := session.ScheduledEvent{Gate: "g", ID: "drop", PrequeueAt: sessiontest.Epoch.Add(-2 * time.Hour),
		StartsAt: sessiontest.Epoch.Add(-time.Hour), Phase: session.EventStarted, FirstPosition: first, Positions: pos,
		Seed: make([]byte, session.LotterySeedSize), StartedAt: sessiontest.Epoch.Add(-time.Hour)}
	raw, err := session.EncodeStoredEvent(ev)
	require.NoError(tb, err)
	return pos, raw
}
