package sessiontest

import (
	"errors"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
)

// RandomSeedEnv names the environment variable that overrides the seed of
// the randomized test, to replay a failure.
const RandomSeedEnv = "ANTEROOM_SEED"

// RandomStepsEnv names the environment variable that overrides the number of
// steps of the randomized test.
const RandomStepsEnv = "ANTEROOM_STEPS"

const (
	defaultSeed  = 20260301
	defaultSteps = 3000
	randomIDs    = 150 // per gate
)

// model is the reference the randomized test holds the Store to: a map and a
// counter per gate, with the rules written out as plainly as possible.
type model struct {
	gates map[string]*modelGate
}

type modelGate struct {
	cfg      session.GateConfig
	next     int64
	sessions map[string]*modelSession
}

type modelSession struct {
	position  int64
	active    bool
	last      time.Time // the last sign of life, exact, as the Waitlist's memory has it
	persisted time.Time // what the store must have
}

func (g *modelGate) count() (active, waiting int64) {
	for _, s := range g.sessions {
		if s.active {
			active++
		} else {
			waiting++
		}
	}
	return active, waiting
}

// waitersInOrder returns the ids of the waiting sessions by position.
func (g *modelGate) waitersInOrder() []string {
	var ids []string
	for id, s := range g.sessions {
		if !s.active {
			ids = append(ids, id)
		}
	}
	sort.Slice(ids, func(i, j int) bool { return g.sessions[ids[i]].position < g.sessions[ids[j]].position })
	return ids
}

func (g *modelGate) promote(now time.Time) int64 {
	active, waiting := g.count()
	n := min(g.cfg.ActiveLimit-active, waiting)
	if n <= 0 {
		return 0
	}
	for _, id := range g.waitersInOrder()[:n] {
		s := g.sessions[id]
		s.active, s.last, s.persisted = true, now, now
	}
	return n
}

func (g *modelGate) join(id string, now time.Time) {
	if s, ok := g.sessions[id]; ok {
		s.last, s.persisted = now, now
		return
	}
	active, waiting := g.count()
	s := &modelSession{position: g.next, last: now, persisted: now}
	g.next++
	if active < g.cfg.ActiveLimit && waiting == 0 {
		s.active = true
	}
	g.sessions[id] = s
}

func (g *modelGate) leave(id string, now time.Time) {
	if s, ok := g.sessions[id]; ok {
		s.last, s.persisted = now, now
	}
}

func (g *modelGate) release(id string, now time.Time) {
	s, ok := g.sessions[id]
	if !ok {
		return
	}
	delete(g.sessions, id)
	if s.active {
		g.promote(now)
	}
}

func (g *modelGate) refresh(id string, now time.Time) bool {
	s, ok := g.sessions[id]
	if !ok || !s.active {
		return false
	}
	if now.After(s.last) {
		s.last = now
	}
	return true
}

// seen is a request naming the session (status): a sign of life, kept in
// memory until the next flush.
func (g *modelGate) seen(id string, now time.Time) {
	if s, ok := g.sessions[id]; ok && now.After(s.last) {
		s.last = now
	}
}

func (g *modelGate) flush() {
	for _, s := range g.sessions {
		s.persisted = s.last
	}
}

func (g *modelGate) update(now time.Time) session.UpdateReport {
	g.flush()
	r := session.UpdateReport{Gate: g.cfg.Name}
	for id, s := range g.sessions {
		if !s.active && now.Sub(s.last) > g.cfg.WaitingTimeout {
			delete(g.sessions, id)
			r.PurgedWaiting++
		}
	}
	for id, s := range g.sessions {
		if s.active && now.Sub(s.last) > g.cfg.ActiveTimeout {
			delete(g.sessions, id)
			r.PurgedActive++
		}
	}
	r.Promoted = g.promote(now)
	return r
}

func envInt(name string, def int64) int64 {
	if v := os.Getenv(name); v != "" {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			return n
		}
	}
	return def
}

// testRandomized runs random operations through the Waitlist against the
// Store and the model, and after every step compares the three: rows,
// counters, positions, the limit, and the Waitlist's memory.
func testRandomized(t *testing.T, open Opener) {
	seed := envInt(RandomSeedEnv, defaultSeed)
	steps := int(envInt(RandomStepsEnv, defaultSteps))
	if testing.Short() {
		steps = min(steps, 500)
	}
	t.Logf("seed %d, %d steps (replay with %s=%d)", seed, steps, RandomSeedEnv, seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 0x616e7465726f6f6d))

	h := newHarness(t, open)
	cfgs := []session.GateConfig{GateConfig("a", 3), GateConfig("b", 12)}
	cfgs[0].WaitingTimeout, cfgs[0].ActiveTimeout = time.Minute, 3*time.Minute
	m := model{gates: map[string]*modelGate{}}
	var names []string
	for _, cfg := range cfgs {
		m.gates[cfg.Name] = &modelGate{cfg: cfg, next: 1, sessions: map[string]*modelSession{}}
		names = append(names, cfg.Name)
	}
	ids := make([]string, randomIDs)
	for i := range ids {
		ids[i] = idOf("r", i)
	}
	w := h.waitlist(cfgs...)
	ctx := h.ctx
	lastNext := map[string]int64{}
	// Positions (never reused) of the sessions seen active: no session goes
	// from active back to waiting.
	wasActive := map[string]map[int64]bool{}
	for _, name := range names {
		wasActive[name] = map[int64]bool{}
	}

	check := func(step int, what string) {
		t.Helper()
		for _, name := range names {
			g := m.gates[name]
			active, waiting := g.count()
			first, last := g.next, g.next-1
			for _, id := range g.waitersInOrder() {
				if first == g.next {
					first = g.sessions[id].position
				}
				last = g.sessions[id].position
			}

			// The Waitlist's memory equals the model, first: it must be up to
			// date when the operation returns, before anything else reaches
			// the store.
			gv, err := w.Global(name)
			require.NoError(t, err)
			require.Equal(t, session.GlobalView{
				Gate: name, FirstWaitingPosition: first, LastWaitingPosition: last,
				Waiting: waiting, Active: active, Limit: g.cfg.ActiveLimit,
			}, withoutBuckets(withoutRate(gv)), "step %d (%s): Global of gate %s", step, what, name)
			var waiters []int64
			for _, id := range g.waitersInOrder() {
				waiters = append(waiters, g.sessions[id].position)
			}
			requireBuckets(t, gv, waiters)
			for _, id := range ids {
				s, ok := g.sessions[id]
				err := w.ValidateSessionIsActive(name, id)
				if ok && s.active {
					require.NoError(t, err, "step %d (%s) gate %s: %s is active", step, what, name, id)
				} else {
					require.ErrorIs(t, err, session.ErrNotActive, "step %d (%s) gate %s: %s is not active", step, what, name, id)
				}
			}

			// Rows equal the model; positions unique, increasing, below next.
			rows := h.rows(name, ids)
			require.Len(t, rows, len(g.sessions), "step %d (%s) gate %s: rows", step, what, name)
			var prev int64
			for _, r := range rows {
				require.Greater(t, r.Position, prev, "step %d gate %s: positions not unique and increasing", step, name)
				require.Less(t, r.Position, g.next, "step %d gate %s: position %d not below next_position", step, name, r.Position)
				prev = r.Position
				if r.Status == session.StatusActive {
					wasActive[name][r.Position] = true
				} else {
					require.False(t, wasActive[name][r.Position], "step %d (%s) gate %s: %s at position %d went from active back to waiting", step, what, name, r.ID, r.Position)
				}
				ms, ok := g.sessions[r.ID]
				require.True(t, ok, "step %d (%s) gate %s: store has %s, model does not", step, what, name, r.ID)
				require.Equal(t, ms.position, r.Position, "step %d gate %s: position of %s", step, name, r.ID)
				require.Equal(t, ms.active, r.Status == session.StatusActive, "step %d (%s) gate %s: status of %s", step, what, name, r.ID)
				require.True(t, ms.persisted.Equal(r.LastActive) && ms.persisted.IsZero() == r.LastActive.IsZero(),
					"step %d (%s) gate %s: last_active of %s: model %v, store %v", step, what, name, r.ID, ms.persisted, r.LastActive)
			}

			// Persisted counters equal the rows, and the model.
			snap := h.snapshot(name)
			st := snap.State
			ra, rw := counted(rows)
			require.Equal(t, ra, st.Active, "step %d (%s) gate %s: active counter vs rows", step, what, name)
			require.Equal(t, rw, st.Waiting, "step %d (%s) gate %s: waiting counter vs rows", step, what, name)
			require.Equal(t, session.GateState{
				Counters:             session.Counters{NextPosition: g.next, Active: active, Waiting: waiting},
				FirstWaitingPosition: first, LastWaitingPosition: last,
			}, st, "step %d (%s) gate %s: state vs model", step, what, name)
			require.LessOrEqual(t, st.Active, g.cfg.ActiveLimit, "step %d gate %s: over the limit", step, name)
			require.GreaterOrEqual(t, st.NextPosition, lastNext[name], "step %d gate %s: next_position went back", step, name)
			lastNext[name] = st.NextPosition
			require.Len(t, snap.Active, int(active), "step %d gate %s: Load's active sessions", step, name)
		}
	}

	var counts [9]int
	for step := 1; step <= steps; step++ {
		name := names[rng.IntN(len(names))]
		g := m.gates[name]
		id := ids[rng.IntN(len(ids))]
		now := h.clock.Now()
		var what string
		switch p := rng.IntN(100); {
		case p < 32:
			what = "join " + name + "/" + id
			counts[0]++
			v, err := w.Join(ctx, name, id)
			require.NoError(t, err, "step %d: %s", step, what)
			g.join(id, now)
			s := g.sessions[id]
			require.Equal(t, s.position, v.Position, "step %d: %s: position", step, what)
			require.Equal(t, s.active, v.Status == session.StatusActive, "step %d: %s: status", step, what)
		case p < 46:
			what = "leave " + name + "/" + id
			counts[1]++
			require.NoError(t, w.Leave(ctx, name, id), "step %d: %s", step, what)
			g.leave(id, now)
		case p < 56:
			what = "release " + name + "/" + id
			counts[2]++
			require.NoError(t, w.Release(ctx, name, id), "step %d: %s", step, what)
			g.release(id, now)
		case p < 66:
			what = "refresh " + name + "/" + id
			counts[3]++
			err := w.ValidateSessionAndRefreshLastActive(name, id)
			if g.refresh(id, now) {
				require.NoError(t, err, "step %d: %s", step, what)
			} else {
				require.ErrorIs(t, err, session.ErrNotActive, "step %d: %s", step, what)
			}
		case p < 84:
			counts[4]++
			var d time.Duration
			switch rng.IntN(6) {
			case 0:
				d = time.Nanosecond
			case 1:
				d = g.cfg.WaitingTimeout
			case 2:
				d = g.cfg.ActiveTimeout / 2
			default:
				d = time.Duration(rng.IntN(40)) * time.Second
			}
			h.clock.Advance(d)
			what = "advance " + d.String()
		case p < 93:
			what = "update"
			counts[5]++
			reps, err := w.Update(ctx)
			require.NoError(t, err, "step %d: update", step)
			require.Len(t, reps, len(names))
			for _, r := range reps {
				want := m.gates[r.Gate].update(now)
				require.Equal(t, want, zeroCounts(r), "step %d: update report of gate %s", step, r.Gate)
			}
		case p < 97:
			what = "flush"
			counts[6]++
			require.NoError(t, w.FlushTouches(ctx))
			for _, g := range m.gates {
				g.flush()
			}
		case p < 98:
			what = "restart"
			counts[7]++
			require.NoError(t, w.Close())
			for _, g := range m.gates {
				g.flush()
			}
			h.reopen()
			w = h.waitlist(cfgs...)
			_, err := w.Join(ctx, name, id) // the closed Waitlist refuses, the new one works
			require.NoError(t, err)
			g.join(id, now)
		default:
			what = "status " + name + "/" + id
			counts[8]++
			v, err := w.Status(ctx, name, id)
			if s, ok := g.sessions[id]; ok {
				require.NoError(t, err, "step %d: %s", step, what)
				require.Equal(t, s.position, v.Position)
				require.Equal(t, s.active, v.Status == session.StatusActive)
				if !s.active {
					var ahead int64
					for _, o := range g.sessions {
						if !o.active && o.position < s.position {
							ahead++
						}
					}
					require.Equal(t, ahead+1, v.Place, "step %d: %s: exact place", step, what)
				}
				g.seen(id, now)
			} else {
				require.True(t, errors.Is(err, session.ErrNotFound), "step %d: %s: got %v", step, what, err)
			}
		}
		check(step, what)
	}
	t.Logf("joins %d, leaves %d, releases %d, refreshes %d, clock moves %d, updates %d, flushes %d, restarts %d, statuses %d",
		counts[0], counts[1], counts[2], counts[3], counts[4], counts[5], counts[6], counts[7], counts[8])
	for _, name := range names {
		a, wt := m.gates[name].count()
		t.Logf("gate %s: next_position %d, active %d, waiting %d", name, m.gates[name].next, a, wt)
	}
}
