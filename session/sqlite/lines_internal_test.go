package sqlite

// A started launch's drawn line in a row of its own (lines.go): its codec
// against hostile bytes, and who reads it.

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
	"github.com/anteroomhq/anteroom/session/sessiontest"
)

func TestDrawnLineCodec(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	for _, n := range []int{0, 1, 2, 100, 10_000} {
		line := make([]int64, n)
		p := int64(rng.IntN(1 << 20))
		for i := range line {
			p += 1 + int64(rng.IntN(1<<uint(rng.IntN(40))))
			line[i] = p
		}
		got, err := decodeLine(encodeLine(line))
		require.NoError(t, err, "n=%d", n)
		assert.Equal(t, line, got, "n=%d", n)
	}
	got, err := decodeLine(encodeLine([]int64{1, math.MaxInt64}))
	require.NoError(t, err)
	assert.Equal(t, []int64{1, math.MaxInt64}, got, "the largest position")

	good := encodeLine([]int64{5, 6, 9})
	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{"empty", nil},
		{"another format", append([]byte{2}, good[1:]...)},
		{"a JSON array", []byte("[5,6,9]")},
		{"truncated", good[:len(good)-1]},
		{"bytes past its end", append(append([]byte{}, good...), 0)},
		{"a count the bytes cannot hold", []byte{lineFormat, 0xff, 0xff, 0xff, 0xff, 0x0f, 1}},
		{"a step of 0", []byte{lineFormat, 2, 5, 0}},
		{"past int64", []byte{lineFormat, 2, 0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 2}},
		{"a varint past 64 bits", []byte{lineFormat, 1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}},
	} {
		_, err := decodeLine(tc.b)
		assert.ErrorIs(t, err, errLine, tc.name)
	}
}

func FuzzDecodeLine(f *testing.F) {
	f.Add(encodeLine([]int64{1, 2, 3}))
	f.Add([]byte{lineFormat, 0})
	f.Add([]byte{lineFormat, 0xff, 0xff, 0x03})
	f.Fuzz(func(t *testing.T, b []byte) {
		line, err := decodeLine(b)
		if err != nil {
			return
		}
		for i := 1; i < len(line); i++ {
			if line[i] <= line[i-1] {
				t.Fatalf("decoded a line that does not ascend: %v", line)
			}
		}
		// Overlong varints decode too (binary.Uvarint takes them); what
		// they decode to comes back through the codec unchanged.
		again, err := decodeLine(encodeLine(line))
		if err != nil || len(again) != len(line) {
			t.Fatalf("decodes to %v, which does not come back: %v, %v", line, again, err)
		}
		for i := range line {
			if again[i] != line[i] {
				t.Fatalf("decodes to %v, which comes back as %v", line, again)
			}
		}
	})
}

// startLaunch runs a launch of gate "default" with n entrants in its
// pre-queue on s and returns it as started.
func startLaunch(t *testing.T, s *Store, n int) session.ScheduledEvent {
	t.Helper()
	ctx, cfg := context.Background(), sessiontest.GateConfig("default", 1)
	ev := session.ScheduledEvent{Gate: "default", ID: "drop", PrequeueAt: epoch.Add(time.Minute),
		StartsAt: epoch.Add(2 * time.Minute), Shuffle: true, Seed: make([]byte, session.LotterySeedSize)}
	_, err := s.SaveEvent(ctx, ev)
	require.NoError(t, err)
	_, _, err = s.AdvanceEvent(ctx, "default", "drop", ev.PrequeueAt)
	require.NoError(t, err)
	for i := range n {
		_, err := s.Join(ctx, cfg, fmt.Sprint("entrant-", i), ev.PrequeueAt)
		require.NoError(t, err)
	}
	started, changed, err := s.AdvanceEvent(ctx, "default", "drop", ev.StartsAt)
	require.NoError(t, err)
	require.True(t, changed)
	require.Equal(t, session.EventStarted, started.Phase)
	require.Len(t, started.Positions, n)
	return started
}

// The line is written in its own row and read back by Load and Events;
// the writer's decisions only check it (at a cache miss of the gate's
// entry). With the line's row damaged every reader leaves the event out
// alike and says why, and the gate is not held (the event reads as
// started). Deleting the event deletes its line.
func TestTheDrawnLineHasARowOfItsOwn(t *testing.T) {
	path := filepath.Join(t.TempDir(), "l.db")
	logs := &sessiontest.LogBuffer{}
	open := func() *Store {
		s, err := Open(path, Options{Logger: slog.New(slog.NewTextHandler(logs, nil))})
		require.NoError(t, err)
		return s
	}
	s := open()
	started := startLaunch(t, s, 40)
	ctx, cfg := context.Background(), sessiontest.GateConfig("default", 1)
	var js []byte
	require.NoError(t, s.readDB.QueryRow(sqlSelectMeta, eventKey("default", "drop")).Scan(&js))
	assert.NotContains(t, string(js), "positions", "the event's JSON has no line")
	evs, err := s.Events(ctx, "default")
	require.NoError(t, err)
	require.Len(t, evs, 1)
	assert.Equal(t, started.Positions, evs[0].Positions)
	require.NoError(t, s.Close())

	s = open()
	snaps, err := s.Load(ctx, []string{"default"})
	require.NoError(t, err)
	require.Len(t, snaps["default"].Events, 1)
	assert.Equal(t, started.Positions, snaps["default"].Events[0].Positions, "Load reads the line")
	require.NoError(t, s.Close())

	rawExec(t, path, `UPDATE meta SET value = x'01ff' WHERE key = '`+lineKey("default", "drop")+`'`)
	s = open()
	t.Cleanup(func() { _ = s.Close() })
	_, err = s.Join(ctx, cfg, "after", started.StartsAt)
	require.NoError(t, err)
	_, err = s.Update(ctx, cfg, started.StartsAt, 0)
	require.NoError(t, err)
	assert.Contains(t, logs.String(), "decide with the instance's own settings", "the writer leaves it out too")
	snaps, err = s.Load(ctx, []string{"default"})
	require.NoError(t, err)
	assert.Empty(t, snaps["default"].Events, "an event whose line does not decode is left out")
	evs, err = s.Events(ctx, "default")
	require.NoError(t, err)
	assert.Empty(t, evs)
	assert.Contains(t, logs.String(), "drawn line does not decode")

	require.NoError(t, s.DeleteEvent(ctx, "default", "drop"))
	var n int
	require.NoError(t, s.readDB.QueryRow(`SELECT count(*) FROM meta WHERE key LIKE 'gate_event%'`).Scan(&n))
	assert.Zero(t, n, "the event and its line are gone")
}

// RemoveGate deletes the gate's lines with its events, and no other
// gate's: the line keys of gate "a" and of gate "a-b" share a prefix.
func TestRemoveGateDeletesItsLines(t *testing.T) {
	s := openInternal(t)
	ctx := context.Background()
	for _, g := range []string{"a", "a-b", "a0"} {
		ev := session.ScheduledEvent{Gate: g, ID: "drop", PrequeueAt: epoch.Add(-2 * time.Hour), StartsAt: epoch.Add(-time.Hour),
			Phase: session.EventStarted, FirstPosition: 1, Positions: []int64{1, 2, 3}, Seed: make([]byte, session.LotterySeedSize),
			StartedAt: epoch.Add(-time.Hour)}
		require.NoError(t, s.gateOp(ctx, g, func(*batch, *gateEntry) error { return s.writeEvent(ev) }))
	}
	closed := sessiontest.GateConfig("a", 1)
	closed.Mode = session.ModeReject
	require.NoError(t, s.RemoveGate(ctx, closed, epoch))
	rows, err := s.readDB.Query(`SELECT key FROM meta WHERE key LIKE 'gate_event%' ORDER BY key`)
	require.NoError(t, err)
	defer rows.Close()
	var keys []string
	for rows.Next() {
		var k string
		require.NoError(t, rows.Scan(&k))
		keys = append(keys, k)
	}
	assert.Equal(t, []string{"gate_event_lines/a-b/drop", "gate_event_lines/a0/drop", "gate_events/a-b/drop", "gate_events/a0/drop"}, keys)
}

// An event written before the line had its own row keeps its line in its
// JSON, and reads as it is.
func TestALineInTheEventsJSONStillReads(t *testing.T) {
	s := openInternal(t)
	ctx := context.Background()
	ev := session.ScheduledEvent{Gate: "default", ID: "old", PrequeueAt: epoch.Add(-2 * time.Hour), StartsAt: epoch.Add(-time.Hour),
		Phase: session.EventStarted, FirstPosition: 1, Positions: []int64{1, 4, 9}, Seed: make([]byte, session.LotterySeedSize),
		StartedAt: epoch.Add(-time.Hour)}
	raw, err := session.EncodeStoredEvent(ev)
	require.NoError(t, err)
	require.True(t, strings.Contains(string(raw), `"positions":[1,4,9]`))
	require.NoError(t, s.gateOp(ctx, "default", func(*batch, *gateEntry) error {
		_, err := s.wc.exec(s.wc.insertMeta, eventKey("default", "old"), raw)
		return err
	}))
	evs, err := s.Events(ctx, "default")
	require.NoError(t, err)
	require.Len(t, evs, 1)
	assert.Equal(t, ev.Positions, evs[0].Positions)
	snaps, err := s.Load(ctx, []string{"default"})
	require.NoError(t, err)
	require.Len(t, snaps["default"].Events, 1)
	assert.Equal(t, ev.Positions, snaps["default"].Events[0].Positions)
}

// From the attacks on the line's row and the hold of a damaged event,
// and a review.
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
