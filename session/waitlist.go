package session

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Options tune a Waitlist. The zero value of each field picks its default.
type Options struct {
	// Clock tells the time for every rule. Default: SystemClock.
	Clock Clock
	// Publisher is told of every change clients must see. Default: none.
	Publisher Publisher
	// Logger receives update reports and warnings. Default: slog.Default().
	Logger *slog.Logger
	// TouchInterval is how often refreshed LastActive values are persisted;
	// in memory they are always exact. Default 5s; negative disables the
	// background flusher (Update and Close still flush).
	TouchInterval time.Duration
	// UpdateChunk is the most rows one transaction of an update touches
	// (Store.Update's chunk), and the most refreshes one Store.Touch call
	// persists: joins queued behind either wait for one such transaction at
	// most. It is the one setting of that size. Default DefaultUpdateChunk.
	UpdateChunk int
	// SweepInterval is how often unclaimed promotions past their deadline
	// and sessions disconnected past their grace are looked for (Sweep).
	// Default 250ms; negative disables the background sweeper (tests call
	// Sweep themselves).
	SweepInterval time.Duration
	// Ready, when set, tells whether memory follows the Store: a Store shared
	// by several processes returns an error while it may have missed the
	// others' commits. Validate then answers that error (wrapping
	// ErrUnavailable) rather than read stale memory. Default: always ready.
	Ready func() error
	// Observer, when set, is called with every commit of the Store after
	// the service applied it to memory and told the Publisher (metrics
	// count joins, admissions and purges from it). It is called on the
	// Store's commit path, one commit at a time: it must not block nor
	// keep the Commit.
	Observer func(Commit)
	// UpdateObserver, when set, is called with the report of each gate's
	// update (Update), its Duration included. It must not block.
	UpdateObserver func(UpdateReport)
	// Events are the configured scheduled events (events.go), stored at New.
	Events []ScheduledEvent
	// HistoryRetention is how long the Store's history is kept: each Update
	// prunes older records. Zero: DefaultHistoryRetention; negative: never
	// pruned.
	HistoryRetention time.Duration
}

// DefaultUpdateChunk is the default Options.UpdateChunk, and the chunk a
// Store uses when Update is asked for none.
const DefaultUpdateChunk = 256

// UpdateChunkGrowth bounds how far a Store may grow an update's transactions
// beyond the chunk while no other operation waits for its writer
// (Store.Update).
const UpdateChunkGrowth = 8

// UpdateYieldRows and UpdateYieldAfter bound how long an update's
// transaction holds another operation that waits for the Store's writer
// (Store.Update): once one waits, the transaction ends at the first step of
// at most UpdateYieldRows rows that ends UpdateYieldAfter or more after the
// transaction began. A join queued behind an update waits for a few
// milliseconds and a commit, not for a whole chunk of scattered deletions,
// and an update under a steady flow of joins still commits a few hundred
// rows at a time on a quick machine, not one step at a time.
const (
	UpdateYieldRows  = 32
	UpdateYieldAfter = 2 * time.Millisecond
)

const (
	defaultTouchInterval = 5 * time.Second
	defaultSweepInterval = 250 * time.Millisecond
)

// Waitlist is the service: the operations of the model over a Store, with
// the hot reads (validate, the global view) answered from memory that is
// updated only after each commit. All methods are safe for concurrent use.
type Waitlist struct {
	store  Store
	clock  Clock
	pub    Publisher
	obs    func(Commit)
	updObs func(UpdateReport)
	log    *slog.Logger
	chunk  int
	ready  func() error
	// retention is Options.HistoryRetention (<= 0: no pruning).
	retention time.Duration
	// set holds the gates, copied on write (AddGate, RemoveGate) so that
	// every hot read looks a gate up without a lock.
	set atomic.Pointer[gateSet]
	// early keeps the commits a Store delivers while New builds memory
	// (starting is set): a shared Store's follower may apply another
	// instance's commit between Load's snapshot and the gate set, and it
	// would be lost, its seq passed. New replays them, in order, once the
	// set exists; a commit delivered meanwhile waits for the replay.
	starting atomic.Bool
	early    struct {
		mu  sync.Mutex
		buf []Commit
	}
	// files are the gates' configurations as the caller gave them to New
	// (the config file), for ResetGateConfig. Never written after New.
	files  map[string]GateConfig
	closed atomic.Bool
	// adminMu serialises the runtime changes of gates (SetGateConfig,
	// ResetGateConfig, AddGate, RemoveGate).
	adminMu sync.Mutex

	updateMu    sync.Mutex
	stopFlusher chan struct{}
	flusherDone chan struct{}
	sweeperDone chan struct{}
	closeOnce   sync.Once

	ev eventMemory // scheduled events (events_waitlist.go)
}

// gateSet is the service's gates: by name, and the names sorted. Never
// written once published.
type gateSet struct {
	m     map[string]*gateMemory
	names []string
}

// gateMemory is what the service keeps in memory of one gate.
type gateMemory struct {
	// cfg is the gate's current configuration, replaced whole at runtime
	// (SetGateConfig); read it once per operation with config().
	cfg    atomic.Pointer[GateConfig]
	mu     sync.RWMutex
	active walkSet[*activeEntry]
	// line holds the waiting positions, for exact places; present the
	// sessions with open sockets or signs of life not yet persisted.
	line     lineIndex
	prio     lineIndex // the priority lane's waiting positions (line holds the normal lane's)
	present  walkSet[*presence]
	view     atomic.Pointer[GlobalView]
	admitted rateWindow
	// joined counts new sessions, admissions sessions admitted (at join or
	// promoted), for GateStats.
	joined, admissions rateWindow
	// runtime: cfg was set at runtime and persisted (GateStats.Runtime).
	runtime atomic.Bool
	// waits and abandoned feed GateStats' wait figures (waitstats.go).
	waits     waitWindow
	abandoned rateWindow
	// events are the Waitlist's scheduled events: the views show the limit
	// in effect (limitAt), an event's override included.
	events *eventMemory
	// links are the claim links the Store settled on this instance while
	// memory could not (claimlink.go).
	links linkMemo
}

type activeEntry struct {
	walkSlot
	position   int64
	lastActive atomic.Int64 // unix nanoseconds, exact
	persisted  atomic.Int64 // unix nanoseconds, as the store has it
	// claimDeadline is the unclaimed session's deadline (unix nanoseconds),
	// 0 once claimed; claimPending is the deadline of a claim made here and
	// not yet persisted (0: none), which names the promotion it claimed
	// (Touch.ClaimDeadline).
	claimDeadline atomic.Int64
	claimPending  atomic.Int64
	// promotion is the claim deadline of the promotion memory applied to
	// this entry, kept after the claim (0: memory never saw it unclaimed);
	// it tells a claim link memory can decide from one it cannot
	// (claimlink.go).
	promotion atomic.Int64
	// disconnectedAt is when the session's last socket closed, 0 while one
	// is open or when it never had one.
	disconnectedAt atomic.Int64
}

// presence is what the service knows of a session's signs of life beyond
// its row: its open sockets and, for a waiter, when it was last seen.
type presence struct {
	walkSlot
	sockets   int32
	lastSeen  int64 // unix nanoseconds
	persisted int64 // unix nanoseconds of the last sign of life persisted by a Touch
}

// New loads the state of the given gates from store and returns the service
// over it. It returns an ErrInvalidArgument error when no gate is given, a
// name repeats or a GateConfig is out of range, and the Store's error when
// loading fails. The caller keeps ownership of store: Close the Waitlist
// first, then the Store.
func New(ctx context.Context, store Store, gates []GateConfig, opts Options) (_ *Waitlist, err error) {
	if len(gates) == 0 {
		return nil, Errorf(CodeInvalidArgument, "no gate configured")
	}
	w := &Waitlist{
		store:  store,
		clock:  opts.Clock,
		pub:    opts.Publisher,
		obs:    opts.Observer,
		updObs: opts.UpdateObserver,
		log:    opts.Logger,
		chunk:  opts.UpdateChunk,
		ready:  opts.Ready,
		files:  make(map[string]GateConfig, len(gates)),

		retention: opts.HistoryRetention,
	}
	if w.retention == 0 {
		w.retention = DefaultHistoryRetention
	}
	if w.clock == nil {
		w.clock = SystemClock{}
	}
	if w.log == nil {
		w.log = slog.Default()
	}
	if w.chunk <= 0 {
		w.chunk = DefaultUpdateChunk
	}
	names := make([]string, 0, len(gates))
	for _, cfg := range gates {
		if err := cfg.Validate(); err != nil {
			return nil, err
		}
		if _, dup := w.files[cfg.Name]; dup {
			return nil, Errorf(CodeInvalidArgument, "gate %q configured twice", cfg.Name)
		}
		w.files[cfg.Name] = cfg
		names = append(names, cfg.Name)
	}
	sort.Strings(names)

	w.starting.Store(true)
	defer func() {
		if err != nil {
			w.set.Store(nil) // a late commit finds no gate: nothing follows a Waitlist never returned
			w.endStart(nil)
		}
	}()
	store.SetCommitListener(w.onCommit)
	snaps, err := store.Load(ctx, names)
	if err != nil {
		return nil, err
	}
	set := &gateSet{m: make(map[string]*gateMemory, len(snaps))}
	for name, snap := range snaps {
		cfg, inFile := w.files[name]
		runtime := false
		switch {
		case snap.Settings != nil && snap.Settings.Validate() == nil && snap.Settings.Name == name:
			if inFile {
				w.log.Info("anteroom: gate settings changed at runtime win over the config file's (reset them through the admin API)",
					"gate", name, "file", cfg.String(), "store", snap.Settings.String())
			} else {
				w.log.Info("anteroom: gate added at runtime restored from the store", "gate", name, "settings", snap.Settings.String())
			}
			cfg, runtime = *snap.Settings, true
		case snap.Settings != nil:
			w.log.Warn("anteroom: persisted gate settings are invalid; ignored", "gate", name)
			if !inFile {
				continue
			}
		case !inFile:
			continue // the Store returned a gate nobody asked for
		}
		g := w.newGateMemory(cfg, snap)
		g.runtime.Store(runtime)
		set.m[name] = g
		set.names = append(set.names, name)
	}
	for _, name := range names {
		if set.m[name] == nil {
			return nil, Errorf(CodeInternal, "store did not load gate %q", name)
		}
	}
	sort.Strings(set.names)
	w.set.Store(set)
	if err := w.initEvents(ctx, snaps, opts.Events); err != nil {
		return nil, err
	}
	// After the events too: a commit kept meanwhile (say an event another
	// instance launched) lands on the events Load read, not under them.
	w.endStart(w.applyCommit)

	interval := opts.TouchInterval
	if interval == 0 {
		interval = defaultTouchInterval
	}
	w.stopFlusher = make(chan struct{})
	w.flusherDone = make(chan struct{})
	w.sweeperDone = make(chan struct{})
	if interval > 0 {
		go w.runFlusher(interval)
	} else {
		close(w.flusherDone)
	}
	sweep := opts.SweepInterval
	if sweep == 0 {
		sweep = defaultSweepInterval
	}
	if sweep > 0 {
		go w.runSweeper(sweep)
	} else {
		close(w.sweeperDone)
	}
	return w, nil
}

// newGateMemory builds a gate's memory from its loaded snapshot.
func (w *Waitlist) newGateMemory(cfg GateConfig, snap GateSnapshot) *gateMemory {
	g := &gateMemory{active: newWalkSet[*activeEntry](), present: newWalkSet[*presence](), events: &w.ev}
	g.cfg.Store(&cfg)
	for _, s := range snap.Active {
		e := &activeEntry{position: s.Position}
		e.lastActive.Store(s.LastActive.UnixNano())
		e.persisted.Store(s.LastActive.UnixNano())
		if !s.ClaimDeadline.IsZero() {
			e.awaitClaim(s.ClaimDeadline.UnixNano())
		}
		g.active.put(s.ID, e)
	}
	g.resetLines(snap)
	v := g.globalView(snap.State, w.clock.Now())
	g.view.Store(&v)
	return g
}

// config is the gate's current configuration.
func (g *gateMemory) config() GateConfig { return *g.cfg.Load() }

// name is the gate's name: memory's own string, which is what anything
// kept beyond a call names the gate by (a caller's name may be a piece of
// its request).
func (g *gateMemory) name() string { return g.cfg.Load().Name }

// Gates returns the gate names, sorted.
func (w *Waitlist) Gates() []string { return append([]string(nil), w.set.Load().names...) }

// lookup returns the named gate's memory, or nil.
func (w *Waitlist) lookup(name string) *gateMemory { return w.set.Load().m[name] }

// GateConfig returns the configuration of a gate, or ErrUnknownGate.
func (w *Waitlist) GateConfig(gate string) (GateConfig, error) {
	g, err := w.gate(gate)
	if err != nil {
		return GateConfig{}, err
	}
	return g.config(), nil
}

// Join puts the session in line, or lets it in, per DecideJoin, and returns
// its view. Errors: ErrUnknownGate, ErrInvalidArgument (malformed id),
// ErrUnavailable after Close, or the Store's.
func (w *Waitlist) Join(ctx context.Context, gate, id string) (SessionView, error) {
	g, err := w.writable(gate, id)
	if err != nil {
		return SessionView{}, err
	}
	now := w.clock.Now()
	w.joinEvents(ctx, g, now)
	s, err := w.store.Join(ctx, w.opConfig(g, now), id, now)
	if err != nil {
		return SessionView{}, err
	}
	return g.sessionView(s, w.clock.Now()), nil
}

// Leave marks a waiting session's departure (it is purged after the waiting
// timeout unless it joins again) and refreshes an active one. Leaving a
// session that does not exist is not an error. Errors: ErrUnknownGate,
// ErrInvalidArgument, ErrUnavailable, or the Store's.
func (w *Waitlist) Leave(ctx context.Context, gate, id string) error {
	g, err := w.writable(gate, id)
	if err != nil {
		return err
	}
	if _, err := w.store.Leave(ctx, g.config(), id, w.clock.Now()); err != nil && !errors.Is(err, ErrNotFound) {
		return err
	}
	return nil
}

// Release ends a session now; when it was active, the freed slot goes to the
// first waiter in the same transaction. Releasing a session that does not
// exist is not an error. Errors: ErrUnknownGate, ErrInvalidArgument,
// ErrUnavailable, or the Store's.
func (w *Waitlist) Release(ctx context.Context, gate, id string) error {
	g, err := w.writable(gate, id)
	if err != nil {
		return err
	}
	now := w.clock.Now()
	if _, err := w.store.Release(ctx, w.opConfig(g, now), id, now); err != nil && !errors.Is(err, ErrNotFound) {
		return err
	}
	return nil
}

// ValidateSessionIsActive returns nil when the session exists and is active,
// ErrNotActive when it is waiting or unknown, ErrUnknownGate, and the error
// of Options.Ready (ErrUnavailable) while memory may be stale. It is read
// from memory only and does not allocate.
//
// It never refreshes the session's LastActive (the contract's read-only
// check: a session validated only this way expires ActiveTimeout after its
// last sign of life). A promoted session whose slot waits to be claimed is
// claimed, without a refresh, because the request is the person arriving
// with the session's credential, and letting it through unclaimed would
// serve a person whose slot is purged at its claim deadline; it then lives
// exactly as a session promoted without a claim window does.
func (w *Waitlist) ValidateSessionIsActive(gate, id string) error {
	g := w.lookup(gate)
	if g == nil {
		return ErrUnknownGate
	}
	if err := w.following(); err != nil {
		return err
	}
	g.mu.RLock()
	e := g.active.get(id)
	g.mu.RUnlock()
	if e == nil {
		return ErrNotActive
	}
	claimSlot(e)
	return nil
}

// ValidateSessionAndRefreshLastActive is ValidateSessionIsActive that also
// sets the session's LastActive to now: exactly in memory at once, persisted
// at most every TouchInterval (and before every update).
func (w *Waitlist) ValidateSessionAndRefreshLastActive(gate, id string) error {
	g := w.lookup(gate)
	if g == nil {
		return ErrUnknownGate
	}
	if err := w.following(); err != nil {
		return err
	}
	g.mu.RLock()
	e := g.active.get(id)
	g.mu.RUnlock()
	if e == nil {
		return ErrNotActive
	}
	signActive(e, w.clock.Now().UnixNano())
	return nil
}

// slot is e's place in its gate's active set (walkSet).
func (e *activeEntry) slot() *walkSlot { return &e.walkSlot }

// awaitClaim records promotion d (its claim deadline, unix nanoseconds)
// on e, unclaimed.
func (e *activeEntry) awaitClaim(d int64) {
	e.claimDeadline.Store(d)
	e.promotion.Store(d)
}

// signActive records a sign of life of an active session at now: its
// LastActive moves forward, and an unclaimed slot is claimed.
func signActive(e *activeEntry, now int64) {
	for {
		old := e.lastActive.Load()
		if old >= now || e.lastActive.CompareAndSwap(old, now) {
			break
		}
	}
	claimSlot(e)
}

// claimSlot claims e's promoted slot when it is unclaimed, without moving
// its LastActive: the claim is persisted by the next touch flush, for the
// promotion whose deadline it took from claimDeadline.
func claimSlot(e *activeEntry) {
	if e.claimDeadline.Load() == 0 {
		return
	}
	if d := e.claimDeadline.Swap(0); d != 0 {
		e.claimPending.Store(d)
	}
}

// Status returns the session's view: active sessions from memory, others from
// the Store. Errors: ErrUnknownGate, ErrInvalidArgument, ErrNotFound, or the
// Store's.
func (w *Waitlist) Status(ctx context.Context, gate, id string) (SessionView, error) {
	g, err := w.gate(gate)
	if err != nil {
		return SessionView{}, err
	}
	if err := checkID(id); err != nil {
		return SessionView{}, err
	}
	now := w.clock.Now()
	g.mu.RLock()
	e := g.active.get(id)
	g.mu.RUnlock()
	if e != nil {
		// A request naming the session is a sign of life.
		signActive(e, now.UnixNano())
		return SessionView{GlobalView: g.currentView(now), Session: id, Status: StatusActive, Position: e.position}, nil
	}
	if w.closed.Load() {
		return SessionView{}, ErrUnavailable
	}
	s, err := w.store.Get(ctx, gate, id)
	if err != nil {
		return SessionView{}, err
	}
	if s.Status == StatusWaiting {
		g.seen(id, now.UnixNano())
	}
	return g.sessionView(s, now), nil
}

// Connect records an open socket of the session, a sign of life for as long
// as it stays open (an unclaimed promotion is claimed at once), and returns
// the function to call when it closes; the close of its last socket is a
// departure (see GateConfig.ReleaseOnDisconnect). The session need not
// exist. It returns ErrUnknownGate, or ErrInvalidArgument for a malformed
// id.
func (w *Waitlist) Connect(gate, id string) (disconnect func(), err error) {
	g, err := w.gate(gate)
	if err != nil {
		return nil, err
	}
	if err := checkID(id); err != nil {
		return nil, err
	}
	// The socket keeps the id for as long as it is open: a copy, not the
	// caller's memory (a token in a request's line or header).
	id = strings.Clone(id)
	now := w.clock.Now().UnixNano()
	g.mu.Lock()
	p := g.presenceOfOwned(id)
	p.sockets++
	p.lastSeen = max(p.lastSeen, now)
	e := g.active.get(id)
	g.mu.Unlock()
	if e != nil {
		signActive(e, now)
		e.disconnectedAt.Store(0)
	}
	var once sync.Once
	return func() { once.Do(func() { w.disconnect(g, id) }) }, nil
}

func (w *Waitlist) disconnect(g *gateMemory, id string) {
	now := w.clock.Now().UnixNano()
	g.mu.Lock()
	p := g.presenceOf(id)
	p.sockets--
	p.lastSeen = max(p.lastSeen, now)
	last := p.sockets <= 0
	e := g.active.get(id)
	g.mu.Unlock()
	if e != nil && last {
		signActive(e, now)
		e.disconnectedAt.Store(now)
	}
}

// seen records a sign of life of a waiter at now, persisted by the next
// flush.
func (g *gateMemory) seen(id string, now int64) {
	g.mu.Lock()
	p := g.presenceOf(id)
	p.lastSeen = max(p.lastSeen, now)
	g.mu.Unlock()
}

// slot is p's place in its gate's present set (walkSet).
func (p *presence) slot() *walkSlot { return &p.walkSlot }

// presenceOf returns the session's presence entry, creating it with a copy
// of id: the entry lives longer than the request whose memory id may be a
// piece of. g.mu must be held for writing.
func (g *gateMemory) presenceOf(id string) *presence {
	if p := g.present.get(id); p != nil {
		return p
	}
	return g.presenceOfOwned(strings.Clone(id))
}

// presenceOfOwned is presenceOf for an id that is the caller's own copy,
// which a new entry keeps.
func (g *gateMemory) presenceOfOwned(id string) *presence {
	p := g.present.get(id)
	if p == nil {
		p = &presence{}
		g.present.put(id, p)
	}
	return p
}

// Sweep passes on at once the slots of promoted sessions that did not claim
// them by their deadline (Store.Purge), promotes waiters into free slots of
// an open gate (as pacing tokens come back: Store.Purge with no ids), and
// releases the active sessions
// whose last socket closed longer than their gate's ReleaseOnDisconnect ago
// without a sign of life since. The background sweeper calls it every
// Options.SweepInterval. It returns the first Store error, or
// ErrUnavailable after Close.
func (w *Waitlist) Sweep(ctx context.Context) error {
	if w.closed.Load() {
		return ErrUnavailable
	}
	firstErr := w.AdvanceEvents(ctx)
	set := w.set.Load()
	for _, name := range set.names {
		g := set.m[name]
		now := w.clock.Now()
		cfg := w.opConfig(g, now)
		w.publishLimit(g, cfg.ActiveLimit)
		nowN := now.UnixNano()
		grace := int64(cfg.ReleaseOnDisconnect)
		// gone: an active session whose last socket closed longer than the
		// grace ago, with no sign of life since. g.mu must be held.
		gone := func(id string, e *activeEntry) bool {
			if grace <= 0 || e.claimDeadline.Load() != 0 {
				return false
			}
			dc := e.disconnectedAt.Load()
			if dc == 0 || nowN-dc < grace || e.lastActive.Load() > dc {
				return false
			}
			p := g.present.get(id)
			return p == nil || p.sockets <= 0
		}
		var unclaimed, released []string
		g.active.walkAll(g.mu.RLocker(), func(id string, e *activeEntry) {
			if d := e.claimDeadline.Load(); d != 0 && nowN > d {
				unclaimed = append(unclaimed, id)
			} else if gone(id, e) {
				released = append(released, id)
			}
		})
		// The walk may visit a session twice (walkSet).
		slices.Sort(unclaimed)
		unclaimed = slices.Compact(unclaimed)
		slices.Sort(released)
		released = slices.Compact(released)
		if len(unclaimed) > 0 || g.fillable(cfg) {
			if _, err := w.store.Purge(ctx, cfg, unclaimed, now); err != nil && firstErr == nil {
				firstErr = err
			}
		}
		for _, id := range released {
			// Asked again just before: a socket may have opened since the
			// walk saw the session (Store.Release does not know sockets).
			g.mu.RLock()
			e := g.active.get(id)
			still := e != nil && gone(id, e)
			g.mu.RUnlock()
			if !still {
				continue
			}
			if _, err := w.store.Release(ctx, cfg, id, now); err != nil && !errors.Is(err, ErrNotFound) && firstErr == nil {
				firstErr = err
			}
		}
	}
	return firstErr
}

// fillable reports whether memory shows waiters and free slots in a gate
// that admits: pacing held them back (its tokens come back with time), or
// the limit was raised. Sweep then has the Store promote (Store.Purge with
// no ids).
func (g *gateMemory) fillable(cfg GateConfig) bool {
	v := g.view.Load()
	return cfg.Mode.Admits() && v.AllWaiting() > 0 && v.Active < cfg.ActiveLimit
}

// Global returns the gate's global view from memory, its admission rate
// computed now, or ErrUnknownGate.
func (w *Waitlist) Global(gate string) (GlobalView, error) {
	g, err := w.gate(gate)
	if err != nil {
		return GlobalView{}, err
	}
	return g.currentView(w.clock.Now()), nil
}

// Ready reports whether the service can serve: ErrUnavailable after Close,
// the Store's error when it implements ReadyChecker and cannot write now
// (for /readyz), nil otherwise.
func (w *Waitlist) Ready(ctx context.Context) error {
	if w.closed.Load() {
		return ErrUnavailable
	}
	if rc, ok := w.store.(ReadyChecker); ok {
		return rc.Ready(ctx)
	}
	return nil
}

// Update runs the cron tick on every gate: it persists pending refreshes,
// then purges stale sessions and promotes waiters (Store.Update). It returns
// one report per gate; on error, the reports of the gates done so far and the
// error. Only one Update runs at a time.
func (w *Waitlist) Update(ctx context.Context) ([]UpdateReport, error) {
	if w.closed.Load() {
		return nil, ErrUnavailable
	}
	w.updateMu.Lock()
	defer w.updateMu.Unlock()
	if err := w.FlushTouches(ctx); err != nil {
		return nil, err
	}
	if err := w.AdvanceEvents(ctx); err != nil {
		w.log.Warn("anteroom: event transitions failed", "err", err)
	}
	set := w.set.Load()
	reports := make([]UpdateReport, 0, len(set.names))
	for _, name := range set.names {
		g := set.m[name]
		start := time.Now()
		now := w.clock.Now()
		r, err := w.store.Update(ctx, w.opConfig(g, now), now, w.chunk)
		r.Gate = name
		r.Duration = time.Since(start)
		if w.updObs != nil {
			w.updObs(r)
		}
		if err != nil {
			return reports, err
		}
		reports = append(reports, r)
	}
	if _, err := w.pruneHistory(ctx); err != nil {
		w.log.Warn("anteroom: pruning history failed", "err", err)
	}
	w.republishRates()
	return reports, nil
}

// republishRates publishes the global view of every gate whose admission
// rate changed since its view was last stored: the rate decays as
// promotions leave the window even when nothing commits, and clients must
// see it (the hub coalesces).
func (w *Waitlist) republishRates() {
	now := w.clock.Now()
	set := w.set.Load()
	for _, name := range set.names {
		g := set.m[name]
		rate := g.admitted.perMinute(now)
		for {
			old := g.view.Load()
			if old.AdmittedPerMinute == rate {
				break
			}
			v := *old
			v.AdmittedPerMinute = rate
			if g.view.CompareAndSwap(old, &v) { // lost to a commit: look again
				if w.pub != nil {
					w.pub.PublishGlobal(v)
				}
				break
			}
		}
	}
}

// FlushTouches persists the signs of life seen in memory since they were
// last persisted: every refreshed LastActive and claim of an active
// session (a claim names the promotion it was made under, so it claims
// nothing if the session was promoted again since), and a waiter's last
// sign of life when it has moved on by a quarter of the waiting timeout or
// when its last socket closed. Open sockets count as a sign of life now.
// It returns the Store's error, or ErrUnavailable. It sends at most
// Options.UpdateChunk per Store.Touch call.
func (w *Waitlist) FlushTouches(ctx context.Context) error {
	now := w.clock.Now().UnixNano()
	set := w.set.Load()
	for _, name := range set.names {
		g := set.m[name]
		cfg := g.config()
		var touches []Touch
		var entries []*activeEntry
		var waiters []*presence
		activeEvery := int64(cfg.ActiveTimeout / 8)
		waitingEvery := int64(cfg.WaitingTimeout / 4)
		// In steps (walkSet.walkAll): a session visited twice is touched
		// twice, which the store takes as once with the later figures
		// (DecideTouch only moves forward). Open sockets are signs of
		// life now, so the present sessions go first: an active one they
		// sign is then among the active sessions to persist.
		var waiterTouches []Touch
		g.present.walkAll(&g.mu, func(id string, p *presence) {
			if p.sockets > 0 {
				p.lastSeen = max(p.lastSeen, now)
			}
			if e := g.active.get(id); e != nil {
				if p.sockets <= 0 {
					g.present.remove(id)
				} else if now-e.lastActive.Load() >= activeEvery {
					signActive(e, now)
				}
				return
			}
			if p.lastSeen <= p.persisted {
				if p.sockets <= 0 {
					g.present.remove(id)
				}
				return
			}
			if p.sockets > 0 && p.lastSeen-p.persisted < waitingEvery {
				return
			}
			waiterTouches = append(waiterTouches, Touch{ID: id, LastActive: time.Unix(0, p.lastSeen)})
			waiters = append(waiters, p)
		})
		g.active.walkAll(g.mu.RLocker(), func(id string, e *activeEntry) {
			la := e.lastActive.Load()
			claim := e.claimPending.Load()
			if la != e.persisted.Load() || claim != 0 {
				t := Touch{ID: id, LastActive: time.Unix(0, la)}
				if claim != 0 {
					t.ClaimDeadline = time.Unix(0, claim)
				}
				touches = append(touches, t)
				entries = append(entries, e)
			}
		})
		touches = append(touches, waiterTouches...) // entries' first, as the bookkeeping after each Touch reads them
		if len(touches) == 0 {
			continue
		}
		for start := 0; start < len(touches); start += w.chunk {
			chunk := touches[start:min(len(touches), start+w.chunk)]
			if err := w.store.Touch(ctx, name, chunk); err != nil {
				return err
			}
			g.mu.Lock()
			for i, t := range chunk {
				if k := start + i; k < len(entries) {
					entries[k].persisted.Store(t.LastActive.UnixNano())
					if !t.ClaimDeadline.IsZero() {
						// Sent: the Store claimed it, or left it as
						// another promotion's. A later claim stays pending.
						entries[k].claimPending.CompareAndSwap(t.ClaimDeadline.UnixNano(), 0)
					}
				} else {
					p := waiters[k-len(entries)]
					p.persisted = max(p.persisted, t.LastActive.UnixNano())
				}
			}
			g.mu.Unlock()
		}
	}
	return nil
}

// Close stops the background flusher and persists pending refreshes. Later
// writes return ErrUnavailable; memory reads keep answering. It does not
// close the Store. It returns the error of the last flush.
func (w *Waitlist) Close() error {
	var err error
	w.closeOnce.Do(func() {
		close(w.stopFlusher)
		<-w.flusherDone
		<-w.sweeperDone
		w.updateMu.Lock()
		err = w.FlushTouches(context.Background())
		w.closed.Store(true)
		w.updateMu.Unlock()
	})
	return err
}

func (w *Waitlist) runFlusher(interval time.Duration) {
	defer close(w.flusherDone)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-w.stopFlusher:
			return
		case <-t.C:
			if err := w.FlushTouches(context.Background()); err != nil {
				w.log.Warn("anteroom: persisting last-active refreshes failed", "err", err)
			}
		}
	}
}

func (w *Waitlist) runSweeper(interval time.Duration) {
	defer close(w.sweeperDone)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-w.stopFlusher:
			return
		case <-t.C:
			if err := w.Sweep(context.Background()); err != nil && !errors.Is(err, ErrUnavailable) {
				w.log.Warn("anteroom: passing on unclaimed or disconnected slots failed", "err", err)
			}
		}
	}
}

// following returns nil when memory follows the Store (Options.Ready).
func (w *Waitlist) following() error {
	if w.ready == nil {
		return nil
	}
	if err := w.ready(); err != nil {
		if CodeOf(err) != CodeUnavailable {
			return Errorf(CodeUnavailable, "not following the store: %w", err)
		}
		return err
	}
	return nil
}

func (w *Waitlist) gate(name string) (*gateMemory, error) {
	g := w.lookup(name)
	if g == nil {
		return nil, Errorf(CodeUnknownGate, "unknown gate %q", name)
	}
	return g, nil
}

func (w *Waitlist) writable(gate, id string) (*gateMemory, error) {
	g, err := w.gate(gate)
	if err != nil {
		return nil, err
	}
	if err := checkID(id); err != nil {
		return nil, err
	}
	if w.closed.Load() {
		return nil, ErrUnavailable
	}
	return g, nil
}

// onCommit is the Store's commit listener: it applies the commit to memory,
// then tells the publisher.
func (w *Waitlist) onCommit(c Commit) {
	if w.starting.Load() {
		w.early.mu.Lock()
		if w.starting.Load() {
			w.early.buf = append(w.early.buf, c)
			w.early.mu.Unlock()
			return
		}
		w.early.mu.Unlock()
	}
	w.applyCommit(c)
}

// endStart ends New's start: the commits kept meanwhile go to replay (nil:
// dropped), in the order they came, and later ones are applied as they
// come.
func (w *Waitlist) endStart(replay func(Commit)) {
	w.early.mu.Lock()
	defer w.early.mu.Unlock()
	if replay != nil {
		for _, c := range w.early.buf {
			replay(c)
		}
	}
	w.early.buf = nil
	w.starting.Store(false)
}

// applyCommit makes memory follow commit c.
func (w *Waitlist) applyCommit(c Commit) {
	set := w.set.Load()
	if set == nil {
		return
	}
	for name, snap := range c.Resync {
		if g := set.m[name]; g != nil {
			g.resync(snap)
		}
	}
	set = w.followSettings(set, c)
	var promoted []Session
	for _, ev := range c.Events {
		g := set.m[ev.Session.Gate]
		if g == nil {
			continue // a gate no longer configured
		}
		g.noteWait(ev, w.clock)
		s := ev.Session
		switch ev.Kind {
		case EventActivated, EventPromoted, EventRefreshed:
			la := s.LastActive.UnixNano()
			g.mu.Lock()
			e := g.active.get(s.ID)
			if e == nil {
				e = &activeEntry{position: s.Position}
				// The set keeps the id as long as the session is active:
				// a copy, not the memory of the op that committed it (a
				// join's id may be a piece of its request's header).
				g.active.put(strings.Clone(s.ID), e)
				e.lastActive.Store(la)
			} else if la > e.lastActive.Load() {
				e.lastActive.Store(la)
			}
			e.persisted.Store(la)
			if s.ClaimDeadline.IsZero() {
				e.claimDeadline.Store(0)
			} else if d := s.ClaimDeadline.UnixNano(); ev.Kind == EventPromoted && e.promotion.Load() != d {
				// A promotion seen again (a commit delivered twice) must
				// not undo the claim memory made of it.
				e.awaitClaim(d)
			}
			if ev.Kind == EventPromoted {
				g.removeWaiter(s.Position)
				if p := g.present.get(s.ID); p != nil && p.sockets > 0 {
					// An open socket claims at once.
					signActive(e, max(la, p.lastSeen))
				}
			}
			g.mu.Unlock()
			if ev.Kind == EventPromoted {
				g.admitted.add(s.LastActive, 1)
				promoted = append(promoted, s)
			}
			if ev.Kind != EventRefreshed {
				g.admissions.add(s.LastActive, 1)
			}
			if ev.Kind == EventActivated {
				g.joined.add(s.CreatedAt, 1)
			}
		case EventDeactivated:
			g.mu.Lock()
			g.active.remove(s.ID)
			g.mu.Unlock()
		case EventQueued:
			g.mu.Lock()
			g.addWaiter(s)
			g.mu.Unlock()
			g.joined.add(s.CreatedAt, 1)
		case EventDequeued:
			g.mu.Lock()
			g.removeWaiter(s.Position)
			g.mu.Unlock()
		}
	}
	now := w.clock.Now()
	for name, st := range c.Gates {
		g := set.m[name]
		if g == nil {
			continue
		}
		v := g.globalView(st, now)
		g.view.Store(&v)
		if w.pub != nil {
			w.pub.PublishGlobal(v)
		}
	}
	if w.pub != nil {
		for _, s := range promoted {
			if g := set.m[s.Gate]; g != nil {
				w.pub.PublishSession(g.sessionView(s, now))
			}
		}
	}
	w.onEventCommit(c)
	if w.obs != nil {
		w.obs(c)
	}
}

// resync replaces the gate's active set with snap's, keeping the exact
// LastActive of the sessions that stay.
func (g *gateMemory) resync(snap GateSnapshot) {
	if snap.Settings != nil && snap.Settings.Validate() == nil && snap.Settings.Name == g.cfg.Load().Name {
		// Settings another instance changed (a shared store).
		c := *snap.Settings
		g.cfg.Store(&c)
		g.runtime.Store(true)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	// In place, so that a walk between two steps (walkSet) still visits
	// every session that stays.
	keep := make(map[string]bool, len(snap.Active))
	for _, s := range snap.Active {
		la := s.LastActive.UnixNano()
		e := g.active.get(s.ID)
		if e == nil || e.position != s.Position {
			e = &activeEntry{position: s.Position}
			e.lastActive.Store(la)
		} else if la > e.lastActive.Load() {
			e.lastActive.Store(la)
		}
		e.persisted.Store(la)
		e.claimDeadline.Store(0)
		if !s.ClaimDeadline.IsZero() {
			e.awaitClaim(s.ClaimDeadline.UnixNano())
		}
		g.active.put(s.ID, e)
		keep[s.ID] = true
	}
	g.active.walk(walkFromEnd, walkFromEnd, func(id string, _ *activeEntry) {
		if !keep[id] {
			g.active.remove(id)
		}
	})
	g.resetLines(snap)
}

func (g *gateMemory) globalView(st GateState, now time.Time) GlobalView {
	// Locked for writing: buckets keeps the starts it found for the next
	// commit.
	g.mu.Lock()
	buckets := g.line.buckets()
	st, prio := g.lanes(st)
	g.mu.Unlock()
	cfg := g.cfg.Load()
	return GlobalView{
		Priority:             prio,
		Gate:                 cfg.Name,
		FirstWaitingPosition: st.FirstWaitingPosition,
		LastWaitingPosition:  st.LastWaitingPosition,
		Waiting:              st.Waiting,
		Active:               st.Active,
		Limit:                g.limitAt(now),
		AdmittedPerMinute:    g.admitted.perMinute(now),
		Buckets:              buckets,
	}
}

// currentView is the stored global view with the admission rate as of now.
func (g *gateMemory) currentView(now time.Time) GlobalView {
	v := *g.view.Load()
	v.AdmittedPerMinute = g.admitted.perMinute(now)
	v.Limit = g.limitAt(now) // an event starts and ends with no commit
	return v
}

// limitAt is the active limit in effect at now: the configured one, or a
// running scheduled event's override (EventConfig).
func (g *gateMemory) limitAt(now time.Time) int64 {
	cfg := g.cfg.Load()
	if g.events != nil {
		if evs := g.events.of(cfg.Name); len(evs) > 0 {
			return EventConfig(*cfg, evs, now).ActiveLimit
		}
	}
	return cfg.ActiveLimit
}

func (g *gateMemory) sessionView(s Session, now time.Time) SessionView {
	v := SessionView{GlobalView: g.currentView(now), Session: s.ID, Status: s.Status, Position: s.Position, Notify: s.Notify}
	switch s.Status {
	case StatusWaiting:
		g.mu.RLock()
		v.Place, v.Lane = g.place(s.Position)
		g.mu.RUnlock()
		v.ClaimWindow = ClaimWindow(g.config(), s).Seconds()
	case StatusActive:
		d := s.ClaimDeadline
		g.mu.RLock()
		if e := g.active.get(s.ID); e != nil {
			d = time.Time{}
			if n := e.claimDeadline.Load(); n != 0 {
				d = time.Unix(0, n).UTC()
			}
		}
		g.mu.RUnlock()
		if !d.IsZero() {
			v.ClaimDeadline = &d
			v.ClaimWindow = ClaimWindow(g.config(), s).Seconds()
		}
	}
	return v
}

// rateWindow counts events in ten-second buckets over the last five minutes.
type rateWindow struct {
	mu      sync.Mutex
	buckets [rateBuckets]struct{ slot, n int64 }
}

const (
	rateBuckets    = 30
	rateBucketSpan = 10 * time.Second
)

func (r *rateWindow) add(t time.Time, n int64) {
	slot := t.UnixNano() / int64(rateBucketSpan)
	r.mu.Lock()
	b := &r.buckets[slot%rateBuckets]
	if b.slot != slot {
		b.slot, b.n = slot, 0
	}
	b.n += n
	r.mu.Unlock()
}

// Evidence needed before perMinute reports a rate: at least rateMinEvents
// events in the window, spread over at least rateMinSpan (first to last
// bucket). One promotion, or a burst of them in one tick, says nothing about
// how fast the line moves.
const (
	rateMinEvents = 3
	rateMinSpan   = time.Minute
)

// perMinute returns the events per minute over the part of the window ending
// at now that the evidence covers, or 0 while the window holds too little
// evidence for a rate.
func (r *rateWindow) perMinute(now time.Time) float64 {
	slot := now.UnixNano() / int64(rateBucketSpan)
	var sum int64
	first, last := int64(math.MaxInt64), int64(math.MinInt64)
	r.mu.Lock()
	for _, b := range r.buckets {
		if b.n > 0 && b.slot > slot-rateBuckets && b.slot <= slot {
			sum += b.n
			first, last = min(first, b.slot), max(last, b.slot)
		}
	}
	r.mu.Unlock()
	if sum < rateMinEvents || time.Duration(last-first)*rateBucketSpan < rateMinSpan {
		return 0
	}
	// Over the time the evidence covers (from its first bucket to now), not
	// the whole window: a gate that began admitting two minutes ago is not
	// five times slower than it is.
	span := time.Duration(slot-first+1) * rateBucketSpan
	return float64(sum) / span.Minutes()
}
