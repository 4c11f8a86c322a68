// Command anteroom-bench measures anteroom's hot paths against baselines
// taken in the same run (issue #5). It starts what it measures itself, on
// loopback: real anteroom servers built from the packages (SQLite store in a
// temporary directory, session.Waitlist, broadcast hub, gate on echo, the
// cron update), with the rate limit off, and the clients that load them.
//
// Usage:
//
//	go run ./cmd/anteroom-bench [flags] [scenario...]
//	go run ./cmd/anteroom-bench -smoke          # a few seconds per scenario
//	go run ./cmd/anteroom-bench -json out.json fanout
//
// Scenarios (all when none is named): join-inproc, validate-inproc,
// join-http, check-http, storm, tick, fanout, abandon, startup, update. On Postgres, when
// named or with the others when -database is given: pg-join, pg-fanout,
// pg-startup; without -database they start a private server (initdb in a
// temporary directory):
//
//	go run ./cmd/anteroom-bench pg-join pg-fanout pg-startup
//	go run ./cmd/anteroom-bench -database postgres://u:p@host/db   # needs CREATEDB
//	go run ./cmd/anteroom-bench -smoke -sockets 300 pg-fanout
//
// It prints a table (metric,
// value, baseline, ratio, target, pass/fail) on stdout and progress on
// stderr. It exits non-zero only when a scenario could not run; a missed
// target is a FAIL in the table, not an error.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// config holds the flags, with smoke or full defaults filled in.
type config struct {
	smoke      bool
	jsonPath   string
	cpuProfile string
	tracePath  string
	verbose    bool

	window   time.Duration // one measuring window of a throughput run
	warmup   time.Duration // load before a window starts counting
	rounds   int           // baseline/value windows, interleaved
	conns    int           // HTTP keep-alive connections
	workers  int           // in-process concurrent callers
	sessions int           // active sessions for validate and check
	joinLine int           // join-http: waiters bulk-loaded in line before the joins (0: none)
	interval time.Duration // broadcast interval

	fanoutN        int
	fanoutRepeat   int
	fanoutIPs      int
	stormRate      int
	stormDuration  time.Duration
	tickSessions   int
	tickStale      int
	tickActive     int
	tickJoinRate   int
	tickQuietPhase time.Duration
	scaleSizes     string // startup, update: sessions per file, comma-separated
	updateStale    int    // update: stale sessions (0: 1% of the file)

	abandonScale    float64
	abandonWaiters  int
	abandonLimit    int
	abandonDuration time.Duration
	abandonSeed     uint64

	pg pgConfig
}

var scenarioNames = []string{"join-inproc", "validate-inproc", "join-http", "join-http-history", "check-http", "storm", "tick", "fanout", "abandon", "startup", "update"}

// pgScenarioNames run on Postgres: when named, or with the rest when
// -database is given.
var pgScenarioNames = []string{"pg-join", "pg-fanout", "pg-startup"}

func main() {
	os.Exit(realMain(os.Args[1:], os.Stdout, os.Stderr))
}

func realMain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("anteroom-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c config
	fs.BoolVar(&c.smoke, "smoke", false, "small sizes and short windows (~1-2 s per scenario): checks the tool runs, not the speed")
	fs.StringVar(&c.jsonPath, "json", "", "also write the results as JSON to `FILE`")
	fs.StringVar(&c.cpuProfile, "cpuprofile", "", "write a CPU profile of this process (clients and in-process servers) to `FILE`")
	fs.StringVar(&c.tracePath, "trace", "", "update: write an execution trace of each update and its aftermath to `FILE`.<size> (go tool trace)")
	fs.BoolVar(&c.verbose, "v", false, "more progress on stderr")
	fs.DurationVar(&c.window, "window", 0, "length of one measuring window (default 2s, smoke 300ms)")
	fs.DurationVar(&c.warmup, "warmup", 0, "load before each window counts (default 500ms, smoke 100ms)")
	fs.IntVar(&c.rounds, "rounds", 0, "interleaved baseline/value windows per throughput scenario (default 5, smoke 1)")
	fs.IntVar(&c.conns, "conns", 0, "HTTP keep-alive client connections (default 128, smoke 32)")
	fs.IntVar(&c.workers, "workers", 0, "concurrent in-process callers for join-inproc (default 256, smoke 64)")
	fs.IntVar(&c.sessions, "sessions", 0, "active sessions for validate-inproc and check-http (default 10000, smoke 1000)")
	fs.IntVar(&c.joinLine, "join-line", 0, "join-http: waiters bulk-loaded in line before the joins, so that they join a long line (default 0: an empty gate)")
	fs.DurationVar(&c.interval, "interval", 250*time.Millisecond, "broadcast interval of the servers (broadcast_interval)")
	fs.IntVar(&c.fanoutN, "fanout-n", 0, "waiting sockets in fanout (default 19000, smoke 300; capped by RLIMIT_NOFILE)")
	fs.IntVar(&c.fanoutRepeat, "fanout-repeat", 0, "state changes timed in fanout; the worst is reported (default 3, smoke 1)")
	fs.IntVar(&c.fanoutIPs, "fanout-ips", 8, "source addresses 127.0.0.2... the fanout clients are spread over")
	fs.IntVar(&c.stormRate, "storm-rate", 0, "joins/s offered in storm (default 10000, smoke 2000)")
	fs.DurationVar(&c.stormDuration, "storm-duration", 0, "length of storm (default 10s, smoke 1s)")
	fs.IntVar(&c.tickSessions, "tick-sessions", 0, "sessions seeded for tick (default 1000000, smoke 20000)")
	fs.IntVar(&c.tickStale, "tick-stale", 0, "stale sessions among them, half active, half waiting that left (default 10000, smoke 1000)")
	fs.IntVar(&c.tickActive, "tick-active", 0, "active limit (and active sessions) of the tick gate (default 10000, smoke 1000)")
	fs.IntVar(&c.tickJoinRate, "tick-join-rate", 1000, "joins/s offered while measuring join latency in tick")
	fs.DurationVar(&c.tickQuietPhase, "tick-quiet", 0, "length of the no-tick join latency phase (default 2s, smoke 500ms)")
	fs.StringVar(&c.scaleSizes, "scale-sizes", "", "startup, update: sessions in each bulk-loaded file, comma-separated (default 1000000,5000000, smoke 20000)")
	fs.IntVar(&c.updateStale, "update-stale", 0, "update: stale sessions, half active and half waiting (default 1% of the file)")
	fs.Float64Var(&c.abandonScale, "abandon-scale", 0, "abandon: simulated time runs this many times faster, every duration and timeout divided by it (default 10, smoke 100)")
	fs.IntVar(&c.abandonWaiters, "abandon-waiters", 0, "abandon: waiters arriving over a simulated minute (default 5000, smoke 300)")
	fs.IntVar(&c.abandonLimit, "abandon-limit", 0, "abandon: active limit, all taken by visitors at the start (default 100, smoke 20)")
	fs.DurationVar(&c.abandonDuration, "abandon-duration", 0, "abandon: simulated length of each mode's run from the first arrival (default 10m, smoke 6m)")
	fs.Uint64Var(&c.abandonSeed, "abandon-seed", 1, "abandon: seed of the population's random draws")
	c.pg.flags(fs)
	serve := fs.Bool("serve", false, "internal: run as the fanout server child")
	serveRaw := fs.Bool("serve-rawfan", false, "internal: run as the fanout's raw write loop baseline child")
	serveDir := fs.String("serve-dir", "", "internal: database directory of the -serve child")
	serveSecret := fs.String("serve-secret", "", "internal: hex token secret of the -serve child")
	var cc childConfig
	fs.StringVar(&cc.database, "serve-database", "", "internal: Postgres URL of the -serve child")
	fs.Int64Var(&cc.limit, "serve-limit", 0, "internal: active limit of the -serve child")
	fs.DurationVar(&cc.waitingTimeout, "serve-waiting-timeout", 0, "internal: waiting timeout of the -serve child")
	var wc wsWorkerConfig
	fs.BoolVar(&wc.run, "ws-worker", false, "internal: run as a websocket client worker of pg-fanout")
	fs.StringVar(&wc.addr, "ws-addr", "", "internal: server address of the -ws-worker")
	fs.IntVar(&wc.n, "ws-n", 0, "internal: sockets of the -ws-worker")
	fs.StringVar(&wc.prefix, "ws-prefix", "", "internal: session id prefix of the -ws-worker's sockets")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: anteroom-bench [flags] [scenario...]\nscenarios: %s\n  on Postgres (with -database, else a private server in a temp dir): %s\nflags:\n",
			strings.Join(scenarioNames, " "), strings.Join(pgScenarioNames, " "))
		fs.VisitAll(func(f *flag.Flag) {
			if strings.HasPrefix(f.Name, "serve") || strings.HasPrefix(f.Name, "ws-") {
				return
			}
			name, usage := flag.UnquoteUsage(f)
			fmt.Fprintf(stderr, "  -%s %s\n    \t%s\n", f.Name, name, usage)
		})
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if wc.run {
		wc.secretHex, wc.ips, wc.cpuProfile = *serveSecret, c.fanoutIPs, c.cpuProfile
		if err := wsWorker(wc, os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(stderr, "anteroom-bench -ws-worker:", err)
			return 1
		}
		return 0
	}
	if *serveRaw {
		if err := serveRawFan(os.Stdout); err != nil {
			fmt.Fprintln(stderr, "anteroom-bench -serve-rawfan:", err)
			return 1
		}
		return 0
	}
	if *serve {
		cc.dir, cc.secretHex, cc.cpuProfile, cc.interval = *serveDir, *serveSecret, c.cpuProfile, c.interval
		if err := serveChild(cc, os.Stdout, stderr); err != nil {
			fmt.Fprintln(stderr, "anteroom-bench -serve:", err)
			return 1
		}
		return 0
	}
	c.fillDefaults()

	scenarios := fs.Args()
	if len(scenarios) == 0 {
		scenarios = scenarioNames
		if c.pg.database != "" {
			scenarios = append(slices.Clone(scenarioNames), pgScenarioNames...)
		}
	}
	for _, s := range scenarios {
		if !slices.Contains(scenarioNames, s) && !slices.Contains(pgScenarioNames, s) {
			fmt.Fprintf(stderr, "anteroom-bench: unknown scenario %q (want some of: %s %s)\n", s, strings.Join(scenarioNames, " "), strings.Join(pgScenarioNames, " "))
			return 2
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	stopProfile, err := startCPUProfile(c.cpuProfile)
	if err != nil {
		fmt.Fprintln(stderr, "anteroom-bench:", err)
		return 1
	}
	defer stopProfile()

	raiseFileLimit()
	b := &bench{cfg: c, log: &lockedWriter{w: stderr}}
	defer b.closePG()
	rep := report{Mode: "full", Machine: describeMachine(), Started: time.Now().UTC().Format(time.RFC3339), Args: args}
	if c.smoke {
		rep.Mode = "smoke"
	}
	failed := false
	start := time.Now()
	for _, name := range scenarios {
		if ctx.Err() != nil {
			break
		}
		b.progress("== %s", name)
		t0 := time.Now()
		res, err := b.run(ctx, name)
		for i := range res {
			res[i].Scenario = name
			res[i].evaluate()
		}
		if err != nil {
			failed = true
			b.progress("%s: ERROR: %v", name, err)
			res = append(res, Result{Scenario: name, Metric: "error", Result: "ERROR", Note: err.Error()})
		}
		b.progress("%s: done in %s", name, time.Since(t0).Round(time.Millisecond))
		rep.Results = append(rep.Results, res...)
	}
	if ctx.Err() != nil {
		failed = true
		fmt.Fprintln(stderr, "anteroom-bench: interrupted")
	}
	rep.Seconds = time.Since(start).Seconds()
	printTable(stdout, rep)
	if c.jsonPath != "" {
		data, _ := json.MarshalIndent(rep, "", "  ")
		if err := os.WriteFile(c.jsonPath, append(data, '\n'), 0o644); err != nil {
			fmt.Fprintln(stderr, "anteroom-bench:", err)
			failed = true
		}
	}
	if failed {
		return 1
	}
	return 0
}

func (c *config) fillDefaults() {
	pick := func(full, smoke int) int {
		if c.smoke {
			return smoke
		}
		return full
	}
	pickD := func(full, smoke time.Duration) time.Duration {
		if c.smoke {
			return smoke
		}
		return full
	}
	setI := func(p *int, full, smoke int) {
		if *p <= 0 {
			*p = pick(full, smoke)
		}
	}
	setD := func(p *time.Duration, full, smoke time.Duration) {
		if *p <= 0 {
			*p = pickD(full, smoke)
		}
	}
	setD(&c.window, 2*time.Second, 300*time.Millisecond)
	setD(&c.warmup, 500*time.Millisecond, 100*time.Millisecond)
	setI(&c.rounds, 5, 1)
	setI(&c.conns, 128, 32)
	setI(&c.workers, 256, 64)
	setI(&c.sessions, 10000, 1000)
	setI(&c.fanoutN, 19000, 300)
	setI(&c.fanoutRepeat, 3, 1)
	setI(&c.stormRate, 10000, 2000)
	setD(&c.stormDuration, 10*time.Second, time.Second)
	setI(&c.tickSessions, 1000000, 20000)
	setI(&c.tickStale, 10000, 1000)
	setI(&c.tickActive, 10000, 1000)
	setD(&c.tickQuietPhase, 2*time.Second, 500*time.Millisecond)
	if c.scaleSizes == "" {
		c.scaleSizes = "1000000,5000000"
		if c.smoke {
			c.scaleSizes = "20000"
		}
	}
	setI(&c.abandonWaiters, 5000, 300)
	setI(&c.abandonLimit, 100, 20)
	setD(&c.abandonDuration, 10*time.Minute, 6*time.Minute)
	if c.abandonScale <= 0 {
		c.abandonScale = 10
		if c.smoke {
			c.abandonScale = 100
		}
	}
	if c.interval <= 0 {
		c.interval = 250 * time.Millisecond
	}
	if c.fanoutIPs <= 0 {
		c.fanoutIPs = 1
	}
	if c.tickJoinRate <= 0 {
		c.tickJoinRate = 1000
	}
	c.pg.fillDefaults(c.smoke)
}

// bench runs scenarios.
type bench struct {
	cfg config
	log io.Writer
	pg  pgServer // the Postgres server of the pg-* scenarios, started on first use
}

// lockedWriter serialises writes to w: the bench's log is written by its
// own goroutines and by the copiers of its child processes' stderr at once.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (b *bench) progress(format string, args ...any) {
	fmt.Fprintf(b.log, "[%s] %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}

func (b *bench) debugf(format string, args ...any) {
	if b.cfg.verbose {
		b.progress(format, args...)
	}
}

func (b *bench) run(ctx context.Context, name string) ([]Result, error) {
	switch name {
	case "join-inproc":
		return b.joinInproc(ctx)
	case "validate-inproc":
		return b.validateInproc(ctx)
	case "join-http":
		return b.joinHTTP(ctx)
	case "join-http-history":
		return b.joinHTTPHistory(ctx)
	case "check-http":
		return b.checkHTTP(ctx)
	case "storm":
		return b.storm(ctx)
	case "tick":
		return b.tick(ctx)
	case "fanout":
		return b.fanout(ctx)
	case "abandon":
		return b.abandon(ctx)
	case "pg-join":
		return b.pgJoin(ctx)
	case "pg-fanout":
		return b.pgFanout(ctx)
	case "pg-startup":
		return b.pgStartup(ctx)
	case "startup":
		return b.startup(ctx)
	case "update":
		return b.update(ctx)
	}
	return nil, fmt.Errorf("unknown scenario %q", name)
}

// tempDir makes a directory for one scenario's databases; the returned
// function removes it.
func tempDir(name string) (string, func(), error) {
	dir, err := os.MkdirTemp("", "anteroom-bench-"+name+"-")
	if err != nil {
		return "", nil, err
	}
	return dir, func() { _ = os.RemoveAll(dir) }, nil
}

// machine is what the numbers were measured on.
type machine struct {
	NumCPU     int    `json:"nproc"`
	GOMAXPROCS int    `json:"gomaxprocs"`
	CPU        string `json:"cpu"`
	Go         string `json:"go"`
	OS         string `json:"os"`
}

func describeMachine() machine {
	m := machine{NumCPU: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0), Go: runtime.Version(), OS: runtime.GOOS + "/" + runtime.GOARCH, CPU: "unknown"}
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.SplitSeq(string(data), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	return m
}
