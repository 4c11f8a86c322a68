package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
	"github.com/anteroomhq/anteroom/session/postgres/pgtest"
	"github.com/anteroomhq/anteroom/session/sessiontest"
)

// TestRemoveGateFollowedWithoutEvents: a runtime gate removed on one
// instance goes on the other too, with its events; added again on the
// other, it has neither the old event nor the old code.
func TestRemoveGateFollowedWithoutEvents(t *testing.T) {
	url := pgtest.DB(t)
	ctx := context.Background()
	var wls [2]*session.Waitlist
	for i := range wls {
		s := open(t, url, quiet)
		t.Cleanup(func() { _ = s.Close() })
		w, err := session.New(ctx, s, []session.GateConfig{sessiontest.GateConfig(multiGate, 1)}, session.Options{TouchInterval: -1, Logger: quiet.Logger})
		require.NoError(t, err)
		t.Cleanup(func() { _ = w.Close() })
		wls[i] = w
	}
	extra := sessiontest.GateConfig("extra", 2)
	require.NoError(t, wls[0].AddGate(ctx, extra))
	_, err := wls[0].AddEvent(ctx, session.ScheduledEvent{Gate: "extra", ID: "later", PrequeueAt: time.Now().Add(time.Hour), StartsAt: time.Now().Add(2 * time.Hour)})
	require.NoError(t, err)
	_, err = wls[0].CreateCode(ctx, "extra", "vip-code-0123456789", "", 3, time.Hour)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		_, err := wls[1].GateConfig("extra")
		return err == nil
	}, 10*time.Second, 5*time.Millisecond, "the other instance follows the added gate")
	require.NoError(t, wls[1].AdvanceEvents(ctx)) // reads the events

	require.NoError(t, wls[0].RemoveGate(ctx, "extra"))
	require.Eventually(t, func() bool {
		_, err := wls[1].GateConfig("extra")
		return err != nil
	}, 10*time.Second, 5*time.Millisecond, "the other instance follows the removal")

	require.NoError(t, wls[1].AddGate(ctx, extra))
	evs, err := wls[1].Events("extra")
	require.NoError(t, err)
	assert.Empty(t, evs, "no event inherited")
	codes, err := wls[1].Codes(ctx, "extra")
	require.NoError(t, err)
	assert.Empty(t, codes, "no code inherited")
}
