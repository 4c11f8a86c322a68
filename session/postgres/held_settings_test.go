package postgres_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
	"github.com/anteroomhq/anteroom/session/postgres"
	"github.com/anteroomhq/anteroom/session/postgres/pgtest"
	"github.com/anteroomhq/anteroom/session/sessiontest"
)

// Runtime settings saved through one instance hold on every other at once:
// the writer decides with the settings stored under the gate's lock, not
// with the configuration an op brought from an instance that has not
// applied the change yet (its notification on the way, or its listener
// lost). A limit lowered to 1 admits nobody more, a gate set to reject
// takes no newcomer, and a release promotes nobody past the new limit.
func TestRuntimeSettingsHoldOnEveryInstanceAtOnce(t *testing.T) {
	url := pgtest.DB(t)
	ctx := context.Background()
	stale := sessiontest.GateConfig(multiGate, 5) // what the lagging instance still holds
	a, b := open(t, url, quiet), open(t, url, quiet)
	t.Cleanup(func() { _ = a.Close(); _ = b.Close() })
	for _, s := range []interface {
		Load(context.Context, []string) (map[string]session.GateSnapshot, error)
	}{a, b} {
		_, err := s.Load(ctx, []string{multiGate})
		require.NoError(t, err)
	}
	_, err := b.Join(ctx, stale, "first", sessiontest.Epoch)
	require.NoError(t, err)

	low := stale
	low.ActiveLimit = 1
	require.NoError(t, a.SaveGateSettings(ctx, multiGate, &low))
	for i := range 4 {
		got, err := b.Join(ctx, stale, fmt.Sprint("late", i), sessiontest.Epoch)
		require.NoError(t, err)
		assert.Equal(t, session.StatusWaiting, got.Status, "late%d: the gate's limit is 1 now", i)
	}
	// A release frees the one slot: exactly one waiter is promoted.
	_, err = b.Release(ctx, stale, "first", sessiontest.Epoch.Add(time.Second))
	require.NoError(t, err)
	rows, err := b.Rows(ctx, multiGate)
	require.NoError(t, err)
	var active int
	for _, r := range rows {
		if r.Status == session.StatusActive {
			active++
		}
	}
	assert.Equal(t, 1, active, "one slot, one active session")

	closed := low
	closed.Mode = session.ModeReject
	require.NoError(t, a.SaveGateSettings(ctx, multiGate, &closed))
	_, err = b.Join(ctx, stale, "newcomer", sessiontest.Epoch.Add(2*time.Second))
	assert.ErrorIs(t, err, session.ErrGateClosed, "the gate was closed on another instance")

	// Reset: the instance's own configuration decides again.
	require.NoError(t, a.SaveGateSettings(ctx, multiGate, nil))
	got, err := b.Join(ctx, stale, "after-reset", sessiontest.Epoch.Add(3*time.Second))
	require.NoError(t, err)
	assert.Equal(t, session.StatusWaiting, got.Status, "people wait ahead of it")
}

// An instance that is not following the others (its listening connection
// lost and not back yet: unready, /readyz 503) still writes; a limit
// lowered by another instance meanwhile holds for its joins too, though
// its memory still has the old one.
func TestAnInstanceNotFollowingDecidesWithTheStoredLimit(t *testing.T) {
	url := pgtest.DB(t)
	ctx := context.Background()
	cfg := sessiontest.GateConfig(multiGate, 5)
	mk := func(app string, reconnect time.Duration) (*postgres.Store, *session.Waitlist) {
		o := quiet
		o.ReconnectDelay = reconnect
		s := open(t, url+"&application_name="+app, o)
		t.Cleanup(func() { _ = s.Close() })
		w, err := session.New(ctx, s, []session.GateConfig{cfg}, session.Options{TouchInterval: -1, SweepInterval: -1, Logger: quiet.Logger, Ready: s.Ready})
		require.NoError(t, err)
		t.Cleanup(func() { _ = w.Close() })
		return s, w
	}
	_, wa := mk("held_a", 0)
	sb, wb := mk("held_b", time.Minute) // b listens again only after a minute
	_, err := wa.Join(ctx, multiGate, "first")
	require.NoError(t, err)

	// b's connections are killed (an operator's pg_terminate_backend, a
	// proxy restart, ...); its listener does not come back in this test.
	admin, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer admin.Close(ctx)
	_, err = admin.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'held_b'`)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return sb.Ready() != nil }, 10*time.Second, 10*time.Millisecond)

	// The operator lowers the limit to 1 on a.
	low := cfg
	low.ActiveLimit = 1
	_, err = wa.SetGateConfig(ctx, low)
	require.NoError(t, err)

	// b, unready, keeps admitting under the limit of 5 it had.
	// (b's pool reconnects on its first use; wait until b writes again.)
	require.Eventually(t, func() bool { return wb.Leave(ctx, multiGate, "nobody") == nil }, 10*time.Second, 20*time.Millisecond)
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() { _, _ = wb.Join(ctx, multiGate, fmt.Sprintf("late%02d", i)) })
	}
	wg.Wait()
	var active int64
	require.NoError(t, admin.QueryRow(ctx, `SELECT count(*) FROM anteroom_sessions WHERE gate = $1 AND status = 1`, multiGate).Scan(&active))
	require.LessOrEqual(t, active, int64(1), "active sessions exceed the gate's limit of 1 (set on another instance)")
}

// A settings row damaged by hand is ignored by the writer's reading of it
// (heldConfig), with one warning per damaged row: nothing fails, and the
// ops decide with their own configuration.
func TestDamagedHeldSettingsAreIgnored(t *testing.T) {
	url := pgtest.DB(t)
	ctx := context.Background()
	cfg := sessiontest.GateConfig(multiGate, 2)
	logs := &sessiontest.LogBuffer{}
	o := quiet
	o.Logger = slog.New(slog.NewTextHandler(logs, nil))
	s := open(t, url, o)
	t.Cleanup(func() { _ = s.Close() })
	_, err := s.Load(ctx, []string{multiGate})
	require.NoError(t, err)
	admin, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer admin.Close(ctx)
	for n, raw := range []string{`{"activeLimit": -4}`, `[1, 2]`} {
		_, err = admin.Exec(ctx, `INSERT INTO anteroom_gate_settings (gate, settings) VALUES ($1, $2) ON CONFLICT (gate) DO UPDATE SET settings = EXCLUDED.settings`, multiGate, raw)
		require.NoError(t, err)
		for i := range 2 {
			_, err := s.Join(ctx, cfg, fmt.Sprintf("s%d-%d", n, i), sessiontest.Epoch)
			require.NoError(t, err)
		}
	}
	assert.Equal(t, 2, strings.Count(logs.String(), "stored runtime settings are damaged"), "once per damaged row")
	rows, err := s.Rows(ctx, multiGate)
	require.NoError(t, err)
	assert.Len(t, rows, 4)
}

// eventWithHeldSettings starts a Waitlist on a fresh database whose gate
// has runtime settings (a limit raised to 10, stored: decisions use them)
// and an event (pre-queue a minute after the clock's start, start a minute
// later, its limit 1).
func eventWithHeldSettings(t *testing.T) (*session.Waitlist, *sessiontest.Clock, session.ScheduledEvent) {
	t.Helper()
	url := pgtest.DB(t)
	ctx := context.Background()
	cfg := sessiontest.GateConfig(multiGate, 2)
	epoch := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	st := open(t, url, quiet)
	t.Cleanup(func() { _ = st.Close() })
	clock := sessiontest.NewClock(epoch)
	wl, err := session.New(ctx, st, []session.GateConfig{cfg}, session.Options{
		Clock: clock, TouchInterval: -1, SweepInterval: -1, Logger: quiet.Logger, Ready: st.Ready,
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = wl.Close() })
	raised := cfg
	raised.ActiveLimit = 10
	_, err = wl.SetGateConfig(ctx, raised)
	require.NoError(t, err)
	one := int64(1)
	ev, err := wl.AddEvent(ctx, session.ScheduledEvent{Gate: multiGate, ID: "drop",
		PrequeueAt: epoch.Add(time.Minute), StartsAt: epoch.Add(2 * time.Minute), ActiveLimit: &one})
	require.NoError(t, err)
	return wl, clock, ev
}

// A gate with runtime settings and a scheduled event: the decisions with
// the stored settings apply the event over them (session.EventConfig), as
// memory does. During the pre-queue everyone waits.
func TestHeldSettingsKeepTheEventsPrequeue(t *testing.T) {
	ctx := context.Background()
	wl, clock, ev := eventWithHeldSettings(t)
	clock.Set(ev.PrequeueAt)
	require.NoError(t, wl.Sweep(ctx))
	for i := range 3 {
		v, err := wl.Join(ctx, multiGate, fmt.Sprint("pre", i))
		require.NoError(t, err)
		assert.Equal(t, session.StatusWaiting, v.Status, "pre%d: the pre-queue is open, everyone waits", i)
	}
}

// TestHeldSettingsKeepTheEventsLimit: as TestHeldSettingsKeepTheEventsPrequeue,
// once the event started its limit holds.
func TestHeldSettingsKeepTheEventsLimit(t *testing.T) {
	ctx := context.Background()
	wl, clock, ev := eventWithHeldSettings(t)
	clock.Set(ev.StartsAt.Add(time.Second))
	require.NoError(t, wl.Sweep(ctx))
	active := 0
	for i := range 4 {
		v, err := wl.Join(ctx, multiGate, fmt.Sprint("late", i))
		require.NoError(t, err)
		if v.Status == session.StatusActive {
			active++
		}
	}
	assert.Equal(t, 1, active, "the started event's ActiveLimit (1) holds")
}
