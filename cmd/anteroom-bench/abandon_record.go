package main

import (
	"maps"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/anteroomhq/anteroom/session"
)

// simClock is the abandon scenario's clock: simulated time runs scale times
// faster than the wall clock, from start. The server is given it as its
// session.Clock, so that every rule (timeouts, claim deadlines, the
// admission rate's window) runs in simulated time, and the simulator
// measures in the same time.
type simClock struct {
	start time.Time
	scale float64
}

func newSimClock(scale float64) *simClock {
	return &simClock{start: time.Now(), scale: scale}
}

// Now returns the simulated time.
func (c *simClock) Now() time.Time { return c.start.Add(c.since()) }

// since returns the simulated time elapsed since start.
func (c *simClock) since() time.Duration {
	return time.Duration(float64(time.Since(c.start)) * c.scale)
}

// real converts a simulated duration to wall-clock time.
func (c *simClock) real(d time.Duration) time.Duration {
	return time.Duration(float64(d) / c.scale)
}

// untilSim returns the wall-clock time until the simulated offset at.
func (c *simClock) untilSim(at time.Duration) time.Duration {
	return time.Until(c.start.Add(c.real(at)))
}

// rankIndex is a Fenwick tree over positions 1..n: which positions wait,
// and how many wait ahead of one.
type rankIndex struct {
	tree []int32 // 1-based
	has  []bool  // has[p]
}

func (r *rankIndex) grow(p int64) {
	if int(p) < len(r.has) {
		return
	}
	n := max(1024, len(r.has))
	for n <= int(p) {
		n *= 2
	}
	old := r.has
	r.has = make([]bool, n)
	r.tree = make([]int32, n)
	for i, h := range old {
		if h {
			r.has[i] = true
			r.addTree(int64(i), 1)
		}
	}
}

func (r *rankIndex) addTree(p int64, d int32) {
	for i := int(p); i < len(r.tree); i += i & -i {
		r.tree[i] += d
	}
}

func (r *rankIndex) add(p int64) {
	if p <= 0 {
		return
	}
	r.grow(p)
	if !r.has[p] {
		r.has[p] = true
		r.addTree(p, 1)
	}
}

func (r *rankIndex) remove(p int64) {
	if p <= 0 || int(p) >= len(r.has) || !r.has[p] {
		return
	}
	r.has[p] = false
	r.addTree(p, -1)
}

func (r *rankIndex) waiting(p int64) bool { return p > 0 && int(p) < len(r.has) && r.has[p] }

// rank is the exact 1-based place of a waiting position.
func (r *rankIndex) rank(p int64) int64 {
	var sum int64
	for i := int(min(p-1, int64(len(r.tree)-1))); i > 0; i -= i & -i {
		sum += int64(r.tree[i])
	}
	return sum + 1
}

// simSession is what the recorder knows of one session id.
type simSession struct {
	active      bool
	activeSince time.Duration
	promoted    bool          // active by a promotion from the line
	claimed     bool          // its client knows it was admitted
	slotFreeAt  time.Duration // when the slot it was promoted into was freed
	goneAt      time.Duration // when its client left without releasing; <0 present
	released    bool          // its client asked for the release
	ghostHeld   time.Duration // slot time held after the client was gone
	// ETA: the first one its client showed, and when.
	etaSet bool
	etaSec float64
	etaAt  time.Duration
}

// recorder keeps, from the store's commits and the clients' reports, the
// truth the abandon scenario measures against. Every method is safe for
// concurrent use; observe runs on the store's commit path and does not
// block for long.
type recorder struct {
	mu      sync.Mutex
	now     func() time.Duration // simulated time
	line    rankIndex
	sess    map[string]*simSession
	pending []time.Duration // freed slots not yet passed to a waiter, oldest first

	lost      map[string]bool // sessions purged while their client was present
	claimLat  []float64       // seconds from a slot freeing to a present waiter claiming it
	etaErr    []float64       // seconds: ETA shown first minus the wait that followed
	etaRelErr []float64       // |etaErr| / actual wait

	placeSamples, placeWithin, convexWithin, placeExact int64
	freshSamples, freshWithin                           int64
	placeErrHist                                        [placeHistMax + 1]int64
	maxPlaceErr                                         int64
}

const placeHistMax = 1000

func newRecorder(now func() time.Duration) *recorder {
	return &recorder{now: now, sess: map[string]*simSession{}, lost: map[string]bool{}}
}

func (r *recorder) get(id string) *simSession {
	s := r.sess[id]
	if s == nil {
		s = &simSession{goneAt: -1}
		r.sess[id] = s
	}
	return s
}

// observe applies one commit of the store.
func (r *recorder) observe(c session.Commit) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.observeAt(c, r.now())
}

func (r *recorder) observeAt(c session.Commit, t time.Duration) {
	for _, ev := range c.Events {
		switch ev.Kind {
		case session.EventQueued, session.EventDequeued, session.EventActivated, session.EventPromoted, session.EventDeactivated:
		default:
			continue // not a change to the line or the active set (a launch names an event, not a session)
		}
		s := ev.Session
		st := r.get(s.ID)
		switch ev.Kind {
		case session.EventQueued:
			r.line.add(s.Position)
		case session.EventDequeued:
			r.line.remove(s.Position)
			if st.goneAt < 0 {
				r.lost[s.ID] = true
			}
		case session.EventActivated:
			st.active, st.activeSince, st.promoted, st.claimed = true, t, false, true
		case session.EventPromoted:
			r.line.remove(s.Position)
			st.active, st.activeSince, st.promoted, st.claimed = true, t, true, false
			st.slotFreeAt = t
			if len(r.pending) > 0 {
				st.slotFreeAt = r.pending[0]
				r.pending = r.pending[1:]
			}
		case session.EventDeactivated:
			if !st.active {
				continue
			}
			st.active = false
			if st.goneAt >= 0 {
				st.ghostHeld += max(0, t-max(st.goneAt, st.activeSince))
			} else if !st.released {
				r.lost[s.ID] = true
			}
			free := t
			if st.promoted && !st.claimed {
				// Nobody used it: the slot has been free since it was
				// freed for this session.
				free = st.slotFreeAt
			}
			i, _ := slices.BinarySearch(r.pending, free)
			r.pending = slices.Insert(r.pending, i, free)
		}
	}
}

// claimed records that a client learned its session was admitted. It returns
// false when the server no longer holds it active.
func (r *recorder) claimed(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	t := r.now()
	st := r.get(id)
	if !st.active {
		return false
	}
	if st.promoted && !st.claimed {
		st.claimed = true
		r.claimLat = append(r.claimLat, (t - st.slotFreeAt).Seconds())
		if st.etaSet {
			actual := (t - st.etaAt).Seconds()
			e := st.etaSec - actual
			r.etaErr = append(r.etaErr, e)
			if actual > 0 {
				r.etaRelErr = append(r.etaRelErr, math.Abs(e)/actual)
			}
		}
	}
	st.claimed = true
	return true
}

// gone records that a client left without releasing (a beacon, a closed
// socket, a silent death), from now on.
func (r *recorder) gone(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if st := r.get(id); st.goneAt < 0 {
		st.goneAt = r.now()
	}
}

// released records that a client asks for its release.
func (r *recorder) released(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.get(id).released = true
}

// place is one sample of a waiter: its client's view and position.
type placeSample struct {
	id       string
	position int64
	view     *session.GlobalView
	fresh    bool // the client holds the newest message any client got
}

// sample compares the places the clients display with their exact ranks at
// this moment, and records the first ETA each client shows.
func (r *recorder) sample(samples []placeSample) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t := r.now()
	for _, s := range samples {
		if s.view == nil || !r.line.waiting(s.position) {
			continue
		}
		truth := r.line.rank(s.position)
		shown := s.view.EstimatePlace(s.position)
		convex := s.view.LastWaitingPosition >= s.position && s.position >= s.view.FirstWaitingPosition
		cv := int64(0)
		if convex {
			cv = s.position - s.view.FirstWaitingPosition + 1
		}
		d := abs64(shown - truth)
		r.placeSamples++
		if d <= 10 {
			r.placeWithin++
		}
		if s.fresh {
			r.freshSamples++
			if d <= 10 {
				r.freshWithin++
			}
		}
		if d == 0 {
			r.placeExact++
		}
		if abs64(cv-truth) <= 10 {
			r.convexWithin++
		}
		r.maxPlaceErr = max(r.maxPlaceErr, d)
		r.placeErrHist[min(d, placeHistMax)]++
		if st := r.get(s.id); !st.etaSet && shown > 0 && s.view.AdmittedPerMinute > 0 {
			st.etaSet, st.etaSec, st.etaAt = true, float64(shown)/s.view.AdmittedPerMinute*60, t
		}
	}
}

func abs64(v int64) int64 {
	if v < 0 {
		return -v
	}
	return v
}

// placeErrPercentile returns the absolute place error at percentile q (0-1).
func (r *recorder) placeErrPercentile(q float64) int64 {
	if r.placeSamples == 0 {
		return 0
	}
	want := int64(math.Ceil(q * float64(r.placeSamples)))
	var seen int64
	for d, n := range r.placeErrHist {
		seen += n
		if seen >= want {
			return int64(d)
		}
	}
	return placeHistMax
}

// abandonOutcome is one mode's figures.
type abandonOutcome struct {
	ghosts          int       // sessions that held a slot after their client was gone
	ghostHeld       []float64 // seconds per ghost
	ghostHeldTotal  float64   // slot-seconds
	stillHeld       int       // ghosts still holding a slot at the end (counted up to it)
	lost            int
	lostBy          string // lost per kind of client
	lostIDs         map[string]bool
	claimLat        []float64
	unclaimed       int // slots freed and not claimed by a present waiter by the end (in claimLat as the time so far)
	etaErr          []float64
	etaRelErr       []float64
	placeSamples    int64
	freshSamples    int64
	freshWithin     int64
	placeWithin     int64
	placeExact      int64
	convexWithin    int64
	placeP99        int64
	maxPlaceErr     int64
	admitted        int
	waitersAtEnd    int64
	errors          int64
	drops           int64
	firstError      string
	lateSamplesMax  time.Duration // worst lateness of a sampling tick, simulated
	samplingSkipped int64
}

// finish closes the books at the end of the run: ghosts still holding a
// slot count up to now.
func (r *recorder) finish() abandonOutcome {
	r.mu.Lock()
	defer r.mu.Unlock()
	t := r.now()
	var o abandonOutcome
	for _, st := range r.sess {
		held := st.ghostHeld
		if st.active && st.goneAt >= 0 {
			held += max(0, t-max(st.goneAt, st.activeSince))
			o.stillHeld++
		}
		if held > 0 {
			o.ghosts++
			o.ghostHeld = append(o.ghostHeld, held.Seconds())
			o.ghostHeldTotal += held.Seconds()
		}
		if st.active && st.promoted && !st.claimed {
			// Promoted and not claimed by the end: its slot has waited at
			// least this long for a present waiter.
			o.unclaimed++
			o.claimLat = append(o.claimLat, (t - st.slotFreeAt).Seconds())
		}
	}
	for _, free := range r.pending {
		o.unclaimed++
		o.claimLat = append(o.claimLat, (t - free).Seconds())
	}
	for i := range r.line.has {
		if r.line.has[i] {
			o.waitersAtEnd++
		}
	}
	o.lost = len(r.lost)
	o.lostIDs = maps.Clone(r.lost)
	o.claimLat = append(o.claimLat, r.claimLat...)
	o.admitted = len(r.claimLat)
	o.etaErr = slices.Clone(r.etaErr)
	o.etaRelErr = slices.Clone(r.etaRelErr)
	o.placeSamples, o.placeWithin, o.placeExact, o.convexWithin = r.placeSamples, r.placeWithin, r.placeExact, r.convexWithin
	o.freshSamples, o.freshWithin = r.freshSamples, r.freshWithin
	o.placeP99 = r.placeErrPercentile(0.99)
	o.maxPlaceErr = r.maxPlaceErr
	return o
}

// percentile returns the nearest-rank percentile q (0-1) of v, NaN when v is
// empty.
func percentile(v []float64, q float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := slices.Clone(v)
	slices.Sort(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[min(max(i, 0), len(s)-1)]
}

func absAll(v []float64) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = math.Abs(x)
	}
	return out
}
