package session

import (
	"math"
	"sync"
)

// walkStep is how many entries a walk over a gate's memory visits while it
// holds the gate's lock. The writer's commit listener takes that lock for
// every commit, and joins wait for the writer: a walk over 50,000 active
// sessions in one hold kept them waiting up to about 2 ms (cold entries
// cost tens of nanoseconds each). 512 entries hold it for some microseconds. A variable
// only so that a benchmark can compare it with a walk in one step.
var walkStep = 512

// walkFromEnd starts a walk (walkSet.walk).
const walkFromEnd = math.MaxInt

// walkSlot is the place of an entry in its walkSet's list.
type walkSlot struct{ i int }

// walkable is an entry of a walkSet: a pointer to a struct that embeds a
// walkSlot.
type walkable interface{ slot() *walkSlot }

// walkRef is one entry of a walkSet's list.
type walkRef[P walkable] struct {
	id string
	v  P
}

// walkSet maps session ids to entries, like a map, and can also be walked
// in bounded steps with the lock that guards it released between them.
//
// The entries also sit in a list; removing one moves the list's last entry
// into its place. A walk goes from the list's end toward its start, so an
// entry that is in the set for the whole walk is visited at least once
// whatever is added or removed between steps: an entry not yet visited
// (below the walk's place) only ever moves to another place below it, and
// what is added goes to the end, above it. An entry visited already may be
// moved below by a removal between steps and visited again.
//
// A walkSet is not safe for concurrent use: its owner's lock guards it.
type walkSet[P walkable] struct {
	m    map[string]P
	list []walkRef[P]
}

func newWalkSet[P walkable]() walkSet[P] {
	return walkSet[P]{m: make(map[string]P)}
}

// get returns id's entry, or the zero P.
func (s *walkSet[P]) get(id string) P { return s.m[id] }

// len returns the number of entries.
func (s *walkSet[P]) len() int { return len(s.list) }

// put sets id's entry to v, in the place of the entry it replaces.
func (s *walkSet[P]) put(id string, v P) {
	if old, ok := s.m[id]; ok {
		i := old.slot().i
		v.slot().i = i
		s.list[i].v = v
	} else {
		v.slot().i = len(s.list)
		s.list = append(s.list, walkRef[P]{id: id, v: v})
	}
	s.m[id] = v
}

// remove removes id's entry, if any.
func (s *walkSet[P]) remove(id string) {
	v, ok := s.m[id]
	if !ok {
		return
	}
	delete(s.m, id)
	i, last := v.slot().i, len(s.list)-1
	if i != last {
		s.list[i] = s.list[last]
		s.list[i].v.slot().i = i
	}
	s.list[last] = walkRef[P]{}
	s.list = s.list[:last]
	if c := cap(s.list); c > 1024 && len(s.list) < c/4 {
		s.list = append(make([]walkRef[P], 0, c/2), s.list...) // a line that emptied gives its memory back
	}
}

// walk visits up to step entries below place at, from the highest place
// down, and returns the place to continue from: 0 when the walk is done.
// A walk starts at walkFromEnd. fn may remove the entry it is given (and no
// other). A step below 1 is 1.
func (s *walkSet[P]) walk(at, step int, fn func(id string, v P)) int {
	at, step = min(at, len(s.list)), max(step, 1)
	stop := max(at-step, 0)
	for i := at - 1; i >= stop; i-- {
		r := s.list[i]
		fn(r.id, r.v)
	}
	return stop
}

// walkAll walks the whole set in steps of walkStep entries, holding l (the
// lock that guards the set: its write lock when fn changes entries, its
// read locker when fn only reads them) for each step and releasing it
// between them. fn may remove the entry it is given (and no other).
func (s *walkSet[P]) walkAll(l sync.Locker, fn func(id string, v P)) {
	for at := walkFromEnd; at > 0; {
		l.Lock()
		at = s.walk(at, walkStep, fn)
		l.Unlock()
	}
}
