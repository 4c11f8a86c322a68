package main

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"log/slog"
	"path/filepath"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
	"github.com/anteroomhq/anteroom/session/sessiontest"
)

// The join baseline does the store's work: rows in position order in the
// store's own sessions table, the gate's counters kept, in batches.
func TestRawJoinBaselineWritesTheStoresRowsInOrder(t *testing.T) {
	path := filepath.Join(t.TempDir(), "raw.db")
	rate, err := rawJoinRate(context.Background(), path, 50*time.Millisecond, 7, 10)
	require.NoError(t, err)
	assert.Positive(t, rate)

	db, err := sql.Open("sqlite", path)
	require.NoError(t, err)
	defer db.Close()
	var n, minPos, maxPos, active, nextPos, gActive, gWaiting int64
	require.NoError(t, db.QueryRow(`SELECT count(*), min(position), max(position), sum(status) FROM sessions WHERE gate = ?`, gateName).Scan(&n, &minPos, &maxPos, &active))
	require.NoError(t, db.QueryRow(`SELECT next_position, active, waiting FROM gates WHERE name = ?`, gateName).Scan(&nextPos, &gActive, &gWaiting))
	assert.Zero(t, n%7, "whole batches of 7: %d rows", n)
	assert.Equal(t, []int64{1, n, n + 1, 10, n - 10}, []int64{minPos, maxPos, nextPos, gActive, gWaiting})
	assert.EqualValues(t, 10, active)
}

// The tick runs on a file built by joins, with the fresh active sessions'
// LastActive refreshed in memory and not yet written.
func TestTickSeedLeavesRefreshesPending(t *testing.T) {
	ctx := context.Background()
	clock := sessiontest.NewClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	now := clock.Now()
	l := tickLayout{sessions: 300, active: 40, staleActive: 10, staleWaiting: 20}
	cfg := session.GateConfig{Name: gateName, ActiveLimit: int64(l.active), ActiveTimeout: 5 * time.Minute, WaitingTimeout: time.Minute}
	in, err := startInstance(ctx, instanceConfig{dir: t.TempDir(), limit: cfg.ActiveLimit, activeTimeout: cfg.ActiveTimeout,
		waitingTimeout: cfg.WaitingTimeout, interval: time.Second, clock: clock, touchInterval: -1})
	require.NoError(t, err)
	defer in.Close()
	ids, err := seedTick(ctx, in, l, clock, cfg)
	require.NoError(t, err)
	require.Len(t, ids, l.sessions)

	fresh := ids[l.staleActive:l.active]
	for _, id := range fresh {
		s, err := in.store.Get(ctx, gateName, id)
		require.NoError(t, err)
		assert.Equal(t, now.Add(-time.Second), s.LastActive.UTC(), "written when it joined, the refresh pending")
	}
	require.NoError(t, in.wl.FlushTouches(ctx))
	for _, id := range fresh {
		s, err := in.store.Get(ctx, gateName, id)
		require.NoError(t, err)
		assert.Equal(t, now, s.LastActive.UTC())
	}
	r, err := in.wl.Update(ctx)
	require.NoError(t, err)
	require.Len(t, r, 1)
	assert.Equal(t, []int64{10, 20, 10}, []int64{r[0].PurgedActive, r[0].PurgedWaiting, r[0].Promoted})
}

// Memory is read as the server holds it: reading it collects nothing.
func TestReadMemDoesNotCollectGarbage(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	cycles := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(cycles)
	before := cycles[0].Value.Uint64()
	m := readMem()
	metrics.Read(cycles)
	assert.Equal(t, before, cycles[0].Value.Uint64(), "readMem ran a GC")
	assert.Positive(t, m.HeapInuse)
	assert.Positive(t, m.StackInuse)
	assert.Positive(t, m.Goroutines)
}

// validate-inproc times what /check does, which refreshes LastActive.
func TestValidateTimesTheCallThatRefreshesLastActive(t *testing.T) {
	ctx := context.Background()
	clock := sessiontest.NewClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	in, err := startInstance(ctx, instanceConfig{dir: t.TempDir(), limit: 5, interval: time.Second, clock: clock, touchInterval: -1})
	require.NoError(t, err)
	defer in.Close()
	ids, err := seedActive(ctx, in, 5)
	require.NoError(t, err)
	clock.Set(clock.Now().Add(time.Minute))
	require.NoError(t, checkCall(in.wl, gateName, ids[2]))
	require.NoError(t, in.wl.FlushTouches(ctx))
	s, err := in.store.Get(ctx, gateName, ids[2])
	require.NoError(t, err)
	assert.Equal(t, clock.Now(), s.LastActive.UTC())
	assert.ErrorIs(t, checkCall(in.wl, gateName, "no-such-session-0000000"), session.ErrNotActive)
}

// recorderAt returns a recorder whose simulated clock the test sets.
func recorderAt(now *time.Duration) *recorder {
	return newRecorder(func() time.Duration { return *now })
}

func ev(kind session.EventKind, id string, pos int64) session.Event {
	return session.Event{Kind: kind, Session: session.Session{Gate: gateName, ID: id, Position: pos}}
}

func commit(evs ...session.Event) session.Commit { return session.Commit{Events: evs} }

// A ghost's slot time runs from when its client was gone (or from its
// promotion, if later) until the slot is freed, or the end of the run.
func TestRecorderGhostSlotSeconds(t *testing.T) {
	var now time.Duration
	r := recorderAt(&now)
	r.observe(commit(ev(session.EventActivated, "closer", 1), ev(session.EventActivated, "releaser", 2), ev(session.EventQueued, "dead", 3), ev(session.EventQueued, "late", 4)))
	now = 10 * time.Second
	r.gone("closer") // closes its socket at 10s
	r.gone("dead")   // dies while waiting at 10s
	r.released("releaser")
	now = 15 * time.Second // the closer's slot is released 5 s later and goes to the dead waiter
	r.observe(commit(ev(session.EventDeactivated, "closer", 1), ev(session.EventPromoted, "dead", 3)))
	now = 16 * time.Second
	r.observe(commit(ev(session.EventDeactivated, "releaser", 2), ev(session.EventPromoted, "late", 4)))
	now = 75 * time.Second // the dead one's claim window ends
	r.observe(commit(ev(session.EventDeactivated, "dead", 3)))
	o := r.finish()
	assert.Equal(t, 2, o.ghosts)
	assert.ElementsMatch(t, []float64{5, 60}, o.ghostHeld)
	assert.InDelta(t, 65, o.ghostHeldTotal, 1e-9)
	assert.Zero(t, o.lost, "nobody present lost a slot or a place")
	assert.Equal(t, 0, o.stillHeld)
}

// The time from a slot freeing to a present waiter claiming it runs through
// the ghosts promoted into it.
func TestRecorderClaimLatencyChainsThroughGhosts(t *testing.T) {
	var now time.Duration
	r := recorderAt(&now)
	r.observe(commit(ev(session.EventActivated, "v", 1), ev(session.EventQueued, "ghost", 2), ev(session.EventQueued, "w", 3), ev(session.EventQueued, "x", 4)))
	r.gone("ghost")
	now = 20 * time.Second
	r.released("v")
	r.observe(commit(ev(session.EventDeactivated, "v", 1), ev(session.EventPromoted, "ghost", 2)))
	now = 80 * time.Second // unclaimed: purged, the slot passes on
	r.observe(commit(ev(session.EventDeactivated, "ghost", 2), ev(session.EventPromoted, "w", 3)))
	now = 81 * time.Second
	require.True(t, r.claimed("w"))
	assert.False(t, r.claimed("x"), "x is not active")
	o := r.finish()
	assert.Equal(t, []float64{61}, o.claimLat, "freed at 20 s, claimed at 81 s")
	assert.Equal(t, 1, o.admitted)

	// At the end, a slot held by an unclaimed promotion counts with the time so far.
	now = 90 * time.Second
	r.observe(commit(ev(session.EventPromoted, "x", 4)))
	now = 100 * time.Second
	o = r.finish()
	assert.ElementsMatch(t, []float64{10, 61}, o.claimLat)
	assert.Equal(t, 1, o.unclaimed)
}

// A present waiter purged from the line, or a present client's slot taken
// back, lost its place; a departed one did not.
func TestRecorderLostPlace(t *testing.T) {
	var now time.Duration
	r := recorderAt(&now)
	r.observe(commit(ev(session.EventQueued, "hidden", 1), ev(session.EventQueued, "left", 2), ev(session.EventQueued, "slow", 3)))
	r.gone("left")
	r.observe(commit(ev(session.EventDequeued, "hidden", 1), ev(session.EventDequeued, "left", 2), ev(session.EventPromoted, "slow", 3)))
	r.observe(commit(ev(session.EventDeactivated, "slow", 3)))
	o := r.finish()
	assert.Equal(t, 2, o.lost)
	assert.True(t, r.lost["hidden"])
	assert.True(t, r.lost["slow"])
}

// Samples compare EstimatePlace on the client's view with the exact rank,
// and the first ETA a client shows is kept for its admission.
func TestRecorderSamplesPlaceAndETA(t *testing.T) {
	var now time.Duration
	r := recorderAt(&now)
	var evs []session.Event
	for p := int64(1); p <= 40; p++ {
		evs = append(evs, ev(session.EventQueued, "w"+strconv.FormatInt(p, 10), p))
	}
	r.observe(commit(evs...))
	// The client's view is stale: it still counts the first 20 waiters,
	// who left.
	stale := &session.GlobalView{FirstWaitingPosition: 1, LastWaitingPosition: 40, Waiting: 40, AdmittedPerMinute: 2}
	var gone []session.Event
	for p := int64(1); p <= 20; p++ {
		gone = append(gone, ev(session.EventDequeued, "w"+strconv.FormatInt(p, 10), p))
		r.gone("w" + strconv.FormatInt(p, 10))
	}
	r.observe(commit(gone...))
	fresh := &session.GlobalView{FirstWaitingPosition: 21, LastWaitingPosition: 40, Waiting: 20, AdmittedPerMinute: 2}
	r.sample([]placeSample{
		{id: "w25", position: 25, view: fresh, fresh: true}, // exact: 5
		{id: "w40", position: 40, view: stale},              // shows 40, is 20
		{id: "w3", position: 3, view: fresh},                // not waiting: skipped
		{id: "w30", position: 30, view: nil},                // no view yet: skipped
	})
	assert.EqualValues(t, 2, r.placeSamples)
	assert.EqualValues(t, 1, r.placeWithin)
	assert.EqualValues(t, 1, r.placeExact)
	assert.EqualValues(t, []int64{1, 1}, []int64{r.freshSamples, r.freshWithin})
	assert.EqualValues(t, 20, r.maxPlaceErr)
	assert.EqualValues(t, 20, r.placeErrPercentile(0.99))

	// w25 showed place 5 at 2/min: 150 s. Admitted 100 s later.
	now = 100 * time.Second
	r.observe(commit(ev(session.EventPromoted, "w25", 25)))
	require.True(t, r.claimed("w25"))
	assert.Equal(t, []float64{50}, r.etaErr)
	assert.InDelta(t, 0.5, r.etaRelErr[0], 1e-9)
}

func TestRankIndexGrows(t *testing.T) {
	var r rankIndex
	for _, p := range []int64{3, 5000, 7, 70000} {
		r.add(p)
	}
	r.remove(7)
	r.remove(123456) // absent: nothing
	assert.True(t, r.waiting(70000))
	assert.False(t, r.waiting(7))
	assert.EqualValues(t, 3, r.rank(70000))
	assert.EqualValues(t, 1, r.rank(3))
	assert.EqualValues(t, 2, r.rank(5000))
}

func TestSimClockRunsScaled(t *testing.T) {
	c := &simClock{start: time.Now().Add(-100 * time.Millisecond), scale: 10}
	assert.GreaterOrEqual(t, c.since(), time.Second)
	assert.Equal(t, 100*time.Millisecond, c.real(time.Second))
	assert.Less(t, c.untilSim(0), time.Duration(0))
}

// The population follows the scenario's shares, the same for both modes.
func TestAbandonPlans(t *testing.T) {
	p := abandonParams{waiters: 5000, limit: 100, arrival: time.Minute, seed: 1}
	plans := abandonPlans(p)
	require.Len(t, plans, 5100)
	assert.Equal(t, plans, abandonPlans(p), "deterministic")
	count := map[abandonKind]int{}
	for _, pl := range plans {
		count[pl.kind]++
		assert.GreaterOrEqual(t, pl.stay, 10*time.Second)
		assert.LessOrEqual(t, pl.stay, time.Minute)
		assert.LessOrEqual(t, pl.joinAt, time.Minute)
		if pl.kind == kindHide {
			assert.GreaterOrEqual(t, pl.hideFor, time.Minute)
			assert.LessOrEqual(t, pl.hideFor, 4*time.Minute)
		}
	}
	assert.Equal(t, 100, count[kindVisitor])
	assert.InDelta(t, 750, count[kindBeacon], 100)
	assert.InDelta(t, 750, count[kindSilent], 100)
	assert.InDelta(t, 1000, count[kindHide], 100)
	assert.InDelta(t, 50, count[kindPoll], 30)
}

// The bulk-loaded file of the scale scenarios is one the store accepts as
// it is (no counter repaired), with the stale sessions where the layout
// says, and its start-up and update scenarios run on it (small sizes).
func TestBulkSeedAndScaleScenarios(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	clock := sessiontest.NewClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	now := clock.Now()
	l := bulkLayout{sessions: 500, active: 40, staleActive: 10, staleWaiting: 20, seenSpread: 15 * time.Second}
	require.NoError(t, seedBulk(ctx, dir, l, now, now.Add(-time.Hour)))
	// The live sessions' last signs of life are spread over seenSpread
	// before now, as on a live file, not all at now.
	db, err := sql.Open("sqlite", dsnOf(dbPath(dir)))
	require.NoError(t, err)
	var live, distinct int
	var oldest, newest int64
	require.NoError(t, db.QueryRowContext(ctx, `SELECT count(*), count(DISTINCT last_active), min(last_active), max(last_active) FROM sessions WHERE last_active > ?`,
		now.Add(-time.Minute).UnixNano()).Scan(&live, &distinct, &oldest, &newest))
	require.NoError(t, db.Close())
	assert.Equal(t, 500-10-20, live)
	assert.Greater(t, distinct, live/2, "the live sessions are last seen at different times")
	assert.GreaterOrEqual(t, oldest, now.Add(-l.seenSpread).UnixNano())
	assert.LessOrEqual(t, newest, now.UnixNano())
	var log sessiontest.LogBuffer
	in, err := startInstance(ctx, instanceConfig{dir: dir, limit: int64(l.active), clock: clock, touchInterval: -1, sweepInterval: -1,
		interval: time.Second, log: slog.New(slog.NewTextHandler(&log, nil))})
	require.NoError(t, err)
	defer in.Close()
	assert.NotContains(t, log.String(), "repaired", "the seeded counters match the rows")
	v, err := in.wl.Global(gateName)
	require.NoError(t, err)
	assert.EqualValues(t, 40, v.Active)
	assert.EqualValues(t, 460, v.Waiting)
	reports, err := in.wl.Update(ctx)
	require.NoError(t, err)
	require.Len(t, reports, 1)
	assert.EqualValues(t, 10, reports[0].PurgedActive)
	assert.EqualValues(t, 20, reports[0].PurgedWaiting)
	assert.EqualValues(t, 10, reports[0].Promoted)
	in.Close()

	var out bytes.Buffer
	b := &bench{cfg: config{smoke: true, scaleSizes: "3000"}, log: &out}
	b.cfg.fillDefaults()
	b.cfg.tickQuietPhase = 100 * time.Millisecond
	for name, rows := range map[string]int{"startup": 2, "update": 5} {
		res, err := b.run(ctx, name)
		require.NoError(t, err, name)
		require.Len(t, res, rows, name)
		for _, r := range res {
			if !strings.Contains(r.Metric, "rows deleted after") { // the cleaner may be done by then
				assert.Positive(t, r.Value, "%s: %s", name, r.Metric)
			}
		}
		if name == "update" {
			assert.Contains(t, res[0].Note, "µs per row changed", "the update's cost per row is in its note")
			// The floor ran the bare statements on a copy (updateAt fails
			// when they changed other rows than the Update) and is the
			// second row's baseline.
			assert.Contains(t, res[1].Metric, "bare SQL")
			require.NotNil(t, res[1].Baseline)
			assert.Positive(t, *res[1].Baseline)
			// Its parts, each with the rows it changed (smoke: 1% of 3,000).
			assert.Regexp(t, `\d+ ms for the 15 stale waiters \(scattered over the line\), \d+ ms for the 15 stale active sessions and \d+ ms to promote 15 waiters`, res[1].Note)
			// The cleaner that writes the promoted rows and deletes the
			// purged sessions' rows after the update is waited for, and its
			// figure reported.
			assert.Contains(t, res[2].Metric, "rows deleted after the update")
			assert.Contains(t, res[2].Note, "(15 promotions in all), then deletes the rows of the 15 waiters and 15 idle active sessions it purged")
			// The joins after the update are timed too, against the same
			// baseline as those during it: the cleaner and the checkpoint
			// come after it.
			assert.Contains(t, res[4].Metric, "after the update")
			require.NotNil(t, res[4].Baseline)
			assert.Equal(t, *res[3].Baseline, *res[4].Baseline)
		}
	}
}

// The HTTP scenarios run their server in a child process and compare with
// GET /healthz on it: every row has a baseline, the per-CPU rows are the
// server's own CPU per request, and /api/global is measured beside /check.
func TestHTTPScenariosCompareWithHealthzOnAServerChild(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the HTTP scenarios")
	}
	var out bytes.Buffer
	b := &bench{cfg: config{smoke: true}, log: &out}
	b.cfg.fillDefaults()
	b.cfg.rounds = 2
	ctx := context.Background()

	res, err := b.run(ctx, "join-http")
	require.NoError(t, err, out.String())
	require.Len(t, res, 2)
	assert.Contains(t, res[0].Target, "/healthz")
	assert.Equal(t, checkRatioMax, res[1].Check)
	assert.InDelta(t, 2.0, res[1].Want, 0)
	for _, r := range res {
		require.NotNil(t, r.Baseline, r.Metric)
		assert.Positive(t, r.Value, r.Metric)
		assert.Positive(t, *r.Baseline, r.Metric)
	}
	assert.Contains(t, res[0].Note, "child process")

	// -join-line: the same joins against a bulk-loaded line, named by it.
	b.cfg.joinLine = 2000
	res, err = b.run(ctx, "join-http")
	require.NoError(t, err, out.String())
	require.Len(t, res, 2)
	for _, r := range res {
		assert.Contains(t, r.Metric, "line of 2k")
		require.NotNil(t, r.Baseline, r.Metric)
		assert.Positive(t, r.Value, r.Metric)
	}
	assert.Contains(t, res[0].Note, "bulk-loaded")
	b.cfg.joinLine = 0

	res, err = b.run(ctx, "check-http")
	require.NoError(t, err, out.String())
	require.Len(t, res, 4)
	var metrics []string
	for _, r := range res {
		require.NotNil(t, r.Baseline, r.Metric)
		assert.Positive(t, r.Value, r.Metric)
		metrics = append(metrics, r.Metric)
	}
	assert.Contains(t, metrics[0], "/check")
	assert.Contains(t, metrics[2], "/api/global")
	assert.InDelta(t, 0.95, res[0].Want, 0)
	assert.InDelta(t, 0.95, res[2].Want, 0)
}

// The fanout scenario, at smoke size, compares the hub with a raw write loop
// in the same run: the row is there with a positive baseline and its ratio
// target, beside the absolute time and the memory rows.
func TestFanoutComparesWithARawWriteLoop(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the fanout scenario: a server child, a baseline child and 2 x 300 sockets")
	}
	var out lockedBuffer // the children's stderr is copied into it as the bench logs
	b := &bench{cfg: config{smoke: true}, log: &out}
	b.cfg.fillDefaults()
	b.cfg.fanoutRepeat = 2
	res, err := b.run(context.Background(), "fanout")
	require.NoError(t, err, out.String())
	metrics := map[string]Result{}
	for _, r := range res {
		metrics[r.Metric] = r
	}
	for _, m := range []string{"state change -> last of N sockets", "server memory/socket (HeapInuse+StackInuse)", "server memory/socket (VmRSS)"} {
		assert.Contains(t, metrics, m)
	}
	// The memory rows judge against issue 14's goal.
	for _, m := range []string{"server memory/socket (HeapInuse+StackInuse)", "server memory/socket (VmRSS)"} {
		assert.Equal(t, checkValueMax, metrics[m].Check, m)
		assert.InDelta(t, 14, metrics[m].Want, 0, m)
		assert.Equal(t, "<= 14 KB", metrics[m].Target, m)
	}
	r, ok := metrics["state change -> last of N sockets vs a raw write loop"]
	require.True(t, ok, "the raw write loop row: %v", res)
	require.NotNil(t, r.Baseline)
	require.NotNil(t, r.Ratio)
	assert.Positive(t, *r.Baseline)
	assert.Positive(t, r.Value)
	assert.Equal(t, checkRatioMax, r.Check)
	assert.InDelta(t, 1.1, r.Want, 0)
	assert.Contains(t, r.Note, "raw write loop")
}

// lockedBuffer is a bytes.Buffer safe for the bench's log and the copying
// of its children's stderr at once.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// The baseline's frame is what a server sends: unmasked text, with the
// length in 7, 16 or 64 bits, and the client's parser reads it back.
func TestWSTextFrameParsesBack(t *testing.T) {
	for _, n := range []int{0, 125, 126, 300, 65535, 65536} {
		p := bytes.Repeat([]byte{'x'}, n)
		frame := wsTextFrame(p)
		ws := &wsClient{br: bufio.NewReader(bytes.NewReader(frame))}
		got, err := ws.next()
		require.NoError(t, err, n)
		assert.Equal(t, string(p), string(got), n)
	}
}
