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
	ts := []session.Touch{{ID: "a0", LastActive: now}}
	var live, stale []string
	for i := range 6 {
		live = append(live, fmt.Sprintf("live%d", i))
		ts = append(ts, session.Touch{ID: live[i], LastActive: cutoff.Add(time.Duration(i) * time.Millisecond)})
	}
	for i := range 6 {
		stale = append(stale, fmt.Sprintf("stale%d", i))
		ts = append(ts, session.Touch{ID: stale[i], LastActive: cutoff.Add(-time.Duration(i+1) * time.Millisecond)})
	}
	for _, id := range append(append([]string{}, live...), stale...) {
		_, err := s.Join(ctx, held, id, epoch)
		require.NoError(t, err)
	}
	require.NoError(t, s.Touch(ctx, cfg.Name, ts))

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

	rows, err := s.Rows(ctx, cfg.Name)
	require.NoError(t, err)
	left := map[string]int64{}
	for _, r := range rows {
		left[r.ID] = r.Position
	}
	for _, id := range stale {
		if pos, ok := left[id]; ok {
			t.Errorf("%s (position %d after the draw) is stale at the update's cutoff and stays", id, pos)
		}
	}
	assert.EqualValues(t, len(stale), rep.PurgedWaiting)
	assert.Len(t, rows, 1+len(live))
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

	ts := []session.Touch{{ID: "a0", LastActive: now}}
	var mid, stale []string
	for i := range 3 { // stale only at the new cutoff, below the cursor
		mid = append(mid, fmt.Sprintf("mid%d", i))
		ts = append(ts, session.Touch{ID: mid[i], LastActive: oldCutoff.Add(100 * time.Millisecond)})
	}
	for i := range 3 { // stale at both
		stale = append(stale, fmt.Sprintf("stale%d", i))
		ts = append(ts, session.Touch{ID: stale[i], LastActive: oldCutoff.Add(-100 * time.Millisecond)})
	}
	for _, id := range append(append([]string{}, mid...), stale...) {
		_, err := s.Join(ctx, cfg, id, epoch)
		require.NoError(t, err)
	}
	require.NoError(t, s.Touch(ctx, cfg.Name, ts))

	saved := make(chan error, 1)
	atUpdateStep(t, s, 2, 1, func() { // after the first in-place deletion (stale0)
		go func() { saved <- s.SaveGateSettings(ctx, cfg.Name, &shorter) }()
	})
	rep, err := s.Update(ctx, cfg, now, 1)
	require.NoError(t, err)
	require.NoError(t, <-saved)

	rows, err := s.Rows(ctx, cfg.Name)
	require.NoError(t, err)
	for _, r := range rows {
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

	ts := []session.Touch{{ID: "a0", LastActive: now}}
	var called, stale []string
	for i := range 3 { // to be called back: kept, below the cursor
		called = append(called, fmt.Sprintf("called%d", i))
		ts = append(ts, session.Touch{ID: called[i], LastActive: cutoff.Add(-100 * time.Millisecond)})
	}
	for i := range 3 {
		stale = append(stale, fmt.Sprintf("stale%d", i))
		ts = append(ts, session.Touch{ID: stale[i], LastActive: cutoff.Add(-100 * time.Millisecond)})
	}
	for _, id := range append(append([]string{}, called...), stale...) {
		_, err := s.Join(ctx, cfg, id, epoch)
		require.NoError(t, err)
	}
	for _, id := range called {
		_, err := s.SetNotify(ctx, cfg, id, true, epoch)
		require.NoError(t, err)
	}
	require.NoError(t, s.Touch(ctx, cfg.Name, ts))

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

	rows, err := s.Rows(ctx, cfg.Name)
	require.NoError(t, err)
	left := map[string]bool{}
	for _, r := range rows {
		left[r.ID] = true
	}
	assert.False(t, left[called[0]], "%s, no longer to be called back, is stale at the update's cutoff and stays", called[0])
	assert.True(t, left[called[1]] && left[called[2]], "the waiters still to be called back stay")
	for _, id := range stale {
		assert.False(t, left[id], "%s is stale at the update's cutoff and stays", id)
	}
	assert.EqualValues(t, len(stale)+1, rep.PurgedWaiting)
}
