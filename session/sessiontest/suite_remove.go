package sessiontest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
)

// testRemoveGate checks that a removed gate takes its scheduled events and
// priority codes with it (a gate added again under its name starts without
// them, also after a restart), that it cannot go while an event's pre-queue
// is open or due, and that the store checks the gate's counters in its own
// transaction (a join committed before the removal that memory has not
// shown yet).
func testRemoveGate(t *testing.T, open Opener) {
	t.Run("TakesEventsAndCodes", func(t *testing.T) { testRemoveGateData(t, open) })
	t.Run("RefusedInPrequeue", func(t *testing.T) { testRemoveGatePrequeue(t, open) })
	t.Run("StoreChecksCounters", func(t *testing.T) { testRemoveGateStoreCounters(t, open) })
	t.Run("RacingJoins", func(t *testing.T) { testRemoveGateRacingJoins(t, open) })
}

func testRemoveGateData(t *testing.T, open Opener) {
	h := newHarness(t, open)
	ctx := context.Background()
	w := h.waitlist(GateConfig(gateName, 1))
	extra := GateConfig("extra", 2)
	require.NoError(t, w.AddGate(ctx, extra))
	ev := suiteEvent("later", Epoch.Add(time.Hour))
	ev.Gate = "extra"
	_, err := w.AddEvent(ctx, ev)
	require.NoError(t, err)
	_, err = w.CreateCode(ctx, "extra", "vip-code-0123456789", "vip", 5, time.Hour)
	require.NoError(t, err)

	require.NoError(t, w.RemoveGate(ctx, "extra"))
	evs, err := h.store.Events(ctx, "extra")
	require.NoError(t, err)
	assert.Empty(t, evs, "the events went with the gate")
	codes, err := h.store.ListCodes(ctx, "extra")
	require.NoError(t, err)
	assert.Empty(t, codes, "the codes went with the gate")

	require.NoError(t, w.AddGate(ctx, extra))
	mem, err := w.Events("extra")
	require.NoError(t, err)
	assert.Empty(t, mem, "a gate added again inherits no event")
	codes, err = w.Codes(ctx, "extra")
	require.NoError(t, err)
	assert.Empty(t, codes, "nor any code")
	sv, codeErr, err := w.JoinWithCode(ctx, "extra", "x", "vip-code-0123456789")
	require.NoError(t, err)
	assert.ErrorIs(t, codeErr, session.ErrCodeUnknown, "the old code gives no priority")
	assert.Equal(t, session.StatusActive, sv.Status, "the join happened beside the code's error")

	require.NoError(t, w.Close())
	h.reopen()
	w = h.waitlist(GateConfig(gateName, 1))
	mem, err = w.Events("extra")
	require.NoError(t, err)
	assert.Empty(t, mem, "nor after a restart")
}

func testRemoveGatePrequeue(t *testing.T, open Opener) {
	h := newHarness(t, open)
	ctx := context.Background()
	w := h.waitlist(GateConfig(gateName, 1))
	extra := GateConfig("extra", 2)
	require.NoError(t, w.AddGate(ctx, extra))
	ev := suiteEvent("sale", Epoch.Add(time.Minute))
	ev.Gate = "extra"
	_, err := w.AddEvent(ctx, ev)
	require.NoError(t, err)

	// Due but not yet advanced: the line is held already.
	h.clock.Set(ev.PrequeueAt)
	assert.ErrorIs(t, w.RemoveGate(ctx, "extra"), &session.Error{Code: session.CodePrequeueOpen})
	require.NoError(t, w.AdvanceEvents(ctx))
	stored, err := h.store.Events(ctx, "extra")
	require.NoError(t, err)
	require.Len(t, stored, 1)
	require.Equal(t, session.EventPrequeue, stored[0].Phase)
	// Open: refused, also in reject mode, and also by the store itself.
	closed := extra
	closed.Mode = session.ModeReject
	_, err = w.SetGateConfig(ctx, closed)
	require.NoError(t, err)
	assert.ErrorIs(t, w.RemoveGate(ctx, "extra"), &session.Error{Code: session.CodePrequeueOpen})
	r := h.store
	assert.ErrorIs(t, r.RemoveGate(ctx, closed, h.clock.Now()), &session.Error{Code: session.CodePrequeueOpen})
	assert.Contains(t, w.Gates(), "extra", "a refused removal keeps the gate")
	stored, err = h.store.Events(ctx, "extra")
	require.NoError(t, err)
	assert.Len(t, stored, 1, "and its event")
	snaps, err := h.store.Load(ctx, nil)
	require.NoError(t, err)
	require.Contains(t, snaps, "extra", "and its settings")

	// Once the event started, the gate may go.
	h.clock.Set(ev.StartsAt)
	require.NoError(t, w.AdvanceEvents(ctx))
	require.NoError(t, w.RemoveGate(ctx, "extra"))
	assert.NotContains(t, w.Gates(), "extra")
}

func testRemoveGateStoreCounters(t *testing.T, open Opener) {
	h := newHarness(t, open)
	ctx := context.Background()
	r := h.store
	cfg := GateConfig("extra", 1)
	require.NoError(t, h.store.SaveGateSettings(ctx, "extra", &cfg))
	// A join the remover's memory did not see yet.
	h.join(cfg, "a")
	h.join(cfg, "b")
	assert.ErrorIs(t, r.RemoveGate(ctx, cfg, h.clock.Now()), &session.Error{Code: session.CodeGateInUse})
	snaps, err := h.store.Load(ctx, nil)
	require.NoError(t, err)
	require.Contains(t, snaps, "extra", "the refused removal kept the settings")
	closed := cfg
	closed.Mode = session.ModeReject
	require.NoError(t, r.RemoveGate(ctx, closed, h.clock.Now()), "in reject mode it may go")
	snaps, err = h.store.Load(ctx, nil)
	require.NoError(t, err)
	assert.NotContains(t, snaps, "extra")
	h.mustGet("extra", "a") // sessions stay
	assert.ErrorIs(t, r.RemoveGate(ctx, session.GateConfig{Name: "no/slash"}, h.clock.Now()), session.ErrInvalidArgument)
}

// testRemoveGateRacingJoins removes an open, empty gate while joins race
// into it. Whatever wins, memory and the store agree afterwards: a refused
// removal (gate_in_use, from the store's own check) leaves the gate whole
// in memory; a removal that went through leaves nothing in memory, and the
// gate added again shows what the store holds.
func testRemoveGateRacingJoins(t *testing.T, open Opener) {
	h := newHarness(t, open)
	ctx := context.Background()
	w := h.waitlist(GateConfig(gateName, 1))
	outcomes := map[string]int{}
	for round := range 12 {
		name := fmt.Sprintf("race%d", round)
		cfg := GateConfig(name, 3)
		require.NoError(t, w.AddGate(ctx, cfg))
		var wg sync.WaitGroup
		joined := make([]error, 6)
		for i := range joined {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, joined[i] = w.Join(ctx, name, fmt.Sprintf("s%d", i))
			}()
		}
		removed := w.RemoveGate(ctx, name)
		wg.Wait()
		for _, err := range joined {
			if err != nil {
				require.ErrorIs(t, err, session.ErrUnknownGate, "a join fails only for want of the gate")
			}
		}
		switch {
		case removed == nil:
			outcomes["removed"]++
			require.NotContains(t, w.Gates(), name)
			require.NoError(t, w.AddGate(ctx, cfg), "added again")
		case errors.Is(removed, &session.Error{Code: session.CodeGateInUse}):
			outcomes["in use"]++
			require.Contains(t, w.Gates(), name, "a refused removal keeps the gate")
		default:
			require.NoError(t, removed)
		}
		v, err := w.Global(name)
		require.NoError(t, err)
		st := h.state(name)
		assert.Equal(t, [2]int64{st.Active, st.Waiting}, [2]int64{v.Active, v.Waiting}, "round %d: memory agrees with the store", round)
	}
	t.Logf("outcomes: %v", outcomes)
}
