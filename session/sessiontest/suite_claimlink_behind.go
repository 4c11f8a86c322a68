package sessiontest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
)

// lagStore hands a Waitlist the harness's Store with a commit listener
// that can fall behind, as an instance of a shared Store does while it has
// not yet applied another instance's commit: held commits reach the
// Waitlist when the next commit comes, before it (the Store applies what it
// missed before its own commit, as the Postgres store's catch-up does). It
// counts the Waitlist's ClaimLink calls.
type lagStore struct {
	session.Store
	h *harness

	mu      sync.Mutex
	next    func(session.Commit)
	holding bool
	catchUp bool // the next commit delivers the held ones first
	held    []session.Commit
	claims  int
	// deadlines holds, per session, the claim deadline of the promotion
	// the commits delivered to the Waitlist left it in (absent: not active).
	deadlines map[string]time.Time
}

func (l *lagStore) SetCommitListener(fn func(session.Commit)) {
	l.mu.Lock()
	l.next = fn
	l.mu.Unlock()
	l.Store.SetCommitListener(l.record)
}

func (l *lagStore) record(c session.Commit) {
	l.h.record(c)
	l.mu.Lock()
	if l.holding && !l.catchUp {
		l.held = append(l.held, c)
		l.mu.Unlock()
		return
	}
	deliver := append(l.held, c)
	l.held, l.holding, l.catchUp = nil, false, false
	next := l.next
	if l.deadlines == nil {
		l.deadlines = map[string]time.Time{}
	}
	for _, c := range deliver {
		for _, ev := range c.Events {
			switch ev.Kind {
			case session.EventActivated, session.EventPromoted:
				l.deadlines[ev.Session.ID] = ev.Session.ClaimDeadline
			case session.EventDeactivated:
				delete(l.deadlines, ev.Session.ID)
			}
		}
	}
	l.mu.Unlock()
	for _, c := range deliver {
		next(c)
	}
}

// delivered returns the claim deadline of the promotion of id that the
// Waitlist was given, and whether it was given one: a probe of memory that,
// unlike a validation, claims nothing.
func (l *lagStore) delivered(id string) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	d, ok := l.deadlines[id]
	return d, ok
}

// hold makes the Waitlist fall behind from now on.
func (l *lagStore) hold() { l.mu.Lock(); l.holding = true; l.mu.Unlock() }

// catchUpOnNext lets the next commit bring the Waitlist up to date.
func (l *lagStore) catchUpOnNext() { l.mu.Lock(); l.catchUp = true; l.mu.Unlock() }

func (l *lagStore) ClaimLink(ctx context.Context, gate, id string, deadline, now time.Time) (session.Session, error) {
	l.mu.Lock()
	l.claims++
	l.mu.Unlock()
	return l.Store.ClaimLink(ctx, gate, id, deadline, now)
}

func (l *lagStore) claimCalls() int { l.mu.Lock(); defer l.mu.Unlock(); return l.claims }

// testClaimLinkMemoryBehind checks Waitlist.ClaimLink when memory has not
// applied the newest promotion of the session (an instance of a shared
// Store following another's commits): the link asks the Store instead of
// being refused, claims the slot once, and a visit again is refused without
// asking the Store; a stale link (an earlier promotion's) is refused by the
// Store, whether memory holds no promotion of the session or still holds
// the stale one unclaimed, and a visit again does not reach the Store; a
// link at its deadline by the Waitlist's clock is refused without asking
// the Store, a nanosecond before it claims.
func testClaimLinkMemoryBehind(t *testing.T, open Opener) {
	h := newHarness(t, open)
	cfg := notifyConfig(1)
	lag, w := h.lagging(cfg)
	claims := func(mark int) int {
		n := 0
		for _, ev := range h.eventsSince(mark) {
			if ev.Claimed && ev.Session.ID == "b" {
				n++
			}
		}
		return n
	}
	// promote makes b (called back) wait behind holder and promotes it;
	// with lagging, memory does not apply the promotion.
	promote := func(holder string, lagging bool) session.Session {
		t.Helper()
		h.join(cfg, holder)
		h.join(cfg, "b")
		h.setNotify(cfg, "b", true)
		h.clock.Advance(time.Millisecond)
		if lagging {
			lag.hold()
		}
		h.release(cfg, holder)
		b := h.mustGet(gateName, "b")
		require.Equal(t, session.StatusActive, b.Status)
		require.False(t, b.ClaimDeadline.IsZero(), "promoted, unclaimed")
		return b
	}

	// A first promotion of b, which memory applies; b ends unclaimed.
	first := promote("a", false)
	assertDelivered(t, lag, first.ClaimDeadline, "memory applied the first promotion")
	h.clock.Advance(time.Millisecond)
	h.release(cfg, "b")

	// b joins again and is promoted while memory lags: it knows neither.
	second := promote("c", true)
	require.ErrorIs(t, w.ValidateSessionIsActive(gateName, "b"), session.ErrNotActive, "memory has not applied the promotion")
	require.True(t, h.clock.Now().Before(first.ClaimDeadline), "the first link has not expired")
	mark := h.mark()
	calls := lag.claimCalls()
	assert.ErrorIs(t, w.ClaimLink(h.ctx, gateName, "b", first.ClaimDeadline), session.ErrNotActive, "a stale link")
	assert.Equal(t, calls+1, lag.claimCalls(), "memory could not tell: the store refused it")
	assert.ErrorIs(t, w.ClaimLink(h.ctx, gateName, "b", first.ClaimDeadline), session.ErrNotActive, "the stale link again")
	assert.Equal(t, calls+1, lag.claimCalls(), "refused again without asking the store")
	assert.Zero(t, claims(mark), "nothing claimed")
	assertTime(t, second.ClaimDeadline, h.mustGet(gateName, "b").ClaimDeadline, "still unclaimed")

	lag.catchUpOnNext()
	require.NoError(t, w.ClaimLink(h.ctx, gateName, "b", second.ClaimDeadline), "memory behind: the store decides, and the link claims")
	assert.Equal(t, 1, claims(mark), "one claim")
	assert.True(t, h.mustGet(gateName, "b").ClaimDeadline.IsZero(), "claimed as stored")
	require.NoError(t, w.ValidateSessionIsActive(gateName, "b"), "memory caught up")
	calls = lag.claimCalls()
	assert.ErrorIs(t, w.ClaimLink(h.ctx, gateName, "b", second.ClaimDeadline), session.ErrNotActive, "a second visit")
	assert.Equal(t, calls, lag.claimCalls(), "a second visit on this instance does not reach the store")

	// A third promotion, which memory applies and holds unclaimed; then,
	// while memory lags, b's slot passes to f and b is promoted a fourth
	// time: the promotion memory holds is the stale one.
	h.clock.Advance(time.Millisecond)
	h.release(cfg, "b")
	third := promote("g", false)
	h.join(cfg, "f") // f waits
	assertDelivered(t, lag, third.ClaimDeadline, "memory holds the third promotion")
	lag.hold()
	h.clock.Advance(time.Millisecond)
	h.release(cfg, "b") // f is promoted
	fourth := promote("f", true)
	require.False(t, fourth.ClaimDeadline.Equal(third.ClaimDeadline))
	assertDelivered(t, lag, third.ClaimDeadline, "memory still holds the third promotion")
	mark = h.mark()
	calls = lag.claimCalls()
	assert.ErrorIs(t, w.ClaimLink(h.ctx, gateName, "b", third.ClaimDeadline), session.ErrNotActive,
		"the promotion memory holds is no longer the store's")
	assert.Equal(t, calls+1, lag.claimCalls(), "the store refused it")
	assert.Zero(t, claims(mark), "nothing claimed")

	// At the deadline's edge: at it, the link is refused without asking
	// the store; a nanosecond before, it claims.
	h.clock.Set(fourth.ClaimDeadline)
	calls = lag.claimCalls()
	assert.ErrorIs(t, w.ClaimLink(h.ctx, gateName, "b", fourth.ClaimDeadline), session.ErrNotActive, "at its deadline")
	assert.Equal(t, calls, lag.claimCalls(), "an expired link does not reach the store")
	h.clock.Set(fourth.ClaimDeadline.Add(-time.Nanosecond))
	lag.catchUpOnNext()
	require.NoError(t, w.ClaimLink(h.ctx, gateName, "b", fourth.ClaimDeadline), "the fourth promotion's link claims it")
	assert.Equal(t, 1, claims(mark), "one claim")
	assert.True(t, h.mustGet(gateName, "b").ClaimDeadline.IsZero(), "claimed as stored")
}

// testClaimWindowInViews checks SessionView.ClaimWindow: a waiter's view
// carries the window it gets once promoted (the claim timeout, or the
// notify claim timeout for a called-back session), so is a promoted,
// unclaimed session's (beside its deadline); a claimed slot's view and a
// gate without a claim window carry none.
func testClaimWindowInViews(t *testing.T, open Opener) {
	h := newHarness(t, open)
	cfg := claimConfig(1)
	cfg.NotifyClaimTimeout = 90 * time.Second
	plain := GateConfig("plain", 1)
	w := h.waitlist(cfg, plain)
	ctx := h.ctx
	_, err := w.Join(ctx, gateName, "a")
	require.NoError(t, err)
	v, err := w.Join(ctx, gateName, "b")
	require.NoError(t, err)
	require.Equal(t, session.StatusWaiting, v.Status)
	assert.Equal(t, 60.0, v.ClaimWindow, "a waiter: the claim timeout")
	_, err = w.Join(ctx, gateName, "c")
	require.NoError(t, err)
	h.setNotify(cfg, "c", true)
	v, err = w.Status(ctx, gateName, "c")
	require.NoError(t, err)
	assert.Equal(t, 90.0, v.ClaimWindow, "a called-back waiter: the notify claim timeout")

	h.clock.Advance(time.Second)
	require.NoError(t, w.Release(ctx, gateName, "a"))
	v, err = w.Join(ctx, gateName, "b") // a join of b: a sign of life that claims
	require.NoError(t, err)
	assert.Equal(t, session.StatusActive, v.Status)
	assert.Nil(t, v.ClaimDeadline)
	assert.Zero(t, v.ClaimWindow, "claimed: no window")

	h.clock.Advance(time.Second)
	require.NoError(t, w.Release(ctx, gateName, "b"))
	v, err = w.Join(ctx, gateName, "c") // called back: the join leaves the claim to the link
	require.NoError(t, err)
	require.Equal(t, session.StatusActive, v.Status)
	require.NotNil(t, v.ClaimDeadline, "promoted, unclaimed")
	assert.Equal(t, 90.0, v.ClaimWindow, "promoted, unclaimed: its window beside its deadline")

	_, err = w.Join(ctx, "plain", "x")
	require.NoError(t, err)
	v, err = w.Join(ctx, "plain", "y")
	require.NoError(t, err)
	require.Equal(t, session.StatusWaiting, v.Status)
	assert.Zero(t, v.ClaimWindow, "a gate without a claim window")
}

// assertDelivered checks that the promotion of b that memory holds is the
// one of deadline, without claiming it (a validation would: it is a sign
// of life of a promoted session).
func assertDelivered(t *testing.T, lag *lagStore, deadline time.Time, msg string) {
	t.Helper()
	got, ok := lag.delivered("b")
	require.True(t, ok, msg)
	require.True(t, got.Equal(deadline), "%s: memory holds the promotion of %v, want %v", msg, got, deadline)
}

// lagging is a Waitlist of gate cfg on the harness's store behind a
// lagStore (closed at the end of the test), without background flushes.
func (h *harness) lagging(cfg session.GateConfig) (*lagStore, *session.Waitlist) {
	h.tb.Helper()
	lag := &lagStore{Store: h.store, h: h}
	w, err := session.New(h.ctx, lag, []session.GateConfig{cfg}, session.Options{Clock: h.clock, TouchInterval: -1, SweepInterval: -1})
	require.NoError(h.tb, err)
	h.tb.Cleanup(func() { _ = w.Close() })
	return lag, w
}
