package sessiontest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
)

const gateName = "default"

func testJoin(t *testing.T, open Opener) {
	type want struct {
		status     session.Status
		position   int64
		lastActive string // "now" or "zero"
		counters   session.Counters
		events     []string
	}
	cases := []struct {
		name  string
		limit int64
		setup func(h *harness, cfg session.GateConfig)
		cfg   func(cfg session.GateConfig) session.GateConfig // the config of the join under test
		id    string
		want  want
	}{
		{
			name:  "new session takes a free slot",
			limit: 2,
			setup: func(h *harness, cfg session.GateConfig) { h.join(cfg, "a") },
			id:    "b",
			want:  want{session.StatusActive, 2, "now", session.Counters{NextPosition: 3, Active: 2}, []string{"activated:b"}},
		},
		{
			name:  "new session waits when the gate is full",
			limit: 2,
			setup: func(h *harness, cfg session.GateConfig) { h.join(cfg, "a"); h.join(cfg, "b") },
			id:    "c",
			want:  want{session.StatusWaiting, 3, "now", session.Counters{NextPosition: 4, Active: 2, Waiting: 1}, []string{"queued:c"}},
		},
		{
			name:  "limit zero: everyone waits",
			limit: 0,
			id:    "a",
			want:  want{session.StatusWaiting, 1, "now", session.Counters{NextPosition: 2, Waiting: 1}, []string{"queued:a"}},
		},
		{
			name:  "no queue jumping: a free slot is not taken while someone waits",
			limit: 1,
			setup: func(h *harness, cfg session.GateConfig) { h.join(cfg, "a"); h.join(cfg, "b") },
			cfg:   func(cfg session.GateConfig) session.GateConfig { cfg.ActiveLimit = 3; return cfg },
			id:    "c",
			want:  want{session.StatusWaiting, 3, "now", session.Counters{NextPosition: 4, Active: 1, Waiting: 2}, []string{"queued:c"}},
		},
		{
			name:  "returning waiter is seen again and keeps its place",
			limit: 1,
			setup: func(h *harness, cfg session.GateConfig) {
				h.join(cfg, "a")
				h.join(cfg, "b")
				h.clock.Advance(time.Minute)
				require.False(h.tb, h.leave(cfg, "b").LastActive.IsZero())
				h.clock.Advance(time.Minute)
			},
			id:   "b",
			want: want{session.StatusWaiting, 2, "now", session.Counters{NextPosition: 3, Active: 1, Waiting: 1}, []string{"returned:b"}},
		},
		{
			name:  "idempotent for a waiter, which is seen",
			limit: 1,
			setup: func(h *harness, cfg session.GateConfig) {
				h.join(cfg, "a")
				h.join(cfg, "b")
				h.clock.Advance(time.Second)
			},
			id:   "b",
			want: want{session.StatusWaiting, 2, "now", session.Counters{NextPosition: 3, Active: 1, Waiting: 1}, []string{"returned:b"}},
		},
		{
			name:  "idempotent for an active session, which is refreshed",
			limit: 1,
			setup: func(h *harness, cfg session.GateConfig) {
				h.join(cfg, "a")
				h.join(cfg, "b")
				h.clock.Advance(time.Minute)
			},
			id:   "a",
			want: want{session.StatusActive, 1, "now", session.Counters{NextPosition: 3, Active: 1, Waiting: 1}, []string{"refreshed:a"}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, open)
			cfg := GateConfig(gateName, tc.limit)
			if tc.setup != nil {
				tc.setup(h, cfg)
			}
			if tc.cfg != nil {
				cfg = tc.cfg(cfg)
			}
			want := session.Session{Gate: gateName, ID: tc.id, Position: tc.want.position, Status: tc.want.status, CreatedAt: h.clock.Now()}
			if before, existed := h.get(gateName, tc.id); existed {
				want.CreatedAt = before.CreatedAt
			}
			if tc.want.lastActive == "now" {
				want.LastActive = h.clock.Now()
			}
			mark := h.mark()
			got := h.join(cfg, tc.id)
			requireSession(t, want, got, "returned by Join")
			requireSession(t, got, h.mustGet(gateName, tc.id), "read by Get")
			assert.Equal(t, tc.want.events, nilIfEmpty(kinds(h.eventsSince(mark))))
			assert.Equal(t, tc.want.counters, h.state(gateName).Counters)

			// Join again at once: nothing changes.
			again := h.join(cfg, tc.id)
			requireSession(t, got, again, "second join")
			assert.Equal(t, tc.want.counters, h.state(gateName).Counters)
		})
	}
}

func nilIfEmpty(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return s
}

func testLeave(t *testing.T, open Opener) {
	t.Run("waiting session gets its departure mark", func(t *testing.T) {
		h := newHarness(t, open)
		cfg := GateConfig(gateName, 1)
		h.join(cfg, "a")
		w := h.join(cfg, "b")
		now := h.clock.Advance(30 * time.Second)
		mark := h.mark()
		got := h.leave(cfg, "b")
		w.LastActive = now
		requireSession(t, w, got)
		requireSession(t, w, h.mustGet(gateName, "b"))
		// A departure changes no counter; it is reported for the history.
		assert.Equal(t, []string{"left:b"}, kinds(h.eventsSince(mark)))
		assert.Equal(t, session.Counters{NextPosition: 3, Active: 1, Waiting: 1}, h.state(gateName).Counters)

		// Leaving twice moves the mark.
		now = h.clock.Advance(time.Second)
		assertTime(t, now, h.leave(cfg, "b").LastActive)
	})
	t.Run("active session is only refreshed", func(t *testing.T) {
		h := newHarness(t, open)
		cfg := GateConfig(gateName, 1)
		a := h.join(cfg, "a")
		now := h.clock.Advance(30 * time.Second)
		mark := h.mark()
		got := h.leave(cfg, "a")
		a.LastActive = now
		requireSession(t, a, got)
		requireSession(t, a, h.mustGet(gateName, "a"))
		evs := h.eventsSince(mark)
		require.Equal(t, []string{"refreshed:a", "left:a"}, kinds(evs))
		requireSession(t, a, evs[0].Session)
		assert.Equal(t, session.Counters{NextPosition: 2, Active: 1}, h.state(gateName).Counters)
	})
	t.Run("absent session", func(t *testing.T) {
		h := newHarness(t, open)
		cfg := GateConfig(gateName, 1)
		_, err := h.store.Leave(h.ctx, cfg, "ghost", h.clock.Now())
		require.ErrorIs(t, err, session.ErrNotFound)
		h.requireAbsent(gateName, "ghost")
		w := h.waitlist(cfg)
		require.NoError(t, w.Leave(h.ctx, gateName, "ghost"), "Waitlist.Leave of an absent session is a no-op")
		h.requireAbsent(gateName, "ghost")
	})
}

func testRelease(t *testing.T, open Opener) {
	t.Run("active: first waiter promoted in the same commit", func(t *testing.T) {
		h := newHarness(t, open)
		cfg := GateConfig(gateName, 1)
		a := h.join(cfg, "a")
		b := h.join(cfg, "b")
		h.join(cfg, "c")
		now := h.clock.Advance(time.Minute)
		mark := h.mark()
		got := h.release(cfg, "a")
		requireSession(t, a, got, "released row")
		h.requireAbsent(gateName, "a")
		b.Status, b.LastActive = session.StatusActive, now
		requireSession(t, b, h.mustGet(gateName, "b"))
		assert.Equal(t, session.StatusWaiting, h.mustGet(gateName, "c").Status)

		// One commit holds both the release and the promotion.
		var found bool
		for _, c := range h.commitsSince(mark) {
			ks := kinds(c.Events)
			if len(ks) == 2 && ks[0] == "deactivated:a" && ks[1] == "promoted:b" {
				found = true
				requireSession(t, a, c.Events[0].Session)
				requireSession(t, b, c.Events[1].Session)
				requireState(t, session.Counters{NextPosition: 4, Active: 1, Waiting: 1}, 3, 3, c.Gates[gateName])
			}
		}
		require.True(t, found, "no commit with [deactivated:a promoted:b]; got %v", kinds(h.eventsSince(mark)))
		requireState(t, session.Counters{NextPosition: 4, Active: 1, Waiting: 1}, 3, 3, h.state(gateName))
	})
	t.Run("active: frees slots up to the limit only", func(t *testing.T) {
		h := newHarness(t, open)
		cfg := GateConfig(gateName, 2)
		h.join(cfg, "a")
		h.join(cfg, "b")
		h.join(cfg, "c")
		lowered := cfg
		lowered.ActiveLimit = 1
		mark := h.mark()
		h.release(lowered, "a")
		assert.Equal(t, []string{"deactivated:a"}, kinds(h.eventsSince(mark)))
		assert.Equal(t, session.StatusWaiting, h.mustGet(gateName, "c").Status)
		requireState(t, session.Counters{NextPosition: 4, Active: 1, Waiting: 1}, 3, 3, h.state(gateName))
	})
	t.Run("waiting session is removed", func(t *testing.T) {
		h := newHarness(t, open)
		cfg := GateConfig(gateName, 1)
		h.join(cfg, "a")
		b := h.join(cfg, "b")
		h.join(cfg, "c")
		mark := h.mark()
		requireSession(t, b, h.release(cfg, "b"))
		h.requireAbsent(gateName, "b")
		assert.Equal(t, []string{"dequeued:b"}, kinds(h.eventsSince(mark)))
		assert.Equal(t, session.StatusWaiting, h.mustGet(gateName, "c").Status)
		requireState(t, session.Counters{NextPosition: 4, Active: 1, Waiting: 1}, 3, 3, h.state(gateName))
	})
	t.Run("absent session", func(t *testing.T) {
		h := newHarness(t, open)
		cfg := GateConfig(gateName, 1)
		h.join(cfg, "a")
		_, err := h.store.Release(h.ctx, cfg, "ghost", h.clock.Now())
		require.ErrorIs(t, err, session.ErrNotFound)
		assert.Equal(t, session.Counters{NextPosition: 2, Active: 1}, h.state(gateName).Counters)
		w := h.waitlist(cfg)
		require.NoError(t, w.Release(h.ctx, gateName, "ghost"))
	})
}

func testStaleBoundaries(t *testing.T, open Opener) {
	cases := []struct {
		name   string
		status session.Status
		past   time.Duration // how far past the timeout the update runs
		purged bool
	}{
		{"waiting at the cutoff is kept", session.StatusWaiting, 0, false},
		{"waiting 1ns past the cutoff is purged", session.StatusWaiting, time.Nanosecond, true},
		{"active at the cutoff is kept", session.StatusActive, 0, false},
		{"active 1ns past the cutoff is purged", session.StatusActive, time.Nanosecond, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, open)
			cfg := GateConfig(gateName, 1)
			h.clock.Advance(time.Minute) // the active session "a" was last seen at Epoch+1m
			h.join(cfg, "a")
			h.join(cfg, "w")
			var subject string
			var at time.Time
			if tc.status == session.StatusWaiting {
				// The waiter left at Epoch+2m; a stays fresh enough.
				h.clock.Advance(time.Minute)
				subject, at = "w", h.leave(cfg, "w").LastActive.Add(cfg.WaitingTimeout+tc.past)
			} else {
				subject, at = "a", h.mustGet(gateName, "a").LastActive.Add(cfg.ActiveTimeout+tc.past)
				// The waiter stays present meanwhile.
				require.NoError(t, h.store.Touch(h.ctx, gateName, []session.Touch{{ID: "w", LastActive: at}}))
			}
			h.clock.Set(at)
			require.Equal(t, tc.purged, session.IsStale(cfg, h.mustGet(gateName, subject), at), "the rule itself")

			mark := h.mark()
			r := h.update(cfg, 0)
			if !tc.purged {
				h.mustGet(gateName, subject)
				assert.Equal(t, session.UpdateReport{Gate: gateName}, zeroCounts(r))
				assert.Empty(t, h.eventsSince(mark))
				assert.Equal(t, session.Counters{NextPosition: 3, Active: 1, Waiting: 1}, h.state(gateName).Counters)
				return
			}
			h.requireAbsent(gateName, subject)
			if tc.status == session.StatusWaiting {
				assert.Equal(t, session.UpdateReport{Gate: gateName, PurgedWaiting: 1}, zeroCounts(r))
				assert.Equal(t, []string{"dequeued:w"}, kinds(h.eventsSince(mark)))
				requireState(t, session.Counters{NextPosition: 3, Active: 1}, 0, 0, h.state(gateName))
			} else {
				// The freed slot goes to the waiter in the same tick.
				assert.Equal(t, session.UpdateReport{Gate: gateName, PurgedActive: 1, Promoted: 1}, zeroCounts(r))
				assert.Equal(t, []string{"deactivated:a", "promoted:w"}, kinds(h.eventsSince(mark)))
				w := h.mustGet(gateName, "w")
				assert.Equal(t, session.StatusActive, w.Status)
				assertTime(t, at, w.LastActive)
				requireState(t, session.Counters{NextPosition: 3, Active: 1}, 0, 0, h.state(gateName))
			}
		})
	}
}

// zeroCounts keeps the counts of a report, for comparisons.
func zeroCounts(r session.UpdateReport) session.UpdateReport {
	return session.UpdateReport{Gate: r.Gate, PurgedWaiting: r.PurgedWaiting, PurgedActive: r.PurgedActive, Promoted: r.Promoted}
}

func testPromotionCount(t *testing.T, open Opener) {
	cases := []struct {
		name            string
		limit, waiting  int64 // at the joins
		newLimit        int64 // at the update
		wantPromoted    int64
		wantActiveAfter int64
	}{
		{"limit raised, more waiting than free slots", 2, 5, 4, 2, 4},
		{"limit raised, fewer waiting than free slots", 2, 1, 5, 1, 3},
		{"limit unchanged", 2, 3, 2, 0, 2},
		{"limit lowered below active", 3, 2, 1, 0, 3},
		{"limit zero", 0, 4, 0, 0, 0},
		{"limit raised from zero", 0, 3, 10, 3, 3},
		{"nobody waits, limit raised", 2, 0, 5, 0, 2},
		{"nobody at all", 0, 0, 3, 0, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, open)
			cfg := GateConfig(gateName, tc.limit)
			var ids []string
			for i := int64(0); i < tc.limit+tc.waiting; i++ {
				ids = append(ids, idOf("s", int(i)))
				h.join(cfg, ids[i])
			}
			before := h.state(gateName)
			require.Equal(t, tc.waiting, before.Waiting)
			cfg.ActiveLimit = tc.newLimit
			require.Equal(t, tc.wantPromoted, session.PromotionCount(tc.newLimit, before.Counters), "the rule itself")

			r := h.update(cfg, 0)
			assert.Equal(t, session.UpdateReport{Gate: gateName, Promoted: tc.wantPromoted}, zeroCounts(r))
			st := h.state(gateName)
			assert.Equal(t, tc.wantActiveAfter, st.Active)
			assert.Equal(t, tc.waiting-tc.wantPromoted, st.Waiting)
			// The promoted are the first waiters, in position order.
			for i, id := range ids {
				s := h.mustGet(gateName, id)
				wantActive := int64(i) < tc.limit+tc.wantPromoted
				assert.Equal(t, wantActive, s.Status == session.StatusActive, "%s at position %d", id, s.Position)
			}
			// A second tick has nothing left to do.
			assert.Equal(t, session.UpdateReport{Gate: gateName}, zeroCounts(h.update(cfg, 0)))
		})
	}
}

func testUpdateChunks(t *testing.T, open Opener) {
	h := newHarness(t, open)
	cfg := GateConfig(gateName, 5)
	const chunk = 4
	for i := 0; i < 5; i++ {
		h.join(cfg, idOf("a", i))
	}
	for i := 0; i < 12; i++ {
		h.join(cfg, idOf("w", i))
	}
	h.clock.Advance(time.Minute)
	for i := 0; i < 6; i++ {
		h.leave(cfg, idOf("w", i))
	}
	now := h.clock.Advance(cfg.ActiveTimeout) // every active session and every leaver is stale
	// The waiters who stayed are still present (their sockets are open).
	var present []session.Touch
	for i := 6; i < 12; i++ {
		present = append(present, session.Touch{ID: idOf("w", i), LastActive: now})
	}
	require.NoError(t, h.store.Touch(h.ctx, gateName, present))
	mark := h.mark()
	r := h.update(cfg, chunk)
	assert.Equal(t, session.UpdateReport{Gate: gateName, PurgedWaiting: 6, PurgedActive: 5, Promoted: 5}, zeroCounts(r))
	// 16 rows, at most 4 in the first transaction; later ones may grow to
	// UpdateChunkGrowth × 4 while nothing else waits for the writer.
	assert.GreaterOrEqual(t, r.Transactions, 2)
	commits := h.commitsSince(mark)
	assert.GreaterOrEqual(t, len(commits), 2, "each chunk's commit is reported")
	if assert.NotEmpty(t, commits) {
		assert.LessOrEqual(t, len(commits[0].Events), chunk, "a first commit of more than one chunk")
	}
	var deactivated, promoted, dequeued []string
	for _, c := range commits {
		assert.LessOrEqual(t, len(c.Events), chunk*session.UpdateChunkGrowth, "a commit of more than the chunk may grow to")
		for _, e := range c.Events {
			switch e.Kind {
			case session.EventDeactivated:
				deactivated = append(deactivated, e.Session.ID)
			case session.EventPromoted:
				promoted = append(promoted, e.Session.ID)
			case session.EventDequeued:
				dequeued = append(dequeued, e.Session.ID)
			default:
				t.Errorf("unexpected event %s", kindName(e.Kind))
			}
		}
	}
	assert.ElementsMatch(t, []string{"a000", "a001", "a002", "a003", "a004"}, deactivated)
	assert.Equal(t, []string{"w006", "w007", "w008", "w009", "w010"}, promoted, "promotions in position order")
	assert.ElementsMatch(t, []string{"w000", "w001", "w002", "w003", "w004", "w005"}, dequeued)
	// The state in the last commit is the final one.
	last := commits[len(commits)-1].Gates[gateName]
	requireState(t, session.Counters{NextPosition: 18, Active: 5, Waiting: 1}, 17, 17, last)
	requireState(t, session.Counters{NextPosition: 18, Active: 5, Waiting: 1}, 17, 17, h.state(gateName))
}

func testPositionsNeverReused(t *testing.T, open Opener) {
	h := newHarness(t, open)
	cfg := GateConfig(gateName, 1)
	assert.Equal(t, int64(1), h.join(cfg, "a").Position)
	assert.Equal(t, int64(2), h.join(cfg, "b").Position)
	assert.Equal(t, int64(3), h.join(cfg, "c").Position)

	// The waiting tail leaves and is purged.
	h.leave(cfg, "c")
	h.clock.Advance(cfg.WaitingTimeout + time.Nanosecond)
	h.seen("b") // b stays
	assert.Equal(t, int64(1), h.update(cfg, 0).PurgedWaiting)
	requireState(t, session.Counters{NextPosition: 4, Active: 1, Waiting: 1}, 2, 2, h.state(gateName))
	assert.Equal(t, int64(4), h.join(cfg, "d").Position)

	// The tail is released.
	h.release(cfg, "d")
	assert.Equal(t, int64(5), h.join(cfg, "e").Position)

	// Every session is gone, the active one purged.
	h.release(cfg, "e")
	h.release(cfg, "b")
	h.clock.Advance(cfg.ActiveTimeout + time.Nanosecond)
	assert.Equal(t, int64(1), h.update(cfg, 0).PurgedActive)
	requireState(t, session.Counters{NextPosition: 6}, 0, 0, h.state(gateName))

	// And after a restart.
	h.reopen()
	requireState(t, session.Counters{NextPosition: 6}, 0, 0, h.state(gateName))
	f := h.join(cfg, "f")
	assert.Equal(t, int64(6), f.Position)
	assert.Equal(t, session.StatusActive, f.Status)
	// A session that comes back after being purged is a new one.
	assert.Equal(t, int64(7), h.join(cfg, "c").Position)
}

func testTouch(t *testing.T, open Opener) {
	h := newHarness(t, open)
	cfg := GateConfig(gateName, 2)
	a := h.join(cfg, "a")
	b := h.join(cfg, "b")
	w := h.join(cfg, "w")
	later := h.clock.Advance(time.Minute)
	mark := h.mark()
	require.NoError(t, h.store.Touch(h.ctx, gateName, []session.Touch{
		{ID: "a", LastActive: later},
		{ID: "w", LastActive: later},                 // waiting: seen
		{ID: "b", LastActive: Epoch.Add(-time.Hour)}, // older than stored: kept
		{ID: "ghost", LastActive: later},             // absent: skipped
	}))
	a.LastActive = later
	w.LastActive = later
	requireSession(t, a, h.mustGet(gateName, "a"))
	requireSession(t, b, h.mustGet(gateName, "b"))
	requireSession(t, w, h.mustGet(gateName, "w"))
	h.requireAbsent(gateName, "ghost")
	assert.Equal(t, session.Counters{NextPosition: 4, Active: 2, Waiting: 1}, h.state(gateName).Counters)
	for _, e := range h.eventsSince(mark) {
		assert.Equal(t, session.EventRefreshed, e.Kind, "Touch may at most report refreshes")
	}
	require.NoError(t, h.store.Touch(h.ctx, gateName, nil))

	// The touched time is what the purge sees.
	h.clock.Set(Epoch.Add(cfg.ActiveTimeout + time.Nanosecond))
	r := h.update(cfg, 0)
	assert.Equal(t, int64(1), r.PurgedActive, "b is stale, a was touched")
	h.mustGet(gateName, "a")
	h.requireAbsent(gateName, "b")
}

func testLoad(t *testing.T, open Opener) {
	h := newHarness(t, open)
	snaps, err := h.store.Load(h.ctx, []string{"x", "y"})
	require.NoError(t, err)
	require.Len(t, snaps, 2)
	for _, g := range []string{"x", "y"} {
		requireState(t, session.Counters{NextPosition: 1}, 0, 0, snaps[g].State)
		assert.Empty(t, snaps[g].Active)
	}
	x := GateConfig("x", 2)
	a := h.join(x, "a")
	h.clock.Advance(time.Second)
	b := h.join(x, "b")
	h.join(x, "c")
	h.join(x, "d")
	h.join(GateConfig("z", 1), "a") // a gate Load never saw
	for _, reopen := range []bool{false, true} {
		if reopen {
			h.reopen()
		}
		snaps, err = h.store.Load(h.ctx, []string{"x", "y", "z"})
		require.NoError(t, err)
		requireState(t, session.Counters{NextPosition: 5, Active: 2, Waiting: 2}, 3, 4, snaps["x"].State)
		require.Len(t, snaps["x"].Active, 2)
		requireSession(t, a, snaps["x"].Active[0])
		requireSession(t, b, snaps["x"].Active[1])
		assert.Equal(t, []int64{3, 4}, snaps["x"].Waiting)
		assert.Empty(t, snaps["y"].Waiting)
		requireState(t, session.Counters{NextPosition: 1}, 0, 0, snaps["y"].State)
		requireState(t, session.Counters{NextPosition: 2, Active: 1}, 0, 0, snaps["z"].State)
	}
	_, err = h.store.Load(h.ctx, nil)
	require.NoError(t, err)
}

func testGet(t *testing.T, open Opener) {
	h := newHarness(t, open)
	cfg := GateConfig(gateName, 1)
	_, err := h.store.Get(h.ctx, gateName, "a")
	require.ErrorIs(t, err, session.ErrNotFound)
	a := h.join(cfg, "a")
	requireSession(t, a, h.mustGet(gateName, "a"))
	_, err = h.store.Get(h.ctx, "other", "a")
	require.ErrorIs(t, err, session.ErrNotFound, "sessions belong to their gate")
}

func testInvalidArgument(t *testing.T, open Opener) {
	h := newHarness(t, open)
	good := GateConfig(gateName, 1)
	bad := good
	bad.ActiveLimit = -1
	noName := good
	noName.Name = ""
	cases := []struct {
		name string
		cfg  session.GateConfig
		id   string
	}{
		{"empty id", good, ""},
		{"id with a space", good, "a b"},
		{"id with a dot", good, "a.b"},
		{"negative limit", bad, "a"},
		{"no gate name", noName, "a"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := h.store.Join(h.ctx, tc.cfg, tc.id, h.clock.Now())
			require.ErrorIs(t, err, session.ErrInvalidArgument)
			_, err = h.store.Leave(h.ctx, tc.cfg, tc.id, h.clock.Now())
			require.ErrorIs(t, err, session.ErrInvalidArgument)
			_, err = h.store.Release(h.ctx, tc.cfg, tc.id, h.clock.Now())
			require.ErrorIs(t, err, session.ErrInvalidArgument)
		})
	}
	assert.Equal(t, session.Counters{NextPosition: 1}, h.state(gateName).Counters)
}

func testCanceledContext(t *testing.T, open Opener) {
	h := newHarness(t, open)
	cfg := GateConfig(gateName, 1)
	ctx, cancel := context.WithCancel(h.ctx)
	cancel()
	_, err := h.store.Join(ctx, cfg, "a", h.clock.Now())
	require.ErrorIs(t, err, context.Canceled)
	h.requireAbsent(gateName, "a")
	_, err = h.store.Update(ctx, cfg, h.clock.Now(), 0)
	require.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, session.Counters{NextPosition: 1}, h.state(gateName).Counters)
	// The store is fine afterwards.
	h.join(cfg, "a")
	// A read under a done context fails with its error, even of a session
	// that exists.
	_, err = h.store.Get(ctx, gateName, "a")
	require.ErrorIs(t, err, context.Canceled)
}

func testClosed(t *testing.T, open Opener) {
	h := newHarness(t, open)
	cfg := GateConfig(gateName, 1)
	h.join(cfg, "a")
	require.NoError(t, h.store.Close())
	now := h.clock.Now()
	unavailable := func(what string, err error) {
		t.Helper()
		assert.True(t, errors.Is(err, session.ErrUnavailable), "%s after Close: got %v, want ErrUnavailable", what, err)
	}
	_, err := h.store.Join(h.ctx, cfg, "b", now)
	unavailable("Join", err)
	_, err = h.store.Leave(h.ctx, cfg, "a", now)
	unavailable("Leave", err)
	_, err = h.store.Release(h.ctx, cfg, "a", now)
	unavailable("Release", err)
	_, err = h.store.Get(h.ctx, gateName, "a")
	unavailable("Get", err)
	unavailable("Touch", h.store.Touch(h.ctx, gateName, []session.Touch{{ID: "a", LastActive: now}}))
	_, err = h.store.Update(h.ctx, cfg, now, 0)
	unavailable("Update", err)
	_, err = h.store.Load(h.ctx, []string{gateName})
	unavailable("Load", err)
	if err := h.store.Close(); err != nil {
		unavailable("second Close", err)
	}
}
