package postgres_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
	"github.com/anteroomhq/anteroom/session/postgres/pgtest"
	"github.com/anteroomhq/anteroom/session/sessiontest"
)

// An event whose row is damaged while its pre-queue is open (a hand edit;
// a newer version's row during a rollback), under a running Waitlist: the
// 2 s reload leaves the row out and memory drops the event, so memory no
// longer holds the line; the writer holds it (session.DamagedEventHolds),
// and neither a newcomer nor the pre-queue gets in ahead of a draw that
// cannot run. Found by an attack on the commit that left damaged rows out.
func TestADamagedOpenPrequeueStillHoldsTheLine(t *testing.T) {
	url := pgtest.DB(t)
	ctx := context.Background()
	st := open(t, url, quiet)
	t.Cleanup(func() { _ = st.Close() })
	epoch := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	clock := sessiontest.NewClock(epoch)
	cfg := sessiontest.GateConfig(multiGate, 2)
	wl, err := session.New(ctx, st, []session.GateConfig{cfg}, session.Options{
		Clock: clock, TouchInterval: -1, SweepInterval: -1, Logger: quiet.Logger, Ready: st.Ready,
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = wl.Close() })
	ev, err := wl.AddEvent(ctx, session.ScheduledEvent{Gate: multiGate, ID: "drop",
		PrequeueAt: epoch.Add(time.Minute), StartsAt: epoch.Add(10 * time.Minute), Shuffle: true})
	require.NoError(t, err)
	clock.Set(ev.PrequeueAt)
	require.NoError(t, wl.Sweep(ctx))
	v, err := wl.Join(ctx, multiGate, "early")
	require.NoError(t, err)
	require.Equal(t, session.StatusWaiting, v.Status, "held by the open pre-queue")

	admin, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer admin.Close(ctx)
	_, err = admin.Exec(ctx, `UPDATE anteroom_events SET event = '{"phase":"bogus"}' WHERE id = 'drop'`)
	require.NoError(t, err)

	clock.Advance(5 * time.Second) // past the reload interval, long before the start
	_ = wl.Sweep(ctx)
	stats, err := wl.Stats(multiGate)
	require.NoError(t, err)
	require.Len(t, stats.DamagedEvents, 1, "the reload tells memory of it")
	assert.Equal(t, "drop", stats.DamagedEvents[0].ID)
	assert.True(t, stats.DamagedEvents[0].Holds)
	assert.Equal(t, session.ModeQueueAll, stats.Effective.Mode, "memory holds the line as the writer does")
	v, err = wl.Join(ctx, multiGate, "late")
	require.NoError(t, err)
	assert.Equal(t, session.StatusWaiting, v.Status, "a newcomer admitted during the open pre-queue, ahead of the draw")
	v, err = wl.Status(ctx, multiGate, "early")
	require.NoError(t, err)
	assert.Equal(t, session.StatusWaiting, v.Status, "the pre-queue promoted in arrival order, without a draw")
}

// A damaged event row whose id is not one the API accepts (65 characters:
// a newer version's, or a hand edit) was never an event of this service,
// and DeleteEvent could not name it: it holds nothing
// (session.DamagedEventHolds), and is left out.
func TestADamagedEventOfAnUnnamableIDHoldsNothing(t *testing.T) {
	url := pgtest.DB(t)
	ctx := context.Background()
	s := open(t, url, quiet)
	t.Cleanup(func() { _ = s.Close() })
	cfg := sessiontest.GateConfig(multiGate, 5)
	_, err := s.Load(ctx, []string{multiGate})
	require.NoError(t, err)
	epoch := sessiontest.Epoch
	raw, err := session.EncodeStoredEvent(session.ScheduledEvent{Gate: multiGate, ID: "ok", PrequeueAt: epoch.Add(-time.Hour),
		StartsAt: epoch.Add(time.Hour), Seed: make([]byte, session.LotterySeedSize), Phase: session.EventPrequeue, FirstPosition: 1})
	require.NoError(t, err)
	admin, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer admin.Close(ctx)
	_, err = admin.Exec(ctx, `INSERT INTO anteroom_events (gate, id, event) VALUES ($1, $2, $3)`, multiGate, strings.Repeat("x", 65), raw)
	require.NoError(t, err)

	got, err := s.Join(ctx, cfg, "a", epoch)
	require.NoError(t, err)
	assert.Equal(t, session.StatusActive, got.Status, "not held")
	evs, err := s.Events(ctx, multiGate)
	require.NoError(t, err)
	assert.Empty(t, evs, "left out")
}
