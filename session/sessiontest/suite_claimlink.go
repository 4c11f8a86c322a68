package sessiontest

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
)

// testClaimLinkOnce checks the store's claim of a claim link: of many
// claims of one promoted slot racing, exactly one succeeds and one claim is
// recorded; a claim of a waiter, an absent session, a claimed slot, a slot
// past its deadline or a direct admission is ErrNotActive and changes
// nothing.
func testClaimLinkOnce(t *testing.T, open Opener) {
	h := newHarness(t, open)
	cfg := notifyConfig(1)
	h.join(cfg, "a")
	h.join(cfg, "b")
	h.join(cfg, "c")
	h.setNotify(cfg, "b", true)

	notActive := func(id string, msg string) {
		t.Helper()
		mark := h.mark()
		deadline := h.clock.Now().Add(cfg.NotifyClaimTimeout) // a link's, for a slot with none
		if s, err := h.store.Get(h.ctx, gateName, id); err == nil && !s.ClaimDeadline.IsZero() {
			deadline = s.ClaimDeadline // the right link's
		}
		_, err := h.store.ClaimLink(h.ctx, gateName, id, deadline, h.clock.Now())
		assert.ErrorIs(t, err, session.ErrNotActive, msg)
		assert.Empty(t, h.eventsSince(mark), "%s: nothing changed", msg)
	}
	notActive("a", "a direct admission has no slot to claim")
	notActive("b", "a waiter has no slot to claim")
	notActive("nobody", "an absent session")
	_, err := h.store.ClaimLink(h.ctx, gateName, "bad id!", h.clock.Now().Add(time.Minute), h.clock.Now())
	assert.ErrorIs(t, err, session.ErrInvalidArgument)

	h.clock.Advance(time.Second)
	h.release(cfg, "a")
	b := h.mustGet(gateName, "b")
	require.Equal(t, session.StatusActive, b.Status)
	require.False(t, b.ClaimDeadline.IsZero())

	mark := h.mark()
	const n = 8
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = h.store.ClaimLink(h.ctx, gateName, "b", b.ClaimDeadline, h.clock.Now())
		}()
	}
	wg.Wait()
	won := 0
	for _, err := range errs {
		if err == nil {
			won++
			continue
		}
		assert.ErrorIs(t, err, session.ErrNotActive)
	}
	assert.Equal(t, 1, won, "exactly one claim of the link succeeds")
	claims := 0
	for _, ev := range h.eventsSince(mark) {
		if ev.Claimed {
			claims++
		}
	}
	assert.Equal(t, 1, claims, "one claim recorded")
	assert.True(t, h.mustGet(gateName, "b").ClaimDeadline.IsZero(), "claimed")
	notActive("b", "a claimed slot cannot be claimed again")

	// A promotion whose deadline passed (not yet purged) cannot be claimed.
	h.setNotify(cfg, "c", true)
	h.clock.Advance(time.Second)
	h.release(cfg, "b")
	c := h.mustGet(gateName, "c")
	require.False(t, c.ClaimDeadline.IsZero())
	h.clock.Set(c.ClaimDeadline)
	notActive("c", "at its deadline the slot is gone")
}

// testClaimLinkBoundToPromotion checks that a claim link claims only the
// promotion it was issued for: a session promoted, released, re-joined by
// name and promoted again a millisecond later refuses the first
// promotion's link (unexpired) and any deadline but its own, changing
// nothing, and takes its own link once.
func testClaimLinkBoundToPromotion(t *testing.T, open Opener) {
	h := newHarness(t, open)
	cfg := notifyConfig(1)
	promote := func(holder string) session.Session {
		t.Helper()
		h.join(cfg, holder)
		h.join(cfg, "b")
		h.setNotify(cfg, "b", true)
		h.clock.Advance(time.Millisecond)
		h.release(cfg, holder)
		b := h.mustGet(gateName, "b")
		require.Equal(t, session.StatusActive, b.Status)
		require.False(t, b.ClaimDeadline.IsZero(), "promoted, unclaimed")
		return b
	}
	first := promote("a")
	h.clock.Advance(time.Millisecond)
	h.release(cfg, "b") // never claimed; then re-joined by name
	h.clock.Advance(time.Millisecond)
	second := promote("c")
	require.True(t, second.ClaimDeadline.After(first.ClaimDeadline))
	require.True(t, h.clock.Now().Before(first.ClaimDeadline), "the first link has not expired")
	require.Equal(t, first.ClaimDeadline.Unix(), second.ClaimDeadline.Unix(), "both deadlines in the same second")

	for _, tc := range []struct {
		name     string
		deadline time.Time
	}{
		{"the first promotion's link", first.ClaimDeadline},
		{"a nanosecond early", second.ClaimDeadline.Add(-time.Nanosecond)},
		{"a nanosecond late", second.ClaimDeadline.Add(time.Nanosecond)},
		{"the second, truncated to the second", second.ClaimDeadline.Truncate(time.Second)},
		{"no deadline", time.Time{}},
	} {
		mark := h.mark()
		_, err := h.store.ClaimLink(h.ctx, gateName, "b", tc.deadline, h.clock.Now())
		assert.ErrorIs(t, err, session.ErrNotActive, tc.name)
		assert.Empty(t, h.eventsSince(mark), "%s: nothing changed", tc.name)
		assertTime(t, second.ClaimDeadline, h.mustGet(gateName, "b").ClaimDeadline, "%s: still unclaimed", tc.name)
	}
	mark := h.mark()
	got, err := h.store.ClaimLink(h.ctx, gateName, "b", second.ClaimDeadline, h.clock.Now())
	require.NoError(t, err, "the second promotion's link claims it")
	assert.True(t, got.ClaimDeadline.IsZero(), "claimed")
	claims := 0
	for _, ev := range h.eventsSince(mark) {
		if ev.Claimed {
			claims++
		}
	}
	assert.Equal(t, 1, claims, "one claim recorded")
	_, err = h.store.ClaimLink(h.ctx, gateName, "b", second.ClaimDeadline, h.clock.Now())
	assert.ErrorIs(t, err, session.ErrNotActive, "once")
}

// testJoinLeavesLinkClaim checks that a join naming a promoted, called-back
// session (a backend's re-join) is a sign of life that leaves its slot to
// the claim link, while a join of any other promoted session claims it
// (one Claimed event, the claimed history note).
func testJoinLeavesLinkClaim(t *testing.T, open Opener) {
	h := newHarness(t, open)
	cfg := notifyConfig(1)
	h.join(cfg, "a")
	h.join(cfg, "b")
	h.join(cfg, "c")
	h.setNotify(cfg, "b", true)
	h.clock.Advance(time.Second)
	h.release(cfg, "a")
	b := h.mustGet(gateName, "b")
	require.False(t, b.ClaimDeadline.IsZero(), "promoted, unclaimed")

	claims := func(mark int) int {
		n := 0
		for _, ev := range h.eventsSince(mark) {
			if ev.Claimed {
				n++
			}
		}
		return n
	}
	h.clock.Advance(time.Second)
	mark := h.mark()
	again := h.join(cfg, "b")
	assertTime(t, b.ClaimDeadline, again.ClaimDeadline, "the re-join left the slot unclaimed")
	assertTime(t, h.clock.Now(), again.LastActive, "and is a sign of life")
	assert.Zero(t, claims(mark), "no claim reported")
	assertTime(t, b.ClaimDeadline, h.mustGet(gateName, "b").ClaimDeadline, "as stored")
	_, err := h.store.ClaimLink(h.ctx, gateName, "b", b.ClaimDeadline, h.clock.Now())
	require.NoError(t, err, "the link still claims it")

	// c is not called back: its re-join claims.
	h.release(cfg, "b")
	c := h.mustGet(gateName, "c")
	require.False(t, c.ClaimDeadline.IsZero())
	mark = h.mark()
	assert.True(t, h.join(cfg, "c").ClaimDeadline.IsZero(), "claimed by the join")
	assert.Equal(t, 1, claims(mark), "one claim reported")
}

// testClaimOutputsOnce checks that every way of claiming a promoted slot
// (a join, a touch, a claim link) writes exactly one claimed webhook row
// and one claimed history record for it, and nothing else claims.
func testClaimOutputsOnce(t *testing.T, open Opener) {
	h := newHarness(t, open)
	os, ok := h.store.(session.OutboxStore)
	if !ok {
		t.Skip("the store does not implement session.OutboxStore")
	}
	r, err := session.NewOutboxRouting([]session.OutboxTarget{{Name: "claims", Events: []string{session.WebhookClaimed}}})
	require.NoError(t, err)
	os.SetOutbox(r)
	cfg := notifyConfig(1)
	h.join(cfg, "a")
	for _, id := range []string{"byJoin", "byTouch", "byLink"} {
		h.join(cfg, id)
	}
	h.setNotify(cfg, "byLink", true)
	claim := map[string]func(){
		"byJoin":  func() { h.join(cfg, "byJoin") },
		"byTouch": func() { h.claim("byTouch", h.clock.Now()) },
		"byLink": func() {
			_, err := h.store.ClaimLink(h.ctx, gateName, "byLink", h.mustGet(gateName, "byLink").ClaimDeadline, h.clock.Now())
			require.NoError(t, err)
		},
	}
	prev := "a"
	for _, id := range []string{"byJoin", "byTouch", "byLink"} {
		h.clock.Advance(time.Second)
		h.release(cfg, prev)
		deadline := h.mustGet(gateName, id).ClaimDeadline
		require.False(t, deadline.IsZero(), "%s promoted, unclaimed", id)
		h.clock.Advance(time.Second)
		claim[id]()
		// Later signs of life claim nothing more.
		h.clock.Advance(time.Second)
		h.join(cfg, id)
		require.NoError(t, h.store.Touch(h.ctx, gateName, []session.Touch{{ID: id, LastActive: h.clock.Now(), ClaimDeadline: deadline}}))
		prev = id
	}
	rows, err := os.ClaimOutbox(h.ctx, session.OutboxTargets{}, h.clock.Now(), time.Minute, 100)
	require.NoError(t, err)
	webhooks := map[string]int{}
	for _, m := range rows {
		require.Equal(t, session.WebhookClaimed, m.Event)
		webhooks[outboxData(t, m).Session]++
	}
	records := map[string]int{}
	for _, rec := range h.history(session.HistoryQuery{Gate: gateName, Limit: 100}) {
		if rec.Kind == session.HistoryClaimed {
			records[rec.Session]++
		}
	}
	want := map[string]int{"byJoin": 1, "byTouch": 1, "byLink": 1}
	assert.Equal(t, want, webhooks, "one claimed webhook per claim")
	assert.Equal(t, want, records, "one claimed history record per claim")
}
