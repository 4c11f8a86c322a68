package sessiontest

import (
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
)

func idOf(prefix string, i int) string { return fmt.Sprintf("%s%03d", prefix, i) }

func testCommitListener(t *testing.T, open Opener) {
	h := newHarness(t, open)
	cfg := GateConfig(gateName, 1)
	mark := h.mark()
	h.join(cfg, "a")
	h.join(cfg, "b")
	h.clock.Advance(time.Second)
	h.leave(cfg, "a")
	h.leave(cfg, "b")
	h.join(cfg, "c")
	h.release(cfg, "a") // b, first in line, takes the slot at once
	h.join(cfg, "d")
	h.leave(cfg, "c")
	h.clock.Advance(cfg.WaitingTimeout + time.Nanosecond)
	h.seen("d")
	h.update(cfg, 0) // c purged, d stays: it is present
	h.clock.Advance(cfg.ActiveTimeout)
	h.seen("d")
	h.update(cfg, 0) // b stale: purged, d promoted
	assert.Equal(t, []string{
		"activated:a", "queued:b", "refreshed:a", "left:a", "left:b", "queued:c", "deactivated:a", "promoted:b",
		"queued:d", "left:c", "dequeued:c", "deactivated:b", "promoted:d",
	}, kinds(h.eventsSince(mark)))
	commits := h.commitsSince(mark)
	require.NotEmpty(t, commits)
	// Every commit's gate state is the state as of that commit: the last one
	// matches the store now, and NextPosition never goes back.
	var next int64
	for _, c := range commits {
		if st, ok := c.Gates[gateName]; ok {
			assert.GreaterOrEqual(t, st.NextPosition, next)
			next = st.NextPosition
		}
	}
	last := commits[len(commits)-1]
	require.Contains(t, last.Gates, gateName)
	assert.Equal(t, h.state(gateName), last.Gates[gateName])
}

// testListenerBeforeAnswer checks that a caller is answered only after the
// listener returned from the commit of its operation.
func testListenerBeforeAnswer(t *testing.T, open Opener) {
	h := newHarness(t, open)
	cfg := GateConfig(gateName, 1)
	entered, unblock := make(chan struct{}), make(chan struct{})
	var once sync.Once
	h.store.SetCommitListener(func(c session.Commit) {
		for _, e := range c.Events {
			if e.Session.ID == "slow" {
				once.Do(func() { close(entered) })
				<-unblock
			}
		}
	})
	release := sync.OnceFunc(func() { close(unblock) })
	defer release() // never leave the writer parked, even on failure
	done := make(chan error, 1)
	go func() {
		_, err := h.store.Join(h.ctx, cfg, "slow", h.clock.Now())
		done <- err
	}()
	select {
	case <-entered:
	case err := <-done:
		t.Fatalf("Join answered (err %v) before the listener was called", err)
	}
	select {
	case err := <-done:
		t.Fatalf("Join answered (err %v) while the listener was still running", err)
	case <-time.After(50 * time.Millisecond):
	}
	release()
	require.NoError(t, <-done)
}

func testCommitListenerConcurrent(t *testing.T, open Opener) {
	h := newHarness(t, open)
	cfg := GateConfig(gateName, 50)
	var (
		inflight atomic.Int32
		overlap  atomic.Bool
		mu       sync.Mutex
		seen     = map[string]bool{}
		order    []int64 // positions of activations, in listener order
	)
	h.store.SetCommitListener(func(c session.Commit) {
		if inflight.Add(1) != 1 {
			overlap.Store(true)
		}
		mu.Lock()
		for _, e := range c.Events {
			seen[e.Session.ID] = true
			if e.Kind == session.EventActivated {
				order = append(order, e.Session.Position)
			}
		}
		mu.Unlock()
		inflight.Add(-1)
	})
	const n = 200
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Go(func() {
			id := idOf("c", i)
			s, err := h.store.Join(h.ctx, cfg, id, h.clock.Now())
			if err != nil {
				errs <- err
				return
			}
			if s.Status == session.StatusActive {
				mu.Lock()
				ok := seen[id]
				mu.Unlock()
				if !ok {
					errs <- fmt.Errorf("join of %s answered before the listener saw its commit", id)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	assert.False(t, overlap.Load(), "the listener was called concurrently")
	assert.Len(t, order, 50)
	assert.True(t, sort.SliceIsSorted(order, func(i, j int) bool { return order[i] < order[j] }),
		"activations reported out of commit order: %v", order)
}

func testConcurrentJoins(t *testing.T, open Opener) {
	h := newHarness(t, open)
	cfg := GateConfig(gateName, 50)
	w := h.waitlist(cfg)
	const n = 1000
	views := make([]session.SessionView, n)
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := 0; i < n; i++ {
		wg.Go(func() {
			views[i], errs[i] = w.Join(h.ctx, gateName, idOf("j", i))
		})
	}
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "join %d", i)
	}
	positions := make(map[int64]string, n)
	var active int
	for i, v := range views {
		id := idOf("j", i)
		if other, dup := positions[v.Position]; dup {
			t.Fatalf("position %d given to %s and %s", v.Position, other, id)
		}
		positions[v.Position] = id
		if v.Status == session.StatusActive {
			active++
			assert.LessOrEqual(t, v.Position, int64(50), "no queue jumping: the first 50 joins got the slots")
			assert.NoError(t, w.ValidateSessionIsActive(gateName, id))
		} else {
			assert.ErrorIs(t, w.ValidateSessionIsActive(gateName, id), session.ErrNotActive)
		}
	}
	assert.Equal(t, 50, active)
	for p := int64(1); p <= n; p++ {
		assert.Contains(t, positions, p, "positions are contiguous")
	}
	st := h.state(gateName)
	requireState(t, session.Counters{NextPosition: n + 1, Active: 50, Waiting: n - 50}, 51, n, st)
	g, err := w.Global(gateName)
	require.NoError(t, err)
	assert.Equal(t, session.GlobalView{Gate: gateName, FirstWaitingPosition: 51, LastWaitingPosition: n, Waiting: n - 50, Active: 50, Limit: 50}, withoutBuckets(g))
	var waiters []int64
	for p := int64(51); p <= n; p++ {
		waiters = append(waiters, p)
	}
	requireBuckets(t, g, waiters)
	if _, ok := h.store.(Inspector); ok {
		rows := h.rows(gateName, nil)
		require.Len(t, rows, n)
		a, wt := counted(rows)
		assert.Equal(t, int64(50), a)
		assert.Equal(t, int64(n-50), wt)
	}
}

func testGroupCommit(t *testing.T, open Opener) {
	h := newHarness(t, open)
	tc, ok := h.store.(TransactionCounter)
	if !ok {
		t.Skip("the Store does not count its transactions (sessiontest.TransactionCounter)")
	}
	cfg := GateConfig(gateName, 100)
	h.join(cfg, "warm-up")
	before := tc.Transactions()
	const n = 500
	var wg sync.WaitGroup
	var failed atomic.Int32
	start := make(chan struct{})
	for i := 0; i < n; i++ {
		wg.Go(func() {
			<-start
			id := idOf("g", i)
			var err error
			switch i % 4 {
			case 0, 1:
				_, err = h.store.Join(h.ctx, cfg, id, h.clock.Now())
			case 2:
				_, err = h.store.Join(h.ctx, cfg, id, h.clock.Now())
				if err == nil {
					_, err = h.store.Leave(h.ctx, cfg, id, h.clock.Now())
				}
			case 3:
				_, err = h.store.Join(h.ctx, cfg, id, h.clock.Now())
				if err == nil {
					_, err = h.store.Release(h.ctx, cfg, id, h.clock.Now())
				}
			}
			if err != nil {
				failed.Add(1)
				t.Error(err)
			}
		})
	}
	close(start)
	wg.Wait()
	require.Zero(t, failed.Load())
	ops := int64(n + n/2)
	txs := tc.Transactions() - before
	t.Logf("%d operations in %d transactions", ops, txs)
	assert.Less(t, txs, ops, "operations were not batched")
	st := h.state(gateName)
	// 1 + 500 joined, 125 released.
	assert.Equal(t, int64(n+2), st.NextPosition)
	assert.Equal(t, int64(n+1-n/4), st.Active+st.Waiting)
	if _, ok := h.store.(Inspector); ok {
		a, w := counted(h.rows(gateName, nil))
		assert.Equal(t, st.Active, a)
		assert.Equal(t, st.Waiting, w)
	}
}

func testRestart(t *testing.T, open Opener) {
	h := newHarness(t, open)
	cfgs := []session.GateConfig{GateConfig("a", 2), GateConfig("b", 1)}
	var ids []string
	for i := 0; i < 6; i++ {
		ids = append(ids, idOf("r", i))
	}
	for _, cfg := range cfgs {
		for _, id := range ids {
			h.join(cfg, id)
			h.clock.Advance(time.Second)
		}
		h.leave(cfg, ids[4])
		h.release(cfg, ids[0])
		h.release(cfg, ids[5])
		h.clock.Advance(time.Second)
	}
	type gateDump struct {
		snap session.GateSnapshot
		rows []session.Session
	}
	dump := func() map[string]gateDump {
		out := map[string]gateDump{}
		for _, cfg := range cfgs {
			out[cfg.Name] = gateDump{snap: h.snapshot(cfg.Name), rows: h.rows(cfg.Name, ids)}
		}
		return out
	}
	before := dump()
	h.reopen()
	after := dump()
	for _, cfg := range cfgs {
		b, a := before[cfg.Name], after[cfg.Name]
		assert.Equal(t, b.snap.State, a.snap.State, "gate %s state", cfg.Name)
		require.Len(t, a.snap.Active, len(b.snap.Active))
		for i := range b.snap.Active {
			requireSession(t, b.snap.Active[i], a.snap.Active[i])
		}
		require.Len(t, a.rows, len(b.rows), "gate %s rows", cfg.Name)
		for i := range b.rows {
			requireSession(t, b.rows[i], a.rows[i])
		}
		act, wt := counted(a.rows)
		assert.Equal(t, session.Counters{NextPosition: 7, Active: act, Waiting: wt}, a.snap.State.Counters)
		assert.Equal(t, int64(7), h.join(cfg, "new").Position, "next_position survives the restart")
	}
}

func testWaitlist(t *testing.T, open Opener) {
	h := newHarness(t, open)
	cfg := GateConfig(gateName, 1)
	w := h.waitlist(cfg)
	a, err := w.Join(h.ctx, gateName, "a")
	require.NoError(t, err)
	assert.Equal(t, session.StatusActive, a.Status)
	b, err := w.Join(h.ctx, gateName, "b")
	require.NoError(t, err)
	assert.Equal(t, session.StatusWaiting, b.Status)
	assert.Equal(t, int64(1), b.Place)
	require.NoError(t, w.ValidateSessionIsActive(gateName, "a"))
	require.ErrorIs(t, w.ValidateSessionIsActive(gateName, "b"), session.ErrNotActive)

	st, err := w.Status(h.ctx, gateName, "b")
	require.NoError(t, err)
	assert.Equal(t, int64(2), st.Position)
	// b's socket stays open: a sign of life for as long as it is.
	disconnect, err := w.Connect(gateName, "b")
	require.NoError(t, err)
	defer disconnect()

	// A refresh in memory is persisted by the next update, before the purge.
	h.clock.Advance(cfg.ActiveTimeout)
	require.NoError(t, w.ValidateSessionAndRefreshLastActive(gateName, "a"))
	h.clock.Advance(time.Minute)
	reps, err := w.Update(h.ctx)
	require.NoError(t, err)
	require.Len(t, reps, 1)
	assert.Equal(t, session.UpdateReport{Gate: gateName}, zeroCounts(reps[0]))
	require.NoError(t, w.ValidateSessionIsActive(gateName, "a"))

	// Release hands the slot over; memory follows the commit.
	require.NoError(t, w.Release(h.ctx, gateName, "a"))
	require.ErrorIs(t, w.ValidateSessionIsActive(gateName, "a"), session.ErrNotActive)
	require.NoError(t, w.ValidateSessionIsActive(gateName, "b"))
	g, err := w.Global(gateName)
	require.NoError(t, err)
	assert.Equal(t, session.GlobalView{Gate: gateName, FirstWaitingPosition: 3, LastWaitingPosition: 2, Active: 1, Limit: 1}, withoutRate(g))
	assert.Zero(t, g.AdmittedPerMinute, "one promotion is no evidence for a rate")
}

func withoutRate(g session.GlobalView) session.GlobalView {
	g.AdmittedPerMinute = 0
	return g
}

func withoutBuckets(g session.GlobalView) session.GlobalView {
	g.Buckets = nil
	return g
}

// requireBuckets checks a view's summary of the line against the waiting
// positions (ascending): bounded, every bucket starting at a waiter, the
// counts adding up, and the place a client estimates from it exact at every
// bucket's start and within MinBucketSize elsewhere.
func requireBuckets(tb testing.TB, g session.GlobalView, waiters []int64) {
	tb.Helper()
	if len(waiters) == 0 {
		require.Empty(tb, g.Buckets)
		return
	}
	require.Zero(tb, len(g.Buckets)%2)
	require.LessOrEqual(tb, len(g.Buckets)/2, session.MaxBuckets)
	rank := make(map[int64]int64, len(waiters))
	for i, p := range waiters {
		rank[p] = int64(i) + 1
	}
	var sum int64
	for i := 0; i < len(g.Buckets); i += 2 {
		start := g.FirstWaitingPosition + g.Buckets[i]
		_, ok := rank[start]
		require.True(tb, ok, "bucket %d starts at %d, not a waiter", i/2, start)
		require.Equal(tb, sum+1, rank[start], "bucket %d: waiters ahead", i/2)
		sum += g.Buckets[i+1]
	}
	require.Equal(tb, g.Waiting, sum, "bucket counts add up to waiting")
	for _, p := range waiters {
		est := g.EstimatePlace(p)
		require.InDelta(tb, rank[p], est, session.MinBucketSize, "estimated place of position %d", p)
	}
}
