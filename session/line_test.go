package session

import (
	"math/rand/v2"
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
