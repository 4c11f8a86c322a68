package sessiontest

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
)

// testEvents runs the scheduled-event tests of the shared suite.
func testEvents(t *testing.T, open Opener) {
	t.Run("SaveAndDelete", func(t *testing.T) { testEventSave(t, open) })
	t.Run("LotteryOnce", func(t *testing.T) { testEventLottery(t, open) })
	t.Run("LotteryKeepsLanes", func(t *testing.T) { testEventLotteryKeepsLanes(t, open) })
	t.Run("Waitlist", func(t *testing.T) { testEventWaitlist(t, open) })
	t.Run("PrequeueHoldsStaleOps", func(t *testing.T) { testEventPrequeueHoldsStaleOps(t, open) })
}

func int64p(v int64) *int64 { return &v }

func suiteEvent(id string, prequeue time.Time) session.ScheduledEvent {
	return session.ScheduledEvent{
		Gate: gateName, ID: id, PrequeueAt: prequeue, StartsAt: prequeue.Add(time.Minute),
		Shuffle: true, Seed: []byte("0123456789abcdef0123456789abcdef"),
	}
}

// testEventSave checks SaveEvent, Events, DeleteEvent and Load: events come
// back after a restart, a replace keeps the seed, and an event whose
// pre-queue opened can neither change nor go.
func testEventSave(t *testing.T, open Opener) {
	h := newHarness(t, open)
	ev := suiteEvent("launch", Epoch.Add(time.Hour))
	ev.ActiveLimit = int64p(40)
	ev.NewUsersPerMinute = int64p(600)
	ev.EndsAt = ev.StartsAt.Add(time.Hour)
	saved, err := h.store.SaveEvent(h.ctx, ev)
	require.NoError(t, err)
	assert.Equal(t, session.EventScheduled, saved.Phase)
	assert.Equal(t, ev.Seed, saved.Seed)

	h.reopen()
	evs, err := h.store.Events(h.ctx, gateName)
	require.NoError(t, err)
	require.Len(t, evs, 1)
	assert.True(t, session.SameSchedule(ev, evs[0]), "%+v", evs[0])
	assert.Equal(t, ev.Seed, evs[0].Seed)
	require.Len(t, h.snapshot(gateName).Events, 1, "Load returns the events")

	// A replace keeps the stored seed, whatever it is given. Its times come
	// back in UTC, as a reload gives them, whatever zone they were given in.
	again := ev
	again.StartsAt = ev.StartsAt.Add(time.Minute).In(time.FixedZone("UTC+5", 5*3600))
	again.Seed = []byte("ffffffffffffffffffffffffffffffff")
	saved, err = h.store.SaveEvent(h.ctx, again)
	require.NoError(t, err)
	assert.Equal(t, ev.Seed, saved.Seed, "the seed never changes")
	assert.True(t, saved.StartsAt.Equal(again.StartsAt))
	for _, at := range []time.Time{saved.PrequeueAt, saved.StartsAt, saved.EndsAt} {
		if !at.IsZero() {
			assert.Same(t, time.UTC, at.Location(), "a saved event's times are UTC")
		}
	}

	// Hostile and malformed input.
	bad := ev
	bad.StartsAt = bad.PrequeueAt.Add(-time.Second)
	_, err = h.store.SaveEvent(h.ctx, bad)
	assert.ErrorIs(t, err, session.ErrInvalidArgument, "starts before its pre-queue")
	bad = suiteEvent("new", Epoch)
	bad.Seed = nil
	_, err = h.store.SaveEvent(h.ctx, bad)
	assert.ErrorIs(t, err, session.ErrInvalidArgument, "a new event needs a seed")
	bad = suiteEvent("a/b", Epoch)
	_, err = h.store.SaveEvent(h.ctx, bad)
	assert.ErrorIs(t, err, session.ErrInvalidArgument)
	assert.ErrorIs(t, h.store.DeleteEvent(h.ctx, gateName, "missing"), &session.Error{Code: session.CodeEventNotFound})
	_, _, err = h.store.AdvanceEvent(h.ctx, gateName, "missing", Epoch)
	assert.ErrorIs(t, err, &session.Error{Code: session.CodeEventNotFound})

	// Once its pre-queue opened, it is locked.
	opened, changed, err := h.store.AdvanceEvent(h.ctx, gateName, "launch", ev.PrequeueAt)
	require.NoError(t, err)
	require.True(t, changed)
	require.Equal(t, session.EventPrequeue, opened.Phase)
	_, err = h.store.SaveEvent(h.ctx, ev)
	assert.ErrorIs(t, err, &session.Error{Code: session.CodeEventLocked})
	assert.ErrorIs(t, h.store.DeleteEvent(h.ctx, gateName, "launch"), &session.Error{Code: session.CodeEventLocked})

	// Started, it may go.
	_, changed, err = h.store.AdvanceEvent(h.ctx, gateName, "launch", again.StartsAt)
	require.NoError(t, err)
	require.True(t, changed)
	require.NoError(t, h.store.DeleteEvent(h.ctx, gateName, "launch"))
	evs, err = h.store.Events(h.ctx, gateName)
	require.NoError(t, err)
	assert.Empty(t, evs)
}

// testEventLottery checks AdvanceEvent: the pre-queue opens once at the
// gate's next position, the seed survives a restart in between, and the
// start permutes exactly the pre-queue's positions by session.LotteryOrder,
// once, with an EventReordered per moved session and one EventLaunched.
func testEventLottery(t *testing.T, open Opener) {
	h := newHarness(t, open)
	cfg := GateConfig(gateName, 1)
	held := cfg
	held.Mode = session.ModeQueueAll
	h.join(cfg, "admitted")
	h.join(cfg, "early") // waits: the slot is taken
	ev := suiteEvent("drop", Epoch)
	_, err := h.store.SaveEvent(h.ctx, ev)
	require.NoError(t, err)

	opened, changed, err := h.store.AdvanceEvent(h.ctx, gateName, "drop", Epoch)
	require.NoError(t, err)
	require.True(t, changed)
	assert.Equal(t, int64(3), opened.FirstPosition, "the next position when the pre-queue opened")
	_, changed, err = h.store.AdvanceEvent(h.ctx, gateName, "drop", Epoch.Add(time.Second))
	require.NoError(t, err)
	assert.False(t, changed, "the pre-queue opens once")

	var ids []string
	for i := 0; i < 12; i++ {
		id := fmt.Sprintf("p%02d", i)
		ids = append(ids, id)
		s := h.join(held, id)
		require.Equal(t, session.StatusWaiting, s.Status)
	}
	h.release(held, "p05") // left before the draw: not in it
	h.reopen()             // a crash between the pre-queue and the start

	mark := h.mark()
	started, changed, err := h.store.AdvanceEvent(h.ctx, gateName, "drop", ev.StartsAt)
	require.NoError(t, err)
	require.True(t, changed)
	require.Equal(t, session.EventStarted, started.Phase)
	assert.Equal(t, ev.Seed, started.Seed, "the seed survived the restart")
	want := []int64{3, 4, 5, 6, 7, 9, 10, 11, 12, 13, 14}
	require.Equal(t, want, started.Positions)

	served, err := session.LotteryOrder(ev.Seed, started.Positions)
	require.NoError(t, err)
	// The session that arrived at served[k] now holds positions[k].
	byOld := map[int64]string{}
	for i, id := range ids {
		if id != "p05" {
			byOld[int64(3+i)] = id
		}
	}
	for k, old := range served {
		got := h.mustGet(gateName, byOld[old])
		assert.Equal(t, started.Positions[k], got.Position, "session %s", byOld[old])
		assert.Equal(t, session.StatusWaiting, got.Status)
	}
	assert.Equal(t, int64(2), h.mustGet(gateName, "early").Position, "an earlier waiter keeps its place")

	var reordered, launched int
	for _, e := range h.eventsSince(mark) {
		switch e.Kind {
		case session.EventReordered:
			reordered++
		case session.EventLaunched:
			launched++
			assert.Equal(t, "drop", e.Session.ID)
			assert.Equal(t, int64(len(want)), e.Session.Position)
		}
	}
	assert.Equal(t, 1, launched)
	assert.Positive(t, reordered)
	assert.LessOrEqual(t, reordered, len(want))

	// Positions unique, the set unchanged, counters right.
	rows := h.rows(gateName, append(ids, "admitted", "early"))
	seen := map[int64]bool{}
	for _, r := range rows {
		require.False(t, seen[r.Position], "position %d twice", r.Position)
		seen[r.Position] = true
	}
	st := h.state(gateName)
	assert.Equal(t, int64(12), st.Waiting)
	assert.Equal(t, int64(2), st.FirstWaitingPosition)
	assert.Equal(t, int64(14), st.LastWaitingPosition)
	assert.Equal(t, int64(15), st.NextPosition)

	mark = h.mark()
	again, changed, err := h.store.AdvanceEvent(h.ctx, gateName, "drop", ev.StartsAt.Add(time.Hour))
	require.NoError(t, err)
	assert.False(t, changed, "the lottery is drawn once")
	assert.Equal(t, started.Positions, again.Positions)
	assert.Empty(t, h.eventsSince(mark))

	// A late arrival comes after the whole pre-queue.
	late := h.join(cfg, "late")
	assert.Equal(t, int64(15), late.Position)
}

// testEventWaitlist drives a gate with an event through the Waitlist on a
// fake clock: as configured before the pre-queue; nobody promoted in it
// even with free slots; at the start, the pre-queue served in the lottery's
// order before later arrivals; the overrides until the end.
func testEventWaitlist(t *testing.T, open Opener) {
	h := newHarness(t, open)
	cfg := GateConfig(gateName, 1)
	w := h.waitlist(cfg)
	ctx := context.Background()
	t0 := Epoch
	ev := session.ScheduledEvent{Gate: gateName, ID: "sale", PrequeueAt: t0.Add(time.Minute), StartsAt: t0.Add(2 * time.Minute),
		EndsAt: t0.Add(time.Hour), Shuffle: true, ActiveLimit: int64p(3)}
	saved, err := w.AddEvent(ctx, ev)
	require.NoError(t, err)
	require.Len(t, saved.Seed, session.LotterySeedSize)

	v, err := w.Join(ctx, gateName, "before")
	require.NoError(t, err)
	assert.Equal(t, session.StatusActive, v.Status, "before the pre-queue the gate is as configured")
	require.NoError(t, w.Release(ctx, gateName, "before"))

	h.clock.Set(ev.PrequeueAt)
	var ids []string
	for i := 0; i < 8; i++ {
		id := fmt.Sprintf("q%d", i)
		ids = append(ids, id)
		v, err := w.Join(ctx, gateName, id)
		require.NoError(t, err)
		assert.Equal(t, session.StatusWaiting, v.Status, "in the pre-queue everyone waits")
		h.clock.Advance(time.Second)
	}
	_, err = w.Update(ctx)
	require.NoError(t, err)
	require.NoError(t, w.Sweep(ctx))
	g, err := w.Global(gateName)
	require.NoError(t, err)
	assert.Equal(t, int64(0), g.Active, "nobody is promoted before the start")

	h.clock.Set(ev.StartsAt)
	// Keep them present across the start.
	for _, id := range ids {
		_, err := w.Status(ctx, gateName, id)
		require.NoError(t, err)
	}
	_, err = w.Update(ctx)
	require.NoError(t, err)
	evs, err := w.Events(gateName)
	require.NoError(t, err)
	require.Len(t, evs, 1)
	require.Equal(t, session.EventStarted, evs[0].Phase)
	served, err := session.LotteryOrder(evs[0].Seed, evs[0].Positions)
	require.NoError(t, err)

	v, err = w.Join(ctx, gateName, "after")
	require.NoError(t, err)
	assert.Equal(t, session.StatusWaiting, v.Status)

	// The override (limit 3) admitted the first three of the lottery.
	byOld := map[int64]string{}
	for i, id := range ids {
		byOld[evs[0].Positions[i]] = id
	}
	for k, old := range served {
		v, err := w.Status(ctx, gateName, byOld[old])
		require.NoError(t, err)
		if k < 3 {
			assert.Equal(t, session.StatusActive, v.Status, "served %d: %s", k, byOld[old])
			continue
		}
		assert.Equal(t, session.StatusWaiting, v.Status, "served %d: %s", k, byOld[old])
		assert.Equal(t, int64(k-3+1), v.Place, "place of %s", byOld[old])
		assert.Equal(t, v.Place, v.Position-v.FirstWaitingPosition+1, "Convex's place arithmetic holds")
	}
	v, err = w.Status(ctx, gateName, "after")
	require.NoError(t, err)
	assert.Equal(t, int64(len(ids)-3+1), v.Place, "a later arrival comes after the whole pre-queue")

	// The promotion order follows the lottery as slots free up.
	var order []string
	for k := 0; k < 3; k++ {
		order = append(order, byOld[served[k]])
	}
	for k := 3; k < len(served); k++ {
		require.NoError(t, w.Release(ctx, gateName, order[k-3]))
		v, err := w.Status(ctx, gateName, byOld[served[k]])
		require.NoError(t, err)
		assert.Equal(t, session.StatusActive, v.Status, "served %d", k)
		order = append(order, byOld[served[k]])
	}
	assert.Len(t, order, len(ids))
	sort.Strings(order)
	assert.Equal(t, ids, order)

	// After the end, the configured limit again.
	h.clock.Set(ev.EndsAt)
	assert.Equal(t, int64(1), session.EventConfig(cfg, evs, h.clock.Now()).ActiveLimit)
	assert.Equal(t, int64(3), session.EventConfig(cfg, evs, ev.EndsAt.Add(-time.Nanosecond)).ActiveLimit)
}

// testEventLotteryKeepsLanes checks that a draw shuffles only the normal
// lane of the pre-queue: a priority waiter keeps its position and lane and is
// not among the published positions, so each lane keeps its set of positions
// (which its place arithmetic counts on).
func testEventLotteryKeepsLanes(t *testing.T, open Opener) {
	h := newHarness(t, open)
	cfg := GateConfig(gateName, 1)
	held := cfg
	held.Mode = session.ModeQueueAll
	h.join(cfg, "admitted")
	newCode(t, h, "vip-lottery-code", 1, time.Hour)
	ev := suiteEvent("drop", Epoch)
	_, err := h.store.SaveEvent(h.ctx, ev)
	require.NoError(t, err)
	_, _, err = h.store.AdvanceEvent(h.ctx, gateName, "drop", Epoch)
	require.NoError(t, err)

	var normal []string
	for i := range 4 {
		id := fmt.Sprintf("n%d", i)
		normal = append(normal, id)
		h.join(held, id)
	}
	vip, codeErr := h.joinCode(held, "vip", "vip-lottery-code")
	require.NoError(t, codeErr)
	require.Equal(t, session.LanePriority, vip.Lane)
	for i := 4; i < 8; i++ {
		id := fmt.Sprintf("n%d", i)
		normal = append(normal, id)
		h.join(held, id)
	}

	started, changed, err := h.store.AdvanceEvent(h.ctx, gateName, "drop", ev.StartsAt)
	require.NoError(t, err)
	require.True(t, changed)
	assert.NotContains(t, started.Positions, vip.Position, "the priority waiter is not in the draw")
	assert.Len(t, started.Positions, len(normal))

	after, ok := h.get(gateName, "vip")
	require.True(t, ok)
	assert.Equal(t, vip.Position, after.Position, "the priority waiter keeps its position")
	assert.Equal(t, session.LanePriority, after.Lane)
	for _, id := range normal {
		s, ok := h.get(gateName, id)
		require.True(t, ok, id)
		assert.Equal(t, session.LaneNormal, s.Lane, "%s stays in the normal lane", s.ID)
		assert.Contains(t, started.Positions, s.Position, "%s holds a position of the normal lane's set", s.ID)
	}
}

// testEventPrequeueHoldsStaleOps: once the pre-queue is open as stored, the
// gate holds its line for every op until the draw, even one decided with a
// configuration read before PrequeueAt (a join, a release, an update or a
// purge whose caller read it a moment earlier, or on an instance whose
// clock lags): nobody is promoted, and a join into free slots waits.
// Positions and stored phases, not clocks. After the start, the line is
// served again.
func testEventPrequeueHoldsStaleOps(t *testing.T, open Opener) {
	h := newHarness(t, open)
	cfg := GateConfig(gateName, 2) // the configuration as read before PrequeueAt
	held := cfg
	held.Mode = session.ModeQueueAll
	h.join(cfg, "a")
	ev := suiteEvent("drop", Epoch.Add(10*time.Second))
	_, err := h.store.SaveEvent(h.ctx, ev)
	require.NoError(t, err)
	h.clock.Advance(10 * time.Second)
	opened, changed, err := h.store.AdvanceEvent(h.ctx, gateName, "drop", h.clock.Now())
	require.NoError(t, err)
	require.True(t, changed)
	require.Equal(t, int64(2), opened.FirstPosition)

	// A free slot, nobody waiting: a join that read the gate as open waits.
	assert.Equal(t, session.StatusWaiting, h.join(cfg, "p1").Status, "admitted ahead of the draw")
	require.Equal(t, session.StatusWaiting, h.join(held, "p2").Status)
	h.release(cfg, "a")
	h.reopen() // the hold is the stored event's, not the process's
	h.update(cfg, 0)
	_, err = h.store.Purge(h.ctx, cfg, []string{"p1"}, h.clock.Now())
	require.NoError(t, err)
	assert.Equal(t, session.StatusWaiting, h.join(cfg, "p3").Status, "admitted ahead of the draw after a restart")
	for _, id := range []string{"p1", "p2", "p3"} {
		assert.Equal(t, session.StatusWaiting, h.mustGet(gateName, id).Status, "%s promoted before the draw", id)
	}
	st := h.state(gateName)
	assert.Zero(t, st.Active, "free slots stay free until the draw")
	assert.Equal(t, int64(3), st.Waiting)

	started, changed, err := h.store.AdvanceEvent(h.ctx, gateName, "drop", ev.StartsAt)
	require.NoError(t, err)
	require.True(t, changed)
	require.Equal(t, session.EventStarted, started.Phase)
	h.clock.Set(ev.StartsAt)
	h.seen("p1", "p2", "p3")
	h.update(cfg, 0)
	assert.Equal(t, int64(2), h.state(gateName).Active, "the pre-queue is served after the draw")
}
