package sessiontest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
)

// testGateSettings checks SaveGateSettings and Load: saved settings come
// back (also after a restart, also for a gate Load was not asked for), nil
// forgets them, and invalid ones are refused.
func testGateSettings(t *testing.T, open Opener) {
	h := newHarness(t, open)
	assert.Nil(t, h.snapshot(gateName).Settings, "never saved")

	cfg := GateConfig(gateName, 7)
	cfg.ClaimTimeout = 90 * time.Second
	cfg.ReleaseOnDisconnect = 3 * time.Second
	cfg.Mode = session.ModeQueueAll
	cfg.NewUsersPerMinute = 120
	cfg.NotifyClaimTimeout = 20 * time.Minute // kept like every other setting
	cfg.AdmissionTTL = 5 * time.Minute
	require.NoError(t, h.store.SaveGateSettings(h.ctx, gateName, &cfg))
	extra := GateConfig("added", 3)
	require.NoError(t, h.store.SaveGateSettings(h.ctx, "added", &extra))

	check := func() {
		t.Helper()
		snaps, err := h.store.Load(h.ctx, []string{gateName})
		require.NoError(t, err)
		require.NotNil(t, snaps[gateName].Settings)
		assert.Equal(t, cfg, *snaps[gateName].Settings)
		require.Contains(t, snaps, "added", "a gate with settings is loaded unasked")
		require.NotNil(t, snaps["added"].Settings)
		assert.Equal(t, extra, *snaps["added"].Settings)
	}
	check()
	h.reopen()
	check()

	// Saving again replaces; nil forgets.
	cfg.ActiveLimit = 9
	require.NoError(t, h.store.SaveGateSettings(h.ctx, gateName, &cfg))
	assert.Equal(t, int64(9), h.snapshot(gateName).Settings.ActiveLimit)
	require.NoError(t, h.store.SaveGateSettings(h.ctx, "added", nil))
	require.NoError(t, h.store.SaveGateSettings(h.ctx, "never-saved", nil), "forgetting nothing is no error")
	snaps, err := h.store.Load(h.ctx, []string{gateName})
	require.NoError(t, err)
	assert.NotContains(t, snaps, "added")

	bad := cfg
	bad.ActiveLimit = -1
	assert.ErrorIs(t, h.store.SaveGateSettings(h.ctx, gateName, &bad), session.ErrInvalidArgument)
	bad = cfg
	bad.AdmissionTTL = 25 * time.Hour
	assert.ErrorIs(t, h.store.SaveGateSettings(h.ctx, gateName, &bad), session.ErrInvalidArgument)
	assert.ErrorIs(t, h.store.SaveGateSettings(h.ctx, "other", &cfg), session.ErrInvalidArgument, "settings of another gate")
	assert.ErrorIs(t, h.store.SaveGateSettings(h.ctx, "no/slash", nil), session.ErrInvalidArgument)
	assert.Equal(t, int64(9), h.snapshot(gateName).Settings.ActiveLimit, "refused saves change nothing")
}

// testRuntimeSettings checks the Waitlist's runtime changes over the Store:
// a raised limit promotes at once, a lowered one admits nobody until active
// falls below it, settings survive a restart and win over the file's until
// reset, and gates come and go.
func testRuntimeSettings(t *testing.T, open Opener) {
	h := newHarness(t, open)
	file := GateConfig(gateName, 1)
	w := h.waitlist(file)
	ctx := h.ctx
	for _, id := range []string{"a", "b", "c", "d"} {
		_, err := w.Join(ctx, gateName, id)
		require.NoError(t, err)
	}
	raised := file
	raised.ActiveLimit = 3
	got, err := w.SetGateConfig(ctx, raised)
	require.NoError(t, err)
	assert.Equal(t, raised, got)
	v, err := w.Global(gateName)
	require.NoError(t, err)
	assert.Equal(t, [3]int64{3, 1, 3}, [3]int64{v.Active, v.Waiting, v.Limit}, "a raised limit promotes at once")

	lowered := file
	lowered.ActiveLimit = 1
	_, err = w.SetGateConfig(ctx, lowered)
	require.NoError(t, err)
	require.NoError(t, w.Release(ctx, gateName, "a"))
	v, _ = w.Global(gateName)
	assert.Equal(t, [3]int64{2, 1, 1}, [3]int64{v.Active, v.Waiting, v.Limit}, "a lowered limit admits nobody while active >= limit")
	require.NoError(t, w.Release(ctx, gateName, "b"))
	v, _ = w.Global(gateName)
	assert.Equal(t, [2]int64{1, 1}, [2]int64{v.Active, v.Waiting}, "still at the limit: d waits")

	bad := lowered
	bad.WaitingTimeout = 0
	_, err = w.SetGateConfig(ctx, bad)
	assert.ErrorIs(t, err, session.ErrInvalidArgument)
	_, err = w.SetGateConfig(ctx, GateConfig("nope", 1))
	assert.ErrorIs(t, err, session.ErrUnknownGate)

	// Runtime settings win over the file's after a restart, until reset.
	stats, err := w.Stats(gateName)
	require.NoError(t, err)
	assert.True(t, stats.Runtime)
	require.NoError(t, w.Close())
	h.reopen()
	w = h.waitlist(file)
	cfg, err := w.GateConfig(gateName)
	require.NoError(t, err)
	assert.Equal(t, lowered, cfg)
	cfg, err = w.ResetGateConfig(ctx, gateName)
	require.NoError(t, err)
	assert.Equal(t, file, cfg)
	stats, _ = w.Stats(gateName)
	assert.False(t, stats.Runtime)

	// Gates added at runtime come back after a restart; removed ones do not.
	added := GateConfig("added", 2)
	require.NoError(t, w.AddGate(ctx, added))
	assert.ErrorIs(t, w.AddGate(ctx, added), &session.Error{Code: session.CodeGateExists})
	sv, err := w.Join(ctx, "added", "x")
	require.NoError(t, err)
	assert.Equal(t, session.StatusActive, sv.Status)
	_, err = w.ResetGateConfig(ctx, "added")
	assert.ErrorIs(t, err, session.ErrInvalidArgument, "a runtime gate has no file settings")
	assert.ErrorIs(t, w.RemoveGate(ctx, "added"), &session.Error{Code: session.CodeGateInUse}, "x is in it")
	require.NoError(t, w.Close())
	h.reopen()
	w = h.waitlist(file)
	assert.Equal(t, []string{"added", gateName}, w.Gates())
	closed := added
	closed.Mode = session.ModeReject
	_, err = w.SetGateConfig(ctx, closed)
	require.NoError(t, err)
	require.NoError(t, w.RemoveGate(ctx, "added"), "a gate in reject mode may go")
	assert.Equal(t, []string{gateName}, w.Gates())
	_, err = w.Join(ctx, "added", "y")
	assert.ErrorIs(t, err, session.ErrUnknownGate)
	require.NoError(t, w.Close())
	h.reopen()
	w = h.waitlist(file)
	assert.Equal(t, []string{gateName}, w.Gates())
}

// testStoredSettingsDecide: once a gate has runtime settings, every op that
// decides is decided with them as stored, not with the configuration its
// caller read (a moment before a change committed, or on an instance that
// has not followed it yet): a join or a release queued with the old limit
// admits nobody past the lowered one, an update purges by the stored
// timeouts, and a reset gives the ops back their own.
func testStoredSettingsDecide(t *testing.T, open Opener) {
	h := newHarness(t, open)
	old := GateConfig(gateName, 3) // what the callers read before the change
	for _, id := range []string{"a", "b"} {
		require.Equal(t, session.StatusActive, h.join(old, id).Status)
	}
	lowered := old
	lowered.ActiveLimit = 1
	lowered.WaitingTimeout = 10 * time.Minute
	require.NoError(t, h.store.SaveGateSettings(h.ctx, gateName, &lowered))

	assert.Equal(t, session.StatusWaiting, h.join(old, "c").Status, "joined past the lowered limit")
	h.release(old, "a")
	assert.Equal(t, session.StatusWaiting, h.mustGet(gateName, "c").Status, "promoted past the lowered limit")
	h.reopen() // read from the store, not kept from the save
	assert.Equal(t, session.StatusWaiting, h.join(old, "d").Status, "joined past the lowered limit after a restart")
	st := h.state(gateName)
	assert.Equal(t, [2]int64{1, 2}, [2]int64{st.Active, st.Waiting})

	// The stored waiting timeout (10m), not the caller's (2m): c and d,
	// silent for 3 minutes, keep their places.
	h.clock.Advance(3 * time.Minute)
	h.seen("b")
	rep := h.update(old, 0)
	assert.Zero(t, rep.PurgedWaiting, "purged by the caller's timeout instead of the stored one")
	assert.Equal(t, int64(2), h.state(gateName).Waiting)

	// Forgotten settings: the ops decide with their own again (the old
	// limit, 3: c and d are promoted).
	require.NoError(t, h.store.SaveGateSettings(h.ctx, gateName, nil))
	h.seen("c", "d")
	h.update(old, 0)
	st = h.state(gateName)
	assert.Equal(t, [2]int64{3, 0}, [2]int64{st.Active, st.Waiting})
}
