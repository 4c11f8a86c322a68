package session

import (
	"math/rand/v2"
	"slices"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestLineIndex holds the order-statistic index to a sorted slice through
// random joins (at growing positions), departures anywhere, promotions from
// the front, and rebuilds.
func TestLineIndex(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		rng := rand.New(rand.NewPCG(seed, 7))
		var l lineIndex
		var model []int64
		next := int64(1 + rng.IntN(1000))
		check := func(step int) {
			require.Equal(t, int64(len(model)), l.n, "seed %d step %d: count", seed, step)
			for i, p := range model {
				require.Equal(t, int64(i), l.ahead(p), "seed %d step %d: ahead of %d", seed, step, p)
				got, ok := l.kth(int64(i) + 1)
				require.True(t, ok)
				require.Equal(t, p, got, "seed %d step %d: kth(%d)", seed, step, i+1)
			}
			_, ok := l.kth(int64(len(model)) + 1)
			require.False(t, ok)
			b := l.buckets()
			var sum int64
			for i := 0; i < len(b); i += 2 {
				sum += b[i+1]
			}
			require.Equal(t, int64(len(model)), sum)
			require.LessOrEqual(t, len(b)/2, MaxBuckets)
		}
		for step := 0; step < 20000; step++ {
			switch r := rng.IntN(10); {
			case r < 5:
				next += int64(1 + rng.IntN(3)) // some positions go to active sessions
				l.add(next)
				model = append(model, next)
			case r < 7 && len(model) > 0:
				i := rng.IntN(len(model))
				l.remove(model[i])
				model = append(model[:i], model[i+1:]...)
			case r < 9 && len(model) > 0:
				n := min(len(model), 1+rng.IntN(20))
				for _, p := range model[:n] {
					l.remove(p)
				}
				model = model[n:]
			default:
				l.remove(next + 100) // absent: nothing
				l.add(next)          // already there or a new tail
				if len(model) == 0 || model[len(model)-1] != next {
					model = append(model, next)
				}
			}
			if step%997 == 0 {
				check(step)
			}
			if step%4999 == 0 {
				// A restart: rebuilt from the positions.
				var fresh lineIndex
				fresh.reset(append([]int64(nil), model...))
				l = fresh
			}
		}
		check(-1)
		require.True(t, sort.SliceIsSorted(model, func(i, j int) bool { return model[i] < model[j] }))
	}
}

// TestLineIndexMemoryFollowsTheLine checks that the index is rebuilt from
// the front, so a long-running gate does not keep a slot per position ever
// handed out.
func TestLineIndexMemoryFollowsTheLine(t *testing.T) {
	var l lineIndex
	for p := int64(1); p <= 1_000_000; p++ {
		l.add(p)
		if p > 100 {
			l.remove(p - 100)
		}
	}
	require.Equal(t, int64(100), l.n)
	require.Less(t, len(l.slots), 20000, "slots kept: %d", len(l.slots))
	require.Equal(t, int64(99), l.ahead(1_000_000))
}

// bucketsFull is the summary computed from scratch (every start looked up
// in the tree): what buckets must give at every state.
func (l *lineIndex) bucketsFull() []int64 {
	if l.n == 0 {
		return nil
	}
	size := max(int64(MinBucketSize), (l.n+MaxBuckets-1)/MaxBuckets)
	first, _ := l.kth(1)
	out := make([]int64, 0, 2*((l.n+size-1)/size))
	for k := int64(1); k <= l.n; k += size {
		p, _ := l.kth(k)
		out = append(out, p-first, min(size, l.n-k+1))
	}
	return out
}

// bucketsFromModel is the summary of a sorted slice of positions, by its
// definition: no tree involved.
func bucketsFromModel(model []int64) []int64 {
	n := int64(len(model))
	if n == 0 {
		return nil
	}
	size := max(int64(MinBucketSize), (n+MaxBuckets-1)/MaxBuckets)
	var out []int64
	for k := int64(0); k < n; k += size {
		out = append(out, model[k]-model[0], min(size, n-k))
	}
	return out
}

// TestLineBucketsIncremental holds the kept bucket starts to a full
// recomputation (and to the summary of a sorted slice) over random commits:
// joins at the end, departures anywhere, promotions from the front in
// batches small and large, a waiter put back ahead of the starts, gaps
// wider than the scan, the line emptied and refilled, and bucket sizes that
// change as the line grows and shrinks. buckets runs once per commit, as
// onCommit calls it.
func TestLineBucketsIncremental(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3, 4} {
		rng := rand.New(rand.NewPCG(seed, 11))
		var l lineIndex
		var model []int64
		next := int64(1)
		removeAt := func(i int) {
			l.remove(model[i])
			model = append(model[:i], model[i+1:]...)
		}
		join := func() {
			next += int64(1 + rng.IntN(3))
			if rng.IntN(500) == 0 {
				next += seekScan + int64(rng.IntN(3*seekScan)) // a gap wider than a scan
			}
			l.add(next)
			model = append(model, next)
		}
		promote := func(k int) {
			for range min(len(model), k) {
				removeAt(0)
			}
		}
		target := rng.IntN(12000) // the line's length drifts towards it
		for commit := range 4000 {
			if commit%400 == 0 {
				target = rng.IntN(12000)
			}
			grow := len(model) < target
			switch r := rng.IntN(20); {
			case len(model) == 0 || r < 10 && grow:
				// Joins only, the common commit: no start moves but when the
				// bucket size grows.
				for range 1 + rng.IntN(100) {
					join()
				}
			case r < 8:
				promote(1 + rng.IntN(16)) // the line shrinks: the size too
			case r < 11:
				promote(1 + rng.IntN(8))
				if grow {
					join()
				}
			case r < 13:
				for range min(len(model), 1+rng.IntN(6)) {
					removeAt(rng.IntN(len(model)))
				}
			case r < 15:
				// Mixed.
				for range 1 + rng.IntN(24) {
					switch {
					case len(model) == 0 || rng.IntN(2) == 0:
						join()
					case rng.IntN(2) == 0:
						removeAt(rng.IntN(len(model)))
					default:
						promote(1 + rng.IntN(4))
					}
				}
			case r < 16 && rng.IntN(10) == 0:
				// A large promotion: more than a scan's worth.
				promote(rng.IntN(seekScan + 600))
			case r < 16:
				promote(1 + rng.IntN(3))
			case r < 17:
				// A waiter back at a free position ahead of the end (a
				// resync or another lane's order): moves the starts after it.
				if len(model) > 2 {
					i := rng.IntN(len(model) - 1)
					if p := model[i] + 1; p < model[i+1] && p >= l.base {
						l.add(p)
						model = slices.Insert(model, i+1, p)
					}
				}
			case r < 19 && len(model) > 1:
				// A waiter out and back at its own position in one commit
				// (a lane change), most often a bucket's start.
				i := rng.IntN(len(model))
				if l.bkSize > 0 {
					i = min(len(model)-1, int(l.bkSize)*rng.IntN(MaxBuckets))
				}
				p := model[i]
				removeAt(i)
				l.add(p)
				model = slices.Insert(model, i, p)
			default:
				if len(model) > 0 {
					// Re-adding a present waiter, removing an absent one:
					// nothing changes.
					l.add(model[rng.IntN(len(model))])
					l.remove(next + 7)
				}
			}
			got := l.buckets()
			require.Equal(t, l.bucketsFull(), got, "seed %d commit %d: buckets against a full recomputation (n=%d)", seed, commit, l.n)
			require.Equal(t, bucketsFromModel(model), got, "seed %d commit %d: buckets against the sorted positions", seed, commit)
			if commit%1499 == 0 {
				var fresh lineIndex
				fresh.reset(append([]int64(nil), model...))
				l = fresh
			}
		}
	}
}

// TestLineBucketsCatchAForgottenDeparture is the check above against a
// deliberately broken update: a departure that clears the waiter's slot and
// tree entry but not the kept starts' bookkeeping (what remove would do
// without its bkGone line). The comparison with a full recomputation must
// see it.
func TestLineBucketsCatchAForgottenDeparture(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var l lineIndex
	for p := int64(1); p <= 4000; p += 1 + rng.Int64N(5) { // uneven gaps: offsets move when starts do
		l.add(p)
	}
	require.Equal(t, l.bucketsFull(), l.buckets())
	brokenRemove := func(p int64) {
		i := int(p - l.base)
		l.slots[i] = 0
		l.n--
		l.update(i, -1)
	}
	brokenRemove(1)
	require.NotEqual(t, l.bucketsFull(), l.buckets(), "a departure the starts were not told of must show")

	// And a join ahead of the starts that does not move them.
	var m lineIndex
	for p := int64(2); p <= 4000; p += 2 {
		m.add(p)
	}
	require.Equal(t, m.bucketsFull(), m.buckets())
	m.slots[1] = 1 // position 3, bypassing add's bookkeeping
	m.n++
	m.update(1, 1)
	require.NotEqual(t, m.bucketsFull(), m.buckets(), "a join ahead of the starts they were not told of must show")
}

// TestLineIndexWaiterBackAheadOfTheFront: a waiter put back at a position
// ahead of the front (which had moved past it) survives the rebuild from
// the front. Before the fix add left the front where it was, and the
// rebuild dropped the slots before it, the waiter's included.
func TestLineIndexWaiterBackAheadOfTheFront(t *testing.T) {
	var l lineIndex
	for p := int64(1); p <= 10000; p++ {
		l.add(p)
	}
	for p := int64(1); p <= 3000; p++ {
		l.remove(p)
	}
	l.add(1000)
	for p := int64(3001); p <= 7000; p++ {
		l.remove(p)
	}
	require.True(t, l.has(1000))
	require.Equal(t, int64(3001), l.n)
	first, ok := l.kth(1)
	require.True(t, ok)
	require.Equal(t, int64(1000), first)
	second, _ := l.kth(2)
	require.Equal(t, int64(7001), second)
	require.Equal(t, int64(1), l.ahead(7001))
	require.Equal(t, l.bucketsFull(), bucketsFromModel(append([]int64{1000}, seq(7001, 10000)...)))
	l.remove(1000)
	require.Less(t, len(l.slots), 10000, "rebuilt from the front once it left")
	require.Equal(t, int64(3000), l.n)
	first, _ = l.kth(1)
	require.Equal(t, int64(7001), first)
}

func seq(from, to int64) []int64 {
	var out []int64
	for p := from; p <= to; p++ {
		out = append(out, p)
	}
	return out
}
