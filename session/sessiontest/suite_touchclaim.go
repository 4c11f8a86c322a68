package sessiontest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
)

// promoteAgain makes id wait behind holder (both joined now) and promotes
// it by releasing holder a millisecond later; it returns id's row, promoted
// and unclaimed.
func (h *harness) promoteAgain(cfg session.GateConfig, holder, id string) session.Session {
	h.tb.Helper()
	h.join(cfg, holder)
	h.join(cfg, id)
	h.clock.Advance(time.Millisecond)
	h.release(cfg, holder)
	s := h.mustGet(gateName, id)
	require.Equal(h.tb, session.StatusActive, s.Status)
	require.False(h.tb, s.ClaimDeadline.IsZero(), "promoted, unclaimed")
	return s
}

// claimsOf counts the claims of id among evs: the EventRefreshed that
// claimed and its EventClaimed note.
func claimsOf(evs []session.Event, id string) int {
	n := 0
	for _, ev := range evs {
		if ev.Session.ID == id && (ev.Claimed || ev.Kind == session.EventClaimed) {
			n++
		}
	}
	return n
}

// testTouchClaimBoundToPromotion checks that a Touch claims only the
// promotion it names, as a claim link does: a session promoted, released,
// joined again and promoted again a millisecond later is refreshed but not
// claimed by a touch naming the first promotion's deadline (unexpired) or
// any deadline but its own, and is claimed by one naming its own.
func testTouchClaimBoundToPromotion(t *testing.T, open Opener) {
	h := newHarness(t, open)
	cfg := claimConfig(1)
	first := h.promoteAgain(cfg, "a", "b")
	h.clock.Advance(time.Millisecond)
	h.release(cfg, "b") // never claimed; then joined again
	h.clock.Advance(time.Millisecond)
	second := h.promoteAgain(cfg, "c", "b")
	require.True(t, second.ClaimDeadline.After(first.ClaimDeadline))
	require.True(t, h.clock.Now().Before(first.ClaimDeadline), "the first promotion's deadline has not passed")

	for _, tc := range []struct {
		name     string
		deadline time.Time
	}{
		{"the first promotion's", first.ClaimDeadline},
		{"a nanosecond early", second.ClaimDeadline.Add(-time.Nanosecond)},
		{"a nanosecond late", second.ClaimDeadline.Add(time.Nanosecond)},
		{"the second's, truncated to the second", second.ClaimDeadline.Truncate(time.Second)},
		{"none", time.Time{}},
	} {
		at := h.clock.Advance(time.Millisecond)
		mark := h.mark()
		require.NoError(t, h.store.Touch(h.ctx, gateName, []session.Touch{{ID: "b", LastActive: at, ClaimDeadline: tc.deadline}}), tc.name)
		assert.Zero(t, claimsOf(h.eventsSince(mark), "b"), "%s: no claim", tc.name)
		b := h.mustGet(gateName, "b")
		assertTime(t, second.ClaimDeadline, b.ClaimDeadline, tc.name+": still unclaimed")
		assertTime(t, at, b.LastActive, tc.name+": refreshed as usual")
	}

	at := h.clock.Advance(time.Millisecond)
	mark := h.mark()
	require.NoError(t, h.store.Touch(h.ctx, gateName, []session.Touch{{ID: "b", LastActive: at, ClaimDeadline: second.ClaimDeadline}}))
	assert.Equal(t, []string{"refreshed:b", "claimed:b"}, kinds(h.eventsSince(mark)), "the second promotion's touch claims it")
	b := h.mustGet(gateName, "b")
	assert.True(t, b.ClaimDeadline.IsZero(), "claimed")
	assertTime(t, at, b.LastActive)
}

// testStaleClaimAfterPromotionAgain checks the Waitlist's claims against a
// session promoted again before memory learned it was gone (an instance
// of a shared Store behind another's commits): a sign of life seen under
// the first promotion, flushed after the session was released, joined
// again and promoted again, does not claim the second promotion, which
// nobody showed a sign of life after; one seen after it does.
func testStaleClaimAfterPromotionAgain(t *testing.T, open Opener) {
	h := newHarness(t, open)
	cfg := claimConfig(1)
	lag, w := h.lagging(cfg)

	first := h.promoteAgain(cfg, "a", "b")
	assertDelivered(t, lag, first.ClaimDeadline, "memory applied the first promotion")
	require.NoError(t, w.ValidateSessionIsActive(gateName, "b"), "b arrives: memory claims the first promotion")

	// Before that claim is flushed, b's slot passes to c (b released), b
	// joins again and is promoted again, and memory learns none of it.
	lag.hold()
	h.clock.Advance(time.Millisecond)
	h.join(cfg, "c")
	h.release(cfg, "b") // c is promoted
	h.clock.Advance(time.Millisecond)
	second := h.promoteAgain(cfg, "c", "b")
	require.False(t, second.ClaimDeadline.Equal(first.ClaimDeadline))
	assertDelivered(t, lag, first.ClaimDeadline, "memory still holds the first promotion")

	mark := h.mark()
	require.NoError(t, w.FlushTouches(h.ctx))
	assert.Zero(t, claimsOf(h.eventsSince(mark), "b"), "the first promotion's claim does not claim the second")
	assertTime(t, second.ClaimDeadline, h.mustGet(gateName, "b").ClaimDeadline, "the second promotion waits for its claim")

	// Memory catches up; a sign of life after the second promotion claims it.
	lag.catchUpOnNext()
	h.join(cfg, "d")
	assertDelivered(t, lag, second.ClaimDeadline, "memory applied the second promotion")
	require.NoError(t, w.ValidateSessionIsActive(gateName, "b"))
	mark = h.mark()
	require.NoError(t, w.FlushTouches(h.ctx))
	assert.Equal(t, 2, claimsOf(h.eventsSince(mark), "b"), "one claim (its refresh and its note)")
	assert.True(t, h.mustGet(gateName, "b").ClaimDeadline.IsZero(), "claimed as stored")
}

// testDuplicateTouches: one Touch call naming a session twice (the
// Waitlist's flusher walks memory in steps and may visit a session twice)
// keeps the later LastActive and claims once, whatever the order of the
// two.
func testDuplicateTouches(t *testing.T, open Opener) {
	for _, claimFirst := range []bool{true, false} {
		t.Run(map[bool]string{true: "claim-first", false: "claim-second"}[claimFirst], func(t *testing.T) {
			h := newHarness(t, open)
			cfg := claimConfig(1)
			s := h.promoteAgain(cfg, "a", "b")
			early := h.clock.Advance(time.Millisecond)
			late := h.clock.Advance(time.Millisecond)
			withClaim := session.Touch{ID: "b", LastActive: late, ClaimDeadline: s.ClaimDeadline}
			older := session.Touch{ID: "b", LastActive: early}
			ts := []session.Touch{withClaim, older}
			if !claimFirst {
				ts = []session.Touch{older, withClaim}
			}
			mark := h.mark()
			require.NoError(t, h.store.Touch(h.ctx, gateName, ts))
			assert.Equal(t, 2, claimsOf(h.eventsSince(mark), "b"), "claimed once (its refresh and its note)")
			b := h.mustGet(gateName, "b")
			assert.True(t, b.ClaimDeadline.IsZero())
			assertTime(t, late, b.LastActive)
		})
	}
}

// testTimesAreUTC: every time a Store hands back (a join's answer, Get,
// Load, a commit's events) is in UTC, not in the process's zone: the wire
// shows them as the Store gives them, and two stores must not differ by
// the zone of the machine they run on.
func testTimesAreUTC(t *testing.T, open Opener) {
	h := newHarness(t, open)
	cfg := claimConfig(1)
	mark := h.mark()
	a := h.join(cfg, "a")
	h.join(cfg, "b")
	h.clock.Advance(time.Millisecond)
	h.release(cfg, "a")
	b := h.mustGet(gateName, "b")
	require.False(t, b.ClaimDeadline.IsZero(), "promoted, unclaimed")
	utc := func(what string, s session.Session, more ...time.Time) {
		t.Helper()
		for i, x := range append([]time.Time{s.LastActive, s.CreatedAt, s.ClaimDeadline}, more...) {
			if !x.IsZero() {
				assert.Same(t, time.UTC, x.Location(), "%s %s: time %d", what, s.ID, i)
			}
		}
	}
	utc("join", a)
	utc("get", b)
	evs := h.eventsSince(mark)
	require.NotEmpty(t, evs)
	for _, ev := range evs {
		utc("event", ev.Session, ev.At)
	}
	snaps, err := h.store.Load(h.ctx, []string{gateName})
	require.NoError(t, err)
	require.NotEmpty(t, snaps[gateName].Active)
	for _, s := range snaps[gateName].Active {
		utc("load", s)
	}
}
