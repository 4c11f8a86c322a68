package postgres_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
	"github.com/anteroomhq/anteroom/session/postgres/pgtest"
	"github.com/anteroomhq/anteroom/session/sessiontest"
)

// Instance A opens a pre-queue; instance B, whose writer decoded the event
// while it was still scheduled, releases, updates and purges with the
// configuration it read before PrequeueAt: none of it promotes a pre-queue
// entrant before the draw, with or without runtime settings.
func TestPrequeueHoldsAnotherInstancesStaleOps(t *testing.T) {
	for _, held := range []bool{false, true} {
		t.Run(fmt.Sprint("runtime settings ", held), func(t *testing.T) {
			url := pgtest.DB(t)
			ctx := context.Background()
			a, b := open(t, url, quiet), open(t, url, quiet)
			t.Cleanup(func() { _ = a.Close(); _ = b.Close() })
			now := sessiontest.Epoch
			cfg := sessiontest.GateConfig(multiGate, 1)
			_, err := a.Load(ctx, []string{multiGate})
			require.NoError(t, err)
			if held {
				require.NoError(t, a.SaveGateSettings(ctx, multiGate, &cfg))
			}
			_, err = a.Join(ctx, cfg, "a", now)
			require.NoError(t, err)
			_, err = b.Join(ctx, cfg, "early", now)
			require.NoError(t, err)
			ev := session.ScheduledEvent{Gate: multiGate, ID: "drop", PrequeueAt: now.Add(10 * time.Second),
				StartsAt: now.Add(time.Minute), Seed: make([]byte, session.LotterySeedSize)}
			_, err = a.SaveEvent(ctx, ev)
			require.NoError(t, err)
			_, err = b.Join(ctx, cfg, "early", now) // b's writer decodes the scheduled event
			require.NoError(t, err)
			now = ev.PrequeueAt
			opened, changed, err := a.AdvanceEvent(ctx, multiGate, "drop", now)
			require.NoError(t, err)
			require.True(t, changed)
			require.Equal(t, int64(3), opened.FirstPosition)
			queueAll := cfg
			queueAll.Mode = session.ModeQueueAll
			for _, id := range []string{"p1", "p2"} {
				got, err := a.Join(ctx, queueAll, id, now)
				require.NoError(t, err)
				require.Equal(t, session.StatusWaiting, got.Status)
			}
			stale, before := cfg, now.Add(-time.Second) // read before PrequeueAt, on b's clock
			_, err = b.Release(ctx, stale, "a", before)
			require.NoError(t, err)
			_, err = b.Release(ctx, stale, "early", before)
			require.NoError(t, err)
			_, err = b.Update(ctx, stale, before, 0)
			require.NoError(t, err)
			_, err = b.Purge(ctx, stale, nil, before)
			require.NoError(t, err)
			got, err := b.Join(ctx, stale, "late", before)
			require.NoError(t, err)
			assert.Equal(t, session.StatusWaiting, got.Status, "admitted ahead of the draw")
			rows, err := b.Rows(ctx, multiGate)
			require.NoError(t, err)
			for _, r := range rows {
				assert.Equal(t, session.StatusWaiting, r.Status, "%s promoted before the draw", r.ID)
			}
		})
	}
}
