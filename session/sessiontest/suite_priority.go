package sessiontest

import (
	"errors"
	"math/rand"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
)

// Priority codes and the priority lane (issue 13), on every Store.

func testPriority(t *testing.T, open Opener) {
	t.Run("Codes", func(t *testing.T) { testPriorityCodes(t, open) })
	t.Run("Lane", func(t *testing.T) { testPriorityLane(t, open) })
	t.Run("AdmittedUsesNothing", func(t *testing.T) { testPriorityAdmitted(t, open) })
	t.Run("ConcurrentUses", func(t *testing.T) { testPriorityConcurrent(t, open) })
	t.Run("PlacesNeverRise", func(t *testing.T) { testPriorityPlaces(t, open) })
	t.Run("ActiveAboveTheLine", func(t *testing.T) { testPriorityActiveAboveTheLine(t, open) })
}

func codeStore(tb testing.TB, s session.Store) session.CodeStore {
	tb.Helper()
	cs, ok := s.(session.CodeStore)
	require.True(tb, ok, "%T does not implement session.CodeStore", s)
	return cs
}

func newCode(tb testing.TB, h *harness, code string, uses int64, ttl time.Duration) session.PriorityCode {
	tb.Helper()
	c, err := session.NewPriorityCode(gateName, code, "label "+code, uses, h.clock.Now().Add(ttl), h.clock.Now())
	require.NoError(tb, err)
	require.NoError(tb, codeStore(tb, h.store).CreateCode(h.ctx, c))
	return c
}

func (h *harness) joinCode(cfg session.GateConfig, id, code string) (session.Session, error) {
	h.tb.Helper()
	s, codeErr, err := codeStore(h.tb, h.store).JoinWithCode(h.ctx, cfg, id, code, h.clock.Now())
	require.NoError(h.tb, err, "join %s with a code", id)
	return s, codeErr
}

func testPriorityCodes(t *testing.T, open Opener) {
	h := newHarness(t, open)
	cs := codeStore(t, h.store)
	a := newCode(t, h, "alpha-123", 3, time.Hour)
	h.clock.Advance(time.Second)
	b := newCode(t, h, "bravo_4567", 1, 24*time.Hour)

	err := cs.CreateCode(h.ctx, a)
	require.ErrorIs(t, err, session.ErrCodeExists)
	list, err := cs.ListCodes(h.ctx, gateName)
	require.NoError(t, err)
	require.Len(t, list, 2)
	assert.Equal(t, b.ID, list[0].ID, "newest first")
	assert.Equal(t, "brav", list[0].Hint)
	assert.Equal(t, "label bravo_4567", list[0].Label)
	assert.Equal(t, int64(1), list[0].MaxUses)
	assert.True(t, b.ExpiresAt.Equal(list[0].ExpiresAt), "expiry %v, want %v", list[0].ExpiresAt, b.ExpiresAt)
	other, err := cs.ListCodes(h.ctx, "other")
	require.NoError(t, err)
	assert.Empty(t, other, "codes belong to their gate")

	// Codes survive a restart.
	h.reopen()
	cs = codeStore(t, h.store)
	list, err = cs.ListCodes(h.ctx, gateName)
	require.NoError(t, err)
	require.Len(t, list, 2)

	require.NoError(t, cs.DeleteCode(h.ctx, gateName, a.ID))
	require.ErrorIs(t, cs.DeleteCode(h.ctx, gateName, a.ID), session.ErrCodeUnknown)
	list, err = cs.ListCodes(h.ctx, gateName)
	require.NoError(t, err)
	require.Len(t, list, 1)

	// A deleted code is unknown to a join.
	cfg := GateConfig(gateName, 0)
	s, codeErr := h.joinCode(cfg, "x1", "alpha-123")
	require.ErrorIs(t, codeErr, session.ErrCodeUnknown)
	assert.Equal(t, session.LaneNormal, s.Lane)
	assert.Equal(t, session.StatusWaiting, s.Status)
}

func testPriorityLane(t *testing.T, open Opener) {
	h := newHarness(t, open)
	cfg := GateConfig(gateName, 1)
	newCode(t, h, "vip-two-uses", 2, time.Hour)
	newCode(t, h, "soon-expired", 5, time.Minute)

	h.join(cfg, "a") // active
	h.join(cfg, "n1")
	h.join(cfg, "n2")
	p1, codeErr := h.joinCode(cfg, "p1", "vip-two-uses")
	require.NoError(t, codeErr)
	assert.Equal(t, session.LanePriority, p1.Lane)
	assert.Equal(t, session.StatusWaiting, p1.Status)
	p2, codeErr := h.joinCode(cfg, "p2", "vip-two-uses")
	require.NoError(t, codeErr)
	assert.Equal(t, session.LanePriority, p2.Lane)
	n3, codeErr := h.joinCode(cfg, "n3", "vip-two-uses")
	require.ErrorIs(t, codeErr, session.ErrCodeUsed, "used up")
	assert.Equal(t, session.LaneNormal, n3.Lane, "the join still happens, without priority")
	n4, codeErr := h.joinCode(cfg, "n4", "no-such-code")
	require.ErrorIs(t, codeErr, session.ErrCodeUnknown)
	assert.Equal(t, session.StatusWaiting, n4.Status)
	h.clock.Advance(time.Minute)
	n5, codeErr := h.joinCode(cfg, "n5", "soon-expired")
	require.ErrorIs(t, codeErr, session.ErrCodeUsed, "expired")
	assert.Equal(t, session.LaneNormal, n5.Lane)
	// A session that exists keeps its lane, uses nothing and hears nothing
	// of the code (a page resending the code it used on every reload).
	again, codeErr := h.joinCode(cfg, "n1", "vip-two-uses")
	require.NoError(t, codeErr)
	assert.Equal(t, session.LaneNormal, again.Lane)
	again, codeErr = h.joinCode(cfg, "p1", "vip-two-uses")
	require.NoError(t, codeErr, "p1 reloads with the code it used up")
	assert.Equal(t, session.LanePriority, again.Lane)

	assert.Equal(t, session.LanePriority, h.mustGet(gateName, "p1").Lane, "Get reads the lane")
	snap := h.snapshot(gateName)
	assert.Equal(t, []int64{p1.Position, p2.Position}, snap.PriorityWaiting)
	assert.Len(t, snap.Waiting, 7)

	// Promotions: the priority lane first, in position order, then the
	// normal lane.
	var order []string
	for _, id := range []string{"a", "p1", "p2", "n1", "n2"} {
		mark := h.mark()
		h.release(cfg, id)
		evs := h.eventsSince(mark)
		for _, e := range evs {
			if e.Kind == session.EventPromoted {
				order = append(order, e.Session.ID)
				assert.Equal(t, e.Session.ID[0] == 'p', e.Session.Lane == session.LanePriority, "event lane of %s", e.Session.ID)
			}
		}
	}
	assert.Equal(t, []string{"p1", "p2", "n1", "n2", "n3"}, order)

	// Positions stay unique and are never reused.
	rows := h.rows(gateName, []string{"n3", "n4", "n5"})
	seen := map[int64]bool{}
	for _, r := range rows {
		require.False(t, seen[r.Position], "position %d twice", r.Position)
		seen[r.Position] = true
		assert.Greater(t, r.Position, p2.Position-5)
	}
	next := h.join(cfg, "late")
	assert.Greater(t, next.Position, n5.Position)
}

func testPriorityAdmitted(t *testing.T, open Opener) {
	h := newHarness(t, open)
	cfg := GateConfig(gateName, 2)
	c := newCode(t, h, "only-if-waiting", 1, time.Hour)
	s, codeErr := h.joinCode(cfg, "a", "only-if-waiting")
	require.NoError(t, codeErr)
	assert.Equal(t, session.StatusActive, s.Status, "a free slot admits at once")
	list, err := codeStore(t, h.store).ListCodes(h.ctx, gateName)
	require.NoError(t, err)
	require.Len(t, list, 1)
	assert.Equal(t, c.ID, list[0].ID)
	assert.Equal(t, int64(0), list[0].Used, "a code is used only when it puts a waiter in the priority lane")
}

func testPriorityConcurrent(t *testing.T, open Opener) {
	h := newHarness(t, open)
	cfg := GateConfig(gateName, 0) // everybody waits
	newCode(t, h, "one-single-use", 1, time.Hour)
	cs := codeStore(t, h.store)
	const n = 50
	var wg sync.WaitGroup
	var mu sync.Mutex
	var ok, used int
	var priority []string
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			s, codeErr, err := cs.JoinWithCode(h.ctx, cfg, idOf("c", i), "one-single-use", h.clock.Now())
			mu.Lock()
			defer mu.Unlock()
			if !assert.NoError(t, err) {
				return
			}
			switch {
			case codeErr == nil:
				ok++
			case errors.Is(codeErr, session.ErrCodeUsed):
				used++
			default:
				t.Errorf("code error %v", codeErr)
			}
			if s.Lane == session.LanePriority {
				priority = append(priority, s.ID)
			}
		}(i)
	}
	wg.Wait()
	assert.Equal(t, 1, ok, "exactly one join gets priority")
	assert.Equal(t, n-1, used)
	assert.Len(t, priority, 1)
	list, err := cs.ListCodes(h.ctx, gateName)
	require.NoError(t, err)
	require.Len(t, list, 1)
	assert.Equal(t, int64(1), list[0].Used)
	snap := h.snapshot(gateName)
	assert.Len(t, snap.PriorityWaiting, 1)
	assert.Equal(t, int64(n), snap.State.Waiting)
}

// testPriorityPlaces runs random joins (some with codes), releases and
// updates through a Waitlist and checks, after every step, CrowdHandler's
// rule: no waiter of the normal lane ever sees its place rise; each lane's
// exact place agrees with the view's estimate; and promotions follow the
// lanes. Memory survives a restart.
func testPriorityPlaces(t *testing.T, open Opener) {
	h := newHarness(t, open)
	cfg := GateConfig(gateName, 3)
	newCode(t, h, "many-uses-code", 1000, time.Hour)
	w := h.waitlist(cfg)
	rng := rand.New(rand.NewSource(13))
	last := map[string]int64{} // normal waiters' last place
	lane := map[string]session.Lane{}
	var ids []string
	check := func(step int) {
		g, err := w.Global(gateName)
		require.NoError(t, err)
		var prioWaiting int64
		if g.Priority != nil {
			prioWaiting = g.Priority.Waiting
		}
		var normal, prio []int64
		for _, id := range ids {
			v, err := w.Status(h.ctx, gateName, id)
			if errors.Is(err, session.ErrNotFound) {
				delete(last, id)
				continue
			}
			require.NoError(t, err)
			if v.Status != session.StatusWaiting {
				if _, waited := last[id]; waited && lane[id] == session.LaneNormal {
					assert.Zero(t, prioWaiting, "step %d: %s promoted while the priority lane waits", step, id)
				}
				delete(last, id)
				continue
			}
			if lane[id] == session.LanePriority {
				prio = append(prio, v.Position)
				assert.Equal(t, "priority", v.Lane)
				assert.Equal(t, int64(len(prio)), v.Place, "step %d: place of %s in the priority lane", step, id)
				continue
			}
			normal = append(normal, v.Position)
			assert.Equal(t, "", v.Lane)
			assert.Equal(t, int64(len(normal)), v.Place, "step %d: place of %s in the normal lane", step, id)
			if p, ok := last[id]; ok {
				assert.LessOrEqual(t, v.Place, p, "step %d: the place of %s rose", step, id)
			}
			last[id] = v.Place
		}
		assert.Equal(t, int64(len(normal)), g.Waiting, "step %d: the view's waiting is the normal lane's", step)
		assert.Equal(t, int64(len(prio)), prioWaiting, "step %d: the priority lane's waiting", step)
		requireBuckets(t, g, normal)
		if g.Priority != nil {
			pv := session.GlobalView{FirstWaitingPosition: g.Priority.FirstWaitingPosition, LastWaitingPosition: g.Priority.LastWaitingPosition,
				Waiting: g.Priority.Waiting, Buckets: g.Priority.Buckets}
			requireBuckets(t, pv, prio)
			for _, p := range prio {
				assert.Equal(t, pv.EstimatePlace(p), g.EstimatePlaceIn(session.LanePriority, p))
			}
		}
	}
	for step := 0; step < 120; step++ {
		switch r := rng.Intn(10); {
		case r < 4:
			id := idOf("n", step)
			_, err := w.Join(h.ctx, gateName, id)
			require.NoError(t, err)
			ids, lane[id] = append(ids, id), session.LaneNormal
		case r < 6:
			id := idOf("p", step)
			v, codeErr, err := w.JoinWithCode(h.ctx, gateName, id, "many-uses-code")
			require.NoError(t, err)
			require.NoError(t, codeErr)
			ids, lane[id] = append(ids, id), session.LaneNormal
			if v.Status == session.StatusWaiting {
				lane[id] = session.LanePriority
				assert.Equal(t, "priority", v.Lane)
			}
		case r < 9 && len(ids) > 0:
			require.NoError(t, w.Release(h.ctx, gateName, ids[rng.Intn(len(ids))]))
		default:
			h.clock.Advance(time.Second)
			_, err := w.Update(h.ctx)
			require.NoError(t, err)
		}
		check(step)
	}
	before, err := w.Global(gateName)
	require.NoError(t, err)
	require.NoError(t, w.Close())
	h.reopen()
	w = h.waitlist(cfg)
	after, err := w.Global(gateName)
	require.NoError(t, err)
	assert.Equal(t, withoutRate(before), withoutRate(after), "both lanes survive a restart")
	check(-1)
}

// testPriorityActiveAboveTheLine checks that an active session of the
// priority lane, promoted ahead of normal waiters with lower positions, is
// among the active sessions Load returns after a restart: the active set is
// not only what lies below the first waiting position.
func testPriorityActiveAboveTheLine(t *testing.T, open Opener) {
	h := newHarness(t, open)
	cfg := GateConfig(gateName, 1)
	newCode(t, h, "vip-above-the-line", 1, time.Hour)
	h.join(cfg, "first")
	h.join(cfg, "n1")
	h.join(cfg, "n2")
	vip, codeErr := h.joinCode(cfg, "vip", "vip-above-the-line")
	require.NoError(t, codeErr)
	require.Equal(t, session.LanePriority, vip.Lane)
	h.release(cfg, "first") // the priority lane goes first
	got, ok := h.get(gateName, "vip")
	require.True(t, ok)
	require.Equal(t, session.StatusActive, got.Status)
	n1, _ := h.get(gateName, "n1")
	require.Less(t, n1.Position, got.Position, "promoted above a waiter of the normal lane")

	h.reopen()
	snaps, err := h.store.Load(h.ctx, []string{gateName})
	require.NoError(t, err)
	var ids []string
	for _, s := range snaps[gateName].Active {
		ids = append(ids, s.ID)
	}
	assert.Equal(t, []string{"vip"}, ids, "the active set after a restart")
	assert.Equal(t, int64(1), snaps[gateName].State.Active)
}
