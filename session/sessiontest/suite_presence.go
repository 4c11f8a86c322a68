package sessiontest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
)

// claimConfig is the suite's gate with a claim window.
func claimConfig(limit int64) session.GateConfig {
	cfg := GateConfig(gateName, limit)
	cfg.ClaimTimeout = time.Minute
	return cfg
}

// testClaim checks the claim window in the store: a promotion carries its
// deadline, a claim clears it, and past it the update purges the session
// and passes the slot on.
func testClaim(t *testing.T, open Opener) {
	h := newHarness(t, open)
	cfg := claimConfig(1)
	h.join(cfg, "a")
	h.join(cfg, "b")
	h.join(cfg, "c")
	now := h.clock.Advance(time.Second)
	h.release(cfg, "a")
	b := h.mustGet(gateName, "b")
	require.Equal(t, session.StatusActive, b.Status)
	assertTime(t, now.Add(cfg.ClaimTimeout), b.ClaimDeadline, "promoted: unclaimed until its deadline")

	// A session admitted at join needs no claim.
	other := GateConfig("other", 1)
	assert.True(t, h.join(other, "x").ClaimDeadline.IsZero())

	// At the deadline the session is kept; 1ns past it, purged, and c takes
	// the slot (and its own deadline).
	h.clock.Set(b.ClaimDeadline)
	h.seen("c")
	assert.Equal(t, session.UpdateReport{Gate: gateName}, zeroCounts(h.update(cfg, 0)))
	at := h.clock.Advance(time.Nanosecond)
	h.seen("c")
	mark := h.mark()
	assert.Equal(t, session.UpdateReport{Gate: gateName, PurgedActive: 1, Promoted: 1}, zeroCounts(h.update(cfg, 0)))
	assert.Equal(t, []string{"deactivated:b", "promoted:c"}, kinds(h.eventsSince(mark)))
	h.requireAbsent(gateName, "b")
	c := h.mustGet(gateName, "c")
	assertTime(t, at.Add(cfg.ClaimTimeout), c.ClaimDeadline)

	// A claim clears the deadline and is reported; the session then lives by
	// the active timeout.
	mark = h.mark()
	h.claim("c", at)
	assert.True(t, h.mustGet(gateName, "c").ClaimDeadline.IsZero())
	assert.Equal(t, []string{"refreshed:c", "claimed:c"}, kinds(h.eventsSince(mark)))
	h.clock.Set(at.Add(cfg.ClaimTimeout + time.Second))
	assert.Equal(t, session.UpdateReport{Gate: gateName}, zeroCounts(h.update(cfg, 0)))
	h.mustGet(gateName, "c")

	// A join claims too.
	h.join(cfg, "d")
	h.release(cfg, "c")
	require.False(t, h.mustGet(gateName, "d").ClaimDeadline.IsZero())
	assert.True(t, h.join(cfg, "d").ClaimDeadline.IsZero(), "a join is a sign of life")

	// The deadline survives a restart.
	h.join(cfg, "e")
	h.release(cfg, "d")
	e := h.mustGet(gateName, "e")
	require.False(t, e.ClaimDeadline.IsZero())
	h.reopen()
	requireSession(t, e, h.mustGet(gateName, "e"))
	snaps, err := h.store.Load(h.ctx, []string{gateName})
	require.NoError(t, err)
	require.Len(t, snaps[gateName].Active, 1)
	assertTime(t, e.ClaimDeadline, snaps[gateName].Active[0].ClaimDeadline)
}

// testPurge checks Store.Purge: only stale sessions among those named go,
// and the freed slots are filled in the same commit.
func testPurge(t *testing.T, open Opener) {
	h := newHarness(t, open)
	cfg := claimConfig(2)
	h.join(cfg, "a")
	h.join(cfg, "b")
	h.join(cfg, "w1")
	h.join(cfg, "w2")
	h.join(cfg, "w3")
	h.release(cfg, "a") // w1 promoted, unclaimed
	w1 := h.mustGet(gateName, "w1")

	// Before the deadline nothing goes, whatever is named.
	r, err := h.store.Purge(h.ctx, cfg, []string{"w1", "b", "ghost"}, h.clock.Now())
	require.NoError(t, err)
	assert.Equal(t, session.UpdateReport{Gate: gateName}, zeroCounts(r))
	h.mustGet(gateName, "w1")

	// Past it, w1 goes and w2 takes the slot, in one commit; b is not stale
	// and stays; the absent one is skipped.
	at := w1.ClaimDeadline.Add(time.Nanosecond)
	h.clock.Set(at)
	mark := h.mark()
	r, err = h.store.Purge(h.ctx, cfg, []string{"ghost", "b", "w1"}, at)
	require.NoError(t, err)
	assert.Equal(t, session.UpdateReport{Gate: gateName, PurgedActive: 1, Promoted: 1}, zeroCounts(r))
	commits := h.commitsSince(mark)
	require.Len(t, commits, 1)
	assert.Equal(t, []string{"deactivated:w1", "promoted:w2"}, kinds(commits[0].Events))
	h.requireAbsent(gateName, "w1")
	h.mustGet(gateName, "b")
	assert.Equal(t, session.StatusActive, h.mustGet(gateName, "w2").Status)
	requireState(t, session.Counters{NextPosition: 6, Active: 2, Waiting: 1}, 5, 5, h.state(gateName))

	// A stale waiter named goes too.
	h.clock.Advance(cfg.WaitingTimeout + time.Minute)
	r, err = h.store.Purge(h.ctx, cfg, []string{"w3"}, h.clock.Now())
	require.NoError(t, err)
	assert.Equal(t, int64(1), r.PurgedWaiting)
	h.requireAbsent(gateName, "w3")

	_, err = h.store.Purge(h.ctx, cfg, []string{"bad id"}, h.clock.Now())
	require.ErrorIs(t, err, session.ErrInvalidArgument)
}

// testPresence checks the Waitlist's presence: an open socket keeps a
// waiter's place however long, claims a promotion at once; a waiter gone
// silent is purged; an unclaimed promotion passes on at its deadline without
// waiting for a tick.
func testPresence(t *testing.T, open Opener) {
	h := newHarness(t, open)
	cfg := claimConfig(1)
	w := h.waitlist(cfg)
	join := func(id string) session.SessionView {
		v, err := w.Join(h.ctx, gateName, id)
		require.NoError(t, err)
		return v
	}
	join("a")
	join("hidden")
	join("silent")
	join("poller")
	join("late")
	closeHidden, err := w.Connect(gateName, "hidden")
	require.NoError(t, err)

	// Far longer than the waiting timeout: the socket stays open (a hidden
	// tab), the poller asks for its status, the silent one shows nothing.
	for i := 0; i < 10; i++ {
		h.clock.Advance(cfg.WaitingTimeout / 3)
		_, err := w.Status(h.ctx, gateName, "poller")
		require.NoError(t, err)
		if i == 1 {
			_, err := w.Status(h.ctx, gateName, "late")
			require.NoError(t, err)
		}
		_, err = w.Update(h.ctx)
		require.NoError(t, err)
	}
	h.mustGet(gateName, "hidden")
	h.mustGet(gateName, "poller")
	h.requireAbsent(gateName, "silent")
	h.requireAbsent(gateName, "late")
	v, err := w.Status(h.ctx, gateName, "hidden")
	require.NoError(t, err)
	assert.Equal(t, int64(1), v.Place, "the hidden tab kept its place, first now")

	// a leaves: hidden is promoted and its open socket claims at once.
	require.NoError(t, w.Release(h.ctx, gateName, "a"))
	require.NoError(t, w.ValidateSessionIsActive(gateName, "hidden"))
	v, err = w.Status(h.ctx, gateName, "hidden")
	require.NoError(t, err)
	assert.Nil(t, v.ClaimDeadline, "claimed by its socket")
	require.NoError(t, w.FlushTouches(h.ctx))
	assert.True(t, h.mustGet(gateName, "hidden").ClaimDeadline.IsZero(), "the claim is persisted")

	// hidden leaves for good: poller is promoted, unclaimed.
	closeHidden()
	require.NoError(t, w.Release(h.ctx, gateName, "hidden"))
	p := h.mustGet(gateName, "poller")
	require.Equal(t, session.StatusActive, p.Status)
	require.False(t, p.ClaimDeadline.IsZero())
	join("next")

	// The sweep before the deadline does nothing; past it, the slot passes
	// on at once.
	h.clock.Set(p.ClaimDeadline)
	require.NoError(t, w.Sweep(h.ctx))
	// (Read from the store: a validation of the unclaimed session would claim it.)
	require.Equal(t, session.StatusActive, h.mustGet(gateName, "poller").Status)
	h.clock.Advance(time.Millisecond)
	require.NoError(t, w.Sweep(h.ctx))
	require.ErrorIs(t, w.ValidateSessionIsActive(gateName, "poller"), session.ErrNotActive)
	h.requireAbsent(gateName, "poller")
	require.Equal(t, session.StatusActive, h.mustGet(gateName, "next").Status)

	// A status (a request naming it) claims; the claim outlives the deadline.
	nx, err := w.Status(h.ctx, gateName, "next")
	require.NoError(t, err)
	assert.Nil(t, nx.ClaimDeadline)
	h.clock.Advance(cfg.ClaimTimeout * 2)
	require.NoError(t, w.Sweep(h.ctx))
	_, err = w.Update(h.ctx)
	require.NoError(t, err)
	require.NoError(t, w.ValidateSessionIsActive(gateName, "next"))
}

// testReleaseOnDisconnect checks that an active session whose last socket
// closes is released after the grace unless a sign of life follows.
func testReleaseOnDisconnect(t *testing.T, open Opener) {
	h := newHarness(t, open)
	cfg := GateConfig(gateName, 1)
	cfg.ReleaseOnDisconnect = 5 * time.Second
	w := h.waitlist(cfg)
	for _, id := range []string{"a", "w1", "w2"} {
		_, err := w.Join(h.ctx, gateName, id)
		require.NoError(t, err)
	}
	tab1, err := w.Connect(gateName, "a")
	require.NoError(t, err)
	tab2, err := w.Connect(gateName, "a")
	require.NoError(t, err)

	// One of two tabs closes: nothing.
	tab1()
	h.clock.Advance(time.Minute)
	require.NoError(t, w.Sweep(h.ctx))
	require.NoError(t, w.ValidateSessionIsActive(gateName, "a"))

	// The last closes, a navigation follows within the grace: kept.
	tab2()
	h.clock.Advance(2 * time.Second)
	require.NoError(t, w.ValidateSessionAndRefreshLastActive(gateName, "a"))
	h.clock.Advance(10 * time.Second)
	require.NoError(t, w.Sweep(h.ctx))
	require.NoError(t, w.ValidateSessionIsActive(gateName, "a"))

	// The next page opens a socket and closes it; nothing follows.
	tab3, err := w.Connect(gateName, "a")
	require.NoError(t, err)
	tab3()
	tab3() // closing twice counts once
	h.clock.Advance(cfg.ReleaseOnDisconnect - time.Nanosecond)
	require.NoError(t, w.Sweep(h.ctx))
	require.NoError(t, w.ValidateSessionIsActive(gateName, "a"), "within the grace")
	h.clock.Advance(time.Nanosecond)
	require.NoError(t, w.Sweep(h.ctx))
	require.ErrorIs(t, w.ValidateSessionIsActive(gateName, "a"), session.ErrNotActive, "released")
	h.requireAbsent(gateName, "a")
	require.NoError(t, w.ValidateSessionIsActive(gateName, "w1"), "the next waiter is in at once")

	// Off (zero grace): a closed socket releases nothing.
	off := GateConfig("off", 1)
	w2 := h.waitlist(off)
	_, err = w2.Join(h.ctx, "off", "x")
	require.NoError(t, err)
	c, err := w2.Connect("off", "x")
	require.NoError(t, err)
	c()
	h.clock.Advance(time.Minute)
	require.NoError(t, w2.Sweep(h.ctx))
	require.NoError(t, w2.ValidateSessionIsActive("off", "x"))
}

// testExactPlace checks that a waiter's place is exact as people ahead and
// behind leave, and that the global view's summary lets a client compute it.
func testExactPlace(t *testing.T, open Opener) {
	h := newHarness(t, open)
	cfg := GateConfig(gateName, 1)
	w := h.waitlist(cfg)
	const n = 60
	for i := 0; i < n; i++ {
		_, err := w.Join(h.ctx, gateName, idOf("p", i))
		require.NoError(t, err)
	}
	// Every third waiter ahead of p040 leaves, and some behind it.
	left := map[int]bool{}
	for i := 1; i < n; i += 3 {
		require.NoError(t, w.Release(h.ctx, gateName, idOf("p", i)))
		left[i] = true
	}
	var waiters []int64
	var rank int64
	for i := 1; i < n; i++ {
		if !left[i] {
			waiters = append(waiters, int64(i)+1)
			rank++
			v, err := w.Status(h.ctx, gateName, idOf("p", i))
			require.NoError(t, err)
			assert.Equal(t, rank, v.Place, "place of %s", idOf("p", i))
		}
	}
	g, err := w.Global(gateName)
	require.NoError(t, err)
	requireBuckets(t, g, waiters)

	// The line index survives a restart.
	require.NoError(t, w.Close())
	h.reopen()
	w = h.waitlist(cfg)
	v, err := w.Status(h.ctx, gateName, idOf("p", 59))
	require.NoError(t, err)
	assert.Equal(t, rank, v.Place)
	g, err = w.Global(gateName)
	require.NoError(t, err)
	requireBuckets(t, g, waiters)
}
