package main

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anteroomhq/anteroom/gate/token"
	_ "modernc.org/sqlite" // the driver the store uses, for the raw insert baseline
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
	// Each round starts from empty files, so that the baseline and the
	// service insert into tables of the same size.
	var rawRate, orderedRate, joinRate, ops, txs float64
	var maxBatch int64
	for r := range b.cfg.rounds {
		rdir := filepath.Join(dir, strconv.Itoa(r))
		if err := os.Mkdir(rdir, 0o755); err != nil {
			return nil, err
		}
		rr, err := rawInsertRate(ctx, filepath.Join(rdir, "raw.db"), b.cfg.warmup+b.cfg.window, false)
		if err != nil {
			return nil, fmt.Errorf("raw insert: %w", err)
		}
		ro, err := rawInsertRate(ctx, filepath.Join(rdir, "ordered.db"), b.cfg.warmup+b.cfg.window, true)
		if err != nil {
			return nil, fmt.Errorf("raw insert: %w", err)
		}
		orderedRate += ro
		in, err := startInstance(ctx, instanceConfig{dir: rdir, limit: 1000, interval: b.cfg.interval})
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
		b.debugf("round %d: raw insert %.0f rows/s, Waitlist.Join %.0f/s", r+1, rr, jr.rate)
		rawRate += rr
		joinRate += jr.rate
		ops += float64(st1.Ops - st0.Ops)
		txs += float64(st1.Transactions - st0.Transactions)
		maxBatch = max(maxBatch, st1.MaxBatch)
	}
	n := float64(b.cfg.rounds)
	note := fmt.Sprintf("%d callers, random ids, from an empty file; mean %.1f joins/tx (max %d); baseline: raw SQLite insert, sessions' key, no secondary index, 1000 rows/tx, same pragmas",
		b.cfg.workers, ops/max(txs, 1), maxBatch)
	return []Result{
		Result{Metric: "Waitlist.Join/s", Unit: unitPerSec, Value: joinRate / n,
			Check: checkValueMin, Want: 100000, Target: ">= 100,000/s", Note: note}.withBaseline(rawRate / n),
		{Metric: "raw SQLite insert, key in insertion order", Unit: unitPerSec, Value: orderedRate / n,
			Note: "reference for the ordered-key lever: the baseline's table and rows, ids that grow"},
	}, nil
}

// rawInsertRate is SQLite's own batched insert rate: a plain table with the
// sessions table's key, random ids, 1000 rows per transaction, on one
// connection with the store's pragmas, for about d from an empty file.
// ordered makes the ids grow instead (the same length).
func rawInsertRate(ctx context.Context, path string, d time.Duration, ordered bool) (float64, error) {
	db, err := sql.Open("sqlite", dsnOf(path, "busy_timeout(5000)", "journal_mode(WAL)", "synchronous(NORMAL)", "temp_store(MEMORY)", "cache_size(-16384)"))
	if err != nil {
		return 0, err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	if _, err := db.ExecContext(ctx, `CREATE TABLE raw (
		gate TEXT NOT NULL, id TEXT NOT NULL, position INTEGER NOT NULL, status INTEGER NOT NULL,
		last_active INTEGER, created_at INTEGER NOT NULL, PRIMARY KEY (gate, id)) WITHOUT ROWID`); err != nil {
		return 0, err
	}
	stmt, err := db.PrepareContext(ctx, `INSERT INTO raw (gate, id, position, status, last_active, created_at) VALUES (?, ?, ?, 0, NULL, ?)`)
	if err != nil {
		return 0, err
	}
	defer stmt.Close()
	start := time.Now()
	var rows int64
	for time.Since(start) < d && ctx.Err() == nil {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return 0, err
		}
		st := tx.StmtContext(ctx, stmt)
		now := time.Now().UnixNano()
		for range 1000 {
			rows++
			id := token.NewID()
			if ordered {
				id = fmt.Sprintf("%022d", rows)
			}
			if _, err := st.ExecContext(ctx, gateName, id, rows, now); err != nil {
				_ = tx.Rollback()
				return 0, err
			}
		}
		if err := tx.Commit(); err != nil {
			return 0, err
		}
	}
	return float64(rows) / time.Since(start).Seconds(), ctx.Err()
}

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
		return in.wl.ValidateSessionIsActive(gateName, ids[(w*7919+i)%k])
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
		_ = in.wl.ValidateSessionIsActive(gateName, ids[j%k])
		j++
	})
	note := fmt.Sprintf("%d goroutines, %d active sessions; baseline: map[string]struct{} under sync.RWMutex, same keys; %s", workers, k, p.spread())
	return []Result{
		Result{Metric: "ValidateSessionIsActive/s", Unit: unitPerSec, Value: val,
			Check: checkRatioMin, Want: 0.5, Target: ">= 0.5 x baseline", Note: note}.withBaseline(base),
		{Metric: "ValidateSessionIsActive allocs/op", Unit: unitAllocs, Value: allocs,
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
