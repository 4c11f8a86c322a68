package session

import "sort"

// Runtime settings on a shared store. Several processes over one Store each
// keep the gates' settings in memory; a change made through one of them
// must reach the others. A Store that is a SettingsFollower reports every
// change of runtime settings, its own process's included, to the commit
// listener (Commit.Settings), in each gate's commit order, so that memory
// follows the Store's order and two operators' changes on two processes end
// the same everywhere. The Waitlist then takes settings from there only,
// never from what its caller asked for.

// SettingsFollower is implemented by a Store shared by several processes
// that reports every change of runtime settings to the commit listener
// (Commit.Settings), its own SaveGateSettings included, before that call
// returns. A gate added elsewhere comes with its state (Commit.Resync).
type SettingsFollower interface {
	// FollowsSettings marks the Store; it does nothing.
	FollowsSettings()
}

// followsSettings reports whether the Store reports settings changes.
func (w *Waitlist) followsSettings() bool {
	_, ok := w.store.(SettingsFollower)
	return ok
}

// followSettings applies c.Settings to memory and returns the gate set in
// effect afterwards. Per gate: settings replace the gate's (a gate unknown
// here is added from its state in c.Resync); nil goes back to the config
// file's settings, or removes a gate added at runtime. It runs on the
// Store's commit path: no Store call, no lock that a Store call holds.
func (w *Waitlist) followSettings(set *gateSet, c Commit) *gateSet {
	for _, name := range sortedNames(c.Settings) {
		cfg := c.Settings[name]
		g := set.m[name]
		switch {
		case cfg != nil && (cfg.Validate() != nil || cfg.Name != name):
			w.log.Warn("anteroom: settings of a gate from the store are invalid; ignored", "gate", name)
		case cfg != nil && g != nil:
			g.runtime.Store(true)
			if *g.cfg.Load() != *cfg {
				w.log.Info("anteroom: gate settings changed by another instance (or this one) followed", "gate", name, "settings", cfg.String())
			}
			w.apply(g, *cfg)
		case cfg != nil:
			snap, ok := c.Resync[name]
			if !ok {
				continue // a commit of this process's AddGate: AddGate installs it
			}
			snap.Settings = cfg
			g = w.newGateMemory(*cfg, snap)
			g.runtime.Store(true)
			set = w.swapSet(func(old *gateSet) *gateSet {
				if old.m[name] != nil {
					return old
				}
				return old.with(name, g)
			})
			w.log.Info("anteroom: gate added at runtime followed from the store", "gate", name, "settings", cfg.String())
			if w.pub != nil {
				w.pub.PublishGlobal(*g.view.Load())
			}
		case g == nil:
		case w.hasFile(name):
			if g.runtime.Swap(false) {
				w.log.Info("anteroom: gate settings reset to the config file's, followed from the store", "gate", name)
			}
			w.apply(g, w.files[name])
		default:
			set = w.swapSet(func(old *gateSet) *gateSet { return old.without(name) })
			w.ev.replace(name, nil, nil) // deleted with the gate (GateRemover)
			w.log.Info("anteroom: gate removed at runtime followed from the store", "gate", name)
		}
	}
	return set
}

func (w *Waitlist) hasFile(name string) bool {
	_, ok := w.files[name]
	return ok
}

// swapSet replaces the gate set with f's answer to the current one,
// atomically (f may run again when another change won), and returns it.
func (w *Waitlist) swapSet(f func(old *gateSet) *gateSet) *gateSet {
	for {
		old := w.set.Load()
		next := f(old)
		if next == old || w.set.CompareAndSwap(old, next) {
			return next
		}
	}
}

// with returns a copy of the set with name's memory set to g.
func (s *gateSet) with(name string, g *gateMemory) *gateSet {
	out := &gateSet{m: make(map[string]*gateMemory, len(s.m)+1)}
	for k, v := range s.m {
		out.m[k] = v
	}
	if out.m[name] == nil {
		out.names = append(append(out.names, s.names...), name)
		sort.Strings(out.names)
	} else {
		out.names = append(out.names, s.names...)
	}
	out.m[name] = g
	return out
}

// without returns a copy of the set without name (the set itself when it
// has no such gate).
func (s *gateSet) without(name string) *gateSet {
	if s.m[name] == nil {
		return s
	}
	out := &gateSet{m: make(map[string]*gateMemory, len(s.m))}
	for _, n := range s.names {
		if n != name {
			out.m[n] = s.m[n]
			out.names = append(out.names, n)
		}
	}
	return out
}

func sortedNames[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
