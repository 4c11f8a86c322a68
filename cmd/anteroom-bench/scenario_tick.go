package main

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/anteroomhq/anteroom/gate/token"
	"github.com/anteroomhq/anteroom/session"
	"github.com/anteroomhq/anteroom/session/sessiontest"
	"github.com/anteroomhq/anteroom/session/sqlite"
)

func dsnOf(path string, pragmas ...string) string {
	q := url.Values{}
	for _, p := range pragmas {
		q.Add("_pragma", p)
	}
	return path + "?" + q.Encode()
}

// tickLayout is the seeded gate: positions 1..active are active (the first
// staleActive of them idle for longer than the active timeout), the rest
// wait; staleWaiting of the waiters, spread over the line, left longer ago
// than the waiting timeout.
type tickLayout struct {
	sessions, active, staleActive, staleWaiting int
}

// seedTick writes the layout straight into a fresh database: the store
// creates the schema (Open, Close), then one bulk INSERT ... SELECT fills
// the sessions and the gate's counters row, in a single transaction. Ids
// look random (a multiplicative hash of the position leads them), as real
// ones are, so that rows of neighbouring positions sit on different pages.
func seedTick(ctx context.Context, path string, l tickLayout, now time.Time, cfg session.GateConfig) error {
	st, err := sqlite.Open(path, sqlite.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return err
	}
	if err := st.Close(); err != nil {
		return err
	}
	db, err := sql.Open("sqlite", dsnOf(path, "busy_timeout(5000)", "journal_mode(WAL)", "synchronous(OFF)", "cache_size(-262144)"))
	if err != nil {
		return err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	waiting := l.sessions - l.active
	if _, err := tx.ExecContext(ctx, `INSERT INTO gates (name, next_position, active, waiting) VALUES (?, ?, ?, ?)`,
		cfg.Name, l.sessions+1, l.active, waiting); err != nil {
		return err
	}
	// Without the secondary indexes, rows go in in key order; the indexes
	// are built afterwards from the schema's own statements.
	var indexes []string
	rows, err := tx.QueryContext(ctx, `SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name = 'sessions' AND sql IS NOT NULL`)
	if err != nil {
		return err
	}
	var names []string
	for rows.Next() {
		var name, def string
		if err := rows.Scan(&name, &def); err != nil {
			_ = rows.Close()
			return err
		}
		names = append(names, name)
		indexes = append(indexes, def)
	}
	if err := rows.Close(); err != nil {
		return err
	}
	for _, name := range names {
		if _, err := tx.ExecContext(ctx, `DROP INDEX "`+name+`"`); err != nil {
			return err
		}
	}
	every := max(waiting/max(l.staleWaiting, 1), 1)
	old := now.Add(-10 * max(cfg.ActiveTimeout, cfg.WaitingTimeout)).UnixNano()
	fresh := now.Add(-time.Second).UnixNano()
	created := now.Add(-time.Hour).UnixNano()
	if _, err := tx.ExecContext(ctx, `
		WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < ?1)
		INSERT INTO sessions (gate, id, position, status, last_active, created_at)
		SELECT ?2, printf('%08x%014d', (x * 2654435761) % 4294967296, x) AS id, x,
			CASE WHEN x <= ?3 THEN 1 ELSE 0 END,
			CASE WHEN x <= ?4 THEN ?6
			     WHEN x <= ?3 THEN ?7
			     WHEN (x - ?3) % ?5 = 0 AND (x - ?3) / ?5 <= ?9 THEN ?6
			     ELSE NULL END,
			?8
		FROM c ORDER BY x`,
		l.sessions, cfg.Name, l.active, l.staleActive, every, old, fresh, created, l.staleWaiting); err != nil {
		return err
	}
	for _, def := range indexes {
		if _, err := tx.ExecContext(ctx, def); err != nil {
			return err
		}
	}
	var left int
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM sessions WHERE gate = ? AND status = 0 AND last_active IS NOT NULL`, cfg.Name).Scan(&left); err != nil {
		return err
	}
	if left != l.staleWaiting {
		return fmt.Errorf("seeded %d stale waiters, want %d", left, l.staleWaiting)
	}
	return tx.Commit()
}

// seedTickAPI seeds the layout through the service, moving the clock: the
// stale active sessions join long ago, the fresh ones a second ago, then the
// waiters; the stale waiters leave long ago.
func seedTickAPI(ctx context.Context, dir string, l tickLayout, clock *sessiontest.Clock, cfg session.GateConfig) error {
	now := clock.Now()
	defer clock.Set(now)
	in, err := startInstance(ctx, instanceConfig{
		dir: dir, limit: cfg.ActiveLimit, activeTimeout: cfg.ActiveTimeout, waitingTimeout: cfg.WaitingTimeout,
		clock: clock, touchInterval: -1,
	})
	if err != nil {
		return err
	}
	defer in.Close()
	ids := make([]string, l.sessions)
	for i := range ids {
		ids[i] = token.NewID()
	}
	old := now.Add(-10 * max(cfg.ActiveTimeout, cfg.WaitingTimeout))
	clock.Set(old)
	if err := joinAll(ctx, in.wl, ids[:l.staleActive], 64); err != nil {
		return err
	}
	clock.Set(now.Add(-time.Second))
	if err := joinAll(ctx, in.wl, ids[l.staleActive:l.active], 64); err != nil {
		return err
	}
	if err := joinAll(ctx, in.wl, ids[l.active:], 256); err != nil {
		return err
	}
	clock.Set(old)
	every := max((l.sessions-l.active)/max(l.staleWaiting, 1), 1)
	for k := 1; k <= l.staleWaiting; k++ {
		if err := in.wl.Leave(ctx, gateName, ids[l.active+k*every-1]); err != nil {
			return err
		}
	}
	return nil
}

// joinSample is one join of the latency load: when it was due and how long
// it took from then.
type joinSample struct {
	due time.Time
	lat time.Duration
}

// latencyLoad offers rate joins/s until stop is closed and returns every
// join's latency, measured from when it was due (so a stalled writer counts
// in full, not only for the joins that happened to be running).
func latencyLoad(ctx context.Context, w *session.Waitlist, rate int, stop <-chan struct{}) ([]joinSample, error) {
	var mu sync.Mutex
	var samples []joinSample
	lctx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-stop:
		case <-lctx.Done():
		}
		cancel()
	}()
	// Enough callers that a stall does not run out of them: each join
	// starts when due, and its latency is the service's, not the load's.
	_, err := paced(lctx, rate, time.Hour, max(64, rate), func(due time.Time) error {
		_, err := w.Join(context.WithoutCancel(lctx), gateName, token.NewID())
		lat := time.Since(due)
		mu.Lock()
		samples = append(samples, joinSample{due: due, lat: lat})
		mu.Unlock()
		return err
	})
	cancel()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if err != nil && lctx.Err() == nil {
		return nil, err
	}
	return samples, nil
}

func (b *bench) tick(ctx context.Context) ([]Result, error) {
	dir, cleanup, err := tempDir("tick")
	if err != nil {
		return nil, err
	}
	defer cleanup()
	l := tickLayout{sessions: b.cfg.tickSessions, active: b.cfg.tickActive}
	l.staleActive = b.cfg.tickStale / 2
	l.staleWaiting = b.cfg.tickStale - l.staleActive
	if l.active > l.sessions || l.staleActive > l.active || l.staleWaiting > l.sessions-l.active {
		return nil, fmt.Errorf("tick layout %+v does not fit", l)
	}
	clock := sessiontest.NewClock(time.Now().Truncate(time.Second))
	now := clock.Now()
	cfg := session.GateConfig{Name: gateName, ActiveLimit: int64(l.active), ActiveTimeout: 5 * time.Minute, WaitingTimeout: time.Minute}
	t0 := time.Now()
	how := "bulk SQL"
	if err := seedTick(ctx, dbPath(dir), l, now, cfg); err != nil {
		// The schema moved on: seed through the service instead (slower).
		b.progress("tick: bulk seeding failed (%v); seeding through Waitlist.Join and Leave", err)
		_ = os.RemoveAll(dir)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		if err := seedTickAPI(ctx, dir, l, clock, cfg); err != nil {
			return nil, fmt.Errorf("seeding: %w", err)
		}
		how = "Waitlist.Join"
	}
	seeded := time.Since(t0)
	b.progress("tick: %d sessions seeded in %s", l.sessions, seeded.Round(time.Millisecond))
	t0 = time.Now()
	in, err := startInstance(ctx, instanceConfig{
		dir: dir, limit: cfg.ActiveLimit, activeTimeout: cfg.ActiveTimeout, waitingTimeout: cfg.WaitingTimeout,
		interval: b.cfg.interval, clock: clock, touchInterval: -1,
	})
	if err != nil {
		return nil, err
	}
	defer in.Close()
	if v, _ := in.wl.Global(gateName); v.Active != int64(l.active) || v.Waiting != int64(l.sessions-l.active) {
		return nil, fmt.Errorf("loaded active=%d waiting=%d, want %d and %d", v.Active, v.Waiting, l.active, l.sessions-l.active)
	}
	b.debugf("tick: server started on the seeded file in %s", time.Since(t0))

	// Join latency with no tick.
	stop := make(chan struct{})
	time.AfterFunc(b.cfg.tickQuietPhase, func() { close(stop) })
	quiet, err := latencyLoad(ctx, in.wl, b.cfg.tickJoinRate, stop)
	if err != nil {
		return nil, err
	}

	// The same load, with one update running through it.
	stop = make(chan struct{})
	var during []joinSample
	var loadErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		during, loadErr = latencyLoad(ctx, in.wl, b.cfg.tickJoinRate, stop)
	}()
	sleepCtx(ctx, 200*time.Millisecond)
	upStart := time.Now()
	reports, err := in.wl.Update(ctx)
	upEnd := time.Now()
	sleepCtx(ctx, 100*time.Millisecond)
	close(stop)
	<-done
	if err != nil {
		return nil, fmt.Errorf("update: %w", err)
	}
	if loadErr != nil {
		return nil, loadErr
	}
	if len(reports) != 1 {
		return nil, fmt.Errorf("update reported %d gates", len(reports))
	}
	r := reports[0]
	if r.PurgedActive != int64(l.staleActive) || r.PurgedWaiting != int64(l.staleWaiting) || r.Promoted != int64(l.staleActive) {
		return nil, fmt.Errorf("update purged %d active, %d waiting and promoted %d; want %d, %d, %d",
			r.PurgedActive, r.PurgedWaiting, r.Promoted, l.staleActive, l.staleWaiting, l.staleActive)
	}
	upDur := upEnd.Sub(upStart)
	if b.cfg.verbose {
		timeline(b, during, upStart)
	}

	worstQuiet, p99Quiet := worst(quiet, time.Time{}, time.Time{})
	worstTick, p99Tick := worst(during, upStart, upEnd)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	note := fmt.Sprintf("%d sessions (seeded by %s in %.1f s): purged %d active + %d waiting, promoted %d, %d tx of <= 1000 rows",
		l.sessions, how, seeded.Seconds(), r.PurgedActive, r.PurgedWaiting, r.Promoted, r.Transactions)
	return []Result{
		{Metric: "Waitlist.Update duration", Unit: unitMs, Value: ms(upDur),
			Check: checkValueMax, Want: 200, Target: "<= 200 ms", Note: note},
		Result{Metric: "worst join latency during the update", Unit: unitMs, Value: ms(worstTick),
			Check: checkValueMax, Want: 50, Target: "<= 50 ms",
			Note: fmt.Sprintf("%d joins/s offered; p99 %.1f ms (no tick: p99 %.1f ms, %d joins); baseline: worst with no tick",
				b.cfg.tickJoinRate, ms(p99Tick), ms(p99Quiet), len(quiet))}.withBaseline(ms(worstQuiet)),
	}, nil
}

// worst returns the worst and the 99th percentile latency of the joins that
// overlapped [from, to] (all of them when from is zero).
func worst(samples []joinSample, from, to time.Time) (time.Duration, time.Duration) {
	var lats []time.Duration
	for _, s := range samples {
		if !from.IsZero() && (s.due.After(to) || s.due.Add(s.lat).Before(from)) {
			continue
		}
		lats = append(lats, s.lat)
	}
	if len(lats) == 0 {
		return 0, 0
	}
	slices.Sort(lats)
	return lats[len(lats)-1], lats[len(lats)*99/100]
}

// timeline prints, per 50 ms of due time around the update, how many joins
// were due and their worst latency.
func timeline(b *bench, samples []joinSample, origin time.Time) {
	type bucket struct {
		n    int
		max  time.Duration
		seen bool
	}
	buckets := map[int]*bucket{}
	lo, hi := 0, 0
	for _, s := range samples {
		k := int(s.due.Sub(origin) / (50 * time.Millisecond))
		if s.due.Before(origin) {
			k--
		}
		bk := buckets[k]
		if bk == nil {
			bk = &bucket{}
			buckets[k] = bk
		}
		bk.n++
		bk.max = max(bk.max, s.lat)
		lo, hi = min(lo, k), max(hi, k)
	}
	for k := lo; k <= hi; k++ {
		if bk := buckets[k]; bk != nil {
			b.progress("tick timeline %+5d ms: %3d joins due, worst %s", k*50, bk.n, bk.max.Round(time.Millisecond))
		}
	}
}
