package session

import (
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type walkItem struct {
	walkSlot
	n int
}

func (w *walkItem) slot() *walkSlot { return &w.walkSlot }

// requireWalkSetConsistent checks that the map and the list name the same
// entries and that every entry knows its place.
func requireWalkSetConsistent(t *testing.T, s *walkSet[*walkItem]) {
	t.Helper()
	require.Len(t, s.list, len(s.m))
	for i, r := range s.list {
		require.Same(t, s.m[r.id], r.v, "place %d", i)
		require.Equal(t, i, r.v.i, "the entry at place %d knows its place", i)
	}
}

func TestWalkSetPutGetRemove(t *testing.T) {
	s := newWalkSet[*walkItem]()
	a, b, c := &walkItem{n: 1}, &walkItem{n: 2}, &walkItem{n: 3}
	s.put("a", a)
	s.put("b", b)
	s.put("c", c)
	requireWalkSetConsistent(t, &s)
	assert.Same(t, b, s.get("b"))
	assert.Nil(t, s.get("x"))

	b2 := &walkItem{n: 22}
	s.put("b", b2) // replaces in place
	requireWalkSetConsistent(t, &s)
	assert.Same(t, b2, s.get("b"))
	assert.Equal(t, 1, b2.i)

	s.remove("a") // c moves into a's place
	requireWalkSetConsistent(t, &s)
	assert.Nil(t, s.get("a"))
	assert.Equal(t, 0, c.i)

	s.remove("b") // the last: nothing moves
	s.remove("x") // absent: no-op
	requireWalkSetConsistent(t, &s)
	assert.Equal(t, 1, s.len())
}

// A walk over an unchanged set visits every entry once, step entries a
// call, and says where it ends.
func TestWalkSetWalksInSteps(t *testing.T) {
	for _, tc := range []struct{ n, step, calls int }{
		{0, 4, 1},
		{1, 4, 1},
		{4, 4, 1},
		{5, 4, 2},
		{1000, walkStep, 2},
		{1000, walkFromEnd, 1},
		{3, 0, 3}, // a step below 1 is 1
	} {
		t.Run(strconv.Itoa(tc.n)+"/"+strconv.Itoa(tc.step), func(t *testing.T) {
			s := newWalkSet[*walkItem]()
			for i := range tc.n {
				s.put(strconv.Itoa(i), &walkItem{n: i})
			}
			seen := map[string]int{}
			calls := 0
			for at := walkFromEnd; at > 0; calls++ {
				visits := 0
				at = s.walk(at, tc.step, func(id string, v *walkItem) {
					seen[id]++
					visits++
					assert.Equal(t, id, strconv.Itoa(v.n))
				})
				assert.LessOrEqual(t, visits, max(tc.step, 1), "one call visits at most step entries")
			}
			assert.Equal(t, tc.calls, calls)
			require.Len(t, seen, tc.n)
			for id, k := range seen {
				assert.Equal(t, 1, k, id)
			}
		})
	}
}

// Between the steps of a walk, entries come and go (and the walk's own
// callback removes some): every entry in the set for the whole walk is
// visited, none that never was in it is, and a second visit happens only
// after a removal.
func TestWalkSetVisitsEveryEntryThatStaysWhateverChanges(t *testing.T) {
	for seed := range uint64(200) {
		r := rand.New(rand.NewPCG(seed, 7))
		s := newWalkSet[*walkItem]()
		next := 0
		add := func() {
			s.put("s"+strconv.Itoa(next), &walkItem{n: next})
			next++
		}
		for range r.IntN(300) {
			add()
		}
		removedDuring := map[string]bool{}
		initial := map[string]bool{}
		for id := range s.m {
			initial[id] = true
		}
		step := 1 + r.IntN(40)
		seen := map[string]int{}
		for at := walkFromEnd; at > 0; {
			at = s.walk(at, step, func(id string, v *walkItem) {
				seen[id]++
				if r.IntN(8) == 0 { // the callback removes the entry it is given
					s.remove(id)
					removedDuring[id] = true
				}
			})
			requireWalkSetConsistent(t, &s)
			for range r.IntN(10) { // others change the set between steps
				switch {
				case r.IntN(2) == 0:
					add()
				case s.len() > 0:
					id := s.list[r.IntN(s.len())].id
					s.remove(id)
					removedDuring[id] = true
				}
			}
		}
		twice := false
		for id := range initial {
			if !removedDuring[id] {
				require.GreaterOrEqual(t, seen[id], 1, "seed %d: %s stayed but was not visited", seed, id)
			}
			twice = twice || seen[id] > 1
		}
		for id := range seen {
			n, err := strconv.Atoi(id[1:])
			require.NoError(t, err)
			require.Less(t, n, next, "seed %d: visited %s, never put", seed, id)
		}
		if twice {
			assert.NotEmpty(t, removedDuring, "seed %d: a second visit needs a removal", seed)
		}
	}
}

// A set that emptied gives back most of its list.
func TestWalkSetShrinksItsList(t *testing.T) {
	s := newWalkSet[*walkItem]()
	for i := range 10000 {
		s.put(strconv.Itoa(i), &walkItem{n: i})
	}
	for i := range 9990 {
		s.remove(strconv.Itoa(i))
	}
	requireWalkSetConsistent(t, &s)
	assert.Equal(t, 10, s.len())
	assert.Less(t, cap(s.list), 1024)
	for i := 9990; i < 10000; i++ {
		assert.NotNil(t, s.get(strconv.Itoa(i)))
	}
}

// countingLocker counts its holds and the most visits one hold saw.
type countingLocker struct {
	held          bool
	holds, visits int
	most          int
}

func (l *countingLocker) Lock()   { l.held, l.visits = true, 0; l.holds++ }
func (l *countingLocker) Unlock() { l.held = false; l.most = max(l.most, l.visits) }

// walkAll holds the lock for each step and only then: never more than
// walkStep visits in one hold, every entry visited once.
func TestWalkSetWalkAllHoldsTheLockPerStep(t *testing.T) {
	defer func(old int) { walkStep = old }(walkStep)
	walkStep = 8
	s := newWalkSet[*walkItem]()
	for i := range 30 {
		s.put(strconv.Itoa(i), &walkItem{n: i})
	}
	var l countingLocker
	seen := map[string]int{}
	s.walkAll(&l, func(id string, _ *walkItem) {
		require.True(t, l.held, "visited under the lock")
		l.visits++
		seen[id]++
	})
	assert.False(t, l.held)
	assert.Equal(t, 4, l.holds, "30 entries in steps of 8")
	assert.Equal(t, 8, l.most)
	assert.Len(t, seen, 30)
}
