package session

// The Waitlist's memory of the two lanes: gateMemory.line holds the normal
// lane's waiting positions, gateMemory.prio the priority lane's. Each
// waiter is in exactly one; positions stay unique across both.

// resetLines rebuilds both lanes from a snapshot: Waiting holds every
// waiting position, PriorityWaiting those of the priority lane.
func (g *gateMemory) resetLines(snap GateSnapshot) {
	if len(snap.PriorityWaiting) == 0 {
		g.line.reset(snap.Waiting)
		g.prio.reset(nil)
		return
	}
	normal := make([]int64, 0, len(snap.Waiting))
	j := 0
	for _, p := range snap.Waiting {
		for j < len(snap.PriorityWaiting) && snap.PriorityWaiting[j] < p {
			j++
		}
		if j < len(snap.PriorityWaiting) && snap.PriorityWaiting[j] == p {
			continue
		}
		normal = append(normal, p)
	}
	g.line.reset(normal)
	g.prio.reset(snap.PriorityWaiting)
}

// addWaiter puts a new waiter in its lane. g.mu must be held.
func (g *gateMemory) addWaiter(s Session) {
	if s.Lane == LanePriority {
		g.prio.add(s.Position)
		return
	}
	g.line.add(s.Position)
}

// removeWaiter takes the waiter at p out of whichever lane holds it. g.mu
// must be held.
func (g *gateMemory) removeWaiter(p int64) {
	if g.prio.n > 0 && g.prio.has(p) {
		g.prio.remove(p)
		return
	}
	g.line.remove(p)
}

// place is the exact place of the waiter at p in its lane, and the lane's
// wire name ("" for the normal lane). g.mu must be held for reading.
func (g *gateMemory) place(p int64) (int64, string) {
	if g.prio.n > 0 && g.prio.has(p) {
		return g.prio.ahead(p) + 1, LanePriority.String()
	}
	return g.line.ahead(p) + 1, ""
}

// lanes returns the store's state with its waiting bounds and count
// narrowed to the normal lane, and the priority lane's view, while anyone
// waits in the priority lane; st as it is otherwise (every waiter is then
// in the normal lane). g.mu must be held for writing (buckets).
func (g *gateMemory) lanes(st GateState) (GateState, *LaneView) {
	if g.prio.n == 0 {
		return st, nil
	}
	pf, _ := g.prio.kth(1)
	pl, _ := g.prio.kth(g.prio.n)
	v := &LaneView{FirstWaitingPosition: pf, LastWaitingPosition: pl, Waiting: g.prio.n, Buckets: g.prio.buckets()}
	st.Waiting = g.line.n
	st.FirstWaitingPosition, st.LastWaitingPosition = st.NextPosition, st.NextPosition-1
	if g.line.n > 0 {
		st.FirstWaitingPosition, _ = g.line.kth(1)
		st.LastWaitingPosition, _ = g.line.kth(g.line.n)
	}
	return st, v
}
