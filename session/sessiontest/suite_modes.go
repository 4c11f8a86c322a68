package sessiontest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
)

// testModes checks the gate modes in the store: queue_all makes newcomers
// wait and promotes nobody, reject refuses newcomers (gate_closed) and keeps
// the others, and reopening promotes into the free slots.
func testModes(t *testing.T, open Opener) {
	h := newHarness(t, open)
	cfg := GateConfig(gateName, 2)
	h.join(cfg, "a")

	cfg.Mode = session.ModeQueueAll
	assert.Equal(t, session.StatusWaiting, h.join(cfg, "b").Status, "queue_all: a newcomer waits despite a free slot")
	assert.Equal(t, session.StatusActive, h.join(cfg, "a").Status, "active sessions go on")
	h.release(cfg, "a")
	assert.Equal(t, session.StatusWaiting, h.mustGet(gateName, "b").Status, "queue_all: a release promotes nobody")
	assert.Equal(t, int64(0), h.update(cfg, 0).Promoted)
	r, err := h.store.Purge(h.ctx, cfg, nil, h.clock.Now())
	require.NoError(t, err)
	assert.Equal(t, int64(0), r.Promoted)

	cfg.Mode = session.ModeReject
	before := h.state(gateName)
	mark := h.mark()
	_, err = h.store.Join(h.ctx, cfg, "c", h.clock.Now())
	require.ErrorIs(t, err, session.ErrGateClosed)
	assert.Equal(t, session.CodeGateClosed, session.CodeOf(err))
	assert.Empty(t, h.eventsSince(mark), "a refused join commits nothing")
	assert.Equal(t, before, h.state(gateName), "a refused join takes no position")
	h.requireAbsent(gateName, "c")
	assert.Equal(t, session.StatusWaiting, h.join(cfg, "b").Status, "reject: a waiter keeps its place and may join again")
	h.leave(cfg, "b")
	assert.Equal(t, int64(0), h.update(cfg, 0).Promoted, "reject: nobody is promoted")

	// Reopened: a fill promotes into the free slots.
	cfg.Mode = session.ModeOpen
	mark = h.mark()
	r, err = h.store.Purge(h.ctx, cfg, nil, h.clock.Now())
	require.NoError(t, err)
	assert.Equal(t, int64(1), r.Promoted)
	assert.Equal(t, []string{"promoted:b"}, kinds(h.eventsSince(mark)))
	assert.Equal(t, session.StatusActive, h.join(cfg, "c").Status)
}

// testPacing checks NewUsersPerMinute: admissions at join and promotions
// take tokens that come back evenly, and the Waitlist's sweeper promotes as
// they do.
func testPacing(t *testing.T, open Opener) {
	h := newHarness(t, open)
	cfg := GateConfig(gateName, 10)
	cfg.NewUsersPerMinute = 60 // one a second, a burst of one
	w := h.waitlist(cfg)
	ctx := h.ctx

	status := func(id string) session.Status {
		t.Helper()
		v, err := w.Status(ctx, gateName, id)
		require.NoError(t, err)
		return v.Status
	}
	v, err := w.Join(ctx, gateName, "a")
	require.NoError(t, err)
	assert.Equal(t, session.StatusActive, v.Status, "a full bucket admits the first")
	v, err = w.Join(ctx, gateName, "b")
	require.NoError(t, err)
	assert.Equal(t, session.StatusWaiting, v.Status, "no token left: b waits despite free slots")

	h.clock.Advance(500 * time.Millisecond)
	require.NoError(t, w.Sweep(ctx))
	assert.Equal(t, session.StatusWaiting, status("b"), "half a token is none")
	h.clock.Advance(500 * time.Millisecond)
	require.NoError(t, w.Sweep(ctx))
	assert.Equal(t, session.StatusActive, status("b"), "the sweeper promotes as the token comes back")

	for _, id := range []string{"c", "d", "e"} {
		v, err := w.Join(ctx, gateName, id)
		require.NoError(t, err)
		assert.Equal(t, session.StatusWaiting, v.Status, id)
	}
	// Three seconds later: three tokens came back but the burst is one, so
	// one at a time, a second apart.
	h.clock.Advance(3 * time.Second)
	require.NoError(t, w.Sweep(ctx))
	require.NoError(t, w.Sweep(ctx))
	assert.Equal(t, []session.Status{session.StatusActive, session.StatusWaiting, session.StatusWaiting}, []session.Status{status("c"), status("d"), status("e")})
	// An update (the cron) is paced too.
	assert.Equal(t, int64(0), h.update(cfg, 0).Promoted)
	h.clock.Advance(time.Second)
	assert.Equal(t, int64(1), h.update(cfg, 0).Promoted)
	assert.Equal(t, session.StatusActive, status("d"))

	// A release's promotion is paced as well.
	require.NoError(t, w.Release(ctx, gateName, "a"))
	assert.Equal(t, session.StatusWaiting, status("e"))
	h.clock.Advance(time.Second)
	require.NoError(t, w.Sweep(ctx))
	assert.Equal(t, session.StatusActive, status("e"))
}
