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

// The writer's entry decides with the gate's events and finds the pre-queue
// floor; neither needs a started event's drawn line (Postgres leaves it out).
func TestGateEntryKeepsNoDrawnLine(t *testing.T) {
	s, ctx, cfg := openInternal(t), context.Background(), sessiontest.GateConfig("default", 1)
	ev := session.ScheduledEvent{Gate: "default", ID: "drop", PrequeueAt: epoch.Add(time.Minute),
		StartsAt: epoch.Add(2 * time.Minute), Seed: make([]byte, session.LotterySeedSize)}
	_, err := s.SaveEvent(ctx, ev)
	require.NoError(t, err)
	_, _, err = s.AdvanceEvent(ctx, "default", "drop", ev.PrequeueAt)
	require.NoError(t, err)
	for i := range 2000 {
		_, err := s.Join(ctx, cfg, fmt.Sprint("p", i), ev.PrequeueAt)
		require.NoError(t, err)
	}
	_, _, err = s.AdvanceEvent(ctx, "default", "drop", ev.StartsAt)
	require.NoError(t, err)
	for _, miss := range []bool{false, true} {
		if miss {
			clear(s.cache) // as every failed batch does
		}
		var events, positions int
		require.NoError(t, s.eventOp(ctx, "default", func(_ *batch, e *gateEntry) error {
			events = len(e.events) // read on the writer, checked here
			if events > 0 {
				positions = len(e.events[0].Positions)
			}
			return nil
		}))
		require.Equal(t, 1, events)
		assert.Zero(t, positions, "drawn line kept (cache miss: %v)", miss)
	}
}
