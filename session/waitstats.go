package session

import (
	"math"
	"sync"
	"time"
)

// The wait figures of GateStats, kept in memory from the commits the
// Waitlist applies (the same stream as the metrics), not read back from the
// Store's history: answering GET gates every second costs no query, the
// figures work with history turned off, and on a shared store every
// instance follows every commit. They start empty at a restart.

// WaitWindow is the span the wait percentiles cover.
const WaitWindow = time.Hour

// waitWindow is a histogram of the waits (join to admission) of the last
// hour: a log-scale histogram per minute, in a ring of 60.
type waitWindow struct {
	mu    sync.Mutex
	slots *[waitSlots]waitSlot // allocated at the first admission
}

type waitSlot struct {
	minute int64
	n      [waitBuckets]uint32
}

const (
	waitSlots   = int(WaitWindow / time.Minute)
	waitBuckets = 192
	// waitBase is the upper bound of bucket 0 (waits under it, a direct
	// admission's 0 among them); bucket i > 0 holds waits in
	// [waitBase·2^((i-1)/8), waitBase·2^(i/8)), the last one everything
	// above (about 18 days). A percentile is off by at most about 4.5%.
	waitBase       = 100 * time.Millisecond
	waitPerOctave  = 8
	waitMinuteSpan = int64(time.Minute)
)

func waitBucket(d time.Duration) int {
	if d < waitBase {
		return 0
	}
	i := 1 + int(math.Floor(math.Log2(float64(d)/float64(waitBase))*waitPerOctave))
	return min(max(i, 1), waitBuckets-1)
}

// waitValue is the value a bucket stands for: 0 for bucket 0, else the
// geometric middle of its bounds.
func waitValue(i int) time.Duration {
	if i == 0 {
		return 0
	}
	return time.Duration(float64(waitBase) * math.Exp2((float64(i)-0.5)/waitPerOctave))
}

// add records one admission at t that waited d.
func (w *waitWindow) add(t time.Time, d time.Duration) {
	minute := t.UnixNano() / waitMinuteSpan
	b := waitBucket(d)
	w.mu.Lock()
	if w.slots == nil {
		w.slots = new([waitSlots]waitSlot)
	}
	s := &w.slots[int(uint64(minute)%uint64(waitSlots))]
	if s.minute != minute {
		s.minute, s.n = minute, [waitBuckets]uint32{}
	}
	s.n[b]++
	w.mu.Unlock()
}

// percentiles returns the waits at each quantile in qs (0 < q <= 1) over
// the hour ending at now, and the number of admissions they come from;
// nil when there was none.
func (w *waitWindow) percentiles(now time.Time, qs ...float64) ([]time.Duration, int64) {
	minute := now.UnixNano() / waitMinuteSpan
	var sum [waitBuckets]uint64
	var total int64
	w.mu.Lock()
	if w.slots != nil {
		for i := range w.slots {
			s := &w.slots[i]
			if s.minute <= minute-int64(waitSlots) || s.minute > minute {
				continue
			}
			for b, n := range s.n {
				sum[b] += uint64(n)
				total += int64(n)
			}
		}
	}
	w.mu.Unlock()
	if total == 0 {
		return nil, 0
	}
	out := make([]time.Duration, len(qs))
	for i, q := range qs {
		rank := uint64(math.Ceil(q * float64(total)))
		rank = min(max(rank, 1), uint64(total))
		var seen uint64
		for b, n := range sum {
			if seen += n; seen >= rank {
				out[i] = waitValue(b)
				break
			}
		}
	}
	return out, total
}

// noteWait feeds the gate's wait figures with one commit event: an
// admission's wait, or an abandon (Abandoned).
func (g *gateMemory) noteWait(ev Event, clock Clock) {
	s := ev.Session
	switch {
	case ev.Kind == EventActivated:
		g.waits.add(s.CreatedAt, 0)
	case ev.Kind == EventPromoted:
		g.waits.add(s.LastActive, max(s.LastActive.Sub(s.CreatedAt), 0))
	case Abandoned(ev):
		at := ev.At
		if at.IsZero() {
			at = clock.Now()
		}
		g.abandoned.add(at, 1)
	}
}

// WaitStats are a gate's wait figures (GateStats).
type WaitStats struct {
	// Admissions is how many admissions of the last WaitWindow the
	// percentiles come from; P50 and P90 are meaningless when it is 0.
	Admissions int64
	// P50 and P90 are the median and 90th percentile of the time from join
	// to admission over the last WaitWindow, direct admissions counting as
	// 0 (within about 4.5%).
	P50, P90 time.Duration
	// AbandonsPerMinute counts waiters that gave up before they were
	// admitted (Abandoned) over the last five minutes; 0 until there is
	// evidence, as the other rates.
	AbandonsPerMinute float64
}

func (g *gateMemory) waitStats(now time.Time) WaitStats {
	st := WaitStats{AbandonsPerMinute: g.abandoned.perMinute(now)}
	if ps, n := g.waits.percentiles(now, 0.5, 0.9); n > 0 {
		st.Admissions, st.P50, st.P90 = n, ps[0], ps[1]
	}
	return st
}
