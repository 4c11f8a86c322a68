package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" driver, to read the Postgres database between runs
	_ "modernc.org/sqlite"             // the "sqlite" driver, to read the database between runs

	"github.com/anteroomhq/anteroom/session/postgres/pgtest"
)

// The crash test runs the real binary, kills it with SIGKILL under load and
// checks, from the database file and from the restarted server, that nothing
// acknowledged was lost and that the counters still count the rows.
//
//	go test -run Crash ./cmd/anteroom/                       # 3 rounds
//	ANTEROOM_CRASH_ROUNDS=20 go test -run Crash ./cmd/anteroom/
//	go test -run Crash ./cmd/anteroom/ -crash.rounds=20 -crash.seed=42
var (
	crashRoundsFlag = flag.Int("crash.rounds", 0, "rounds of the crash test (default: $ANTEROOM_CRASH_ROUNDS, else 3)")
	crashSeedFlag   = flag.Uint64("crash.seed", 0, "seed of the crash test (default: $ANTEROOM_CRASH_SEED, else random)")
)

const (
	crashDefaultRounds = 3
	crashWorkers       = 8
	crashStatusWorkers = 16
)

// crashGates are the gates the binary is configured with, and their limits.
var crashGates = map[string]int64{"default": 4, "vip": 2}

func crashRounds(t *testing.T) int {
	if *crashRoundsFlag > 0 {
		return *crashRoundsFlag
	}
	if v := os.Getenv("ANTEROOM_CRASH_ROUNDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("ANTEROOM_CRASH_ROUNDS=%q: want a positive whole number", v)
		}
		return n
	}
	return crashDefaultRounds
}

func crashSeed(t *testing.T) uint64 {
	if *crashSeedFlag != 0 {
		return *crashSeedFlag
	}
	if v := os.Getenv("ANTEROOM_CRASH_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("ANTEROOM_CRASH_SEED=%q: want a whole number", v)
		}
		return n
	}
	return uint64(time.Now().UnixNano())
}

// crashSession is one session whose join was acknowledged (200).
type crashSession struct {
	gate, id, token string
	position        int64
	// released: a release of it was acknowledged (204); it must be gone.
	released bool
	// maybeReleased: a release was sent but its answer was lost in the
	// crash; the database decides.
	maybeReleased bool
}

func (s *crashSession) live() bool { return !s.released && !s.maybeReleased }

// crashWorld is what the test knows, across rounds.
type crashWorld struct {
	t  *testing.T
	mu sync.Mutex
	// owner[gate][position] is the id of the acknowledged join that got the
	// position: a position handed out twice is a bug even after a release.
	owner map[string]map[int64]string
	// lastNext[gate] is next_position as last read from the database.
	lastNext map[string]int64
	// sessions[w] are the sessions of worker w: only w acts on them, so that
	// their state is known without locks between rounds.
	sessions [crashWorkers][]*crashSession
	acked    struct{ joins, rejoins, leaves, releases, statuses, lost int }
}

func (w *crashWorld) maxSeen(gate string) int64 {
	var m int64
	for p := range w.owner[gate] {
		m = max(m, p)
	}
	return m
}

func (w *crashWorld) all() []*crashSession {
	var out []*crashSession
	for _, ss := range w.sessions {
		out = append(out, ss...)
	}
	return out
}

// crashView is the part of a SessionView (+ token) the test reads.
type crashView struct {
	Gate                 string `json:"gate"`
	Session              string `json:"session"`
	Status               string `json:"status"`
	Position             int64  `json:"position"`
	Token                string `json:"token"`
	Active               int64  `json:"active"`
	Waiting              int64  `json:"waiting"`
	Limit                int64  `json:"limit"`
	FirstWaitingPosition int64  `json:"firstWaitingPosition"`
	LastWaitingPosition  int64  `json:"lastWaitingPosition"`
}

// crashLog collects the child's stderr.
type crashLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *crashLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *crashLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// crashProc is one run of the binary.
type crashProc struct {
	cmd    *exec.Cmd
	base   string // http://127.0.0.1:port
	log    *crashLog
	exited chan struct{}
	err    error // of Wait, once exited is closed
}

func TestCrash(t *testing.T) { crashTest(t, "") }

// TestCrashPostgres is the crash test on the shared Postgres store: the
// server is killed, the database stays.
func TestCrashPostgres(t *testing.T) { crashTest(t, pgtest.DB(t)) }

// crashTest runs the crash test on database, or on an SQLite file in a
// temporary directory when it is empty.
func crashTest(t *testing.T, database string) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("the crash test builds the binary and needs go on PATH: %v", err)
		}
		t.Skipf("go not on PATH, cannot build the binary: %v", err)
	}
	rounds, seed := crashRounds(t), crashSeed(t)
	t.Logf("crash test: %d rounds, seed %d (rerun with -crash.seed=%d or ANTEROOM_CRASH_SEED=%d)", rounds, seed, seed, seed)
	rng := rand.New(rand.NewPCG(seed, 0x616e7465726f6f6d))

	dir := t.TempDir()
	bin := filepath.Join(dir, "anteroom")
	build := exec.Command(goBin, "build", "-o", bin, ".")
	start := time.Now()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	t.Logf("built the binary in %v", time.Since(start).Round(time.Millisecond))
	db := database
	if db == "" {
		db = filepath.Join(dir, "anteroom.db")
	}

	w := &crashWorld{t: t, owner: map[string]map[int64]string{}, lastNext: map[string]int64{}}
	for g := range crashGates {
		w.owner[g] = map[int64]string{}
	}
	for round := range rounds {
		p := crashStart(t, bin, db)
		if round > 0 {
			crashVerifyServed(t, w, p)
		}
		load := time.Duration(50+rng.IntN(350)) * time.Millisecond
		crashDrive(t, w, p, rng.Uint64(), round, load)
		crashCheckDB(t, w, db, fmt.Sprintf("after the kill of round %d", round+1))
		if t.Failed() {
			t.Fatalf("round %d failed (seed %d); log of the killed server:\n%s", round+1, seed, crashTail(p.log.String()))
		}
	}

	// A last start: everything is still served; then a graceful stop leaves
	// the same consistent file.
	p := crashStart(t, bin, db)
	crashVerifyServed(t, w, p)
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM: %v", err)
	}
	select {
	case <-p.exited:
		if p.err != nil {
			t.Errorf("graceful stop: %v\n%s", p.err, crashTail(p.log.String()))
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("the server did not stop within 20s of SIGTERM")
	}
	crashCheckDB(t, w, db, "after the graceful stop")
	live := 0
	for _, s := range w.all() {
		if s.live() {
			live++
		}
	}
	t.Logf("acknowledged: %d joins, %d re-joins, %d leaves, %d releases, %d status reads; %d requests lost in crashes; %d sessions live at the end",
		w.acked.joins, w.acked.rejoins, w.acked.leaves, w.acked.releases, w.acked.statuses, w.acked.lost, live)
	if w.acked.joins == 0 {
		t.Errorf("no join was acknowledged: the test drove nothing")
	}
}

// crashEnv is the child's environment: the parent's minus every ANTEROOM_*
// variable (the test's own ANTEROOM_CRASH_* would be refused as unknown), plus
// the test's configuration.
func crashEnv(db, listen string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ANTEROOM_") {
			env = append(env, kv)
		}
	}
	env = append(env,
		"ANTEROOM_LISTEN="+listen,
		"ANTEROOM_DATABASE="+db,
		"ANTEROOM_RATE_LIMIT_PER_SECOND=0",
		"ANTEROOM_UPDATE_INTERVAL=1h",
		"ANTEROOM_LOG_LEVEL=warn",
	)
	for g, limit := range crashGates {
		n := strings.ToUpper(g)
		// Long timeouts: nothing is purged, so every acknowledged session
		// that was not released must still be there.
		env = append(env,
			fmt.Sprintf("ANTEROOM_GATES_%s_ACTIVE_LIMIT=%d", n, limit),
			fmt.Sprintf("ANTEROOM_GATES_%s_ACTIVE_TIMEOUT=1h", n),
			fmt.Sprintf("ANTEROOM_GATES_%s_WAITING_TIMEOUT=1h", n),
		)
	}
	return env
}

// crashStart runs the binary on a free loopback port (another port when the
// chosen one was taken meanwhile) and waits until it is ready.
func crashStart(t *testing.T, bin, db string) *crashProc {
	t.Helper()
	for attempt := 1; ; attempt++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("finding a free port: %v", err)
		}
		addr := l.Addr().String()
		_ = l.Close()

		p := &crashProc{base: "http://" + addr, log: &crashLog{}, exited: make(chan struct{})}
		p.cmd = exec.Command(bin)
		p.cmd.Env = crashEnv(db, addr)
		p.cmd.Stdout = io.Discard
		p.cmd.Stderr = p.log
		if err := p.cmd.Start(); err != nil {
			t.Fatalf("starting %s: %v", bin, err)
		}
		go func() { p.err = p.cmd.Wait(); close(p.exited) }()
		t.Cleanup(func() {
			_ = p.cmd.Process.Kill()
			<-p.exited
		})
		if crashWaitReady(p, 30*time.Second) {
			return p
		}
		log := p.log.String()
		_ = p.cmd.Process.Kill()
		<-p.exited
		if strings.Contains(log, "address already in use") && attempt < 5 {
			t.Logf("port %s was taken meanwhile, trying another", addr)
			continue
		}
		t.Fatalf("the server did not become ready (exit: %v):\n%s", p.err, crashTail(log))
	}
}

func crashWaitReady(p *crashProc, timeout time.Duration) bool {
	c := &http.Client{Timeout: time.Second}
	defer c.CloseIdleConnections()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		select {
		case <-p.exited:
			return false
		default:
		}
		if resp, err := c.Get(p.base + "/readyz"); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return true
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	return false
}

func crashTail(log string) string {
	const keep = 8 << 10
	if len(log) > keep {
		return "...\n" + log[len(log)-keep:]
	}
	return log
}

type crashReply struct {
	status int
	view   crashView
	raw    []byte
}

// crashDo sends one request; an error means no answer arrived (the server
// died under it), so its outcome is unknown.
func crashDo(c *http.Client, method, url, body string, header ...string) (crashReply, error) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		return crashReply{}, err
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		return crashReply{}, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return crashReply{}, err
	}
	r := crashReply{status: resp.StatusCode, raw: raw}
	if resp.StatusCode == http.StatusOK && strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		if err := json.Unmarshal(raw, &r.view); err != nil {
			return r, fmt.Errorf("undecodable answer %q: %w", raw, err)
		}
	}
	return r, nil
}

// crashNotSent reports whether err says the request never reached a
// server (no connection), so it cannot have had an effect.
func crashNotSent(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// crashAuth returns the header that carries a session's token, cookie or
// Bearer at random.
func crashAuth(rng *rand.Rand, tok string) []string {
	if rng.IntN(2) == 0 {
		return []string{"Cookie", "anteroom_session=" + tok}
	}
	return []string{"Authorization", "Bearer " + tok}
}

func crashGateNames() []string {
	names := make([]string, 0, len(crashGates))
	for g := range crashGates {
		names = append(names, g)
	}
	sort.Strings(names)
	return names
}

// crashDrive runs the workers against p for about load, then kills p with
// SIGKILL while they are still sending, and waits for them.
func crashDrive(t *testing.T, w *crashWorld, p *crashProc, seed uint64, round int, load time.Duration) {
	t.Helper()
	tr := &http.Transport{MaxIdleConnsPerHost: crashWorkers}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range crashWorkers {
		rng := rand.New(rand.NewPCG(seed, uint64(i)))
		wg.Go(func() { crashWorker(t, w, p, c, rng, i, stop) })
	}
	time.Sleep(load)
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatalf("SIGKILL: %v", err)
	}
	<-p.exited
	close(stop)
	wg.Wait()
	t.Logf("round %d: killed after %v", round+1, load)
}

// crashWorker sends random operations on its own sessions until stop, or
// until a request goes unanswered (the server is dead): so at most one
// operation per worker and round has an unknown outcome.
func crashWorker(t *testing.T, w *crashWorld, p *crashProc, c *http.Client, rng *rand.Rand, me int, stop <-chan struct{}) {
	gates := crashGateNames()
	lost := 0
	defer func() {
		w.mu.Lock()
		w.acked.lost += lost
		w.mu.Unlock()
	}()
	fail := func(format string, args ...any) {
		t.Errorf("worker %d: "+format, append([]any{me}, args...)...)
	}
	checkView := func(what string, v crashView) {
		if v.Active > v.Limit || v.Active < 0 || v.Waiting < 0 {
			fail("%s: active %d, waiting %d, limit %d", what, v.Active, v.Waiting, v.Limit)
		}
	}
	for {
		select {
		case <-stop:
			return
		default:
		}
		var live []*crashSession
		for _, s := range w.sessions[me] {
			if s.live() {
				live = append(live, s)
			}
		}
		op := rng.IntN(100)
		if len(live) == 0 {
			op = 0
		}
		switch {
		case op < 40: // a new session joins, naming its gate in the body, the query or not at all
			g := gates[rng.IntN(len(gates))]
			url, body := p.base+"/anteroom/api/join", ""
			switch {
			case g == "default" && rng.IntN(3) == 0:
			case rng.IntN(2) == 0:
				body = `{"gate":"` + g + `"}`
			default:
				url += "?gate=" + g
			}
			r, err := crashDo(c, http.MethodPost, url, body)
			if err != nil {
				lost++
				return
			}
			if r.status != http.StatusOK {
				fail("join %s: %d %s", g, r.status, r.raw)
				continue
			}
			v := r.view
			checkView("join", v)
			if v.Gate != g || v.Session == "" || !strings.HasPrefix(v.Token, v.Session+".") || v.Position < 1 {
				fail("join %s: answer %s", g, r.raw)
				continue
			}
			w.mu.Lock()
			if prev, dup := w.owner[g][v.Position]; dup {
				fail("gate %s: position %d handed to %s and, again, to %s", g, v.Position, prev, v.Session)
			}
			w.owner[g][v.Position] = v.Session
			w.acked.joins++
			w.mu.Unlock()
			w.sessions[me] = append(w.sessions[me], &crashSession{gate: g, id: v.Session, token: v.Token, position: v.Position})

		case op < 60: // a known session joins again with its token: same session, same place
			s := live[rng.IntN(len(live))]
			r, err := crashDo(c, http.MethodPost, p.base+"/anteroom/api/join?gate="+s.gate, "", crashAuth(rng, s.token)...)
			if err != nil {
				lost++
				return
			}
			if r.status != http.StatusOK {
				fail("re-join %s/%s: %d %s", s.gate, s.id, r.status, r.raw)
				continue
			}
			checkView("re-join", r.view)
			if r.view.Session != s.id || r.view.Position != s.position {
				fail("re-join %s/%s at %d: answer %s", s.gate, s.id, s.position, r.raw)
			}
			w.mu.Lock()
			w.acked.rejoins++
			w.mu.Unlock()

		case op < 75: // leave (a waiter's departure mark; purged only after 1h)
			s := live[rng.IntN(len(live))]
			r, err := crashDo(c, http.MethodPost, p.base+"/anteroom/api/leave?gate="+s.gate, "", crashAuth(rng, s.token)...)
			if err != nil {
				lost++
				return
			}
			if r.status != http.StatusNoContent {
				fail("leave %s/%s: %d %s", s.gate, s.id, r.status, r.raw)
				continue
			}
			w.mu.Lock()
			w.acked.leaves++
			w.mu.Unlock()

		case op < 92: // release: the row goes, a waiter may take the slot
			s := live[rng.IntN(len(live))]
			s.maybeReleased = true
			r, err := crashDo(c, http.MethodPost, p.base+"/anteroom/api/release?gate="+s.gate, "", crashAuth(rng, s.token)...)
			if err != nil {
				if crashNotSent(err) {
					s.maybeReleased = false
				}
				lost++
				return
			}
			if r.status != http.StatusNoContent {
				fail("release %s/%s: %d %s", s.gate, s.id, r.status, r.raw)
				continue
			}
			s.maybeReleased, s.released = false, true
			w.mu.Lock()
			w.acked.releases++
			w.mu.Unlock()

		default: // status: same place
			s := live[rng.IntN(len(live))]
			r, err := crashDo(c, http.MethodGet, p.base+"/anteroom/api/status?gate="+s.gate, "", crashAuth(rng, s.token)...)
			if err != nil {
				lost++
				return
			}
			if r.status != http.StatusOK || r.view.Session != s.id || r.view.Position != s.position {
				fail("status %s/%s at %d: %d %s", s.gate, s.id, s.position, r.status, r.raw)
				continue
			}
			checkView("status", r.view)
			w.mu.Lock()
			w.acked.statuses++
			w.mu.Unlock()
		}
	}
}

// crashVerifyServed asks the restarted server for every session the test
// knows: a live one has its place, a released one is gone; and the global
// views hold what the database held (nothing is purged, promotions keep the
// sum).
func crashVerifyServed(t *testing.T, w *crashWorld, p *crashProc) {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: crashStatusWorkers}}
	defer c.CloseIdleConnections()
	for _, g := range crashGateNames() {
		r, err := crashDo(c, http.MethodGet, p.base+"/anteroom/api/global?gate="+g, "")
		if err != nil || r.status != http.StatusOK {
			t.Fatalf("global %s after restart: %v %d %s", g, err, r.status, r.raw)
		}
		v := r.view
		if v.Limit != crashGates[g] || v.Active > v.Limit {
			t.Errorf("gate %s after restart: active %d, limit %d (want limit %d)", g, v.Active, v.Limit, crashGates[g])
		}
		if v.Active < v.Limit && v.Waiting > 0 {
			t.Errorf("gate %s after restart: %d waiting while %d of %d slots are taken", g, v.Waiting, v.Active, v.Limit)
		}
	}
	sessions := w.all()
	work := make(chan *crashSession)
	var wg sync.WaitGroup
	for range crashStatusWorkers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(len(sessions)), 1))
			for s := range work {
				r, err := crashDo(c, http.MethodGet, p.base+"/anteroom/api/status?gate="+s.gate, "", crashAuth(rng, s.token)...)
				if err != nil {
					t.Errorf("status %s/%s after restart: %v", s.gate, s.id, err)
					continue
				}
				switch {
				case s.released:
					if r.status != http.StatusNotFound {
						t.Errorf("status of %s/%s, released (acknowledged), after restart: %d %s", s.gate, s.id, r.status, r.raw)
					}
				case r.status != http.StatusOK:
					t.Errorf("status of %s/%s (position %d, acknowledged) after restart: %d %s", s.gate, s.id, s.position, r.status, r.raw)
				case r.view.Session != s.id || r.view.Position != s.position || r.view.Gate != s.gate:
					t.Errorf("status of %s/%s (position %d) after restart: %s", s.gate, s.id, s.position, r.raw)
				case r.view.Active > r.view.Limit:
					t.Errorf("status of %s/%s after restart: active %d > limit %d", s.gate, s.id, r.view.Active, r.view.Limit)
				}
			}
		})
	}
	for _, s := range sessions {
		work <- s
	}
	close(work)
	wg.Wait()
}

// crashRow is one sessions row.
type crashRow struct {
	gate, id string
	position int64
	status   int64
}

// crashCheckDB reads the database of a dead server, read-only, and checks
// it against itself and against what the test knows. It resolves releases
// whose answer was lost.
func crashCheckDB(t *testing.T, w *crashWorld, path, when string) {
	t.Helper()
	driver, dsn, prefix := "sqlite", "file:"+path+"?mode=ro", ""
	if isPostgres(path) {
		driver, dsn, prefix = "pgx", path, "anteroom_"
	} else if _, err := os.Stat(path); err != nil {
		t.Fatalf("%s: %v", when, err)
	}
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatalf("%s: opening the database read-only: %v", when, err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	if driver == "pgx" {
		// The killed server's backends may still run what it had sent
		// (a batch that ends in COMMIT, a lost release among them): read
		// only once they have exited, or a commit landing after the read
		// would resolve a lost release the wrong way.
		deadline := time.Now().Add(20 * time.Second)
		for {
			var others int
			if err := db.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity
				WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'`).Scan(&others); err != nil {
				t.Fatalf("%s: %v", when, err)
			}
			if others == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d backends of the killed server still running after 20s", when, others)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if driver == "sqlite" {
		var check string
		if err := db.QueryRowContext(ctx, "PRAGMA quick_check").Scan(&check); err != nil || check != "ok" {
			t.Fatalf("%s: quick_check: %q %v", when, check, err)
		}
	}
	type counters struct{ next, active, waiting int64 }
	gates := map[string]counters{}
	rows, err := db.QueryContext(ctx, "SELECT name, next_position, active, waiting FROM "+prefix+"gates")
	if err != nil {
		t.Fatalf("%s: reading gates: %v", when, err)
	}
	for rows.Next() {
		var name string
		var c counters
		if err := rows.Scan(&name, &c.next, &c.active, &c.waiting); err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		gates[name] = c
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		t.Fatalf("%s: reading gates: %v", when, err)
	}
	rows, err = db.QueryContext(ctx, "SELECT gate, id, position, status FROM "+prefix+"sessions")
	if err != nil {
		t.Fatalf("%s: reading sessions: %v", when, err)
	}
	type key struct{ gate, id string }
	byID := map[key]crashRow{}
	byPos := map[string]map[int64]string{}
	counted := map[string]counters{}
	for rows.Next() {
		var r crashRow
		if err := rows.Scan(&r.gate, &r.id, &r.position, &r.status); err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		byID[key{r.gate, r.id}] = r
		if byPos[r.gate] == nil {
			byPos[r.gate] = map[int64]string{}
		}
		if other, dup := byPos[r.gate][r.position]; dup {
			t.Errorf("%s: gate %s: position %d held by both %s and %s", when, r.gate, r.position, other, r.id)
		}
		byPos[r.gate][r.position] = r.id
		c := counted[r.gate]
		switch r.status {
		case 0:
			c.waiting++
		case 1:
			c.active++
		default:
			t.Errorf("%s: %s/%s: status %d", when, r.gate, r.id, r.status)
		}
		c.next = max(c.next, r.position) // the largest position, here
		counted[r.gate] = c
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		t.Fatalf("%s: reading sessions: %v", when, err)
	}

	for g := range counted {
		if _, ok := gates[g]; !ok {
			t.Errorf("%s: sessions of gate %q, which has no gates row", when, g)
		}
	}
	for _, g := range crashGateNames() {
		c, ok := gates[g]
		if !ok {
			t.Errorf("%s: no gates row for %q", when, g)
			continue
		}
		rc := counted[g]
		if c.active != rc.active || c.waiting != rc.waiting {
			t.Errorf("%s: gate %s: counters active=%d waiting=%d, rows active=%d waiting=%d", when, g, c.active, c.waiting, rc.active, rc.waiting)
		}
		if c.next <= rc.next {
			t.Errorf("%s: gate %s: next_position %d, not above the largest stored position %d", when, g, c.next, rc.next)
		}
		if seen := w.maxSeen(g); c.next <= seen {
			t.Errorf("%s: gate %s: next_position %d, not above position %d acknowledged earlier", when, g, c.next, seen)
		}
		if c.next < w.lastNext[g] {
			t.Errorf("%s: gate %s: next_position went back from %d to %d", when, g, w.lastNext[g], c.next)
		}
		w.lastNext[g] = c.next
		if limit := crashGates[g]; rc.active > limit {
			t.Errorf("%s: gate %s: %d active rows, limit %d", when, g, rc.active, limit)
		} else if rc.active < limit && rc.waiting > 0 {
			t.Errorf("%s: gate %s: %d waiting rows while only %d of %d slots are taken", when, g, rc.waiting, rc.active, limit)
		}
		for pos, id := range byPos[g] {
			if owner, ok := w.owner[g][pos]; ok && owner != id {
				t.Errorf("%s: gate %s: position %d, acknowledged to %s, is now held by %s", when, g, pos, owner, id)
			}
		}
	}

	resolved := 0
	for _, s := range w.all() {
		r, ok := byID[key{s.gate, s.id}]
		switch {
		case s.released:
			if ok {
				t.Errorf("%s: %s/%s was released (acknowledged) but is still stored at position %d", when, s.gate, s.id, r.position)
			}
		case s.maybeReleased:
			// The release's answer was lost: either outcome is fine, but the
			// row, when kept, keeps its position.
			resolved++
			s.maybeReleased = false
			s.released = !ok
			if ok && r.position != s.position {
				t.Errorf("%s: %s/%s: stored at position %d, acknowledged at %d", when, s.gate, s.id, r.position, s.position)
			}
		case !ok:
			t.Errorf("%s: %s/%s, acknowledged at position %d, is gone", when, s.gate, s.id, s.position)
		case r.position != s.position:
			t.Errorf("%s: %s/%s: stored at position %d, acknowledged at %d", when, s.gate, s.id, r.position, s.position)
		}
	}
	t.Logf("%s: %d rows; gates %v; %d lost releases resolved", when, len(byID), gates, resolved)
}
