package sqlite

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
	"github.com/anteroomhq/anteroom/session/sessiontest"
)

// The purge marks and the counters under random operations (joins, some
// through a priority code, leaves, touches, releases, call-backs, updates in
// chunks of 1 to 40 rows, purges of named sessions, scheduled events whose
// lottery moves the waiters of their pre-queue) on a clock that jumps to
// and around the edges of seconds (migrations/0013) and is set back now
// and then, with the cleaner held or let go, clean restarts and crash
// copies. After each
// step the counters equal the live rows, Load and Get agree with Rows; each
// update (or purge: of its ids) removes exactly the rows session.IsStale
// calls stale at its now, while a pre-queue is open too.
// ANTEROOM_MARKS_SEED and ANTEROOM_MARKS_STEPS run another seed, longer.
func TestMarksHoldUnderRandomOps(t *testing.T) {
	seeds, steps, defaults := randomRuns(t, "ANTEROOM_MARKS_SEED", "ANTEROOM_MARKS_STEPS", []int64{1, 2, 3}, 300) // an even seed gives the gate a claim window; a multiple of 3 starts before 1970
	var all randomCoverage
	ran := 0
	for _, seed := range seeds {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			c := marksUnderRandomOps(t, seed, steps)
			all.underMark += c.underMark
			all.markAtCutoff += c.markAtCutoff
			all.moved += c.moved
			ran++
		})
	}
	// The paths the test is for were taken by the default seeds: a change
	// that stopped drawing them would pass without testing anything. (One
	// seed alone, or another one, need not take all of them.)
	if !defaults || ran != len(seeds) {
		return
	}
	assert.Positive(t, all.underMark, "no step left purged rows under a mark")
	assert.Positive(t, all.markAtCutoff, "no mark reached the cutoff's second")
	assert.Positive(t, all.moved, "no lottery moved a session")
}

// randomRuns returns the seeds and the steps of a random test: seeds and
// steps, or the seed and the steps the environment variables seedEnv and
// stepsEnv name (to reproduce a failing seed, or to run one longer); and
// whether they are the defaults, which alone must reach the test's
// coverage.
func randomRuns(t *testing.T, seedEnv, stepsEnv string, seeds []int64, steps int) ([]int64, int, bool) {
	t.Helper()
	defaults := true
	if v := os.Getenv(seedEnv); v != "" {
		seed, err := strconv.ParseInt(v, 10, 64)
		require.NoError(t, err, seedEnv)
		seeds, defaults = []int64{seed}, false
	}
	if v := os.Getenv(stepsEnv); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(t, err, stepsEnv)
		defaults = defaults && n == steps
		steps = n
	}
	return seeds, steps, defaults
}

// randomCoverage counts what a run of marksUnderRandomOps went through:
// steps with purged rows under a mark, steps whose waiting mark was at or
// past the cutoff's second, sessions a lottery moved.
type randomCoverage struct{ underMark, markAtCutoff, moved int }

func marksUnderRandomOps(t *testing.T, seed int64, steps int) randomCoverage {
	rng := rand.New(rand.NewPCG(uint64(seed), 7))
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "r.db")
	open := func() *Store {
		s, err := Open(path, Options{Logger: slog.New(slog.DiscardHandler)})
		require.NoError(t, err)
		return s
	}
	s := open()
	defer func() { s.Close() }()
	release := holdCleaner(t, s)
	cfg := sessiontest.GateConfig("default", 4)
	// Times in tenths of the marks' unit of order (seenSecondNanos).
	tenth := time.Duration(seenSecondNanos) / 10
	cfg.WaitingTimeout = 20*tenth + 3*tenth/10
	cfg.ActiveTimeout = 30*tenth + 7*tenth/10
	if seed%2 == 0 {
		cfg.ClaimTimeout = 15 * tenth
	}
	ids := make([]string, 60)
	for i := range ids {
		ids[i] = fmt.Sprintf("s%d", i)
	}
	now := epoch
	if seed%3 == 0 {
		now = time.Unix(0, -50_000_000_123).UTC() // crosses 1970 during the run
	}
	pick := func() time.Time {
		// near a second's boundary, in the recent past or at now
		base := now.Truncate(10 * tenth).Add(-time.Duration(rng.IntN(40)) * 10 * tenth)
		switch rng.IntN(5) {
		case 0:
			return base
		case 1:
			return base.Add(-time.Nanosecond)
		case 2:
			return base.Add(time.Nanosecond)
		case 3:
			return base.Add(time.Duration(rng.IntN(100)) * tenth / 10)
		}
		return now
	}
	check := func(step int, what string) {
		t.Helper()
		st, rows := requireCountersMatchRows(t, s, cfg.Name, fmt.Sprintf("step %d %s", step, what))
		live := map[string]bool{}
		for _, r := range rows {
			live[r.ID] = true
		}
		var prio []int64
		for _, r := range rows {
			if r.Status == session.StatusWaiting && r.Lane == session.LanePriority {
				prio = append(prio, r.Position)
			}
		}
		require.Equal(t, len(prio), len(st.PriorityWaiting), "step %d %s: priority waiting", step, what)
		for _, id := range ids {
			_, err := s.Get(ctx, cfg.Name, id)
			if live[id] {
				require.NoError(t, err, "step %d %s: Get %s", step, what, id)
			} else {
				require.ErrorIs(t, err, session.ErrNotFound, "step %d %s: Get %s", step, what, id)
			}
		}
	}
	var underMark, markAtCutoff int
	code, err := session.NewPriorityCode(cfg.Name, "vip-code-0123", "vip", session.MaxCodeUses, now.Add(24*time.Hour), now)
	require.NoError(t, err)
	require.NoError(t, s.CreateCode(ctx, code))
	// One scheduled event with a lottery at a time: saved and its pre-queue
	// opened at now, waiters joined while it is open (with the gate held,
	// as the Waitlist's EventConfig makes it), drawn at its StartsAt (or
	// at a later now), then deleted so that another can follow.
	held := cfg
	held.Mode = session.ModeQueueAll
	var ev session.ScheduledEvent
	var evPhase session.EventPhase // "" none, prequeue or started
	var evCount, evJoins, evDraws, evMoved int
	evWhat := func() string {
		if evPhase == "" {
			return ""
		}
		return fmt.Sprintf(" (event %s %s)", ev.ID, evPhase)
	}
	// purges checks an update, or a purge of ids (named: only those of
	// them may go), against session.IsStale at now: exactly the stale rows
	// (of ids) go, nothing else. An open pre-queue holds promotions, not
	// purges; without stored settings an event changes no timeout.
	purges := func(step int, what string, purge bool, named []string, run func() (session.UpdateReport, error)) {
		t.Helper()
		before, err := s.Rows(ctx, cfg.Name)
		require.NoError(t, err, "step %d %s", step, what)
		var only map[string]bool
		if purge {
			only = map[string]bool{}
			for _, id := range named {
				only[id] = true
			}
		}
		stale := map[string]bool{}
		var sw, sa int64
		for _, r := range before {
			if (only == nil || only[r.ID]) && session.IsStale(cfg, r, now) {
				stale[r.ID] = true
				if r.Status == session.StatusActive {
					sa++
				} else {
					sw++
				}
			}
		}
		rep, err := run()
		require.NoError(t, err, "step %d %s", step, what)
		require.Equal(t, sw, rep.PurgedWaiting, "step %d %s: purged waiting", step, what)
		require.Equal(t, sa, rep.PurgedActive, "step %d %s: purged active", step, what)
		if evPhase == session.EventPrequeue {
			require.Zero(t, rep.Promoted, "step %d %s: promoted while the pre-queue is open", step, what)
		}
		after, err := s.Rows(ctx, cfg.Name)
		require.NoError(t, err, "step %d %s", step, what)
		got := map[string]bool{}
		for _, r := range after {
			got[r.ID] = true
			require.False(t, stale[r.ID], "step %d %s: %s was stale and stays", step, what, r.ID)
		}
		for _, r := range before {
			if !stale[r.ID] {
				require.True(t, got[r.ID], "step %d %s: %s was live and is gone", step, what, r.ID)
			}
		}
	}
	eventStep := func(step int) string {
		t.Helper()
		switch evPhase {
		case "":
			evCount++
			seed := make([]byte, session.LotterySeedSize)
			for i := range seed {
				seed[i] = byte(rng.Uint32())
			}
			ev = session.ScheduledEvent{Gate: cfg.Name, ID: fmt.Sprintf("ev%d", evCount),
				PrequeueAt: now.Add(-time.Duration(rng.IntN(30)) * tenth),
				StartsAt:   now.Add(time.Duration(1+rng.IntN(60)) * tenth),
				Shuffle:    true, Seed: seed}
			what := fmt.Sprintf("schedule %s [%v, %v) and open it at %v", ev.ID, ev.PrequeueAt, ev.StartsAt, now)
			_, err := s.SaveEvent(ctx, ev)
			if !ev.PrequeueAt.After(time.Unix(0, 0)) { // a clock before 1970: refused (ScheduledEvent.Validate)
				require.ErrorIs(t, err, session.ErrInvalidArgument, "step %d %s", step, what)
				return what + ": refused"
			}
			require.NoError(t, err, "step %d %s", step, what)
			next, changed, err := s.AdvanceEvent(ctx, cfg.Name, ev.ID, now)
			require.NoError(t, err, "step %d %s", step, what)
			require.True(t, changed, "step %d %s: the pre-queue opens", step, what)
			require.Equal(t, session.EventPrequeue, next.Phase, "step %d %s", step, what)
			evPhase = session.EventPrequeue
			return what
		case session.EventPrequeue:
			if rng.IntN(3) > 0 {
				var joined []string
				for range 1 + rng.IntN(5) {
					id := ids[rng.IntN(len(ids))]
					_, err := s.Join(ctx, held, id, now)
					require.NoError(t, err, "step %d pre-queue join %s", step, id)
					joined = append(joined, id)
					evJoins++
				}
				return fmt.Sprintf("pre-queue joins %v at %v%s", joined, now, evWhat())
			}
			at := ev.StartsAt
			if now.After(at) && rng.IntN(2) == 0 {
				at = now
			}
			what := fmt.Sprintf("draw %s at %v", ev.ID, at)
			before, err := s.Rows(ctx, cfg.Name)
			require.NoError(t, err, "step %d %s", step, what)
			next, changed, err := s.AdvanceEvent(ctx, cfg.Name, ev.ID, at)
			require.NoError(t, err, "step %d %s", step, what)
			require.True(t, changed, "step %d %s: the lottery is drawn", step, what)
			require.Equal(t, session.EventStarted, next.Phase, "step %d %s", step, what)
			after, err := s.Rows(ctx, cfg.Name)
			require.NoError(t, err, "step %d %s", step, what)
			was := map[string]session.Session{}
			for _, r := range before {
				was[r.ID] = r
			}
			// A permutation of the pre-queue's normal-lane positions; the
			// rest stays.
			require.Len(t, after, len(before), "step %d %s: the draw keeps every row", step, what)
			taken := map[int64]bool{}
			for _, r := range before {
				taken[r.Position] = true
			}
			for _, r := range after {
				b, ok := was[r.ID]
				require.True(t, ok, "step %d %s: %s appeared", step, what, r.ID)
				require.Equal(t, b.Status, r.Status, "step %d %s: %s", step, what, r.ID)
				if b.Position != r.Position {
					evMoved++
					require.True(t, taken[r.Position], "step %d %s: %s moved to %d, a position nobody held", step, what, r.ID, r.Position)
					require.True(t, b.Status == session.StatusWaiting && b.Lane == session.LaneNormal && b.Position >= next.FirstPosition,
						"step %d %s: %s moved from %d, not a normal waiter of the pre-queue", step, what, r.ID, b.Position)
				}
			}
			evDraws++
			evPhase = session.EventStarted
			return what
		}
		what := "delete " + ev.ID
		require.NoError(t, s.DeleteEvent(ctx, cfg.Name, ev.ID), "step %d %s", step, what)
		evPhase = ""
		return what
	}
	for step := 1; step <= steps; step++ {
		id := ids[rng.IntN(len(ids))]
		var what string
		switch p := rng.IntN(110); {
		case p < 25:
			what = "join " + id
			var err error
			if rng.IntN(3) == 0 {
				var codeErr error
				_, codeErr, err = s.JoinWithCode(ctx, cfg, id, "vip-code-0123", now)
				require.NoError(t, codeErr, "step %d %s", step, what)
			} else {
				_, err = s.Join(ctx, cfg, id, now)
			}
			require.NoError(t, err, "step %d %s", step, what)
			_, err = s.Get(ctx, cfg.Name, id)
			require.NoError(t, err, "step %d %s: joined, not found", step, what)
		case p < 35:
			what = "leave " + id
			_, err := s.Leave(ctx, cfg, id, now)
			if !errors.Is(err, session.ErrNotFound) {
				require.NoError(t, err, "step %d %s", step, what)
			}
		case p < 50:
			var ts []session.Touch
			for range 1 + rng.IntN(6) {
				ts = append(ts, session.Touch{ID: ids[rng.IntN(len(ids))], LastActive: pick()})
			}
			what = fmt.Sprintf("touch %v", ts)
			require.NoError(t, s.Touch(ctx, cfg.Name, ts), "step %d", step)
		case p < 55:
			what = "release " + id
			_, err := s.Release(ctx, cfg, id, now)
			if !errors.Is(err, session.ErrNotFound) {
				require.NoError(t, err, "step %d %s", step, what)
			}
		case p < 58:
			what = "notify " + id
			_, err := s.SetNotify(ctx, cfg, id, rng.IntN(2) == 0, now)
			if err != nil && !errors.Is(err, session.ErrNotFound) {
				t.Logf("step %d %s: %v", step, what, err)
			}
		case p < 78:
			// the clock: forward by a bit, a second edge, or back
			switch rng.IntN(6) {
			case 0:
				now = now.Add(-time.Duration(rng.IntN(3000)) * tenth / 100)
			case 1:
				now = now.Truncate(10 * tenth).Add(10 * tenth)
			case 2:
				now = now.Add(time.Nanosecond)
			default:
				now = now.Add(time.Duration(rng.IntN(1500)) * tenth / 100)
			}
			what = "clock " + now.String()
		case p < 95:
			chunk := 1 + rng.IntN(40)
			what = fmt.Sprintf("update at %v chunk %d%s", now, chunk, evWhat())
			purges(step, what, false, nil, func() (session.UpdateReport, error) { return s.Update(ctx, cfg, now, chunk) })
		case p < 100:
			what = "clean"
			release()
			require.NoError(t, s.WaitClean(ctx))
			release = holdCleaner(t, s)
		case p < 105:
			what = eventStep(step)
		case p < 110:
			var pids []string
			for range rng.IntN(6) {
				pids = append(pids, ids[rng.IntN(len(ids))])
			}
			what = fmt.Sprintf("purge %v at %v%s", pids, now, evWhat())
			purges(step, what, true, pids, func() (session.UpdateReport, error) { return s.Purge(ctx, cfg, pids, now) })
		default:
			what = "restart"
			if rng.IntN(2) == 0 {
				what = "crash"
				crashed := copyFiles(t, path, t.TempDir(), "", "-wal")
				old := s
				defer old.Close()
				path = crashed
				var log sessiontest.LogBuffer
				var err error
				s, err = Open(path, Options{Logger: slog.New(slog.NewTextHandler(&log, nil))})
				require.NoError(t, err, "step %d: open after a crash", step)
				require.NotContains(t, log.String(), "repaired", "step %d", step)
			} else {
				require.NoError(t, s.Close())
				s = open()
			}
			release = holdCleaner(t, s)
		}
		check(step, what)
		if n := physicalRows(t, s, cfg.Name); n > 0 {
			rows, _ := s.Rows(ctx, cfg.Name)
			if n > len(rows) {
				underMark++
			}
		}
		var ms, ap int64
		require.NoError(t, s.readDB.QueryRow(`SELECT purged_seen, active_purged_seen FROM gates WHERE name = 'default'`).Scan(&ms, &ap))
		if ms != noMark.seen && seenSecond(ms) >= seenSecond(now.Add(-cfg.WaitingTimeout).UnixNano()) {
			markAtCutoff++
		}
	}
	t.Logf("steps with purged rows under a mark: %d; mark at or past the cutoff's second: %d", underMark, markAtCutoff)
	t.Logf("events: %d, pre-queue joins: %d, draws: %d, sessions moved: %d", evCount, evJoins, evDraws, evMoved)
	return randomCoverage{underMark: underMark, markAtCutoff: markAtCutoff, moved: evMoved}
}
