package session

import "sort"

// lineIndex is an order-statistic index of a gate's waiting positions: it
// counts the waiters ahead of a position, and finds the k-th waiter, in
// O(log n). It is a Fenwick tree over the positions from base on, one slot
// per position (1 while a waiter holds it), grown at the end as positions
// are handed out and rebuilt from a later base once the front has moved on.
// Not safe for concurrent use: the gate's lock guards it.
type lineIndex struct {
	base  int64   // the position of slot 0
	slots []int8  // 1 where a waiter is
	tree  []int32 // Fenwick sums, 1-based: tree[i] covers slots (i-lowbit(i), i]
	n     int64   // waiters
	front int     // no waiter in slots[:front]

	// The last buckets' starts, kept so that a commit does not look up all
	// of them again (see buckets). bk[j] is the position that held the
	// waiter of rank 1+j·bkSize when buckets last ran. For j < bkOK nobody
	// joined at or ahead of bk[j] since, so the waiters at positions up to
	// bk[j] are that rank less the departures at or before it (the sum of
	// bkGone[:j+1]); from bkOK on the starts must be looked up again.
	// bkSize 0: nothing kept.
	bk     []int64
	bkGone []int64 // bkGone[j]: departures at or before bk[j] and after bk[j-1], since
	bkOK   int
	bkSize int64
}

func lowbit(i int) int { return i & -i }

// reset builds the index from ascending positions.
func (l *lineIndex) reset(positions []int64) {
	l.n = 0
	l.front = 0
	l.bkSize, l.bkOK = 0, 0
	l.slots = l.slots[:0]
	l.tree = l.tree[:0]
	if len(positions) == 0 {
		l.base = 0
		return
	}
	l.base = positions[0]
	size := int(positions[len(positions)-1]-l.base) + 1
	l.slots = make([]int8, size)
	for _, p := range positions {
		l.slots[p-l.base] = 1
	}
	l.n = int64(len(positions))
	l.build()
}

// build computes tree from slots in O(n).
func (l *lineIndex) build() {
	size := len(l.slots)
	l.tree = make([]int32, size+1, size+size/4+1)
	for i := 1; i <= size; i++ {
		l.tree[i] += int32(l.slots[i-1])
		if j := i + lowbit(i); j <= size {
			l.tree[j] += l.tree[i]
		}
	}
}

// prefix returns the waiters in slots[:i].
func (l *lineIndex) prefix(i int) int64 {
	var sum int64
	for ; i > 0; i -= lowbit(i) {
		sum += int64(l.tree[i])
	}
	return sum
}

// grow appends empty slots up to and including slot i.
func (l *lineIndex) grow(i int) {
	if len(l.tree) == 0 {
		l.tree = append(l.tree, 0)
	}
	for len(l.slots) <= i {
		l.slots = append(l.slots, 0)
		m := len(l.slots) // the new slot's 1-based index
		// tree[m] covers (m-lowbit(m), m]: the sums of the slots before it in
		// that range, the new one being empty.
		l.tree = append(l.tree, int32(l.prefix(m-1)-l.prefix(m-lowbit(m))))
	}
}

func (l *lineIndex) update(i int, d int32) {
	for j := i + 1; j < len(l.tree); j += lowbit(j) {
		l.tree[j] += d
	}
}

// add puts a waiter at position p. Positions below the base (never handed
// out again) are ignored, as is a position already held.
func (l *lineIndex) add(p int64) {
	if l.n == 0 && len(l.slots) == 0 {
		l.base = p
	}
	if p < l.base {
		return
	}
	i := int(p - l.base)
	l.grow(i)
	if l.slots[i] == 1 {
		return
	}
	l.slots[i] = 1
	// A waiter back ahead of the front (at a position it left) moves the
	// front back, else the next rebuild from the front would drop it.
	l.front = min(l.front, i)
	l.n++
	l.update(i, 1)
	// A waiter behind every kept start (a new join at the end) moves none
	// of them; one at or ahead of a start moves that start and all after it.
	if k := l.bkOK; k > 0 && p <= l.bk[k-1] {
		l.bkOK = sort.Search(k, func(j int) bool { return l.bk[j] >= p })
	}
}

// remove takes the waiter at position p out, if there is one.
func (l *lineIndex) remove(p int64) {
	if p < l.base || p-l.base >= int64(len(l.slots)) {
		return
	}
	i := int(p - l.base)
	if l.slots[i] == 0 {
		return
	}
	l.slots[i] = 0
	l.n--
	l.update(i, -1)
	// A departure at or before a kept start moves it, and all after it, one
	// waiter on.
	if k := l.bkOK; k > 0 && p <= l.bk[k-1] {
		l.bkGone[sort.Search(k, func(j int) bool { return l.bk[j] >= p })]++
	}
	if l.n == 0 {
		l.slots, l.tree, l.front, l.bkSize, l.bkOK = l.slots[:0], l.tree[:0], 0, 0, 0
		l.base = p + 1
		return
	}
	for l.front < len(l.slots) && l.slots[l.front] == 0 {
		l.front++
	}
	// Rebuild from the front once the dead slots ahead of it outweigh the
	// line, so memory follows the line, not every position ever handed out.
	if l.front > 4096 && l.front > len(l.slots)/2 {
		l.slots = append([]int8(nil), l.slots[l.front:]...)
		l.base += int64(l.front)
		l.front = 0
		l.build()
	}
}

// ahead returns the waiters at positions below p.
func (l *lineIndex) ahead(p int64) int64 {
	if l.n == 0 || p <= l.base {
		return 0
	}
	i := int(p - l.base)
	if i > len(l.slots) {
		i = len(l.slots)
	}
	return l.prefix(i)
}

// kth returns the position of the k-th waiter (1-based), or false when
// there are fewer than k.
func (l *lineIndex) kth(k int64) (int64, bool) {
	if k < 1 || k > l.n {
		return 0, false
	}
	pos, size := 0, len(l.tree)-1
	step := 1
	for step*2 <= size {
		step *= 2
	}
	for ; step > 0; step /= 2 {
		if next := pos + step; next <= size && int64(l.tree[next]) < k {
			pos = next
			k -= int64(l.tree[next])
		}
	}
	// pos is the last 1-based index whose prefix is below k: the waiter is
	// in slot pos (0-based).
	return l.base + int64(pos), true
}

// buckets summarises the line for a GlobalView: at most MaxBuckets
// [offset, count] pairs of equal counts (at least MinBucketSize), each
// starting at a waiter, offsets from the first waiter. The result is the
// caller's (a new slice each time).
//
// It is called after every commit, so it does not look every start up in
// the tree again: a start no waiter joined at or ahead of since the last
// call still knows how many waiters are at or ahead of it (its rank then,
// less the departures at or before it since), and the new start of its
// bucket is that many waiters on or back, found by scanning the slots next
// to it, where the waiters it moved past are. That covers joins at the end
// (no start moves unless the bucket size changes, and then start j moves j
// waiters), promotions from the front and departures (the starts after them
// move one waiter on per departure). Only the starts a join ahead of them
// moved, new starts at the end, and starts that would have to scan far are
// looked up in the tree.
func (l *lineIndex) buckets() []int64 {
	if l.n == 0 {
		return nil
	}
	size := max(int64(MinBucketSize), (l.n+MaxBuckets-1)/MaxBuckets)
	count := int((l.n + size - 1) / size)
	ok := 0
	if l.bkSize > 0 {
		ok = min(l.bkOK, count)
	}
	var gone int64
	for j := range ok {
		gone += l.bkGone[j]
		had := 1 + int64(j)*l.bkSize - gone // waiters at or ahead of bk[j]
		want := 1 + int64(j)*size
		if gone > 0 || had != want {
			l.bk[j] = l.seek(l.bk[j], had, want)
		}
	}
	l.bk = l.bk[:ok]
	for j := ok; j < count; j++ {
		p, _ := l.kth(1 + int64(j)*size)
		l.bk = append(l.bk, p)
	}
	l.bkOK, l.bkSize = count, size
	if cap(l.bkGone) < count {
		l.bkGone = make([]int64, count, MaxBuckets)
	}
	l.bkGone = l.bkGone[:count]
	clear(l.bkGone)
	out := make([]int64, 0, 2*count)
	first := l.bk[0]
	for j, p := range l.bk {
		k := 1 + int64(j)*size
		out = append(out, p-first, min(size, l.n-k+1))
	}
	return out
}

// seekScan bounds the slots seek scans before it looks the waiter up in
// the tree instead.
const seekScan = 4096

// seek returns the position of the waiter of rank k, given that had
// waiters are at positions up to p: the (k-had)-th waiter after p, or, when
// k <= had, the (had-k+1)-th at or before p.
func (l *lineIndex) seek(p, had, k int64) int64 {
	i := p - l.base
	if d := k - had; d > 0 {
		if d <= seekScan {
			for i, end := max(i+1, 0), min(int64(len(l.slots)), max(i+1, 0)+seekScan); i < end; i++ {
				if l.slots[i] == 1 {
					if d--; d == 0 {
						return l.base + i
					}
				}
			}
		}
	} else if d = 1 - d; d <= seekScan {
		for i, end := min(i, int64(len(l.slots))-1), max(i-seekScan, -1); i > end; i-- {
			if l.slots[i] == 1 {
				if d--; d == 0 {
					return l.base + i
				}
			}
		}
	}
	q, _ := l.kth(k)
	return q
}

// has reports whether a waiter is at position p.
func (l *lineIndex) has(p int64) bool {
	return p >= l.base && p-l.base < int64(len(l.slots)) && l.slots[p-l.base] == 1
}
