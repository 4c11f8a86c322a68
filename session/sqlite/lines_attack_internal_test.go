package sqlite

// From an attack on the drawn line's row of its own and the hold of a
// damaged event.

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
	"github.com/anteroomhq/anteroom/session/sessiontest"
)

// A damaged event row whose key's id is not one the API accepts (here 65
// characters: a newer version's longer id read after a rollback, or a
// hand edit) was never an event of this service, and DeleteEvent could
// not name it: it holds nothing (session.DamagedEventHolds), and is left
// out. Held, the gate could not be opened again but by removing it.
func TestADamagedEventOfAnUnnamableIDHoldsNothing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "d.db")
	s, err := Open(path, Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	require.NoError(t, s.Close())
	id := strings.Repeat("x", 65)
	ev := session.ScheduledEvent{Gate: "default", ID: "ok", PrequeueAt: epoch.Add(time.Hour),
		StartsAt: epoch.Add(2 * time.Hour), Seed: make([]byte, session.LotterySeedSize), Phase: session.EventPrequeue, FirstPosition: 1}
	raw, err := session.EncodeStoredEvent(ev) // a well-formed open pre-queue, under an id of 65 characters
	require.NoError(t, err)
	rawExec(t, path, `INSERT INTO meta (key, value) VALUES ('gate_events/default/`+id+`', '`+string(raw)+`')`)

	s, err = Open(path, Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	ctx, cfg := context.Background(), sessiontest.GateConfig("default", 5)
	got, err := s.Join(ctx, cfg, "a", epoch)
	require.NoError(t, err)
	assert.Equal(t, session.StatusActive, got.Status, "not held")
	evs, err := s.Events(ctx, "default")
	require.NoError(t, err)
	assert.Empty(t, evs, "left out")
}

// A line row whose event row is gone (an older build, after a rollback,
// deletes an event or a gate without knowing of lines: it deletes only
// gate_events/...) is adopted by the next event of that id whose launch
// has nobody in its pre-queue: such a start writes no line row, and
// withLines reads the stale one as its drawn line. The published lottery
// data then shows positions that were never drawn.
func TestAnEmptyLaunchKeepsNoStaleLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "d.db")
	s, err := Open(path, Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	ctx, cfg := context.Background(), sessiontest.GateConfig("default", 1)
	ev := session.ScheduledEvent{Gate: "default", ID: "drop", PrequeueAt: epoch.Add(time.Minute),
		StartsAt: epoch.Add(2 * time.Minute), Seed: make([]byte, session.LotterySeedSize)}
	_, err = s.SaveEvent(ctx, ev)
	require.NoError(t, err)
	_, _, err = s.AdvanceEvent(ctx, "default", "drop", ev.PrequeueAt)
	require.NoError(t, err)
	for _, id := range []string{"p1", "p2", "p3"} {
		_, err := s.Join(ctx, cfg, id, ev.PrequeueAt)
		require.NoError(t, err)
	}
	started, _, err := s.AdvanceEvent(ctx, "default", "drop", ev.StartsAt)
	require.NoError(t, err)
	require.Len(t, started.Positions, 3)
	for _, id := range []string{"p1", "p2", "p3"} {
		_, err := s.Release(ctx, cfg, id, ev.StartsAt)
		require.NoError(t, err)
	}
	require.NoError(t, s.Close())
	// An older build's DeleteEvent: the event's row only.
	rawExec(t, path, `DELETE FROM meta WHERE key = 'gate_events/default/drop'`)

	s, err = Open(path, Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	again := ev
	again.PrequeueAt, again.StartsAt = epoch.Add(time.Hour), epoch.Add(2*time.Hour)
	_, err = s.SaveEvent(ctx, again)
	require.NoError(t, err)
	_, _, err = s.AdvanceEvent(ctx, "default", "drop", again.PrequeueAt)
	require.NoError(t, err)
	out, _, err := s.AdvanceEvent(ctx, "default", "drop", again.StartsAt) // nobody in its pre-queue
	require.NoError(t, err)
	assert.Empty(t, out.Positions, "AdvanceEvent's answer")
	evs, err := s.Events(ctx, "default")
	require.NoError(t, err)
	require.Len(t, evs, 1)
	assert.Empty(t, evs[0].Positions, "an empty launch published a stale drawn line")
}

// A started event whose JSON decodes but whose line row does not: Load
// and Events leave it out ("as a damaged event": memory loses its
// overrides, which the docs say is all a started event's damage costs),
// but the writer's decisions (storedEvents, which never read the line)
// keep it and apply its overrides: the store admits by a limit that
// memory, GET gates and the dashboard do not show.
func TestADamagedLineIsLeftOutEverywhereAlike(t *testing.T) {
	path := filepath.Join(t.TempDir(), "d.db")
	s, err := Open(path, Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	ctx, cfg := context.Background(), sessiontest.GateConfig("default", 1)
	require.NoError(t, s.SaveGateSettings(ctx, "default", &cfg))
	three := int64(3)
	ev := session.ScheduledEvent{Gate: "default", ID: "drop", PrequeueAt: epoch.Add(time.Minute),
		StartsAt: epoch.Add(2 * time.Minute), ActiveLimit: &three, Seed: make([]byte, session.LotterySeedSize)}
	_, err = s.SaveEvent(ctx, ev)
	require.NoError(t, err)
	_, err = s.Join(ctx, cfg, "a", epoch) // active
	require.NoError(t, err)
	_, _, err = s.AdvanceEvent(ctx, "default", "drop", ev.PrequeueAt)
	require.NoError(t, err)
	for _, id := range []string{"w1", "w2"} {
		_, err := s.Join(ctx, cfg, id, ev.PrequeueAt)
		require.NoError(t, err)
	}
	_, _, err = s.AdvanceEvent(ctx, "default", "drop", ev.StartsAt)
	require.NoError(t, err)
	require.NoError(t, s.Close())
	rawExec(t, path, `UPDATE meta SET value = x'02' WHERE key = 'gate_event_lines/default/drop'`)

	s, err = Open(path, Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	snaps, err := s.Load(ctx, []string{"default"})
	require.NoError(t, err)
	require.Empty(t, snaps["default"].Events, "Load leaves the event out")
	memCfg := session.EventConfig(cfg, snaps["default"].Events, ev.StartsAt) // what memory decides and shows: limit 1
	require.Equal(t, int64(1), memCfg.ActiveLimit)
	rep, err := s.Update(ctx, memCfg, ev.StartsAt, 0)
	require.NoError(t, err)
	assert.Zero(t, rep.Promoted, "the writer applied the overrides of an event memory left out (limit 3, not 1)")
}

// A started event whose line does not decode is left out by the writer,
// which then decides with the ops' own configuration; deleting the event
// (its JSON decodes: the normal path) reads the gate's events again, so
// that the stored runtime settings decide once more. They used to stay
// ignored until the gate's entry was read again (a restart, a failed
// batch): a join carrying a stale limit got in past the stored one. From
// a review.
func TestDeletingAnEventWithADamagedLineRestoresTheStoredSettings(t *testing.T) {
	path := filepath.Join(t.TempDir(), "d.db")
	s, err := Open(path, Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	ctx, held := context.Background(), sessiontest.GateConfig("default", 1)
	require.NoError(t, s.SaveGateSettings(ctx, "default", &held))
	startLaunch(t, s, 0) // nobody waiting: every join below decides by its limit alone
	require.NoError(t, s.Close())
	rawExec(t, path, `UPDATE meta SET value = x'02' WHERE key = 'gate_event_lines/default/drop'`)

	s, err = Open(path, Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	stale := sessiontest.GateConfig("default", 50) // what a caller read before the settings were saved
	got, err := s.Join(ctx, stale, "x1", epoch.Add(time.Hour))
	require.NoError(t, err)
	require.Equal(t, session.StatusActive, got.Status)
	got, err = s.Join(ctx, stale, "x1b", epoch.Add(time.Hour))
	require.NoError(t, err)
	require.Equal(t, session.StatusActive, got.Status, "the event left out: the op's own limit (50) decides, not the stored one (1)")
	require.NoError(t, s.DeleteEvent(ctx, "default", "drop"))
	got, err = s.Join(ctx, stale, "x2", epoch.Add(time.Hour))
	require.NoError(t, err)
	assert.Equal(t, session.StatusWaiting, got.Status, "decided with the stored limit (1) again, not the op's (50)")
}
