package session

// GlobalRecounted is the gate's current global view with the buckets of
// both lanes counted from scratch (bucketsFull), at the state the view was
// made for when no commit is under way: what the kept starts must give.
func (w *Waitlist) GlobalRecounted(gate string) (GlobalView, error) {
	g, err := w.gate(gate)
	if err != nil {
		return GlobalView{}, err
	}
	v := g.currentView(w.clock.Now())
	g.mu.RLock()
	defer g.mu.RUnlock()
	v.Buckets = g.line.bucketsFull()
	if v.Priority != nil {
		p := *v.Priority
		p.Buckets = g.prio.bucketsFull()
		v.Priority = &p
	}
	return v, nil
}

// SameEvent is sameEvent, for the tests of session_test.
var SameEvent = sameEvent

// EventsInMemory is memory's events of gate, also of a gate no longer in
// the gate set.
func (w *Waitlist) EventsInMemory(gate string) []ScheduledEvent { return w.ev.of(gate) }

// SetWalkStep sets how many sessions a walk over a gate's memory visits in
// one hold of its lock (walkStep) until the returned func restores it.
func SetWalkStep(n int) (restore func()) {
	old := walkStep
	walkStep = n
	return func() { walkStep = old }
}

// DefaultWalkStep is walkStep as built.
var DefaultWalkStep = walkStep
