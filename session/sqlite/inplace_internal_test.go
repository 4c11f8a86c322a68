package sqlite

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
	"github.com/anteroomhq/anteroom/session/sessiontest"
)

// An event's lottery, drawn between two transactions of an update, moves
// pre-queued waiters to other positions of the draw: a stale waiter of the
// cutoff's own second, above the in-place cursor (updateStep.inPlace) when
// the draw begins, can be given a position below it. The update's next
// steps must still delete it: the update leaves no waiter stale at its
// cutoff.
func TestALotteryBetweenInPlaceStepsLeavesNoStaleWaiter(t *testing.T) {
	s := openInternal(t)
	ctx := context.Background()
	cfg := sessiontest.GateConfig("default", 1)
	held := cfg
	held.Mode = session.ModeQueueAll
	_, err := s.Join(ctx, cfg, "a0", epoch) // position 1, active
	require.NoError(t, err)
	ev := session.ScheduledEvent{Gate: "default", ID: "drop", PrequeueAt: epoch, StartsAt: epoch.Add(time.Hour),
		Shuffle: true, Seed: []byte("0123456789abcdef0123456789abcdef")}
	_, err = s.SaveEvent(ctx, ev)
	require.NoError(t, err)
	_, changed, err := s.AdvanceEvent(ctx, "default", "drop", epoch)
	require.NoError(t, err)
	require.True(t, changed, "the pre-queue opens")

	// Live waiters first (positions 2..7), then stale ones (8..13), all
	// last seen in the cutoff's second.
	now := epoch.Add(cfg.WaitingTimeout + 2*time.Second + 500*time.Millisecond)
	cutoff := now.Add(-cfg.WaitingTimeout)
	ids := waitersSeen(t, s, held, now,
		seenGroup{"live", 6, func(i int) time.Time { return cutoff.Add(time.Duration(i) * time.Millisecond) }},
		seenGroup{"stale", 6, func(i int) time.Time { return cutoff.Add(-time.Duration(i+1) * time.Millisecond) }})
	live, stale := ids[0], ids[1]

	// After the update's second step (the first in-place deletion:
	// stale0), the lottery is drawn before its next transaction.
	drawn := make(chan error, 1)
	atUpdateStep(t, s, 2, 1, func() {
		go func() {
			_, changed, err := s.AdvanceEvent(ctx, "default", "drop", ev.StartsAt)
			if err == nil && !changed {
				err = fmt.Errorf("the lottery was not drawn")
			}
			drawn <- err
		}()
	})
	rep, err := s.Update(ctx, cfg, now, 1)
	require.NoError(t, err)
	require.NoError(t, <-drawn)
	require.Greater(t, rep.Transactions, 1)

	left := rowsByID(t, s, cfg.Name)
	for _, id := range stale {
		if r, ok := left[id]; ok {
			t.Errorf("%s (position %d after the draw) is stale at the update's cutoff and stays", id, r.Position)
		}
	}
	assert.EqualValues(t, len(stale), rep.PurgedWaiting)
	assert.Len(t, left, 1+len(live))
}

// Stored settings that shorten the waiting timeout by less than a second,
// saved between two transactions of an update, move its cutoff later
// within the same second: waiters last seen between the two cutoffs are
// stale at the update's new cutoff, and must go even when they lie below
// the in-place cursor taken at the old one.
func TestACutoffMovedWithinItsSecondLeavesNoStaleWaiter(t *testing.T) {
	s := openInternal(t)
	ctx := context.Background()
	cfg := sessiontest.GateConfig("default", 1)
	_, err := s.Join(ctx, cfg, "a0", epoch) // position 1, active
	require.NoError(t, err)
	now := epoch.Add(cfg.WaitingTimeout + 2*time.Second + 500*time.Millisecond)
	oldCutoff := now.Add(-cfg.WaitingTimeout) // epoch+2.5s
	shorter := cfg
	shorter.WaitingTimeout -= 400 * time.Millisecond // cutoff epoch+2.9s, same second
	require.Equal(t, seenSecond(oldCutoff.UnixNano()), seenSecond(now.Add(-shorter.WaitingTimeout).UnixNano()))

	ids := waitersSeen(t, s, cfg, now,
		seenGroup{"mid", 3, func(int) time.Time { return oldCutoff.Add(100 * time.Millisecond) }},    // stale only at the new cutoff, below the cursor
		seenGroup{"stale", 3, func(int) time.Time { return oldCutoff.Add(-100 * time.Millisecond) }}) // stale at both
	mid, stale := ids[0], ids[1]

	saved := make(chan error, 1)
	atUpdateStep(t, s, 2, 1, func() { // after the first in-place deletion (stale0)
		go func() { saved <- s.SaveGateSettings(ctx, cfg.Name, &shorter) }()
	})
	rep, err := s.Update(ctx, cfg, now, 1)
	require.NoError(t, err)
	require.NoError(t, <-saved)

	for _, r := range rowsByID(t, s, cfg.Name) {
		if r.ID != "a0" {
			t.Errorf("%s (position %d, last seen %v) is stale at the update's cutoff and stays", r.ID, r.Position, r.LastActive)
		}
	}
	assert.EqualValues(t, len(mid)+len(stale), rep.PurgedWaiting)
}

// A call-back turned off between two transactions of an update leaves a
// waiter stale in the cutoff's second where it lies, possibly below the
// in-place cursor (updateStep.inPlace): while it was to be called back it
// was not deleted, and now it must be. SetNotify on a clock far behind
// leaves its sign of life where it was.
func TestACallBackTurnedOffBetweenInPlaceStepsLeavesNoStaleWaiter(t *testing.T) {
	s := openInternal(t)
	ctx := context.Background()
	cfg := sessiontest.GateConfig("default", 1)
	_, err := s.Join(ctx, cfg, "a0", epoch) // position 1, active
	require.NoError(t, err)
	now := epoch.Add(cfg.WaitingTimeout + 2*time.Second + 500*time.Millisecond)
	cutoff := now.Add(-cfg.WaitingTimeout)

	seen := func(int) time.Time { return cutoff.Add(-100 * time.Millisecond) }
	ids := waitersSeen(t, s, cfg, now, seenGroup{"called", 3, seen}, seenGroup{"stale", 3, seen})
	called, stale := ids[0], ids[1]
	for _, id := range called { // to be called back: kept, below the cursor
		_, err := s.SetNotify(ctx, cfg, id, true, epoch)
		require.NoError(t, err)
	}

	turnedOff := make(chan error, 1)
	atUpdateStep(t, s, 2, 1, func() { // after the first in-place deletion (stale0)
		go func() {
			_, err := s.SetNotify(ctx, cfg, called[0], false, epoch)
			turnedOff <- err
		}()
	})
	rep, err := s.Update(ctx, cfg, now, 1)
	require.NoError(t, err)
	require.NoError(t, <-turnedOff)

	left := map[string]bool{}
	for id := range rowsByID(t, s, cfg.Name) {
		left[id] = true
	}
	assert.False(t, left[called[0]], "%s, no longer to be called back, is stale at the update's cutoff and stays", called[0])
	assert.True(t, left[called[1]] && left[called[2]], "the waiters still to be called back stay")
	for _, id := range stale {
		assert.False(t, left[id], "%s is stale at the update's cutoff and stays", id)
	}
	assert.EqualValues(t, len(stale)+1, rep.PurgedWaiting)
}

// seenGroup is n waiters named prefix0, prefix1, … last seen at at(i).
type seenGroup struct {
	prefix string
	n      int
	at     func(i int) time.Time
}

// waitersSeen joins each group's waiters in order at epoch with cfg, then
// touches them at their times, and touches a0 (the test's active session)
// at now. It returns each group's ids.
func waitersSeen(t *testing.T, s *Store, cfg session.GateConfig, now time.Time, groups ...seenGroup) [][]string {
	t.Helper()
	ctx := context.Background()
	ts := []session.Touch{{ID: "a0", LastActive: now}}
	ids := make([][]string, len(groups))
	for g, gr := range groups {
		for i := range gr.n {
			id := fmt.Sprintf("%s%d", gr.prefix, i)
			_, err := s.Join(ctx, cfg, id, epoch)
			require.NoError(t, err)
			ids[g] = append(ids[g], id)
			ts = append(ts, session.Touch{ID: id, LastActive: gr.at(i)})
		}
	}
	require.NoError(t, s.Touch(ctx, cfg.Name, ts))
	return ids
}

// rowsByID is the gate's rows (Rows), by session id.
func rowsByID(t *testing.T, s *Store, gate string) map[string]session.Session {
	t.Helper()
	rows, err := s.Rows(context.Background(), gate)
	require.NoError(t, err)
	m := make(map[string]session.Session, len(rows))
	for _, r := range rows {
		m[r.ID] = r
	}
	return m
}
