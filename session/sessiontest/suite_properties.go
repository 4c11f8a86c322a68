package sessiontest

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
)

// testStaleIsExactlyIsStale checks that Update purges exactly the sessions
// session.IsStale calls stale: whatever a Store writes its purge in (SQL,
// ...), it selects the same rows as the rule, to the nanosecond on both sides
// of each cutoff, for both statuses, and never a waiter still present.
func testStaleIsExactlyIsStale(t *testing.T, open Opener) {
	offsets := []time.Duration{-time.Hour, -time.Second, -time.Nanosecond, 0, time.Nanosecond, time.Second}
	h := newHarness(t, open)
	cfg := GateConfig(gateName, int64(len(offsets)))
	at := Epoch.Add(24 * time.Hour) // when the update runs
	waitingCutoff, activeCutoff := session.StaleCutoffs(cfg, at)

	var ids []string
	var touches []session.Touch
	for i, d := range offsets {
		id := idOf("a", i)
		ids = append(ids, id)
		h.join(cfg, id)
		touches = append(touches, session.Touch{ID: id, LastActive: activeCutoff.Add(d)})
	}
	require.NoError(t, h.store.Touch(h.ctx, gateName, touches))
	for i := range offsets {
		ids = append(ids, idOf("w", i))
		h.join(cfg, idOf("w", i))
	}
	ids = append(ids, "stayed") // waits and stays present (its socket is open): never stale
	h.join(cfg, "stayed")
	for i, d := range offsets { // in time order
		h.clock.Set(waitingCutoff.Add(d))
		h.leave(cfg, idOf("w", i))
	}
	h.clock.Set(at)
	h.seen("stayed")

	before := h.rows(gateName, ids)
	require.Len(t, before, len(ids))
	var want []string
	var wantWaiting, wantActive int64
	for _, r := range before {
		if !session.IsStale(cfg, r, at) {
			want = append(want, r.ID)
			continue
		}
		if r.Status == session.StatusActive {
			wantActive++
		} else {
			wantWaiting++
		}
	}
	// The table covers both sides of both cutoffs.
	require.Equal(t, int64(3), wantActive, "stale active sessions in the table")
	require.Equal(t, int64(3), wantWaiting, "stale waiters in the table")

	frozen := cfg
	frozen.ActiveLimit = 0 // no promotion: the purge alone decides who remains
	r := h.update(frozen, 0)
	assert.Equal(t, session.UpdateReport{Gate: gateName, PurgedWaiting: wantWaiting, PurgedActive: wantActive}, zeroCounts(r))
	var got []string
	for _, r := range h.rows(gateName, ids) {
		got = append(got, r.ID)
	}
	assert.Equal(t, want, got, "the sessions Update kept are exactly those session.IsStale does not call stale")
	assert.Equal(t, session.Counters{NextPosition: int64(len(ids)) + 1, Active: int64(len(offsets)) - wantActive, Waiting: int64(len(offsets)) + 1 - wantWaiting},
		h.state(gateName).Counters)
}

// testActiveNeverWaitsAgain checks the property stores rely on: no session
// goes from active back to waiting, whatever happens to it or its gate (a
// limit lowered, even to zero, its joins and leaves, refreshes, updates,
// releases of others, a restart). A session once seen active is active or
// gone.
func testActiveNeverWaitsAgain(t *testing.T, open Opener) {
	h := newHarness(t, open)
	cfg := GateConfig(gateName, 2)
	ids := []string{"a", "b", "w1", "w2", "w3", "x0", "x1"}
	seen := map[string]int64{} // id -> position while active
	check := func(what string) {
		t.Helper()
		for _, r := range h.rows(gateName, ids) {
			if r.Status == session.StatusActive {
				seen[r.ID] = r.Position
				continue
			}
			if pos, ok := seen[r.ID]; ok && pos == r.Position {
				require.Failf(t, "an active session went back to waiting", "after %s: %s at position %d", what, r.ID, r.Position)
			}
		}
	}
	for _, id := range ids[:5] {
		h.join(cfg, id)
	}
	check("joins")
	require.Len(t, seen, 2)

	lowered := cfg
	for _, limit := range []int64{1, 0} {
		lowered.ActiveLimit = limit
		steps := []struct {
			what string
			do   func()
		}{
			{"join again", func() { h.join(lowered, "a"); h.join(lowered, "b") }},
			{"leave", func() { h.leave(lowered, "a") }},
			{"touch", func() {
				require.NoError(t, h.store.Touch(h.ctx, gateName, []session.Touch{{ID: "b", LastActive: h.clock.Now()}}))
			}},
			{"update", func() { h.update(lowered, 0) }},
			{"a waiter joins and is released", func() {
				id := fmt.Sprintf("x%d", limit)
				h.join(lowered, id)
				h.release(lowered, id)
			}},
			{"restart", func() { h.reopen() }},
			{"update after the restart", func() { h.clock.Advance(time.Second); h.update(lowered, 1) }},
		}
		for _, s := range steps {
			s.do()
			check(fmt.Sprintf("%s at limit %d", s.what, limit))
		}
	}
	// Both active sessions stayed active over the lowered limit.
	assert.Equal(t, session.StatusActive, h.mustGet(gateName, "a").Status)
	assert.Equal(t, session.StatusActive, h.mustGet(gateName, "b").Status)

	// The limit back up: a release promotes a waiter, who stays active too.
	h.release(cfg, "a")
	check("release at the limit")
	require.Contains(t, seen, "w1", "w1 was promoted")
	h.leave(cfg, "w1")
	h.join(cfg, "w1")
	h.clock.Advance(cfg.WaitingTimeout + time.Second) // past the waiting timeout, not the active one
	h.update(cfg, 0)
	check("an update past the waiting timeout")
	assert.Equal(t, session.StatusActive, h.mustGet(gateName, "w1").Status)
}
