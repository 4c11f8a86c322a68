package sessiontest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
)

// reasons returns "kind:id:reason" for each event, the reason as
// session.PurgeReason names it ("not_stale" on events that are no
// departure).
func reasons(evs []session.Event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = kindName(e.Kind) + ":" + e.Session.ID + ":" + e.Reason.String()
	}
	return out
}

// testEventReasons checks that every departure a Store reports says why
// (metrics and history count purges by reason): released for Release,
// gone, idle and unclaimed for the update's and Purge's purges, and no
// reason on the other events.
func testEventReasons(t *testing.T, open Opener) {
	h := newHarness(t, open)
	cfg := claimConfig(2)

	mark := h.mark()
	h.join(cfg, "a")
	h.join(cfg, "b")
	h.join(cfg, "w1")
	h.join(cfg, "w2")
	h.join(cfg, "w3")
	h.join(cfg, "w4")
	assert.Equal(t, []string{"activated:a:not_stale", "activated:b:not_stale", "queued:w1:not_stale",
		"queued:w2:not_stale", "queued:w3:not_stale", "queued:w4:not_stale"}, reasons(h.eventsSince(mark)))

	// An explicit release, of an active session and of a waiter.
	mark = h.mark()
	h.release(cfg, "a") // w1 promoted, unclaimed
	h.release(cfg, "w4")
	assert.Equal(t, []string{"deactivated:a:released", "promoted:w1:not_stale", "dequeued:w4:released"},
		reasons(h.eventsSince(mark)))

	// The update: w1 past its claim deadline is unclaimed, w2 promoted in
	// its place; w3 stays (seen).
	w1 := h.mustGet(gateName, "w1")
	h.clock.Set(w1.ClaimDeadline.Add(time.Nanosecond))
	h.seen("b", "w2", "w3")
	mark = h.mark()
	h.update(cfg, 0)
	assert.Equal(t, []string{"deactivated:w1:unclaimed", "promoted:w2:not_stale"}, reasons(h.eventsSince(mark)))

	// Purge names the reason too: w2 unclaimed.
	w2 := h.mustGet(gateName, "w2")
	h.clock.Set(w2.ClaimDeadline.Add(time.Nanosecond))
	h.seen("b", "w3")
	mark = h.mark()
	_, err := h.store.Purge(h.ctx, cfg, []string{"w2", "b"}, h.clock.Now())
	require.NoError(t, err)
	assert.Equal(t, []string{"deactivated:w2:unclaimed", "promoted:w3:not_stale"}, reasons(h.eventsSince(mark)))

	// A waiter gone silent is gone; an active session not seen for the
	// active timeout is idle.
	h.join(cfg, "w5")
	h.join(cfg, "w6")
	h.claim("w3", h.clock.Now())
	h.clock.Advance(cfg.WaitingTimeout + time.Second)
	h.seen("b", "w3", "w6")
	mark = h.mark()
	h.update(cfg, 0)
	assert.Equal(t, []string{"dequeued:w5:gone"}, reasons(h.eventsSince(mark)))
	h.clock.Advance(cfg.ActiveTimeout + time.Second)
	h.seen("w3", "w6")
	mark = h.mark()
	h.update(cfg, 0)
	evs := reasons(h.eventsSince(mark))
	assert.Contains(t, evs, "deactivated:b:idle")
	assert.Contains(t, evs, "promoted:w6:not_stale")
}
