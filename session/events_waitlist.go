package session

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The Waitlist's side of scheduled events: the events of every gate in
// memory (copied on write, read lock-free by every operation through
// opConfig), their transitions run by the sweeper, the update and, when
// due, by a join before it joins, and the admin operations.

// eventsReload is how often a Waitlist over a shared Store (Options.Ready
// set) reads the events again, to see those another instance added.
const eventsReload = 2 * time.Second

// eventMemory holds the events of every gate.
type eventMemory struct {
	mu       sync.Mutex // serialises writers of byGate
	byGate   atomic.Pointer[map[string]*gateEvents]
	loadedAt atomic.Int64 // unix nanoseconds of the last reload
	stale    atomic.Bool  // another instance started an event: reload
	// damaged holds each gate's damaged events, as its Store last reported
	// them (DamageReporter); nil while no gate has any. Copied on write
	// under mu.
	damaged atomic.Pointer[map[string][]DamagedEvent]
	// unread are the gates whose events a read after a change failed to
	// put in memory (refreshEvents), under mu.
	unread map[string]bool
	// changes counts the changes of events this Waitlist made (its admin
	// operations, under adminMu): a reload whose read one came between
	// would put back what it changed, and is dropped.
	changes atomic.Int64
}

// damagedOf returns the gate's damaged events (never written).
func (m *eventMemory) damagedOf(gate string) []DamagedEvent {
	if p := m.damaged.Load(); p != nil {
		return (*p)[gate]
	}
	return nil
}

// replace puts the gate's events and damaged events in memory together,
// under one lock: a reader never sees the events of one read beside the
// hold of another (a load, a gate added, removed or followed).
func (m *eventMemory) replace(gate string, evs []ScheduledEvent, damaged []DamagedEvent) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.setLocked(gate, evs)
	m.setDamagedLocked(gate, damaged)
}

// setDamagedLocked replaces the gate's damaged events, with mu held.
func (m *eventMemory) setDamagedLocked(gate string, list []DamagedEvent) {
	old := m.damaged.Load()
	if len(list) == 0 && (old == nil || (*old)[gate] == nil) {
		return // none before, none now: no copy of the map
	}
	next := map[string][]DamagedEvent{}
	if old != nil {
		for k, v := range *old {
			next[k] = v
		}
	}
	if len(list) == 0 {
		delete(next, gate)
	} else {
		next[gate] = list
	}
	if len(next) == 0 {
		m.damaged.Store(nil)
		return
	}
	m.damaged.Store(&next)
}

// damagedHolds reports whether one of the gate's damaged events holds it.
func (m *eventMemory) damagedHolds(gate string) bool {
	for _, d := range m.damagedOf(gate) {
		if d.Holds {
			return true
		}
	}
	return false
}

// readStoreEvents reads the gate's events from the Store, and with them,
// when the Store is a DamageReporter (both stores are: the shared suite
// requires it), its damaged events; memory is left as it is. Errors: the
// Store's.
func (w *Waitlist) readStoreEvents(ctx context.Context, gate string) (evs []ScheduledEvent, damaged []DamagedEvent, err error) {
	if r, ok := w.store.(DamageReporter); ok {
		return r.EventsAndDamaged(ctx, gate)
	}
	evs, err = w.store.Events(ctx, gate)
	return evs, nil, err
}

// refreshEvents puts the gate's events as stored in memory, after this
// Waitlist changed them in the Store (RemoveEvent, under adminMu), as the
// sweep's reload does (reloadEvents: event by event, phases never going
// back). A failed read is logged, not returned (the change was made), and
// read again by the next AdvanceEvents: until then memory may show the
// events, and the hold of a damaged one, as they were.
func (w *Waitlist) refreshEvents(ctx context.Context, gate string) {
	w.ev.changes.Add(1) // a reload that read before this change drops its put
	if err := w.reloadEvents(ctx, gate); err != nil {
		w.log.Warn("anteroom: reading a gate's events failed; read again at the next sweep", "gate", gate, "err", err)
		w.ev.markUnread(gate)
	}
}

// markUnread notes that memory's events of gate may be behind the Store's
// (refreshEvents failed).
func (m *eventMemory) markUnread(gate string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.unread == nil {
		m.unread = map[string]bool{}
	}
	m.unread[gate] = true
}

// takeUnread returns the gates marked by markUnread, and forgets them.
func (m *eventMemory) takeUnread() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]string, 0, len(m.unread))
	for g := range m.unread {
		out = append(out, g)
	}
	m.unread = nil
	return out
}

// gateEvents is a gate's events as one change left them. Never written
// once stored but for published: a change of the gate's events stores a
// new one, and a write that leaves them the same (sameEvents: a reload
// from a shared Store, a transition another instance ran first) keeps
// it, with its published view.
type gateEvents struct {
	list []ScheduledEvent // sorted by start
	// published is list as published over the span of time last asked
	// for (Waitlist.PublishedEvents).
	published atomic.Pointer[PublishedEvents]
}

// of returns the gate's events (never written: copy before changing).
func (m *eventMemory) of(gate string) []ScheduledEvent {
	if ge := m.entry(gate); ge != nil {
		return ge.list
	}
	return nil
}

// entry returns the gate's events as last changed, nil without events.
func (m *eventMemory) entry(gate string) *gateEvents {
	p := m.byGate.Load()
	if p == nil {
		return nil
	}
	return (*p)[gate]
}

// setLocked replaces the gate's events (sorting evs), unless memory holds
// the same already: then it keeps what it holds, so that the gate's
// PublishedEvents stays the same value (the HTTP layer caches the
// answer's encoding by it). A started event's phase still turns to ended
// when the clock crosses its end: that is the published view's span, not
// a change of memory.
func (m *eventMemory) setLocked(gate string, evs []ScheduledEvent) {
	old := m.byGate.Load()
	var cur []ScheduledEvent
	if old != nil {
		if ge := (*old)[gate]; ge != nil {
			cur = ge.list
		}
	}
	SortEvents(evs)
	if sameEvents(cur, evs) {
		return
	}
	next := make(map[string]*gateEvents)
	if old != nil {
		for k, v := range *old {
			next[k] = v
		}
	}
	if len(evs) == 0 {
		delete(next, gate)
	} else {
		next[gate] = &gateEvents{list: evs}
	}
	m.byGate.Store(&next)
}

// phaseRank orders phases so that memory never goes back.
func phaseRank(p EventPhase) int {
	switch p {
	case EventPrequeue:
		return 1
	case EventStarted, EventEnded:
		return 2
	}
	return 0
}

// put replaces one event of the gate unless memory already holds it in a
// later phase (answers of concurrent transitions arrive in any order).
func (m *eventMemory) put(ev ScheduledEvent) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.putLocked(ev)
}

// putLocked is put with mu held.
func (m *eventMemory) putLocked(ev ScheduledEvent) {
	cur := m.of(ev.Gate)
	evs := make([]ScheduledEvent, 0, len(cur)+1)
	for _, e := range cur {
		if e.ID == ev.ID {
			if phaseRank(e.Phase) > phaseRank(ev.Phase) {
				ev = e
			}
			continue
		}
		evs = append(evs, e)
	}
	m.setLocked(ev.Gate, append(evs, ev))
}

// opConfig is the configuration the gate's operations run with at now: its
// configuration with its events applied (EventConfig), held while a
// damaged event holds it, as the Store's writer holds it (PrequeueHold).
func (w *Waitlist) opConfig(g *gateMemory, now time.Time) GateConfig {
	cfg := g.config()
	if evs := w.ev.of(cfg.Name); len(evs) > 0 {
		cfg = EventConfig(cfg, evs, now)
	}
	if w.ev.damagedHolds(cfg.Name) { // one atomic load while no gate has a damaged event
		cfg = PrequeueHold(cfg, nil, true)
	}
	return cfg
}

// initEvents puts the loaded events in memory and stores the configured
// ones (Options.Events): a new one is saved with a fresh seed; a stored one
// still scheduled takes the file's schedule; one whose pre-queue opened is
// left as stored. A configured event that is not stored and whose start
// has passed is skipped with a warning.
func (w *Waitlist) initEvents(ctx context.Context, snaps map[string]GateSnapshot, configured []ScheduledEvent) error {
	for name, snap := range snaps {
		w.ev.replace(name, append([]ScheduledEvent(nil), snap.Events...), snap.DamagedEvents)
	}
	now := w.clock.Now()
	for _, ev := range configured {
		if err := ev.Validate(); err != nil {
			return err
		}
		g := w.lookup(ev.Gate)
		if g == nil {
			return Errorf(CodeUnknownGate, "event %q: unknown gate %q", ev.ID, ev.Gate)
		}
		var stored *ScheduledEvent
		for _, e := range w.ev.of(ev.Gate) {
			if e.ID == ev.ID {
				e := e
				stored = &e
			}
		}
		switch {
		case stored != nil && stored.PhaseAt(now) != EventScheduled:
			if !SameSchedule(*stored, ev) {
				w.log.Warn("anteroom: configured event has begun; its stored schedule stays", "gate", ev.Gate, "event", ev.ID)
			}
			continue
		case stored != nil && SameSchedule(*stored, ev):
			continue
		case stored == nil && !ev.StartsAt.After(now):
			w.log.Warn("anteroom: configured event starts in the past and was never stored; skipped", "gate", ev.Gate, "event", ev.ID)
			continue
		}
		if err := ev.checkOverlap(w.ev.of(ev.Gate)); err != nil {
			return err
		}
		if stored == nil {
			seed, err := NewLotterySeed()
			if err != nil {
				return err
			}
			ev.Seed = seed
		}
		saved, err := w.store.SaveEvent(ctx, ev)
		if err != nil {
			return err
		}
		w.ev.put(saved)
	}
	w.ev.loadedAt.Store(now.UnixNano())
	return nil
}

// Now is the Waitlist's clock (Options.Clock): the time its rules see.
func (w *Waitlist) Now() time.Time { return w.clock.Now() }

// Events returns the gate's events from memory, sorted by start. Errors:
// ErrUnknownGate.
func (w *Waitlist) Events(gate string) ([]ScheduledEvent, error) {
	if _, err := w.gate(gate); err != nil {
		return nil, err
	}
	return append([]ScheduledEvent(nil), w.ev.of(gate)...), nil
}

// PublishedEvents is a gate's events as GET /api/events publishes them
// over a span of time: never written once returned, so that its identity
// names what it holds (the HTTP layer caches its encoding by it).
type PublishedEvents struct {
	// Events are the gate's events, sorted by start (their positions
	// included: they are published once an event started).
	Events []ScheduledEvent
	// From and Until bound the span [From, Until) over which every event's
	// PhaseAt stays the same (PhaseSpan); a zero one leaves that side open.
	From, Until time.Time
}

// Holds reports whether now falls in the span of p.
func (p *PublishedEvents) Holds(now time.Time) bool {
	return (p.From.IsZero() || !now.Before(p.From)) && (p.Until.IsZero() || now.Before(p.Until))
}

// noEvents is the PublishedEvents of every gate without events.
var noEvents = &PublishedEvents{}

// PublishedEvents returns the gate's events from memory as published at
// now. Until the gate's events change, every call at an instant of its
// span returns the same *PublishedEvents, also calls made at once; a
// change, or an instant outside that span, gives a new one. A gate
// without events gives one that holds always. Errors: ErrUnknownGate.
func (w *Waitlist) PublishedEvents(gate string, now time.Time) (*PublishedEvents, error) {
	if _, err := w.gate(gate); err != nil {
		return nil, err
	}
	ge := w.ev.entry(gate)
	if ge == nil {
		return noEvents, nil
	}
	cur := ge.published.Load()
	if cur != nil && cur.Holds(now) {
		return cur, nil
	}
	p := &PublishedEvents{Events: ge.list}
	p.From, p.Until = PhaseSpan(ge.list, now)
	// Concurrent first calls in one span agree on the first stored; the
	// last asked for stays: calls at instants on both sides of a boundary
	// at once may swap it a few times, each a correct view.
	for range publishTries {
		if ge.published.CompareAndSwap(cur, p) {
			return p, nil
		}
		if cur = ge.published.Load(); cur != nil && cur.Holds(now) {
			return cur, nil
		}
	}
	return p, nil
}

// publishTries bounds the times PublishedEvents tries to store its view
// while calls at instants of other spans replace it: then it returns its
// own, correct but not stored.
const publishTries = 4

// AddEvent schedules a new event (ev.Gate names the gate) with a fresh
// secret seed, and returns it as stored; a pre-queue already open at now
// opens at once. Errors: ErrUnknownGate, ErrInvalidArgument (out of range,
// in the past, too far ahead, its pre-queue overlapping another's, too many
// events), a CodeEventExists error, ErrUnavailable, or the Store's.
func (w *Waitlist) AddEvent(ctx context.Context, ev ScheduledEvent) (ScheduledEvent, error) {
	return w.saveEvent(ctx, ev, true)
}

// ReplaceEvent changes the schedule and overrides of an event that is still
// scheduled (it keeps its seed). Errors: those of AddEvent, a
// CodeEventNotFound error instead of CodeEventExists, and a CodeEventLocked
// error once its pre-queue opened.
func (w *Waitlist) ReplaceEvent(ctx context.Context, ev ScheduledEvent) (ScheduledEvent, error) {
	return w.saveEvent(ctx, ev, false)
}

func (w *Waitlist) saveEvent(ctx context.Context, ev ScheduledEvent, create bool) (ScheduledEvent, error) {
	g, err := w.gate(ev.Gate)
	if err != nil {
		return ScheduledEvent{}, err
	}
	// Memory and the Store keep the event until it changes: the gate's own
	// name and a copy of the id, not the caller's (pieces of a request).
	ev.Gate, ev.ID = g.name(), strings.Clone(ev.ID)
	now := w.clock.Now()
	ev = ev.Schedule()
	ev.Seed = nil
	if err := ev.ValidateNew(now); err != nil {
		return ScheduledEvent{}, err
	}
	w.adminMu.Lock()
	defer w.adminMu.Unlock()
	if w.closed.Load() {
		return ScheduledEvent{}, ErrUnavailable
	}
	current, damaged, err := w.readStoreEvents(ctx, ev.Gate)
	if err != nil {
		return ScheduledEvent{}, err
	}
	exists := false
	for _, e := range current {
		if e.ID == ev.ID {
			exists = true
			if !create && e.Phase != EventScheduled {
				return ScheduledEvent{}, Errorf(CodeEventLocked, "event %q of gate %q is %s: it can no longer change", ev.ID, ev.Gate, e.Phase)
			}
		}
	}
	switch {
	case create && exists:
		return ScheduledEvent{}, Errorf(CodeEventExists, "gate %q has an event %q already", ev.Gate, ev.ID)
	case !create && !exists:
		return ScheduledEvent{}, EventNotFound(ev.Gate, ev.ID)
	}
	if err := ev.checkOverlap(current); err != nil {
		return ScheduledEvent{}, err
	}
	if create {
		if ev.Seed, err = NewLotterySeed(); err != nil {
			return ScheduledEvent{}, err
		}
	}
	saved, err := w.store.SaveEvent(ctx, ev)
	if err != nil {
		return ScheduledEvent{}, err
	}
	w.ev.changes.Add(1)
	w.ev.replace(ev.Gate, replaceEvent(current, saved), damaged)
	w.log.Info("anteroom: event scheduled", "gate", ev.Gate, "event", ev.ID, "prequeueAt", ev.PrequeueAt, "startsAt", ev.StartsAt, "shuffle", ev.Shuffle)
	if saved.Due(now) {
		if _, _, err := w.advanceEvent(ctx, saved.Gate, saved.ID, now); err != nil {
			return saved, err
		}
		for _, e := range w.ev.of(ev.Gate) {
			if e.ID == ev.ID {
				saved = e
			}
		}
	}
	return saved, nil
}

func replaceEvent(evs []ScheduledEvent, ev ScheduledEvent) []ScheduledEvent {
	out := make([]ScheduledEvent, 0, len(evs)+1)
	for _, e := range evs {
		if e.ID != ev.ID {
			out = append(out, e)
		}
	}
	return append(out, ev)
}

// RemoveEvent removes an event: one not yet in its pre-queue, or one that
// started (its overrides stop; its published lottery data goes). Errors:
// ErrUnknownGate, a CodeEventNotFound error, a CodeEventLocked error while
// its pre-queue is open, ErrUnavailable, or the Store's.
func (w *Waitlist) RemoveEvent(ctx context.Context, gate, id string) error {
	g, err := w.gate(gate)
	if err != nil {
		return err
	}
	gate = g.name() // memory's events are put back under it (refreshEvents)
	if !ValidGateName(id) {
		return EventNotFound(gate, id)
	}
	w.adminMu.Lock()
	defer w.adminMu.Unlock()
	if w.closed.Load() {
		return ErrUnavailable
	}
	if err := w.store.DeleteEvent(ctx, gate, id); err != nil {
		return err
	}
	w.refreshEvents(ctx, gate)
	w.log.Info("anteroom: event removed", "gate", gate, "event", id)
	return nil
}

// advanceEvent runs the transitions of one event due at now (Store.AdvanceEvent)
// and puts the result in memory.
func (w *Waitlist) advanceEvent(ctx context.Context, gate, id string, now time.Time) (ScheduledEvent, bool, error) {
	ev, changed, err := w.store.AdvanceEvent(ctx, gate, id, now)
	if err != nil {
		if errors.Is(err, &Error{Code: CodeEventNotFound}) {
			// Removed by another instance.
			w.ev.stale.Store(true)
		}
		return ev, false, err
	}
	w.ev.put(ev)
	if changed {
		switch ev.Phase {
		case EventPrequeue:
			w.log.Info("anteroom: event pre-queue opened", "gate", gate, "event", id, "firstPosition", ev.FirstPosition, "commitment", ev.Commitment())
		case EventStarted:
			w.log.Info("anteroom: event started", "gate", gate, "event", id, "prequeue", len(ev.Positions), "shuffle", ev.Shuffle)
		}
	}
	return ev, changed, nil
}

// advanceDue runs the transitions due at now of the gate's events. It
// returns the first error.
func (w *Waitlist) advanceDue(ctx context.Context, gate string, now time.Time) error {
	var first error
	for _, e := range w.ev.of(gate) {
		if !e.Due(now) {
			continue
		}
		if _, _, err := w.advanceEvent(ctx, gate, e.ID, now); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// AdvanceEvents runs every transition due now, on every gate; over a
// shared Store it first reads the events again every eventsReload (or
// after another instance started one), and on any Store those of a gate
// whose read after a change failed (refreshEvents). The sweeper and Update call it. It
// returns the first error.
func (w *Waitlist) AdvanceEvents(ctx context.Context) error {
	if w.closed.Load() {
		return ErrUnavailable
	}
	now := w.clock.Now()
	var first error
	set := w.set.Load()
	for _, name := range w.ev.takeUnread() { // a read after a change failed, or was overtaken
		if w.lookup(name) == nil {
			continue // removed since
		}
		if err := w.reloadEvents(ctx, name); err != nil {
			w.ev.markUnread(name)
			if first == nil {
				first = err
			}
		}
	}
	if w.ready != nil && (w.ev.stale.Load() || now.UnixNano()-w.ev.loadedAt.Load() >= int64(eventsReload)) {
		w.ev.stale.Store(false)
		w.ev.loadedAt.Store(now.UnixNano())
		for _, name := range set.names {
			if err := w.reloadEvents(ctx, name); err != nil && first == nil {
				first = err
			}
		}
	}
	for _, name := range set.names {
		if err := w.advanceDue(ctx, name, now); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// reloadEvents reads the gate's events (and damaged events) from the
// Store and puts them in memory (eventMemory.applyRead). The read takes
// no lock, so that a slow Store holds up neither the admin operations nor
// the sweeper; a read overtaken by an admin change of events is dropped
// and marked to be read again at the next AdvanceEvents. Errors: the
// Store's.
func (w *Waitlist) reloadEvents(ctx context.Context, gate string) error {
	changes := w.ev.changes.Load()
	evs, damaged, err := w.readStoreEvents(ctx, gate)
	if err != nil {
		return err
	}
	present := func() bool { return w.lookup(gate) != nil }
	if applied, gone := w.ev.applyRead(gate, changes, present, evs, damaged); !applied && !gone {
		w.ev.markUnread(gate)
	}
	return nil
}

// dropRemovedLocked forgets the events of gate that the store no longer
// has (stored is what it has), with mu held.
func (m *eventMemory) dropRemovedLocked(gate string, stored []ScheduledEvent) {
	keep := make(map[string]bool, len(stored))
	for _, e := range stored {
		keep[e.ID] = true
	}
	cur := m.of(gate)
	out := make([]ScheduledEvent, 0, len(cur))
	for _, e := range cur {
		if keep[e.ID] {
			out = append(out, e)
		}
	}
	if len(out) != len(cur) {
		m.setLocked(gate, out)
	}
}

// applyRead puts a read of the gate's events (and its damaged events) in
// memory, event by event where memory holds a later
// phase (put: a transition may have reached memory first), forgetting
// those the Store no longer has; unless, checked under mu with the put,
// the gate is gone from the gate set (present false: removed since the
// read) or memory's events changed since the read (changes moved: an admin
// change came between, which the older read would undo). It reports
// whether it put them, and gone when the gate is gone.
func (m *eventMemory) applyRead(gate string, changes int64, present func() bool, evs []ScheduledEvent, damaged []DamagedEvent) (applied, gone bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !present() {
		return false, true
	}
	if m.changes.Load() != changes {
		return false, false
	}
	for _, e := range evs {
		m.putLocked(e)
	}
	m.dropRemovedLocked(gate, evs)
	m.setDamagedLocked(gate, damaged)
	return true, false
}

// joinEvents runs the transitions due before a join at now, so that nobody
// joins a gate whose pre-queue should be open, or whose lottery should be
// drawn, before that happened. A failure is logged: the join still waits
// (EventConfig holds the line until the start is stored). The events are
// named by g's own name, not the join's (a piece of its request, which the
// event a transition stores would keep).
func (w *Waitlist) joinEvents(ctx context.Context, g *gateMemory, now time.Time) {
	gate := g.name()
	if err := w.advanceDue(ctx, gate, now); err != nil {
		w.log.Warn("anteroom: event transition before a join failed", "gate", gate, "err", err)
	}
}

// onEventCommit tells the clients of each session the lottery moved of its
// new position, and notes an event started elsewhere (a shared Store's
// follower) so that memory reads the events again.
func (w *Waitlist) onEventCommit(c Commit) {
	set := w.set.Load()
	now := w.clock.Now()
	for _, ev := range c.Events {
		switch ev.Kind {
		case EventReordered:
			if g := set.m[ev.Session.Gate]; g != nil && w.pub != nil {
				w.pub.PublishSession(g.sessionView(ev.Session, now))
			}
		case EventLaunched:
			w.ev.stale.Store(true)
		}
	}
}
