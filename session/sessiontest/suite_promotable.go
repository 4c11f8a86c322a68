package sessiontest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
)

// testPromotable checks the other half of session.Promotable on the store:
// a release gives its slot to the first waiter at once, whenever it joined
// (its op's now may be a moment earlier than a racing join's). That an
// update promotes only the sessions in line when it began is checked by
// each store's own test, which joins in the middle of an update
// (TestUpdatePromotesOnlyWhoWasInLine).
func testPromotable(t *testing.T, open Opener) {
	t.Run("ReleasePromotesAtOnce", func(t *testing.T) { testPromotableRelease(t, open) })
}

func testPromotableRelease(t *testing.T, open Opener) {
	h := newHarness(t, open)
	cfg := GateConfig(gateName, 1)
	t0 := h.clock.Now()
	h.join(cfg, "a")
	h.clock.Advance(10 * time.Second)
	h.join(cfg, "late")
	// A release decided a moment before the waiter joined (its call raced
	// the join) still hands its slot over at once.
	_, err := h.store.Release(h.ctx, cfg, "a", t0.Add(5*time.Second))
	require.NoError(t, err)
	assert.Equal(t, session.StatusActive, h.mustGet(gateName, "late").Status)
	assert.Equal(t, session.Counters{NextPosition: 3, Active: 1, Waiting: 0}, h.state(gateName).Counters)
}
