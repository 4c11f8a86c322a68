package sessiontest

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
)

// notifyConfig is the suite's gate with a claim window and a longer one for
// called-back sessions (longer than the active timeout, so that the idle
// rule would purge an unclaimed notify session if it applied).
func notifyConfig(limit int64) session.GateConfig {
	cfg := claimConfig(limit)
	cfg.NotifyClaimTimeout = 15 * time.Minute
	return cfg
}

func (h *harness) setNotify(cfg session.GateConfig, id string, on bool) session.Session {
	h.tb.Helper()
	ns, ok := h.store.(session.NotifyStore)
	if !ok {
		h.tb.Skip("the store does not implement session.NotifyStore")
	}
	s, err := ns.SetNotify(h.ctx, cfg, id, on, h.clock.Now())
	require.NoError(h.tb, err, "notify %s", id)
	return s
}

// testNotify checks "leave, we'll call you" in the store: a notify waiter
// is not purged for absence, it is promoted with the notify claim window,
// is not purged as idle while unclaimed, and is purged past its deadline;
// the flag survives a restart and can be cleared.
func testNotify(t *testing.T, open Opener) {
	h := newHarness(t, open)
	cfg := notifyConfig(1)
	h.join(cfg, "a")
	h.join(cfg, "b")
	h.join(cfg, "c")
	h.join(cfg, "d")
	b := h.setNotify(cfg, "b", true)
	assert.True(t, b.Notify)
	assert.Equal(t, session.StatusWaiting, b.Status)
	assert.True(t, h.mustGet(gateName, "b").Notify, "persisted")
	assert.False(t, h.mustGet(gateName, "c").Notify)

	// Absent sessions: not found.
	ns := h.store.(session.NotifyStore)
	_, err := ns.SetNotify(h.ctx, cfg, "nobody", true, h.clock.Now())
	assert.True(t, errors.Is(err, session.ErrNotFound), "%v", err)

	// Nobody shows a sign of life for long: c and d are gone, b stays.
	h.clock.Advance(WaitingTimeout + time.Minute)
	h.seen("a")
	rep := h.update(cfg, 0)
	assert.Equal(t, int64(2), rep.PurgedWaiting)
	h.mustGet(gateName, "b")
	h.requireAbsent(gateName, "c")

	// The flag survives a restart.
	h.reopen()
	assert.True(t, h.mustGet(gateName, "b").Notify)

	// Promoted: the notify claim window, not claim_timeout.
	now := h.clock.Advance(time.Second)
	h.release(cfg, "a")
	b = h.mustGet(gateName, "b")
	require.Equal(t, session.StatusActive, b.Status)
	assertTime(t, now.Add(cfg.NotifyClaimTimeout), b.ClaimDeadline)

	// Past the active timeout but within its window: kept.
	h.clock.Advance(ActiveTimeout + time.Minute)
	assert.Equal(t, session.UpdateReport{Gate: gateName}, zeroCounts(h.update(cfg, 0)))
	h.mustGet(gateName, "b")

	// Past the deadline: purged as unclaimed.
	h.clock.Set(b.ClaimDeadline.Add(time.Nanosecond))
	mark := h.mark()
	rep = h.update(cfg, 0)
	assert.Equal(t, int64(1), rep.PurgedActive)
	evs := h.eventsSince(mark)
	require.NotEmpty(t, evs)
	assert.Equal(t, session.Unclaimed, evs[0].Reason)

	// Cleared: the waiting timeout counts again, from the call.
	h.join(cfg, "e") // admitted: the slot is free
	h.join(cfg, "f")
	h.setNotify(cfg, "f", true)
	h.clock.Advance(WaitingTimeout + time.Minute)
	f := h.setNotify(cfg, "f", false)
	assert.False(t, f.Notify)
	assertTime(t, h.clock.Now(), f.LastActive, "the call is a sign of life")
	h.seen("e")
	assert.Equal(t, int64(0), h.update(cfg, 0).PurgedWaiting)
	h.clock.Advance(WaitingTimeout + time.Second)
	h.seen("e")
	assert.Equal(t, int64(1), h.update(cfg, 0).PurgedWaiting)
	h.requireAbsent(gateName, "f")
}

// outboxData decodes a row's payload.
func outboxData(t *testing.T, m session.OutboxMessage) session.OutboxData {
	t.Helper()
	var d session.OutboxData
	require.NoError(t, json.Unmarshal(m.Payload, &d))
	return d
}

// testOutbox checks the webhook outbox: rows are written with the commit of
// the change, one per event and target that wants it; claims lease them;
// answers apply under the lease only; dedup; counts.
func testOutbox(t *testing.T, open Opener) {
	h := newHarness(t, open)
	os, ok := h.store.(session.OutboxStore)
	if !ok {
		t.Skip("the store does not implement session.OutboxStore")
	}
	ctx := h.ctx
	cfg := claimConfig(1)

	// Without routing nothing is written.
	h.join(cfg, "z")
	h.release(cfg, "z")
	got, err := os.ClaimOutbox(ctx, session.OutboxTargets{}, h.clock.Now(), time.Minute, 10)
	require.NoError(t, err)
	assert.Empty(t, got)

	r, err := session.NewOutboxRouting([]session.OutboxTarget{
		{Name: "all", Events: session.WebhookEvents},
		{Name: "promo", Events: []string{session.WebhookPromoted}},
	})
	require.NoError(t, err)
	os.SetOutbox(r)

	h.join(cfg, "a")
	h.join(cfg, "b")
	h.join(cfg, "c")
	now := h.clock.Advance(time.Second)
	h.release(cfg, "a") // released a (all), promoted b (all, promo)
	got, err = os.ClaimOutbox(ctx, session.OutboxTargets{}, now, time.Minute, 10)
	require.NoError(t, err)
	require.Len(t, got, 3)
	assert.Less(t, got[0].ID, got[1].ID)
	assert.Less(t, got[1].ID, got[2].ID)
	assert.Equal(t, "all", got[0].Target)
	assert.Equal(t, session.WebhookReleased, got[0].Event)
	assert.Equal(t, "a", outboxData(t, got[0]).Session)
	assert.Equal(t, "released", outboxData(t, got[0]).Reason)
	promo := map[string]bool{}
	for _, m := range got[1:] {
		assert.Equal(t, session.WebhookPromoted, m.Event)
		d := outboxData(t, m)
		assert.Equal(t, "b", d.Session)
		assert.Equal(t, gateName, d.Gate)
		require.NotNil(t, d.ClaimDeadline)
		assertTime(t, now.Add(cfg.ClaimTimeout), *d.ClaimDeadline)
		promo[m.Target] = true
		assert.NotEmpty(t, m.Lease)
	}
	assert.Equal(t, map[string]bool{"all": true, "promo": true}, promo)

	// Leased: nobody else gets them meanwhile.
	again, err := os.ClaimOutbox(ctx, session.OutboxTargets{}, now, time.Minute, 10)
	require.NoError(t, err)
	assert.Empty(t, again)

	// Answers: delivered, retried, dead.
	require.NoError(t, os.AckOutbox(ctx, got[0], now))
	require.NoError(t, os.RetryOutbox(ctx, got[1], now.Add(5*time.Second), "receiver answered 500"))
	require.NoError(t, os.DeadOutbox(ctx, got[2], "gave up"))
	none, err := os.ClaimOutbox(ctx, session.OutboxTargets{}, now.Add(time.Second), time.Minute, 10)
	require.NoError(t, err)
	assert.Empty(t, none, "the retry is not due yet")
	retry, err := os.ClaimOutbox(ctx, session.OutboxTargets{}, now.Add(6*time.Second), time.Minute, 10)
	require.NoError(t, err)
	require.Len(t, retry, 1)
	assert.Equal(t, got[1].ID, retry[0].ID, "the same row: the same idempotency key")
	assert.Equal(t, 1, retry[0].Attempts)
	assert.Equal(t, got[1].Payload, retry[0].Payload)

	// A lease that ran out: the row is handed out again, and the old
	// lease's answer is ignored.
	later, err := os.ClaimOutbox(ctx, session.OutboxTargets{}, now.Add(6*time.Second+time.Minute+time.Second), time.Minute, 10)
	require.NoError(t, err)
	require.Len(t, later, 1)
	assert.NotEqual(t, retry[0].Lease, later[0].Lease)
	require.NoError(t, os.AckOutbox(ctx, retry[0], now)) // the stale lease
	c, err := os.OutboxCounts(ctx)
	require.NoError(t, err)
	assert.Equal(t, session.OutboxCounts{Pending: 1, Delivered: 1, Dead: 1}, c)
	require.NoError(t, os.AckOutbox(ctx, later[0], now))
	c, err = os.OutboxCounts(ctx)
	require.NoError(t, err)
	assert.Equal(t, session.OutboxCounts{Pending: 0, Delivered: 2, Dead: 1}, c)

	// A claim, a purge: claimed and purged rows (for "all" only).
	at := h.clock.Advance(time.Second)
	h.claim("b", at)
	h.clock.Advance(WaitingTimeout + time.Minute)
	h.seen("b")
	h.update(cfg, 0) // c is gone
	rows, err := os.ClaimOutbox(ctx, session.OutboxTargets{}, h.clock.Now(), time.Minute, 10)
	require.NoError(t, err)
	require.Len(t, rows, 2)
	assert.Equal(t, session.WebhookClaimed, rows[0].Event)
	assert.Equal(t, "b", outboxData(t, rows[0]).Session)
	assert.Equal(t, session.WebhookPurged, rows[1].Event)
	assert.Equal(t, "gone", outboxData(t, rows[1]).Reason)
	assert.Equal(t, "c", outboxData(t, rows[1]).Session)

	// A refresh that claims nothing writes nothing.
	h.join(cfg, "b")
	rows, err = os.ClaimOutbox(ctx, session.OutboxTargets{}, h.clock.Now().Add(time.Hour), time.Minute, 10)
	require.NoError(t, err)
	require.Len(t, rows, 2, "only the two leased above, handed out again after their lease")

	// Named events, with dedup.
	n, err := os.EnqueueOutbox(ctx, session.WebhookEventStarted, gateName, "launch-1", []byte(`{"event":"launch"}`), h.clock.Now())
	require.NoError(t, err)
	assert.Equal(t, 1, n, "only the target that wants it")
	n, err = os.EnqueueOutbox(ctx, session.WebhookEventStarted, gateName, "launch-1", []byte(`{"event":"launch"}`), h.clock.Now())
	require.NoError(t, err)
	assert.Equal(t, 0, n, "deduplicated")

	// The rows survive a restart (they are in the database).
	h.reopen()
	os = h.store.(session.OutboxStore)
	rows, err = os.ClaimOutbox(ctx, session.OutboxTargets{}, h.clock.Now().Add(2*time.Hour), time.Minute, 10)
	require.NoError(t, err)
	require.Len(t, rows, 3)
	assert.Equal(t, session.WebhookEventStarted, rows[2].Event)
	assert.JSONEq(t, `{"event":"launch"}`, string(rows[2].Payload))

	// Bad arguments.
	_, err = os.ClaimOutbox(ctx, session.OutboxTargets{}, now, 0, 1)
	assert.True(t, errors.Is(err, session.ErrInvalidArgument))
	_, err = os.EnqueueOutbox(ctx, session.WebhookEventStarted, "bad gate!", "", nil, now)
	assert.True(t, errors.Is(err, session.ErrInvalidArgument))
}

// testOutboxTargets checks a claim's selection by target: Only hands out
// one target's rows and leaves the others due; Not leaves out the targets
// it names (a deliverer's rows of endpoints it no longer knows); the zero
// value takes every row.
func testOutboxTargets(t *testing.T, open Opener) {
	h := newHarness(t, open)
	os, ok := h.store.(session.OutboxStore)
	if !ok {
		t.Skip("the store does not implement session.OutboxStore")
	}
	ctx := h.ctx
	cfg := claimConfig(1)
	r, err := session.NewOutboxRouting([]session.OutboxTarget{
		{Name: "slow", Events: []string{session.WebhookPromoted}},
		{Name: "fast", Events: []string{session.WebhookPromoted}},
		{Name: "gone", Events: []string{session.WebhookPromoted}},
	})
	require.NoError(t, err)
	os.SetOutbox(r)
	h.join(cfg, "a")
	for i := range 3 { // three promotions: three rows per target
		h.join(cfg, fmt.Sprint("w", i))
		h.release(cfg, map[bool]string{true: "a", false: fmt.Sprint("w", i-1)}[i == 0])
	}
	now := h.clock.Now()
	targets := func(ms []session.OutboxMessage) []string {
		var out []string
		for _, m := range ms {
			out = append(out, m.Target)
		}
		return out
	}

	// Only: the oldest rows of that target, however many of others are older.
	fast, err := os.ClaimOutbox(ctx, session.OutboxTargets{Only: "fast"}, now, time.Minute, 2)
	require.NoError(t, err)
	assert.Equal(t, []string{"fast", "fast"}, targets(fast))
	assert.Less(t, fast[0].ID, fast[1].ID)
	rest, err := os.ClaimOutbox(ctx, session.OutboxTargets{Only: "fast"}, now, time.Minute, 10)
	require.NoError(t, err)
	assert.Equal(t, []string{"fast"}, targets(rest))
	none, err := os.ClaimOutbox(ctx, session.OutboxTargets{Only: "nobody"}, now, time.Minute, 10)
	require.NoError(t, err)
	assert.Empty(t, none)

	// Only wins over Not.
	both, err := os.ClaimOutbox(ctx, session.OutboxTargets{Only: "gone", Not: []string{"gone"}}, now, time.Minute, 1)
	require.NoError(t, err)
	assert.Equal(t, []string{"gone"}, targets(both))

	// Not: every row but those of the targets named.
	orphans, err := os.ClaimOutbox(ctx, session.OutboxTargets{Not: []string{"slow", "fast"}}, now, time.Minute, 10)
	require.NoError(t, err)
	assert.Equal(t, []string{"gone", "gone"}, targets(orphans))

	// The zero value: what is left, whatever its target.
	all, err := os.ClaimOutbox(ctx, session.OutboxTargets{}, now, time.Minute, 10)
	require.NoError(t, err)
	assert.Equal(t, []string{"slow", "slow", "slow"}, targets(all))

	// Given back unattempted: claimable again at once, no attempt counted;
	// a lease that is no longer the row's gives nothing back.
	require.NoError(t, os.ReleaseOutbox(ctx, all[0]))
	require.NoError(t, os.ReleaseOutbox(ctx, session.OutboxMessage{ID: all[1].ID, Lease: "not-its-lease"}))
	back, err := os.ClaimOutbox(ctx, session.OutboxTargets{}, now, time.Minute, 10)
	require.NoError(t, err)
	require.Len(t, back, 1)
	assert.Equal(t, all[0].ID, back[0].ID)
	assert.Zero(t, back[0].Attempts)
}

// testOutboxEventStarted checks that the start of a scheduled event writes
// its event.started row in the draw's own transaction: one row per target
// that wants it, naming the event and the pre-queue's size, and none again
// when the start is asked for once more.
func testOutboxEventStarted(t *testing.T, open Opener) {
	h := newHarness(t, open)
	os, ok := h.store.(session.OutboxStore)
	if !ok {
		t.Skip("the store does not implement session.OutboxStore")
	}
	r, err := session.NewOutboxRouting([]session.OutboxTarget{
		{Name: "launches", Events: []string{session.WebhookEventStarted}},
		{Name: "promo", Events: []string{session.WebhookPromoted}},
	})
	require.NoError(t, err)
	os.SetOutbox(r)

	cfg := GateConfig(gateName, 1)
	held := cfg
	held.Mode = session.ModeQueueAll
	h.join(cfg, "admitted")
	ev := suiteEvent("drop", Epoch)
	_, err = h.store.SaveEvent(h.ctx, ev)
	require.NoError(t, err)
	_, _, err = h.store.AdvanceEvent(h.ctx, gateName, "drop", Epoch)
	require.NoError(t, err)
	for i := range 3 {
		h.join(held, fmt.Sprintf("p%d", i))
	}
	_, changed, err := h.store.AdvanceEvent(h.ctx, gateName, "drop", ev.StartsAt)
	require.NoError(t, err)
	require.True(t, changed)
	_, changed, err = h.store.AdvanceEvent(h.ctx, gateName, "drop", ev.StartsAt.Add(time.Minute))
	require.NoError(t, err)
	require.False(t, changed)

	rows, err := os.ClaimOutbox(h.ctx, session.OutboxTargets{}, ev.StartsAt.Add(time.Hour), time.Minute, 10)
	require.NoError(t, err)
	require.Len(t, rows, 1, "one event.started row, for the one target that wants it")
	assert.Equal(t, "launches", rows[0].Target)
	assert.Equal(t, session.WebhookEventStarted, rows[0].Event)
	var d session.EventStartedData
	require.NoError(t, json.Unmarshal(rows[0].Payload, &d))
	assert.Equal(t, "drop", d.Event)
	assert.Equal(t, gateName, d.Gate)
	assert.Equal(t, int64(3), d.PrequeueSize)
	assert.True(t, ev.StartsAt.Equal(d.StartedAt), "startedAt %v, want %v", d.StartedAt, ev.StartsAt)
}
