package postgres

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
	"github.com/anteroomhq/anteroom/session/postgres/pgtest"
	"github.com/anteroomhq/anteroom/session/sessiontest"
)

// An update promotes only the sessions in line when it began
// (session.Promotable): joins that arrive between its transactions wait for
// the next op. Before, its later transactions promoted them with the
// configuration it read at its start: an update that began before an
// event's pre-queue opened admitted the pre-queue's first arrivals, in
// arrival order, before the draw.
func TestUpdatePromotesOnlyWhoWasInLine(t *testing.T) {
	ctx := context.Background()
	quiet := slog.New(slog.DiscardHandler)
	s, err := Open(ctx, pgtest.DB(t), Options{Logger: quiet})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	clock := sessiontest.NewClock(sessiontest.Epoch)
	w, err := session.New(ctx, s, []session.GateConfig{sessiontest.GateConfig("default", 3)},
		session.Options{Clock: clock, TouchInterval: -1, SweepInterval: -1, UpdateChunk: 1, Logger: quiet})
	require.NoError(t, err)
	t.Cleanup(func() { _ = w.Close() })
	for _, id := range []string{"a1", "a2", "a3"} { // the active sessions, stale at the update
		_, err := w.Join(ctx, "default", id)
		require.NoError(t, err)
	}
	clock.Advance(sessiontest.ActiveTimeout + time.Second)
	_, err = w.AddEvent(ctx, session.ScheduledEvent{Gate: "default", ID: "drop",
		PrequeueAt: clock.Now().Add(10 * time.Second), StartsAt: clock.Now().Add(time.Minute), Shuffle: true})
	require.NoError(t, err)

	arrivals := []string{"first-arrival", "second-arrival"}
	var once sync.Once
	t.Cleanup(func() { testHookUpdateStep = nil })
	testHookUpdateStep = func() {
		once.Do(func() { // after the update's first transaction: the pre-queue opens, two arrive
			clock.Advance(11 * time.Second)
			for _, id := range arrivals {
				v, err := w.Join(ctx, "default", id)
				require.NoError(t, err)
				require.Equal(t, session.StatusWaiting, v.Status, "the pre-queue holds the line")
			}
		})
	}
	rep, err := w.Update(ctx)
	require.NoError(t, err)
	require.Len(t, rep, 1)
	assert.EqualValues(t, 3, rep[0].PurgedActive)
	assert.Greater(t, rep[0].Transactions, 1, "the update ran over several transactions")
	assert.Zero(t, rep[0].Promoted, "the update promoted someone who was not in line when it began")
	for _, id := range arrivals {
		v, err := w.Status(ctx, "default", id)
		require.NoError(t, err)
		assert.Equal(t, session.StatusWaiting, v.Status, "%s was admitted before the draw", id)
	}
}
