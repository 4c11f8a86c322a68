package session

import (
	"context"
)

// The gates' runtime changes: settings (SetGateConfig, ResetGateConfig) and
// the set of gates itself (AddGate, RemoveGate). Each is persisted in the
// Store (Store.SaveGateSettings) before it takes effect in memory, so what a
// caller was told survives a restart.

// GateStats is what an operator sees of a gate: its configuration, its
// global view, and its rates.
type GateStats struct {
	Config GateConfig
	// Effective is Config as in effect now: a scheduled event's pre-queue
	// holds the line (ModeQueueAll) and a running event overrides the limit
	// and the pace (EventConfig). View.Limit is its ActiveLimit.
	Effective GateConfig
	View      GlobalView
	// JoinsPerMinute counts new sessions (admitted at once or queued), and
	// AdmissionsPerMinute admissions (at join and promotions), over the last
	// five minutes; 0 until there is evidence (as GlobalView.AdmittedPerMinute).
	JoinsPerMinute      float64
	AdmissionsPerMinute float64
	// Runtime reports whether the configuration was set at runtime (it wins
	// over the config file's until reset), false when it is the file's.
	Runtime bool
	// Waits are the wait-time figures and the abandon rate (waitstats.go).
	Waits WaitStats
	// DamagedEvents are the gate's stored events that do not decode, as
	// its Store last reported them (DamageReporter); one that holds the
	// gate makes Effective hold it too.
	DamagedEvents []DamagedEvent
}

// Stats returns the gate's GateStats now, from memory, or ErrUnknownGate.
func (w *Waitlist) Stats(gate string) (GateStats, error) {
	g, err := w.gate(gate)
	if err != nil {
		return GateStats{}, err
	}
	now := w.clock.Now()
	return GateStats{
		Config:              g.config(),
		Effective:           w.opConfig(g, now),
		View:                g.currentView(now),
		JoinsPerMinute:      g.joined.perMinute(now),
		AdmissionsPerMinute: g.admissions.perMinute(now),
		Runtime:             g.runtime.Load(),
		Waits:               g.waitStats(now),
		DamagedEvents:       w.ev.damagedOf(gate),
	}, nil
}

// SetGateConfig changes a gate's configuration (cfg.Name names it) at
// runtime: persisted first (it wins over the config file's from then on,
// also after a restart), then in effect. A raised limit, a reopened gate or
// a faster pace promotes waiters at once; a lowered limit admits nobody new
// until the active sessions fall below it. It returns the configuration in
// effect. Errors: ErrInvalidArgument (cfg out of range), ErrUnknownGate,
// ErrUnavailable after Close, or the Store's (then nothing changed, unless
// only the promotion after it failed).
func (w *Waitlist) SetGateConfig(ctx context.Context, cfg GateConfig) (GateConfig, error) {
	if err := cfg.Validate(); err != nil {
		return GateConfig{}, err
	}
	w.adminMu.Lock()
	defer w.adminMu.Unlock()
	g, err := w.gate(cfg.Name)
	if err != nil {
		return GateConfig{}, err
	}
	if w.closed.Load() {
		return GateConfig{}, ErrUnavailable
	}
	if err := w.store.SaveGateSettings(ctx, cfg.Name, &cfg); err != nil {
		return GateConfig{}, err
	}
	if !w.followsSettings() { // else the Store's commit listener applied it
		g.runtime.Store(true)
		w.apply(g, cfg)
	}
	return cfg, w.fill(ctx, g)
}

// ResetGateConfig forgets a gate's runtime settings and goes back to the
// configuration New was given for it (the config file's). Errors:
// ErrUnknownGate, ErrInvalidArgument for a gate added at runtime (it has no
// file configuration: remove it instead), ErrUnavailable, or the Store's.
func (w *Waitlist) ResetGateConfig(ctx context.Context, gate string) (GateConfig, error) {
	w.adminMu.Lock()
	defer w.adminMu.Unlock()
	g, err := w.gate(gate)
	if err != nil {
		return GateConfig{}, err
	}
	cfg, ok := w.files[gate]
	if !ok {
		return GateConfig{}, Errorf(CodeInvalidArgument, "gate %q was added at runtime and has no configured settings to go back to", gate)
	}
	if w.closed.Load() {
		return GateConfig{}, ErrUnavailable
	}
	if err := w.store.SaveGateSettings(ctx, gate, nil); err != nil {
		return GateConfig{}, err
	}
	if !w.followsSettings() { // else the Store's commit listener applied it
		g.runtime.Store(false)
		w.apply(g, cfg)
	}
	return cfg, w.fill(ctx, g)
}

// AddGate adds a gate at runtime, persisted (it comes back after a
// restart until removed). Errors: ErrInvalidArgument, a CodeGateExists
// error when the name is taken, ErrUnavailable, or the Store's.
func (w *Waitlist) AddGate(ctx context.Context, cfg GateConfig) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	w.adminMu.Lock()
	defer w.adminMu.Unlock()
	if w.lookup(cfg.Name) != nil {
		return Errorf(CodeGateExists, "gate %q already exists", cfg.Name)
	}
	if w.closed.Load() {
		return ErrUnavailable
	}
	if err := w.store.SaveGateSettings(ctx, cfg.Name, &cfg); err != nil {
		return err
	}
	if g := w.lookup(cfg.Name); g != nil {
		// A Store that follows settings installed it from its commit.
		w.log.Info("anteroom: gate added at runtime", "gate", cfg.Name, "settings", cfg.String())
		return w.fill(ctx, g)
	}
	snaps, err := w.store.Load(ctx, []string{cfg.Name})
	if err != nil {
		return err
	}
	g := w.newGateMemory(cfg, snaps[cfg.Name])
	w.ev.replace(cfg.Name, append([]ScheduledEvent(nil), snaps[cfg.Name].Events...), snaps[cfg.Name].DamagedEvents)
	g.runtime.Store(true)
	w.swapSet(func(old *gateSet) *gateSet { return old.with(cfg.Name, g) })
	w.log.Info("anteroom: gate added at runtime", "gate", cfg.Name, "settings", cfg.String())
	if w.pub != nil {
		w.pub.PublishGlobal(*g.view.Load())
	}
	return w.fill(ctx, g)
}

// RemoveGate removes a gate at runtime: one nobody is in, or one in
// ModeReject (its sessions stay in the Store, and come back with the gate if
// it is added again), and not while a scheduled event's pre-queue is open.
// Its runtime settings, scheduled events and priority codes are deleted
// (Store.RemoveGate, in one transaction); a gate of the config file comes
// back at the next start with the file's settings and events. A join that
// commits between the Store's removal and memory's may leave a session in
// the Store, which comes back with the gate if it is added again. Errors:
// ErrUnknownGate, a CodeGateInUse error for a gate with sessions that is not in reject mode, a
// CodePrequeueOpen error, ErrUnavailable, or the Store's.
func (w *Waitlist) RemoveGate(ctx context.Context, gate string) error {
	w.adminMu.Lock()
	defer w.adminMu.Unlock()
	g, err := w.gate(gate)
	if err != nil {
		return err
	}
	if w.closed.Load() {
		return ErrUnavailable
	}
	v, cfg, now := g.view.Load(), g.config(), w.clock.Now()
	if err := CheckRemoveGate(cfg, Counters{Active: v.Active, Waiting: v.Waiting}, w.ev.of(gate), now); err != nil {
		return err
	}
	// The Store decides under the gate's lock, on its counters: a join
	// committed meanwhile makes it refuse. The gate stays in memory until
	// then, so that memory follows every commit of a gate that stays.
	if err := w.store.RemoveGate(ctx, cfg, now); err != nil {
		return err
	}
	w.swapSet(func(old *gateSet) *gateSet { return old.without(gate) })
	w.ev.replace(gate, nil, nil)
	w.log.Info("anteroom: gate removed at runtime", "gate", gate)
	return nil
}

// apply puts cfg in effect in the gate's memory and tells clients of the
// new limit.
func (w *Waitlist) apply(g *gateMemory, cfg GateConfig) {
	g.cfg.Store(&cfg)
	w.publishLimit(g, g.limitAt(w.clock.Now())) // a running event's override stays in effect
}

// publishLimit stores limit, the gate's limit in effect, in its global view
// and tells clients, when it changed: a runtime change, or a scheduled
// event's override that began or ended (no commit marks those).
func (w *Waitlist) publishLimit(g *gateMemory, limit int64) {
	for {
		old := g.view.Load()
		if old.Limit == limit {
			return
		}
		v := *old
		v.Limit = limit
		if g.view.CompareAndSwap(old, &v) {
			if w.pub != nil {
				w.pub.PublishGlobal(v)
			}
			return
		}
	}
}

// fill promotes waiters into the gate's free slots now, when it admits
// (Store.Purge with no ids).
func (w *Waitlist) fill(ctx context.Context, g *gateMemory) error {
	cfg := w.opConfig(g, w.clock.Now())
	if !g.fillable(cfg) {
		return nil
	}
	_, err := w.store.Purge(ctx, cfg, nil, w.clock.Now())
	return err
}
