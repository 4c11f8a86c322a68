package postgres_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
	"github.com/anteroomhq/anteroom/session/postgres/pgtest"
	"github.com/anteroomhq/anteroom/session/sessiontest"
)

// TestClaimLinkOnceAcrossInstances: two instances on one database both
// hold a called-back session's promotion in memory; the same claim link
// visited on both at the same instant (and twice on each) is claimed
// exactly once.
func TestClaimLinkOnceAcrossInstances(t *testing.T) {
	url := pgtest.DB(t)
	ctx := context.Background()
	cfg := sessiontest.GateConfig(multiGate, 1)
	cfg.ClaimTimeout = time.Minute
	cfg.NotifyClaimTimeout = 15 * time.Minute
	var wls [2]*session.Waitlist
	var store session.Store
	for i := range wls {
		s := open(t, url, quiet)
		store = s
		t.Cleanup(func() { _ = s.Close() })
		w, err := session.New(ctx, s, []session.GateConfig{cfg}, session.Options{TouchInterval: -1, Logger: quiet.Logger})
		require.NoError(t, err)
		t.Cleanup(func() { _ = w.Close() })
		wls[i] = w
	}
	for round := range 3 {
		holder, waiter := "h"+string(rune('0'+round)), "w"+string(rune('0'+round))
		v, err := wls[0].Join(ctx, multiGate, holder)
		require.NoError(t, err)
		require.Equal(t, session.StatusActive, v.Status)
		_, err = wls[0].Join(ctx, multiGate, waiter)
		require.NoError(t, err)
		_, err = wls[0].SetNotify(ctx, multiGate, waiter, true)
		require.NoError(t, err)
		require.NoError(t, wls[0].Release(ctx, multiGate, holder))
		for _, w := range wls {
			require.Eventually(t, func() bool {
				// The line emptied: the waiter was promoted. (A validation
				// would claim the slot: it is a sign of life.)
				g, err := w.Global(multiGate)
				return err == nil && g.Waiting == 0 && g.Active == 1
			}, 10*time.Second, 5*time.Millisecond, "both instances hold the promotion")
		}
		row, err := store.Get(ctx, multiGate, waiter)
		require.NoError(t, err)
		require.False(t, row.ClaimDeadline.IsZero(), "promoted, unclaimed")
		var wg sync.WaitGroup
		errs := make([]error, 4)
		for i := range errs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = wls[i%2].ClaimLink(ctx, multiGate, waiter, row.ClaimDeadline)
			}()
		}
		wg.Wait()
		won := 0
		for _, err := range errs {
			if err == nil {
				won++
			} else {
				assert.ErrorIs(t, err, session.ErrNotActive)
			}
		}
		assert.Equal(t, 1, won, "round %d: exactly one visit claims the slot", round)
		require.NoError(t, wls[1].Release(ctx, multiGate, waiter))
		for _, w := range wls {
			require.Eventually(t, func() bool {
				g, err := w.Global(multiGate)
				return err == nil && g.Active == 0
			}, 10*time.Second, 5*time.Millisecond)
		}
	}
}
