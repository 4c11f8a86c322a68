package sessiontest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
)

// DamageOpener is an Opener that also returns the function that damages a
// stored row in place, so that it no longer decodes (as a newer version's
// row, or an edit by hand, would read): it sets the gate's event id, or
// with id empty the gate's runtime settings, to value (always valid JSON,
// which a Store may keep as JSON). The suite calls damage while the Store
// is closed.
type DamageOpener func(tb testing.TB) (open func() session.Store, damage func(gate, id, value string))

// RunDamagedRowSuite runs the tests of stored events and runtime settings
// that do not decode, which every Store must pass.
func RunDamagedRowSuite(t *testing.T, open DamageOpener) {
	t.Run("Event", func(t *testing.T) { testDamagedEvent(t, open) })
	t.Run("EventHolds", func(t *testing.T) { testDamagedEventHolds(t, open) })
	t.Run("Settings", func(t *testing.T) { testDamagedSettings(t, open) })
}

// damagedEvent is the JSON of an event of an unknown phase.
const damagedEvent = `{"phase":"bogus"}`

// newDamageHarness is newHarness over a DamageOpener, and the function
// that restarts the Store with a row damaged meanwhile.
func newDamageHarness(t *testing.T, open DamageOpener) (*harness, func(id, value string)) {
	var damage func(gate, id, value string)
	h := newHarness(t, func(tb testing.TB) func() session.Store {
		o, d := open(tb)
		damage = d
		return o
	})
	return h, func(id, value string) {
		t.Helper()
		require.NoError(t, h.store.Close())
		damage(gateName, id, value)
		h.store = h.openStore()
	}
}

// A stored event that does not decode: the Store still opens and loads,
// leaves the event out of its listing and of every decision, refuses to
// save over it or advance it (session.EventDamaged), and deletes it, alone
// or with its gate, so that an operator can clear it through the admin
// API.
func testDamagedEvent(t *testing.T, open DamageOpener) {
	h, restartDamaging := newDamageHarness(t, open)
	ids := func(evs []session.ScheduledEvent) []string {
		out := []string{}
		for _, e := range evs {
			out = append(out, e.ID)
		}
		return out
	}
	events := func() []string {
		t.Helper()
		evs, err := h.store.Events(h.ctx, gateName)
		require.NoError(t, err, "a damaged event does not fail the listing")
		return ids(evs)
	}
	keep := suiteEvent("keep", Epoch.Add(time.Hour))
	bad := suiteEvent("bad", Epoch.Add(3*time.Hour))
	for _, ev := range []session.ScheduledEvent{keep, bad} {
		_, err := h.store.SaveEvent(h.ctx, ev)
		require.NoError(t, err)
	}
	restartDamaging("bad", damagedEvent)

	assert.Equal(t, []string{"keep"}, ids(h.snapshot(gateName).Events), "Load leaves the damaged event out")
	assert.Equal(t, []string{"keep"}, events())
	cfg := GateConfig(gateName, 5)
	s, err := h.store.Join(h.ctx, cfg, "s1", Epoch)
	require.NoError(t, err, "the gate works beside a damaged event")
	assert.Equal(t, session.StatusWaiting, s.Status, "held: the damaged event may be a pre-queue (testDamagedEventHolds)")

	locked := &session.Error{Code: session.CodeEventLocked}
	_, err = h.store.SaveEvent(h.ctx, bad)
	assert.ErrorIs(t, err, locked, "no save over a damaged event: it is deleted first")
	_, _, err = h.store.AdvanceEvent(h.ctx, gateName, "bad", bad.StartsAt)
	assert.ErrorIs(t, err, locked, "a damaged event does not advance")

	require.NoError(t, h.store.DeleteEvent(h.ctx, gateName, "bad"), "a damaged event can be deleted")
	assert.Equal(t, []string{"keep"}, events())
	_, err = h.store.SaveEvent(h.ctx, bad)
	require.NoError(t, err, "and scheduled again")
	assert.Equal(t, []string{"keep", "bad"}, events())

	restartDamaging("keep", damagedEvent)
	w := h.waitlist(cfg)
	got, err := w.Events(gateName)
	require.NoError(t, err)
	assert.Equal(t, []string{"bad"}, ids(got), "a Waitlist starts over a damaged event, without it")
	require.Implements(t, (*session.DamageReporter)(nil), h.store, "memory must hold what the writer holds")
	{
		st, err := w.Stats(gateName)
		require.NoError(t, err)
		require.Len(t, st.DamagedEvents, 1, "memory knows of it")
		assert.Equal(t, "keep", st.DamagedEvents[0].ID)
		assert.True(t, st.DamagedEvents[0].Holds)
		assert.NotEmpty(t, st.DamagedEvents[0].Err)
		assert.Equal(t, session.ModeQueueAll, st.Effective.Mode, "memory holds the gate as the writer does")
		v, err := w.Join(h.ctx, gateName, "w1")
		require.NoError(t, err)
		assert.Equal(t, session.StatusWaiting, v.Status)
		require.NoError(t, w.RemoveEvent(h.ctx, gateName, "keep"), "deleted through the Waitlist")
		st, err = w.Stats(gateName)
		require.NoError(t, err)
		assert.Empty(t, st.DamagedEvents)
		assert.True(t, st.Effective.Mode.Admits(), "no longer held: %q", st.Effective.Mode)
		_, err = w.Update(h.ctx)
		require.NoError(t, err)
		v, err = w.Status(h.ctx, gateName, "w1")
		require.NoError(t, err)
		assert.Equal(t, session.StatusActive, v.Status, "admitted once it is deleted")
	}

	closed := cfg
	closed.Mode = session.ModeReject
	require.NoError(t, h.store.RemoveGate(h.ctx, closed, Epoch), "a gate with a damaged event can be removed")
	assert.Empty(t, events(), "with every event, the damaged one too")
}

// Stored runtime settings that do not decode: the Store still opens and
// loads (without them), its ops decide with the configuration they bring,
// and saving or resetting the settings replaces the row.
func testDamagedSettings(t *testing.T, open DamageOpener) {
	h, restartDamaging := newDamageHarness(t, open)
	cfg := GateConfig(gateName, 3)
	held := GateConfig(gateName, 1)
	require.NoError(t, h.store.SaveGateSettings(h.ctx, gateName, &held))
	restartDamaging("", `{"activeLimit":-4}`)

	assert.Nil(t, h.snapshot(gateName).Settings, "Load leaves the damaged settings out")
	for _, id := range []string{"s1", "s2"} {
		s, err := h.store.Join(h.ctx, cfg, id, Epoch)
		require.NoError(t, err)
		assert.Equal(t, session.StatusActive, s.Status, "%s: decided with the op's own limit (3), not the damaged row's", id)
	}

	require.NoError(t, h.store.SaveGateSettings(h.ctx, gateName, &held), "saving replaces the damaged row")
	s, err := h.store.Join(h.ctx, cfg, "s3", Epoch)
	require.NoError(t, err)
	assert.Equal(t, session.StatusWaiting, s.Status, "the saved limit (1) holds")
	got := h.snapshot(gateName).Settings
	require.NotNil(t, got)
	assert.Equal(t, int64(1), got.ActiveLimit)

	restartDamaging("", `{"activeLimit":-4}`)
	require.NoError(t, h.store.SaveGateSettings(h.ctx, gateName, nil), "a reset deletes the damaged row")
	h.reopen()
	assert.Nil(t, h.snapshot(gateName).Settings)
	w := h.waitlist(cfg)
	assert.NotNil(t, w, "a Waitlist starts")
}

// A damaged event that may be a pre-queue (its phase does not read as
// started) holds its gate as an open pre-queue does: nobody joins into a
// free slot, nobody is promoted, until it is deleted; its draw cannot run,
// and letting anyone in could put them ahead of it. One that still reads
// as started holds nothing (its overrides are lost). Scalars, which some
// JSON operators refuse, are left out as any damaged row.
func testDamagedEventHolds(t *testing.T, open DamageOpener) {
	for _, c := range []struct {
		name, value string
		holds       bool
	}{
		{"open pre-queue of a bad seed", `{"phase":"prequeue","prequeueAt":1,"startsAt":2,"seed":"zz","firstPosition":1}`, true},
		{"unknown phase", damagedEvent, true},
		{"null", `null`, true},
		{"a string", `"off"`, true},
		{"an array", `[1,2]`, true},
		{"started, of a bad seed", `{"phase":"started","prequeueAt":1,"startsAt":2,"seed":"zz","firstPosition":1}`, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			h, restartDamaging := newDamageHarness(t, open)
			cfg := GateConfig(gateName, 2)
			a := h.join(cfg, "a")
			require.Equal(t, session.StatusActive, a.Status)
			_, err := h.store.SaveEvent(h.ctx, suiteEvent("drop", Epoch.Add(time.Hour)))
			require.NoError(t, err)
			restartDamaging("drop", c.value)

			evs, err := h.store.Events(h.ctx, gateName)
			require.NoError(t, err)
			assert.Empty(t, evs, "left out")
			want := session.StatusActive
			if c.holds {
				want = session.StatusWaiting
			}
			b := h.join(cfg, "b")
			assert.Equal(t, want, b.Status, "a join into a free slot")
			_, err = h.store.Release(h.ctx, cfg, "a", Epoch)
			require.NoError(t, err)
			c2 := h.join(cfg, "c")
			if c.holds {
				assert.Equal(t, session.StatusWaiting, c2.Status)
				st := h.state(gateName)
				assert.Equal(t, int64(0), st.Active, "nobody promoted into the freed slot")
				assert.Equal(t, int64(2), st.Waiting)
			}

			require.NoError(t, h.store.DeleteEvent(h.ctx, gateName, "drop"), "deleted")
			_, err = h.store.Update(h.ctx, cfg, Epoch, 0)
			require.NoError(t, err)
			st := h.state(gateName)
			assert.Equal(t, int64(2), st.Active, "the gate admits again once it is deleted")
			assert.Equal(t, int64(0), st.Waiting)

			closed := cfg
			closed.Mode = session.ModeReject
			_, err = h.store.SaveEvent(h.ctx, suiteEvent("drop", Epoch.Add(time.Hour)))
			require.NoError(t, err)
			restartDamaging("drop", c.value)
			require.NoError(t, h.store.RemoveGate(h.ctx, closed, Epoch), "the gate can be removed")
			evs, err = h.store.Events(h.ctx, gateName)
			require.NoError(t, err)
			assert.Empty(t, evs)
		})
	}
}
