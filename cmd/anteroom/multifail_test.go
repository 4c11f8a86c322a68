package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session/postgres/pgtest"
)

// The failure tests of three real sidecars on one Postgres database: one
// of them killed with SIGKILL under load, round after round; the database
// crashed and restarted under them. What they check after each: every
// acknowledged join is stored at its position, every acknowledged release
// is gone, the counters equal the rows, the limit holds, and every
// instance's memory (what /check and the global view answer) equals the
// tables.

const (
	multiLimit        = 50
	multiKillRounds   = 5
	multiWorkers      = 18
	multiMemorySample = 300 // waiting rows /check is asked about per instance
)

// multiSession is one acknowledged join.
type multiSession struct {
	pos    int64
	token  string
	active bool // at its join
}

// multiWorld is what the test knows of the line, across rounds.
type multiWorld struct {
	mu       sync.Mutex
	acked    map[string]multiSession
	released map[string]bool // acknowledged (204)
	maybe    map[string]bool // sent, no answer: the database decides
	owner    map[int64]string
}

func newMultiWorld() *multiWorld {
	return &multiWorld{acked: map[string]multiSession{}, released: map[string]bool{}, maybe: map[string]bool{}, owner: map[int64]string{}}
}

// multiLoad sends joins (and releases of sessions it saw admitted) to the
// instances that are up, from several workers, until stopped.
type multiLoad struct {
	t      *testing.T
	w      *multiWorld
	client *http.Client
	// strict: an instance that is not down must answer every request
	// with success (the kill test); otherwise 503s and lost answers are
	// counted (the database restart).
	strict bool

	mu    sync.Mutex
	procs []*crashProc
	down  map[*crashProc]bool

	stop     chan struct{}
	wg       sync.WaitGroup
	joins    atomic.Int64 // acknowledged joins
	failures atomic.Int64 // answers that were not a success, and lost answers
}

// startMultiLoad starts the workers; the sessions of own (acknowledged
// joins) are shared out among them, to be released among their own.
func startMultiLoad(t *testing.T, w *multiWorld, client *http.Client, procs []*crashProc, own []string, seed uint64, strict bool) *multiLoad {
	l := &multiLoad{t: t, w: w, client: client, strict: strict, procs: append([]*crashProc(nil), procs...),
		down: map[*crashProc]bool{}, stop: make(chan struct{})}
	for i := range multiWorkers {
		rng := rand.New(rand.NewPCG(seed, uint64(i)))
		var mine []string
		for k := i; k < len(own); k += multiWorkers {
			mine = append(mine, own[k])
		}
		l.wg.Go(func() { l.worker(rng, i, mine) })
	}
	return l
}

// markDown tells the load that p is about to die: its lost answers are no
// failure, and no new request goes to it.
func (l *multiLoad) markDown(p *crashProc) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.down[p] = true
}

func (l *multiLoad) pick(rng *rand.Rand) (*crashProc, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var up []*crashProc
	for _, p := range l.procs {
		if !l.down[p] {
			up = append(up, p)
		}
	}
	if len(up) == 0 {
		return nil, false
	}
	return up[rng.IntN(len(up))], true
}

func (l *multiLoad) isDown(p *crashProc) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.down[p]
}

// Stop stops the workers and waits for them.
func (l *multiLoad) Stop() {
	close(l.stop)
	l.wg.Wait()
}

// worker joins new sessions and releases its own (mine, in the order of
// their joins), mostly its oldest: those are the ones admitted first and
// promoted first, so releases free slots and promote waiters.
func (l *multiLoad) worker(rng *rand.Rand, me int, mine []string) {
	for {
		select {
		case <-l.stop:
			return
		default:
		}
		p, ok := l.pick(rng)
		if !ok {
			return
		}
		fail := func(what string, status int, raw []byte, err error) {
			l.failures.Add(1)
			if l.strict && !l.isDown(p) {
				l.t.Errorf("worker %d: %s on %s, which is up: status %d %s %v", me, what, p.base, status, raw, err)
			}
			if !l.strict {
				time.Sleep(5 * time.Millisecond) // the database is down: do not spin
			}
		}
		if len(mine) > 0 && rng.IntN(100) < 15 {
			i := 0
			if rng.IntN(10) < 3 {
				i = rng.IntN(len(mine))
			}
			id := mine[i]
			mine = append(mine[:i], mine[i+1:]...)
			l.w.mu.Lock()
			tok := l.w.acked[id].token
			l.w.maybe[id] = true
			l.w.mu.Unlock()
			r, err := crashDo(l.client, http.MethodPost, p.base+"/anteroom/api/release", "", "Authorization", "Bearer "+tok)
			l.w.mu.Lock()
			switch {
			case err == nil && r.status == http.StatusNoContent:
				delete(l.w.maybe, id)
				l.w.released[id] = true
			case err == nil && r.status < 500 || crashNotSent(err):
				// Refused: nothing happened. A 5xx stays a maybe: a
				// release committed while the flush that acknowledges it
				// failed (the database went down between the two) is a
				// 503, yet the commit may survive the restart.
				delete(l.w.maybe, id)
			}
			l.w.mu.Unlock()
			if err != nil || r.status != http.StatusNoContent {
				fail("release", r.status, r.raw, err)
			}
			continue
		}
		r, err := crashDo(l.client, http.MethodPost, p.base+"/anteroom/api/join", `{"gate":"default"}`)
		if err != nil || r.status != http.StatusOK {
			fail("join", r.status, r.raw, err)
			continue
		}
		v := r.view
		l.w.mu.Lock()
		if prev, dup := l.w.owner[v.Position]; dup && prev != v.Session {
			l.t.Errorf("position %d acknowledged to %s and to %s", v.Position, prev, v.Session)
		}
		l.w.owner[v.Position] = v.Session
		l.w.acked[v.Session] = multiSession{pos: v.Position, token: v.Token, active: v.Status == "active"}
		l.w.mu.Unlock()
		mine = append(mine, v.Session)
		l.joins.Add(1)
	}
}

// multiRow is one stored session.
type multiRow struct {
	pos    int64
	active bool
}

// multiCheckDB reads the tables and checks them against themselves and
// against what the test knows; it resolves releases whose answer was lost.
// It returns the stored sessions.
func multiCheckDB(t *testing.T, url string, w *multiWorld, when string) map[string]multiRow {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer db.Close(context.Background())
	var next, act, wait int64
	require.NoError(t, db.QueryRow(ctx, "SELECT next_position, active, waiting FROM anteroom_gates WHERE name = 'default'").Scan(&next, &act, &wait))
	rows, err := db.Query(ctx, "SELECT id, position, status FROM anteroom_sessions WHERE gate = 'default'")
	require.NoError(t, err)
	stored := map[string]multiRow{}
	var cntA, cntW, maxPos int64
	for rows.Next() {
		var id string
		var r multiRow
		var status int16
		require.NoError(t, rows.Scan(&id, &r.pos, &status))
		r.active = status == 1
		stored[id] = r
		if r.active {
			cntA++
		} else {
			cntW++
		}
		maxPos = max(maxPos, r.pos)
	}
	require.NoError(t, rows.Err())
	assert.Equal(t, cntA, act, "%s: the active counter equals the rows", when)
	assert.Equal(t, cntW, wait, "%s: the waiting counter equals the rows", when)
	assert.LessOrEqual(t, cntA, int64(multiLimit), "%s: nobody admitted beyond the limit", when)
	if cntA < multiLimit {
		assert.Zero(t, cntW, "%s: %d waiting while only %d slots are taken", when, cntW, cntA)
	}
	assert.Greater(t, next, maxPos, "%s: next_position above every stored position", when)

	w.mu.Lock()
	defer w.mu.Unlock()
	lost, resolved := 0, 0
	for id, s := range w.acked {
		r, ok := stored[id]
		switch {
		case w.released[id]:
			assert.False(t, ok, "%s: %s was released (acknowledged) but is still stored", when, id)
		case w.maybe[id]:
			resolved++
			delete(w.maybe, id)
			if !ok {
				w.released[id] = true
			} else {
				assert.Equal(t, s.pos, r.pos, "%s: %s keeps its position", when, id)
			}
		case !ok || r.pos != s.pos:
			lost++
			if lost <= 5 {
				t.Errorf("%s: %s, acknowledged at position %d, is stored as %+v (present: %v)", when, id, s.pos, r, ok)
			}
		}
		assert.Greater(t, next, s.pos, "%s: next_position above every acknowledged position", when)
	}
	assert.Zero(t, lost, "%s: acknowledged joins lost", when)
	t.Logf("%s: %d rows (%d active, %d waiting), next_position %d; %d acknowledged joins, %d releases, %d lost releases resolved",
		when, len(stored), cntA, cntW, next, len(w.acked), len(w.released), resolved)
	return stored
}

// multiCheckMemory waits until every instance answers from memory what the
// tables hold: the global view's counts, /check of every active session
// (200) and of a sample of the waiting ones (403), released ones 401.
func multiCheckMemory(t *testing.T, client *http.Client, procs []*crashProc, w *multiWorld, stored map[string]multiRow, seed uint64) {
	t.Helper()
	var act, wait int64
	var ask []string
	rng := rand.New(rand.NewPCG(seed, 7))
	w.mu.Lock()
	tokens := map[string]string{}
	for id, s := range w.acked {
		tokens[id] = s.token
	}
	// Every stored row counts; /check is asked about those whose token the
	// test knows (a join whose answer was lost in a kill may be stored).
	for id, r := range stored {
		_, known := tokens[id]
		if r.active {
			act++
		} else {
			wait++
		}
		if known && (r.active || rng.IntN(len(stored)) < multiMemorySample) {
			ask = append(ask, id)
		}
	}
	var gone []string
	for id := range w.released {
		if len(gone) < 50 {
			gone = append(gone, id)
		}
	}
	w.mu.Unlock()
	for _, p := range procs {
		matches := func(report bool) bool {
			r, err := crashDo(client, http.MethodGet, p.base+"/anteroom/api/global?gate=default", "")
			if err != nil || r.status != http.StatusOK || r.view.Active != act || r.view.Waiting != wait {
				if report {
					t.Errorf("%s: global view %d %s, want active %d waiting %d (%v)", p.base, r.status, r.raw, act, wait, err)
				}
				return false
			}
			var bad atomic.Int64
			var wg sync.WaitGroup
			work := make(chan string)
			for range 8 {
				wg.Go(func() {
					for id := range work {
						want := http.StatusForbidden
						if r, ok := stored[id]; !ok {
							want = http.StatusUnauthorized
						} else if r.active {
							want = http.StatusOK
						}
						got, err := crashDo(client, http.MethodGet, p.base+"/anteroom/check", "", "Authorization", "Bearer "+tokens[id])
						if err != nil || got.status != want {
							if bad.Add(1) <= 3 && report {
								t.Errorf("%s: /check of %s: %d %s (%v), want %d", p.base, id, got.status, got.raw, err, want)
							}
						}
					}
				})
			}
			for _, id := range append(ask, gone...) {
				work <- id
			}
			close(work)
			wg.Wait()
			return bad.Load() == 0
		}
		if !assert.Eventually(t, func() bool { return matches(false) }, 20*time.Second, 50*time.Millisecond,
			"%s answers from memory what the tables hold", p.base) {
			matches(true)
		}
	}
}

// multiOwn returns the sessions still stored (as far as the test knows),
// in position order.
func multiOwn(w *multiWorld) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	type ps struct {
		pos int64
		id  string
	}
	var all []ps
	for id, s := range w.acked {
		if !w.released[id] && !w.maybe[id] {
			all = append(all, ps{s.pos, id})
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].pos < all[j].pos })
	out := make([]string, len(all))
	for i, p := range all {
		out[i] = p.id
	}
	return out
}

func multiClient(t *testing.T) *http.Client {
	tr := &http.Transport{MaxIdleConnsPerHost: 64, MaxConnsPerHost: 64}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// waitCount waits until n() reaches want or the deadline passes.
func waitCount(t *testing.T, what string, n func() int64, want int64, timeout time.Duration) {
	t.Helper()
	require.Eventually(t, func() bool { return n() >= want }, timeout, 5*time.Millisecond, "%s: %d of %d", what, n(), want)
}

// One of three sidecars killed with SIGKILL under join and release load,
// round after round (a different one each round, restarted after): no
// acknowledged join is lost, the counters equal the rows, the survivors
// keep serving through the kill, and every instance (the restarted one
// too) answers what the tables hold.
func TestInstancesSurviveSIGKILLRounds(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary, runs three and kills them")
	}
	url := pgtest.DB(t)
	bin := multiBinary(t)
	seed := crashSeed(t)
	t.Logf("seed %d (rerun with -crash.seed=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 11))
	procs := make([]*crashProc, 3)
	for i := range procs {
		procs[i] = multiStart(t, bin, url)
	}
	client := multiClient(t)
	w := newMultiWorld()
	for round := range multiKillRounds {
		victim := procs[round%len(procs)]
		load := startMultiLoad(t, w, client, procs, multiOwn(w), rng.Uint64(), true)
		// Load first, then the kill at a random moment of it.
		waitCount(t, "joins before the kill", load.joins.Load, int64(50+rng.IntN(200)), 30*time.Second)
		load.markDown(victim)
		require.NoError(t, victim.cmd.Process.Kill())
		<-victim.exited
		killedAt := load.joins.Load()
		waitCount(t, "joins through the survivors after the kill", load.joins.Load, killedAt+100, 30*time.Second)
		for _, p := range procs {
			if p == victim {
				continue
			}
			r, err := crashDo(client, http.MethodGet, p.base+"/readyz", "")
			require.NoError(t, err)
			assert.Equal(t, http.StatusOK, r.status, "survivor %s stays ready", p.base)
		}
		load.Stop()
		if t.Failed() {
			t.FailNow()
		}
		stored := multiCheckDB(t, url, w, fmt.Sprintf("round %d, after killing %s", round+1, victim.base))
		procs[round%len(procs)] = multiStart(t, bin, url)
		multiCheckMemory(t, client, procs, w, stored, seed+uint64(round))
		if t.Failed() {
			t.Fatalf("round %d failed (seed %d)", round+1, seed)
		}
	}
}

// The database crashes under load and comes back: every sidecar goes
// unready (/readyz 503) and, while it cannot follow, answers /check with
// 503 rather than from memory; all reconnect, resync and serve again;
// nothing acknowledged is lost, nobody is admitted beyond the limit, and
// every instance's memory equals the tables.
func TestInstancesFollowAPostgresRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server of its own, three sidecars, and crashes the server")
	}
	srv, url := pgtest.Own(t)
	bin := multiBinary(t)
	seed := crashSeed(t)
	procs := make([]*crashProc, 3)
	for i := range procs {
		procs[i] = multiStart(t, bin, url)
	}
	client := multiClient(t)
	w := newMultiWorld()

	// An admitted session and a waiting one that the load leaves alone.
	var admitted, waiting crashView
	for admitted.Session == "" || waiting.Session == "" {
		r, err := crashDo(client, http.MethodPost, procs[0].base+"/anteroom/api/join", `{"gate":"default"}`)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, r.status, "%s", r.raw)
		w.acked[r.view.Session] = multiSession{pos: r.view.Position, token: r.view.Token, active: r.view.Status == "active"}
		w.owner[r.view.Position] = r.view.Session
		if r.view.Status == "active" {
			admitted = r.view
		} else {
			waiting = r.view
		}
	}
	for _, p := range procs {
		r, err := crashDo(client, http.MethodGet, p.base+"/anteroom/check", "", "Authorization", "Bearer "+admitted.Token)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, r.status, "%s admits the admitted session before the crash", p.base)
	}

	var own []string
	for _, id := range multiOwn(w) {
		if id != admitted.Session && id != waiting.Session {
			own = append(own, id)
		}
	}
	load := startMultiLoad(t, w, client, procs, own, seed, false)
	waitCount(t, "joins before the crash", load.joins.Load, 200, 30*time.Second)
	srv.Kill()
	for _, p := range procs {
		require.Eventually(t, func() bool {
			r, err := crashDo(client, http.MethodGet, p.base+"/readyz", "")
			return err == nil && r.status == http.StatusServiceUnavailable
		}, 30*time.Second, 5*time.Millisecond, "%s goes unready", p.base)
	}
	// The server is still down: no instance can have caught up, so none
	// may answer from what it remembers.
	for _, p := range procs {
		for _, s := range []crashView{admitted, waiting} {
			r, err := crashDo(client, http.MethodGet, p.base+"/anteroom/check", "", "Authorization", "Bearer "+s.Token)
			require.NoError(t, err)
			assert.Equal(t, http.StatusServiceUnavailable, r.status, "%s answers /check of the %s session from stale memory: %s", p.base, s.Status, r.raw)
		}
	}
	failedWhileDown := load.failures.Load()
	require.NoError(t, srv.Restart(false))
	for _, p := range procs {
		require.Eventually(t, func() bool {
			r, err := crashDo(client, http.MethodGet, p.base+"/readyz", "")
			return err == nil && r.status == http.StatusOK
		}, 60*time.Second, 10*time.Millisecond, "%s is ready again", p.base)
	}
	back := load.joins.Load()
	waitCount(t, "joins after the restart", load.joins.Load, back+200, 30*time.Second)
	load.Stop()
	assert.Positive(t, failedWhileDown, "requests failed while the server was down")
	t.Logf("%d joins acknowledged, %d requests failed (most while the server was down)", load.joins.Load(), load.failures.Load())

	stored := multiCheckDB(t, url, w, "after the database restart")
	require.Contains(t, stored, admitted.Session)
	multiCheckMemory(t, client, procs, w, stored, seed)
}
