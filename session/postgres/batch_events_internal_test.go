package postgres

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
	"github.com/anteroomhq/anteroom/session/postgres/pgtest"
	"github.com/anteroomhq/anteroom/session/sessiontest"
)

// An event's deletion earlier in a batch holds for the batch's later ops,
// as AdvanceEvent's and SaveEvent's changes do (setScheduled), and as on
// SQLite: a join after it is not decided with the deleted event's limit.
func TestEventOpsHoldForTheirBatch(t *testing.T) {
	ctx, now := context.Background(), sessiontest.Epoch
	s, err := Open(ctx, pgtest.DB(t), Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	cfg := sessiontest.GateConfig("g", 10)
	_, err = s.Load(ctx, []string{"g"})
	require.NoError(t, err)
	require.NoError(t, s.SaveGateSettings(ctx, "g", &cfg)) // stored: limit 10
	one := int64(1)
	_, err = s.SaveEvent(ctx, session.ScheduledEvent{Gate: "g", ID: "drop", PrequeueAt: now.Add(-2 * time.Minute),
		StartsAt: now.Add(-time.Minute), ActiveLimit: &one, Seed: make([]byte, session.LotterySeedSize)})
	require.NoError(t, err)
	_, _, err = s.AdvanceEvent(ctx, "g", "drop", now) // opens and starts it: limit 1
	require.NoError(t, err)
	_, err = s.Join(ctx, cfg, "a", now)
	require.NoError(t, err)

	entered, release, blocked := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		blocked <- s.eventOp(ctx, "g", func(context.Context, *batch, *gateTx) error { close(entered); <-release; return nil })
	}()
	<-entered
	deleted, joined := make(chan error, 1), make(chan session.Session, 1)
	go func() { deleted <- s.DeleteEvent(ctx, "g", "drop") }()
	waitOps(t, s, 1)
	go func() { got, err := s.Join(ctx, cfg, "c", now); assert.NoError(t, err); joined <- got }()
	waitOps(t, s, 2)
	close(release) // the deletion and the join run in one batch, in that order
	require.NoError(t, <-blocked)
	require.NoError(t, <-deleted)
	assert.Equal(t, session.StatusActive, (<-joined).Status, "decided with the deleted event's limit (1)")
}

func waitOps(t *testing.T, s *Store, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); len(s.ops) < n; time.Sleep(time.Millisecond) {
		require.True(t, time.Now().Before(deadline), "ops not queued")
	}
}
