package main

import (
	"context"
	"database/sql/driver"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	msqlite "modernc.org/sqlite" // the driver the store uses, for the raw insert baseline

	"github.com/anteroomhq/anteroom/gate/token"
	"github.com/anteroomhq/anteroom/session"
	"github.com/anteroomhq/anteroom/session/sqlite"
)

// loop runs fn from workers goroutines for warmup+window and returns the
// calls per second inside the window. fn gets the worker and a counter.
func loop(ctx context.Context, workers int, warmup, window time.Duration, fn func(w, i int) error) (measure, error) {
	var done atomic.Int64
	var stop atomic.Bool
	var firstErr atomic.Pointer[error]
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			var n int64
			for i := 0; ; i++ {
				if i&63 == 0 {
					done.Add(n)
					n = 0
					if stop.Load() {
						return
					}
				}
				if err := fn(w, i); err != nil {
					firstErr.CompareAndSwap(nil, &err)
					stop.Store(true)
					return
				}
				n++
			}
		})
	}
	m := measureWindow(ctx, warmup, window, done.Load)
	stop.Store(true)
	wg.Wait()
	if p := firstErr.Load(); p != nil {
		return measure{}, *p
	}
	return m, ctx.Err()
}

func (b *bench) joinInproc(ctx context.Context) ([]Result, error) {
	dir, cleanup, err := tempDir("join-inproc")
	if err != nil {
		return nil, err
	}
	defer cleanup()
	// Each round starts from empty files, so that the service and the
	// baseline insert into tables of the same size. The service goes first:
	// its mean transaction size is the baseline's batch.
	const limit = 1000
	var rawRate, joinRate, ops, txs float64
	var maxBatch int64
	var batches []int
	for r := range b.cfg.rounds {
		rdir := filepath.Join(dir, strconv.Itoa(r))
		if err := os.Mkdir(rdir, 0o755); err != nil {
			return nil, err
		}
		in, err := startInstance(ctx, instanceConfig{dir: rdir, limit: limit, interval: b.cfg.interval})
		if err != nil {
			return nil, err
		}
		st0 := in.store.Stats()
		jr, err := loop(ctx, b.cfg.workers, b.cfg.warmup, b.cfg.window, func(int, int) error {
			_, err := in.wl.Join(ctx, gateName, token.NewID())
			return err
		})
		st1 := in.store.Stats()
		in.Close()
		if err != nil {
			return nil, err
		}
		rOps, rTxs := float64(st1.Ops-st0.Ops), float64(st1.Transactions-st0.Transactions)
		batch := max(1, int(math.Round(rOps/max(rTxs, 1))))
		batches = append(batches, batch)
		rr, err := rawJoinRate(ctx, filepath.Join(rdir, "raw.db"), b.cfg.warmup+b.cfg.window, batch, limit)
		if err != nil {
			return nil, fmt.Errorf("raw insert: %w", err)
		}
		b.debugf("round %d: Waitlist.Join %.0f/s in transactions of %d; raw ordered insert %.0f rows/s", r+1, jr.rate, batch, rr)
		rawRate += rr
		joinRate += jr.rate
		ops += rOps
		txs += rTxs
		maxBatch = max(maxBatch, st1.MaxBatch)
	}
	n := float64(b.cfg.rounds)
	note := fmt.Sprintf("%d callers, random ids, from an empty file; mean %.1f joins/tx (max %d); baseline: the store's own statements on one connection with its pragmas "+
		"(BEGIN IMMEDIATE, INSERT of rows in position order into the migrated sessions table, UPDATE of the gate's counters, COMMIT) in batches of the service's mean transaction (%v per round)",
		b.cfg.workers, ops/max(txs, 1), maxBatch, batches)
	return []Result{
		Result{Metric: "Waitlist.Join/s", Unit: unitPerSec, Value: joinRate / n,
			Check: checkValueMin, Want: 100000, Target: ">= 100,000/s", Note: note}.withBaseline(rawRate / n),
	}, nil
}

// rawJoinRate is what SQLite alone does of the store's work for a join,
// for about d from an empty file: the schema the store migrates (Open,
// Close), one connection opened with the writer's pragmas, and per
// transaction of batch rows the writer's statements, prepared once and run
// through the driver as the writer does: BEGIN IMMEDIATE, one INSERT per
// row in position order (the first limit rows active, the rest waiting,
// random ids made beforehand), the gate's counters UPDATE, COMMIT. As in
// the store, no checkpoint runs on the commit path (the store's run on
// another connection; here none runs in the few seconds measured).
func rawJoinRate(ctx context.Context, path string, d time.Duration, batch, limit int) (float64, error) {
	st, err := sqlite.Open(path, sqlite.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return 0, err
	}
	if err := st.Close(); err != nil {
		return 0, err
	}
	conn, err := (&msqlite.Driver{}).Open(storeWriterDSN(path))
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	// Ids are made before the clock starts: Join's callers make them on
	// their own goroutines, not the writer's. The key is the position, so
	// the pool can repeat.
	ids := make([]string, 1<<14)
	for i := range ids {
		ids[i] = token.NewID()
	}
	prep := func(q string) (driver.StmtExecContext, func(), error) {
		s, err := conn.Prepare(q)
		if err != nil {
			return nil, nil, err
		}
		return s.(driver.StmtExecContext), func() { _ = s.Close() }, nil
	}
	var stmts [5]driver.StmtExecContext
	for i, q := range []string{
		"BEGIN IMMEDIATE", "COMMIT",
		`INSERT INTO gates (name, next_position, active, waiting) VALUES (?, 1, 0, 0)`,
		`INSERT INTO sessions (gate, position, id, status, last_active, created_at) VALUES (?, ?, ?, ?, ?, ?)`,
		`UPDATE gates SET next_position = ?, active = ?, waiting = ? WHERE name = ?`,
	} {
		s, closeFn, err := prep(q)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", q, err)
		}
		defer closeFn()
		stmts[i] = s
	}
	begin, commit, insGate, insRow, updGate := stmts[0], stmts[1], stmts[2], stmts[3], stmts[4]
	var nv []driver.NamedValue // reused, as the writer's bind does
	args := func(vs ...any) []driver.NamedValue {
		nv = nv[:0]
		for i, v := range vs {
			nv = append(nv, driver.NamedValue{Ordinal: i + 1, Value: v})
		}
		return nv
	}
	if _, err := insGate.ExecContext(ctx, args(gateName)); err != nil {
		return 0, err
	}
	start := time.Now()
	var pos, active int64
	for time.Since(start) < d && ctx.Err() == nil {
		if _, err := begin.ExecContext(ctx, nil); err != nil {
			return 0, err
		}
		now := time.Now().UnixNano()
		for range batch {
			pos++
			var status int64
			var lastActive any
			if active < int64(limit) {
				status, lastActive = 1, now
				active++
			}
			if _, err := insRow.ExecContext(ctx, args(gateName, pos, ids[pos%int64(len(ids))], status, lastActive, now)); err != nil {
				return 0, err
			}
		}
		if _, err := updGate.ExecContext(ctx, args(pos+1, active, pos-active, gateName)); err != nil {
			return 0, err
		}
		if _, err := commit.ExecContext(ctx, nil); err != nil {
			return 0, err
		}
	}
	return float64(pos) / time.Since(start).Seconds(), ctx.Err()
}

// checkCall is what validate-inproc times: the call the gate's /check
// makes, the lookup and the LastActive refresh.
var checkCall = (*session.Waitlist).ValidateSessionAndRefreshLastActive

func (b *bench) validateInproc(ctx context.Context) ([]Result, error) {
	dir, cleanup, err := tempDir("validate-inproc")
	if err != nil {
		return nil, err
	}
	defer cleanup()
	k := b.cfg.sessions
	in, err := startInstance(ctx, instanceConfig{dir: dir, limit: int64(k), interval: b.cfg.interval})
	if err != nil {
		return nil, err
	}
	defer in.Close()
	ids, err := seedActive(ctx, in, k)
	if err != nil {
		return nil, err
	}

	// The baseline: the same key set in a plain map under an RWMutex.
	var mu sync.RWMutex
	set := make(map[string]struct{}, k)
	for _, id := range ids {
		set[id] = struct{}{}
	}
	errMissing := fmt.Errorf("baseline: key missing")
	mapLookup := func(w, i int) error {
		mu.RLock()
		_, ok := set[ids[(w*7919+i)%k]]
		mu.RUnlock()
		if !ok {
			return errMissing
		}
		return nil
	}
	validate := func(w, i int) error {
		return checkCall(in.wl, gateName, ids[(w*7919+i)%k])
	}
	workers := runtime.GOMAXPROCS(0)
	var p pairs
	for r := range b.cfg.rounds {
		rb, err := loop(ctx, workers, b.cfg.warmup, b.cfg.window, mapLookup)
		if err != nil {
			return nil, err
		}
		rv, err := loop(ctx, workers, b.cfg.warmup, b.cfg.window, validate)
		if err != nil {
			return nil, fmt.Errorf("validate: %w", err)
		}
		b.debugf("round %d: map %.0f/s, validate %.0f/s", r+1, rb.rate, rv.rate)
		p.add(rb, rv)
	}
	base, val := p.means()
	j := 0
	allocs := testing.AllocsPerRun(10000, func() {
		_ = checkCall(in.wl, gateName, ids[j%k])
		j++
	})
	note := fmt.Sprintf("%d goroutines, %d active sessions, the call /check makes (lookup and LastActive refresh on the system clock); baseline: map[string]struct{} under sync.RWMutex, same keys; %s", workers, k, p.spread())
	return []Result{
		Result{Metric: "ValidateSessionAndRefreshLastActive/s", Unit: unitPerSec, Value: val,
			Check: checkRatioMin, Want: 0.5, Target: ">= 0.5 x baseline", Note: note}.withBaseline(base),
		{Metric: "ValidateSessionAndRefreshLastActive allocs/op", Unit: unitAllocs, Value: allocs,
			Check: checkValueEq, Want: 0, Target: "0", Note: "testing.AllocsPerRun"},
	}, nil
}

// seedActive joins k fresh sessions into an instance whose limit admits them
// all, and checks that they are all active.
func seedActive(ctx context.Context, in *instance, k int) ([]string, error) {
	ids := make([]string, k)
	for i := range ids {
		ids[i] = token.NewID()
	}
	if err := joinAll(ctx, in.wl, ids, 64); err != nil {
		return nil, err
	}
	if v, _ := in.wl.Global(gateName); v.Active != int64(k) {
		return nil, fmt.Errorf("seeded %d sessions, %d active", k, v.Active)
	}
	return ids, nil
}
