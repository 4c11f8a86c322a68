package postgres_test

import (
	"context"
	"fmt"
	"slices"
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

// within polls cond until it holds or a second (the promise) is
// over, and fails the test naming what did not follow.
func within(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within a second", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Settings changed through one instance reach the others within a second,
// in the order they were committed: a raised limit, a gate added at
// runtime, changed and removed, and a reset to the config file's.
func TestSettingsFollowAcrossInstances(t *testing.T) {
	url := pgtest.DB(t)
	ctx := context.Background()
	ins := startInstances(t, url, 2, 1, quiet)
	a, b := ins[0], ins[1]
	for _, id := range []string{"first", "second", "third"} {
		_, err := b.wl.Join(ctx, multiGate, id)
		require.NoError(t, err)
	}
	require.ErrorIs(t, b.wl.ValidateSessionIsActive(multiGate, "second"), session.ErrNotActive)

	cfg, err := a.wl.GateConfig(multiGate)
	require.NoError(t, err)
	cfg.ActiveLimit = 3
	_, err = a.wl.SetGateConfig(ctx, cfg)
	require.NoError(t, err)
	within(t, "the raised limit on b", func() bool {
		c, err := b.wl.GateConfig(multiGate)
		return err == nil && c.ActiveLimit == 3
	})
	within(t, "the promotions on b", func() bool {
		return b.wl.ValidateSessionIsActive(multiGate, "second") == nil && b.wl.ValidateSessionIsActive(multiGate, "third") == nil
	})
	v, err := b.wl.Global(multiGate)
	require.NoError(t, err)
	assert.Equal(t, int64(3), v.Limit, "b's global view carries the new limit")
	st, err := b.wl.Stats(multiGate)
	require.NoError(t, err)
	assert.True(t, st.Runtime, "b shows the settings as changed at runtime")

	// Two changes in a row on two instances: both end with the last.
	cfg.ActiveLimit, cfg.Mode = 7, session.ModeQueueAll
	_, err = b.wl.SetGateConfig(ctx, cfg)
	require.NoError(t, err)
	cfg.ActiveLimit = 9
	_, err = a.wl.SetGateConfig(ctx, cfg)
	require.NoError(t, err)
	for i, in := range ins {
		within(t, fmt.Sprintf("the last change on instance %d", i), func() bool {
			c, err := in.wl.GateConfig(multiGate)
			return err == nil && c == cfg
		})
	}

	// A gate added on a, usable on b, changed on b, removed on a.
	extra := sessiontest.GateConfig("extra", 2)
	require.NoError(t, a.wl.AddGate(ctx, extra))
	within(t, "the added gate on b", func() bool { return slices.Contains(b.wl.Gates(), "extra") })
	_, err = b.wl.Join(ctx, "extra", "x1")
	require.NoError(t, err)
	within(t, "b's join on a", func() bool { return a.wl.ValidateSessionIsActive("extra", "x1") == nil })
	extra.ActiveLimit = 4
	_, err = b.wl.SetGateConfig(ctx, extra)
	require.NoError(t, err)
	within(t, "b's change of the added gate on a", func() bool {
		c, err := a.wl.GateConfig("extra")
		return err == nil && c.ActiveLimit == 4
	})
	require.NoError(t, b.wl.Release(ctx, "extra", "x1"))
	within(t, "the release on a", func() bool {
		v, err := a.wl.Global("extra")
		return err == nil && v.Active == 0
	})
	require.NoError(t, a.wl.RemoveGate(ctx, "extra"))
	within(t, "the removal on b", func() bool { return !slices.Contains(b.wl.Gates(), "extra") })
	_, err = b.wl.Join(ctx, "extra", "x2")
	require.ErrorIs(t, err, session.ErrUnknownGate)

	// Added again: it comes back on b.
	require.NoError(t, a.wl.AddGate(ctx, extra))
	within(t, "the gate added again on b", func() bool { return slices.Contains(b.wl.Gates(), "extra") })

	// A reset on b goes back to the file's settings on a.
	_, err = b.wl.ResetGateConfig(ctx, multiGate)
	require.NoError(t, err)
	within(t, "the reset on a", func() bool {
		c, err := a.wl.GateConfig(multiGate)
		st, _ := a.wl.Stats(multiGate)
		return err == nil && c.ActiveLimit == 1 && c.Mode != session.ModeQueueAll && !st.Runtime
	})
}

// Settings changed, and a gate added, while an instance was not listening
// reach it with the resync that follows.
func TestSettingsFollowResync(t *testing.T) {
	url := pgtest.DB(t)
	ctx := context.Background()
	opts := quiet
	opts.ReconnectDelay = 500 * time.Millisecond
	ins := startInstances(t, url, 2, 5, opts)
	a, b := ins[0], ins[1]

	c, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer c.Close(ctx)
	var killed int
	require.NoError(t, c.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = current_database() AND query LIKE 'LISTEN%' AND pid <> pg_backend_pid()`).Scan(&killed))
	require.Equal(t, 2, killed)
	require.Eventually(t, func() bool { return a.store.Ready() != nil }, 10*time.Second, 5*time.Millisecond, "a goes unready")

	cfg := sessiontest.GateConfig(multiGate, 11)
	_, err = b.wl.SetGateConfig(ctx, cfg)
	require.NoError(t, err)
	require.NoError(t, b.wl.AddGate(ctx, sessiontest.GateConfig("later", 3)))

	require.Eventually(t, func() bool { return a.store.Ready() == nil }, 10*time.Second, 10*time.Millisecond, "a is ready again")
	within(t, "the change made while away", func() bool {
		c, err := a.wl.GateConfig(multiGate)
		return err == nil && c.ActiveLimit == 11
	})
	within(t, "the gate added while away", func() bool {
		c, err := a.wl.GateConfig("later")
		return err == nil && c.ActiveLimit == 3
	})
}

// newUsersPerMinute bounds the admissions of all instances together: three
// instances on one database, joins through all of them, a fake minute.
func TestPaceSharedAcrossInstances(t *testing.T) {
	url := pgtest.DB(t)
	ctx := context.Background()
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	clock := sessiontest.NewClock(start)
	cfg := sessiontest.GateConfig(multiGate, 10_000)
	cfg.NewUsersPerMinute = 60 // one a second, a burst of one
	var wls []*session.Waitlist
	var stores []*postgres.Store
	for range 3 {
		st := open(t, url, quiet)
		t.Cleanup(func() { _ = st.Close() })
		wl, err := session.New(ctx, st, []session.GateConfig{cfg}, session.Options{
			Clock: clock, TouchInterval: -1, SweepInterval: -1, Logger: quiet.Logger,
		})
		require.NoError(t, err)
		t.Cleanup(func() { _ = wl.Close() })
		wls, stores = append(wls, wl), append(stores, st)
	}
	n := 0
	for sec := 0; sec < 60; sec++ {
		for range 6 {
			_, err := wls[n%3].Join(ctx, multiGate, fmt.Sprintf("s%04d", n))
			require.NoError(t, err)
			n++
		}
		for _, wl := range wls {
			require.NoError(t, wl.Sweep(ctx))
		}
		clock.Advance(250 * time.Millisecond)
		for _, wl := range wls {
			require.NoError(t, wl.Sweep(ctx))
		}
		clock.Advance(750 * time.Millisecond)
	}
	// The last sweeps happen at start+59.25s: at most the burst (1) plus
	// one a second since the start.
	rows, err := stores[0].Rows(ctx, multiGate)
	require.NoError(t, err)
	active := 0
	for _, r := range rows {
		if r.Status == session.StatusActive {
			active++
		}
	}
	assert.LessOrEqual(t, active, 61, "admissions over the minute, all instances together")
	assert.GreaterOrEqual(t, active, 55, "pacing still admits about one a second")
}

// The pacing survives a restart: a new store on the database does not
// start with a fresh burst.
func TestPacePersists(t *testing.T) {
	url := pgtest.DB(t)
	ctx := context.Background()
	clock := sessiontest.NewClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	cfg := sessiontest.GateConfig(multiGate, 100)
	cfg.NewUsersPerMinute = 600 // burst of 10
	st := open(t, url, quiet)
	admitted := 0
	for i := range 20 {
		s, err := st.Join(ctx, cfg, fmt.Sprintf("a%02d", i), clock.Now())
		require.NoError(t, err)
		if s.Status == session.StatusActive {
			admitted++
		}
	}
	require.Equal(t, 10, admitted, "one second's burst")
	require.NoError(t, st.Close())
	st2 := open(t, url, quiet)
	t.Cleanup(func() { _ = st2.Close() })
	r, err := st2.Purge(ctx, cfg, nil, clock.Now())
	require.NoError(t, err)
	assert.Zero(t, r.Promoted, "a restart at the same instant has no token to give")
	r, err = st2.Purge(ctx, cfg, nil, clock.Advance(500*time.Millisecond))
	require.NoError(t, err)
	assert.Equal(t, int64(5), r.Promoted, "half a second later, half the burst")
}

// Forged settings notifications are hints like the others: a gate that has
// no settings is not added, a bad name is ignored, and the instance keeps
// following settings.
func TestForgedSettingsNotificationsAreIgnored(t *testing.T) {
	url := pgtest.DB(t)
	ctx := context.Background()
	ins := startInstances(t, url, 2, 5, quiet)
	a, b := ins[0], ins[1]
	c, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer c.Close(ctx)
	for _, p := range []string{"1 ghost s", "7 default s", "1 ../etc s", "1 default s s", "x ghost s", "1  s"} {
		_, err := c.Exec(ctx, "SELECT pg_notify('anteroom_commits', $1)", p)
		require.NoError(t, err)
	}
	cfg := sessiontest.GateConfig(multiGate, 8)
	_, err = b.wl.SetGateConfig(ctx, cfg)
	require.NoError(t, err)
	within(t, "a real change after the forged ones", func() bool {
		c, err := a.wl.GateConfig(multiGate)
		return err == nil && c.ActiveLimit == 8
	})
	assert.Equal(t, []string{multiGate}, a.wl.Gates(), "no gate made up")
	assert.NoError(t, a.store.Ready())
}
