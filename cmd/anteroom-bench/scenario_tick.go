package main

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/anteroomhq/anteroom/gate/token"
	"github.com/anteroomhq/anteroom/session"
	"github.com/anteroomhq/anteroom/session/sessiontest"
)

func dsnOf(path string, pragmas ...string) string {
	q := url.Values{}
	for _, p := range pragmas {
		q.Add("_pragma", p)
	}
	return path + "?" + q.Encode()
}

// storeWriterDSN is the DSN of path with the pragmas of the store's writer
// connection (session/sqlite: WAL, synchronous=NORMAL, its default 16 MiB
// page cache), for the baselines that time bare SQL as the store runs it.
func storeWriterDSN(path string) string {
	return dsnOf(path, "busy_timeout(5000)", "journal_mode(WAL)", "synchronous(NORMAL)", "temp_store(MEMORY)", "wal_autocheckpoint(0)", "cache_size(-16384)")
}

// tickLayout is the seeded gate: positions 1..active are active (the first
// staleActive of them idle for longer than the active timeout), the rest
// wait; staleWaiting of the waiters, spread over the line, left longer ago
// than the waiting timeout.
type tickLayout struct {
	sessions, active, staleActive, staleWaiting int
}

// seedTick builds the layout through the service, as a live sidecar's file
// is built: every session is a Waitlist.Join (in position order, from many
// callers at once, so that transactions batch as they do under load), the
// stale waiters a Waitlist.Leave. The clock moves: the stale active
// sessions join long ago, the rest a second ago, and the stale waiters
// leave long ago. Then every fresh active session is checked the way /check
// does (ValidateSessionAndRefreshLastActive) at now, with the background
// flusher off: the update finds their LastActive refreshes pending and
// persists them first, as it does on a sidecar whose users are polling.
// It returns the ids in position order.
func seedTick(ctx context.Context, in *instance, l tickLayout, clock *sessiontest.Clock, cfg session.GateConfig) ([]string, error) {
	now := clock.Now()
	defer clock.Set(now)
	ids := make([]string, l.sessions)
	for i := range ids {
		ids[i] = token.NewID()
	}
	old := now.Add(-10 * max(cfg.ActiveTimeout, cfg.WaitingTimeout))
	clock.Set(old)
	if err := joinAll(ctx, in.wl, ids[:l.staleActive], 64); err != nil {
		return nil, err
	}
	clock.Set(now.Add(-time.Second))
	if err := joinAll(ctx, in.wl, ids[l.staleActive:l.active], 64); err != nil {
		return nil, err
	}
	if err := joinAll(ctx, in.wl, ids[l.active:], 256); err != nil {
		return nil, err
	}
	clock.Set(old)
	every := max((l.sessions-l.active)/max(l.staleWaiting, 1), 1)
	var next atomic.Int64
	var firstErr atomic.Pointer[error]
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for {
				k := int(next.Add(1))
				if k > l.staleWaiting || firstErr.Load() != nil {
					return
				}
				if err := in.wl.Leave(ctx, gateName, ids[l.active+k*every-1]); err != nil {
					firstErr.CompareAndSwap(nil, &err)
					return
				}
			}
		})
	}
	wg.Wait()
	if p := firstErr.Load(); p != nil {
		return nil, *p
	}
	clock.Set(now)
	for _, id := range ids[l.staleActive:l.active] {
		if err := in.wl.ValidateSessionAndRefreshLastActive(gateName, id); err != nil {
			return nil, fmt.Errorf("check of a fresh active session: %w", err)
		}
	}
	return ids, nil
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
	cfg := session.GateConfig{Name: gateName, ActiveLimit: int64(l.active), ActiveTimeout: 5 * time.Minute, WaitingTimeout: time.Minute}
	in, err := startInstance(ctx, instanceConfig{
		dir: dir, limit: cfg.ActiveLimit, activeTimeout: cfg.ActiveTimeout, waitingTimeout: cfg.WaitingTimeout,
		interval: b.cfg.interval, clock: clock, touchInterval: -1,
		// The update alone: the sweeper would fill the slots the update's
		// first chunks free, and the report would not count those.
		sweepInterval: -1,
	})
	if err != nil {
		return nil, err
	}
	defer in.Close()
	t0 := time.Now()
	if _, err := seedTick(ctx, in, l, clock, cfg); err != nil {
		return nil, fmt.Errorf("seeding: %w", err)
	}
	seeded := time.Since(t0)
	b.progress("tick: %d sessions joined, %d left, %d checked in %s", l.sessions, l.staleWaiting, l.active-l.staleActive, seeded.Round(time.Millisecond))
	if v, _ := in.wl.Global(gateName); v.Active != int64(l.active) || v.Waiting != int64(l.sessions-l.active) {
		return nil, fmt.Errorf("seeded active=%d waiting=%d, want %d and %d", v.Active, v.Waiting, l.active, l.sessions-l.active)
	}

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
	note := fmt.Sprintf("%d sessions built by Waitlist.Join in %.1f s, %d LastActive refreshes pending: flushed, then purged %d active + %d waiting, promoted %d in %d tx of <= 256 rows",
		l.sessions, seeded.Seconds(), l.active-l.staleActive, r.PurgedActive, r.PurgedWaiting, r.Promoted, r.Transactions)
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
