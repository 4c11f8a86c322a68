package main

import (
	"bufio"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	_ "net/http/pprof" // /debug/pprof/ on the servers
	"os"
	"os/signal"
	"path/filepath"
	"runtime/metrics"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/anteroomhq/anteroom/broadcast"
	"github.com/anteroomhq/anteroom/cronjobs"
	"github.com/anteroomhq/anteroom/gate"
	"github.com/anteroomhq/anteroom/gate/token"
	"github.com/anteroomhq/anteroom/session"
	"github.com/anteroomhq/anteroom/session/postgres"
	"github.com/anteroomhq/anteroom/session/sqlite"
)

const (
	gateName = "default"
	basePath = "/anteroom"
	// emptyPath is the baseline route: an empty echo handler served by the
	// same http.Server as the gate.
	emptyPath = "/bench/empty"
)

// instanceConfig describes one anteroom server.
type instanceConfig struct {
	dir            string
	limit          int64
	activeTimeout  time.Duration
	waitingTimeout time.Duration
	interval       time.Duration
	clock          session.Clock // nil: the system clock
	touchInterval  time.Duration // 0: the default
	cron           bool          // run the cron update every minute, as the sidecar does by default
	secret         []byte        // nil: the store's generated secret
	log            *slog.Logger

	claimTimeout        time.Duration // GateConfig.ClaimTimeout (0: off)
	releaseOnDisconnect time.Duration // GateConfig.ReleaseOnDisconnect (0: off)
	sweepInterval       time.Duration // session.Options.SweepInterval (0: the default)
	// commitHook, when set, sees every commit of the store before the
	// Waitlist does (the abandon scenario's record of what the server did).
	commitHook func(session.Commit)
	noHistory  bool // history_retention: 0 (sqlite.Options.DisableHistory)
	// database, when set, is the URL of a shared Postgres database: the
	// instance runs on session/postgres instead of an SQLite file in dir.
	database string
	// labelProfile labels each request's CPU samples with its path
	// (a -serve child run with -cpuprofile).
	labelProfile bool
}

// hookedStore is a Store whose commit listener calls a hook first.
type hookedStore struct {
	session.Store
	hook func(session.Commit)
}

func (s hookedStore) SetCommitListener(fn func(session.Commit)) {
	s.Store.SetCommitListener(func(c session.Commit) {
		s.hook(c)
		fn(c)
	})
}

// instance is a real anteroom server wired like cmd/anteroom does, listening
// on 127.0.0.1, with the benchmark's extra routes beside the gate.
type instance struct {
	cfg    instanceConfig
	gate   session.GateConfig
	store  *sqlite.Store   // nil on Postgres
	pg     *postgres.Store // nil on SQLite
	hub    *broadcast.Hub
	wl     *session.Waitlist
	signer *token.Signer
	sched  *cronjobs.Scheduler
	srv    *http.Server
	addr   string
}

func dbPath(dir string) string { return filepath.Join(dir, "anteroom.db") }

func startInstance(ctx context.Context, cfg instanceConfig) (in *instance, err error) {
	if cfg.activeTimeout == 0 {
		cfg.activeTimeout = 5 * time.Minute
	}
	if cfg.waitingTimeout == 0 {
		cfg.waitingTimeout = time.Minute
	}
	if cfg.log == nil {
		cfg.log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	in = &instance{cfg: cfg, gate: session.GateConfig{
		Name: gateName, ActiveLimit: cfg.limit, ActiveTimeout: cfg.activeTimeout, WaitingTimeout: cfg.waitingTimeout,
		ClaimTimeout: cfg.claimTimeout, ReleaseOnDisconnect: cfg.releaseOnDisconnect,
	}}
	defer func() {
		if err != nil {
			in.Close()
			in = nil
		}
	}()
	var store session.Store
	var ready func() error
	var secretOf func(context.Context, func() ([]byte, error)) ([]byte, error)
	if cfg.database != "" {
		if in.pg, err = postgres.Open(ctx, cfg.database, postgres.Options{Logger: cfg.log}); err != nil {
			return in, err
		}
		store, ready, secretOf = in.pg, in.pg.Ready, in.pg.Secret
	} else {
		if in.store, err = sqlite.Open(dbPath(cfg.dir), sqlite.Options{Logger: cfg.log, DisableHistory: cfg.noHistory}); err != nil {
			return in, err
		}
		store, secretOf = in.store, in.store.Secret
	}
	secret := cfg.secret
	if len(secret) == 0 {
		if secret, err = secretOf(ctx, token.NewSecret); err != nil {
			return in, err
		}
	}
	if in.signer, err = token.NewSigner(secret); err != nil {
		return in, err
	}
	in.hub = broadcast.New(broadcast.Options{Interval: cfg.interval, Logger: cfg.log})
	if cfg.commitHook != nil {
		store = hookedStore{Store: store, hook: cfg.commitHook}
	}
	in.wl, err = session.New(ctx, store, []session.GateConfig{in.gate}, session.Options{
		Publisher: in.hub, Logger: cfg.log, Clock: cfg.clock, TouchInterval: cfg.touchInterval,
		SweepInterval: cfg.sweepInterval, Ready: ready,
	})
	if err != nil {
		return in, err
	}
	if cfg.cron {
		if err := cronjobs.RunUpdate(ctx, in.wl, cfg.log); err != nil {
			return in, err
		}
		sched, err := cronjobs.ParseSchedule("1m")
		if err != nil {
			return in, err
		}
		in.sched = cronjobs.Start(in.wl, sched, cronjobs.Options{Logger: cfg.log})
	}
	handler, err := gate.New(gate.Options{
		BasePath: basePath,
		Waitlist: in.wl,
		Signer:   in.signer,
		Hub:      in.hub,
		Logger:   cfg.log,
		// RateLimit: zero value, off.
	})
	if err != nil {
		return in, err
	}
	in.srv = &http.Server{
		Handler:           in.mux(handler),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(cfg.log.Handler(), slog.LevelWarn),
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return in, err
	}
	in.addr = ln.Addr().String()
	go func() { _ = in.srv.Serve(ln) }()
	return in, nil
}

// mux serves the gate, and under /bench/ an echo instance of its own: the
// empty baseline handler and the fanout child's controls. Both go through
// the same http.Server.
func (in *instance) mux(gateHandler http.Handler) http.Handler {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.Any(emptyPath, func(c echo.Context) error { return c.NoContent(http.StatusOK) })
	e.GET("/bench/mem", func(c echo.Context) error { return c.JSON(http.StatusOK, readMem()) })
	e.POST("/bench/seed", in.seedHandler)
	e.GET("/bench/sent", in.sentHandler)
	e.GET("/bench/store", in.storeHandler)
	e.GET("/bench/cpu", func(c echo.Context) error {
		return c.JSON(http.StatusOK, cpuReport{Nanos: cpuTime().Nanoseconds()})
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if in.cfg.labelProfile {
			// The connection's goroutine keeps the label after the handler
			// returns: the response's write (finishRequest) counts for the
			// path too. Read with pprof -tagfocus path=...
			pprof.SetGoroutineLabels(pprof.WithLabels(r.Context(), pprof.Labels("path", r.URL.Path)))
		}
		if strings.HasPrefix(r.URL.Path, "/bench/") {
			e.ServeHTTP(w, r)
			return
		}
		if strings.HasPrefix(r.URL.Path, "/debug/pprof/") {
			http.DefaultServeMux.ServeHTTP(w, r) // net/http/pprof, for digging by hand
			return
		}
		gateHandler.ServeHTTP(w, r)
	})
}

// seedHandler joins ?n= sessions named ?prefix=<i> through the Waitlist.
func (in *instance) seedHandler(c echo.Context) error {
	n, err := strconv.Atoi(c.QueryParam("n"))
	if err != nil || n < 0 {
		return echo.NewHTTPError(http.StatusBadRequest, "n")
	}
	ids := make([]string, n)
	for i := range ids {
		ids[i] = c.QueryParam("prefix") + strconv.Itoa(i)
	}
	if err := joinAll(c.Request().Context(), in.wl, ids, 64); err != nil {
		return echo.NewHTTPError(http.StatusInternalServerError, err.Error())
	}
	return c.NoContent(http.StatusNoContent)
}

// sentHandler reports the hub's Sent counter and, with ?until=, waits (up
// to 60 s) until it reaches that value and reports when it did: the time
// the server wrote the last message of a fan-out.
func (in *instance) sentHandler(c echo.Context) error {
	until, _ := strconv.ParseUint(c.QueryParam("until"), 10, 64)
	deadline := time.Now().Add(60 * time.Second)
	for {
		sent := in.hub.Stats().Sent
		if sent >= until || time.Now().After(deadline) {
			return c.JSON(http.StatusOK, sentReport{Sent: sent, At: time.Now().UnixNano()})
		}
		time.Sleep(500 * time.Microsecond)
	}
}

// storeHandler reports the store's write transactions (and, on Postgres,
// the commits of other instances applied and the resyncs).
func (in *instance) storeHandler(c echo.Context) error {
	var r storeReport
	if in.pg != nil {
		r = storeReport{Transactions: in.pg.Transactions(), Remote: in.pg.RemoteCommits(), Resyncs: in.pg.Resyncs()}
	} else if in.store != nil {
		st := in.store.Stats()
		r.Transactions, r.Ops, r.MaxBatch = st.Transactions, st.Ops, int64(st.MaxBatch)
	}
	return c.JSON(http.StatusOK, r)
}

type storeReport struct {
	Transactions int64 `json:"transactions"`
	Remote       int64 `json:"remote"`
	Resyncs      int64 `json:"resyncs"`
	Ops          int64 `json:"ops"`      // SQLite: ops committed
	MaxBatch     int64 `json:"maxBatch"` // SQLite: the largest transaction's ops
}

// cpuReport is the server process's CPU time (user+system) so far.
type cpuReport struct {
	Nanos int64 `json:"nanos"`
}

type sentReport struct {
	Sent uint64 `json:"sent"`
	At   int64  `json:"at"` // unix ns
}

// joinAll joins every id through w from workers goroutines.
func joinAll(ctx context.Context, w *session.Waitlist, ids []string, workers int) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	var firstErr atomic.Pointer[error]
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(ids) || firstErr.Load() != nil {
					return
				}
				if _, err := w.Join(ctx, gateName, ids[i]); err != nil {
					firstErr.CompareAndSwap(nil, &err)
					return
				}
			}
		})
	}
	wg.Wait()
	if p := firstErr.Load(); p != nil {
		return *p
	}
	return nil
}

// Close stops the server in the sidecar's order.
func (in *instance) Close() {
	if in.hub != nil {
		_ = in.hub.Close()
	}
	if in.srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = in.srv.Shutdown(ctx)
		cancel()
	}
	if in.sched != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = in.sched.Stop(ctx)
		cancel()
	}
	if in.wl != nil {
		_ = in.wl.Close()
	}
	if in.store != nil {
		_ = in.store.Close()
	}
	if in.pg != nil {
		_ = in.pg.Close()
	}
}

// memStats is what the child reports of its memory.
type memStats struct {
	HeapInuse  uint64 `json:"heapInuse"`  // heap spans in use: objects, live or not yet collected, and their free slots
	StackInuse uint64 `json:"stackInuse"` // goroutine stacks
	RSS        uint64 `json:"rss"`        // VmRSS, bytes
	Goroutines int    `json:"goroutines"`
}

// memSamples are what readMem reads, at once.
var memSamples = []metrics.Sample{
	{Name: "/memory/classes/heap/objects:bytes"},
	{Name: "/memory/classes/heap/unused:bytes"},
	{Name: "/memory/classes/heap/stacks:bytes"},
	{Name: "/sched/goroutines:goroutines"},
}

// readMem reads the process's memory as it is, without collecting garbage
// first: a server carries its garbage too, and the sidecar's RSS is what
// an operator provisions for. It reads runtime/metrics (no stop of the
// world) and VmRSS from /proc/self/status.
func readMem() memStats {
	s := slices.Clone(memSamples)
	metrics.Read(s)
	u := func(i int) uint64 {
		if s[i].Value.Kind() != metrics.KindUint64 {
			return 0
		}
		return s[i].Value.Uint64()
	}
	m := memStats{HeapInuse: u(0) + u(1), StackInuse: u(2), Goroutines: int(u(3))}
	if data, err := os.ReadFile("/proc/self/status"); err == nil {
		for line := range strings.SplitSeq(string(data), "\n") {
			if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
				f := strings.Fields(rest)
				if len(f) >= 1 {
					kb, _ := strconv.ParseUint(f[0], 10, 64)
					m.RSS = kb << 10
				}
			}
		}
	}
	return m
}

const readyPrefix = "ANTEROOM-BENCH-READY "

// childConfig is what a -serve child is told by its flags.
type childConfig struct {
	dir, secretHex, cpuProfile string
	interval                   time.Duration
	database                   string        // -serve-database: Postgres instead of dir
	limit                      int64         // -serve-limit
	waitingTimeout             time.Duration // -serve-waiting-timeout (0: the bench's default)
}

// serveChild is the -serve mode: the fanout server in a process of its own,
// so that each process holds about N descriptors. It prints readyPrefix and
// its address on out, and serves until SIGTERM, SIGINT or its stdin closes.
func serveChild(cc childConfig, out, errOut io.Writer) error {
	dir, secretHex, cpuProfile, interval := cc.dir, cc.secretHex, cc.cpuProfile, cc.interval
	raiseFileLimit()
	if dir == "" && cc.database == "" {
		return errors.New("-serve-dir or -serve-database is required")
	}
	stopProfile, err := startCPUProfile(cpuProfile)
	if err != nil {
		return err
	}
	defer stopProfile()
	secret, err := hex.DecodeString(secretHex)
	if err != nil {
		return fmt.Errorf("-serve-secret: %w", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(errOut, &slog.HandlerOptions{Level: slog.LevelWarn}))
	in, err := startInstance(ctx, instanceConfig{
		dir: dir, limit: cc.limit, interval: interval, secret: secret, cron: true, log: log,
		database: cc.database, waitingTimeout: cc.waitingTimeout, labelProfile: cpuProfile != "",
	})
	if err != nil {
		return err
	}
	defer in.Close()
	fmt.Fprintf(out, "%s%s\n", readyPrefix, in.addr)
	go func() { // the parent holds our stdin: when it goes, so do we
		_, _ = io.Copy(io.Discard, os.Stdin)
		stop()
	}()
	<-ctx.Done()
	return nil
}

// readReady reads the child's address from its stdout.
func readReady(r io.Reader) (string, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		if addr, ok := strings.CutPrefix(sc.Text(), readyPrefix); ok {
			go func() { _, _ = io.Copy(io.Discard, r) }()
			return addr, nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", errors.New("server child exited before it was ready")
}

// getJSON fetches a small JSON document with a throwaway client.
func getJSON(addr, path string, v any) error {
	resp, err := http.Get("http://" + addr + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("GET %s: %s: %s", path, resp.Status, body)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// countHistory counts the history records of the instance's gate.
func countHistory(ctx context.Context, in *instance) (int64, error) {
	var n int64
	q := session.HistoryQuery{Gate: gateName, Limit: session.MaxHistoryLimit}
	for {
		page, err := in.store.History(ctx, q)
		if err != nil {
			return n, err
		}
		n += int64(len(page.Records))
		if page.Next == nil {
			return n, nil
		}
		q.Before = page.Next
	}
}
