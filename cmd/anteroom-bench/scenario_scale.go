package main

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/anteroomhq/anteroom/session"
	"github.com/anteroomhq/anteroom/session/sessiontest"
	"github.com/anteroomhq/anteroom/session/sqlite"
)

// The scale scenarios (issue 14) run on files of millions of sessions,
// which Waitlist.Join would take minutes to build: they are bulk-loaded in
// SQL on the schema the store migrates (positions in order, the first
// active, every row with the times a live file has), with the gate's
// counters set to match. Each file lives in a temporary directory under
// os.TempDir that is removed afterwards.

// bulkLayout is a bulk-loaded gate: positions 1..active are active (the
// first staleActive of them last seen long ago), the rest wait; every
// waiter at a multiple of the stride (staleWaiting of them) was last seen
// long ago. Every other session was last seen at a random time within
// seenSpread before now, as on a live file: the flusher persists a
// present waiter's sign of life once it has moved on by a quarter of
// waiting_timeout, and an active session's every TouchInterval, so the
// stored times of the live line are spread over that much, in no relation
// to the positions (zero: all at now, which flatters every statement that
// orders rows by their last sign of life: the sessions to promote, at the
// front of the line, would sit together in that order).
type bulkLayout struct {
	sessions, active, staleActive, staleWaiting int
	seenSpread                                  time.Duration
}

// seedBulk creates the database of l under dir: the store migrates it
// (and records its identity), then one SQL statement inserts the rows.
func seedBulk(ctx context.Context, dir string, l bulkLayout, now, old time.Time) error {
	path := dbPath(dir)
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
	stride := 0
	if l.staleWaiting > 0 {
		stride = max((l.sessions-l.active)/l.staleWaiting, 1)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // after Commit, a no-op
	// ids: 22 hex characters of random (88 bits), valid session ids.
	_, err = tx.ExecContext(ctx, `
WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < ?1)
INSERT INTO sessions (gate, position, id, status, last_active, created_at, claim_deadline)
SELECT ?2, x, lower(hex(randomblob(11))),
       CASE WHEN x <= ?3 THEN 1 ELSE 0 END,
       CASE WHEN x <= ?4 THEN ?6
            WHEN x > ?3 AND ?7 > 0 AND (x - ?3) % ?7 = 0 AND (x - ?3) / ?7 <= ?8 THEN ?6
            ELSE ?5 - (random() & 1099511627775) % ?9 END,
       CASE WHEN x <= ?4 THEN ?6 ELSE ?5 END,
       NULL
FROM c`, l.sessions, gateName, l.active, l.staleActive, now.UnixNano(), old.UnixNano(), stride, l.staleWaiting, max(l.seenSpread.Nanoseconds(), 1))
	if err != nil {
		return fmt.Errorf("bulk insert: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO gates (name, next_position, active, waiting) VALUES (?1, ?2, ?3, ?4)
		ON CONFLICT (name) DO UPDATE SET next_position = excluded.next_position, active = excluded.active, waiting = excluded.waiting`,
		gateName, l.sessions+1, l.active, l.sessions-l.active); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	_, err = db.ExecContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)")
	return err
}

// scaleSizes parses -scale-sizes.
func (c *config) scaleSizeList() ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(c.scaleSizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("-scale-sizes: %q is not a positive count", f)
		}
		out = append(out, n)
	}
	return out, nil
}

func sizeName(n int) string {
	if n%1000000 == 0 {
		return strconv.Itoa(n/1000000) + "M"
	}
	if n%1000 == 0 {
		return strconv.Itoa(n/1000) + "k"
	}
	return strconv.Itoa(n)
}

// startup times a restart on a file of n sessions, none stale: from Open
// of the store to the Waitlist loaded and its first update run (what the
// sidecar waits for before /readyz answers 200).
func (b *bench) startup(ctx context.Context) ([]Result, error) {
	sizes, err := b.cfg.scaleSizeList()
	if err != nil {
		return nil, err
	}
	var out []Result
	for _, n := range sizes {
		res, err := b.startupAt(ctx, n)
		if err != nil {
			return out, fmt.Errorf("%s sessions: %w", sizeName(n), err)
		}
		out = append(out, res...)
	}
	return out, nil
}

func (b *bench) startupAt(ctx context.Context, n int) ([]Result, error) {
	dir, cleanup, err := tempDir("startup")
	if err != nil {
		return nil, err
	}
	defer cleanup()
	now := time.Now().Truncate(time.Second)
	l := bulkLayout{sessions: n, active: min(10000, n/2)}
	t0 := time.Now()
	if err := seedBulk(ctx, dir, l, now, now); err != nil {
		return nil, err
	}
	b.progress("startup: %s sessions bulk-loaded in %s (%s)", sizeName(n), time.Since(t0).Round(time.Millisecond), fileSize(dbPath(dir)))
	clock := sessiontest.NewClock(now)
	cfg := session.GateConfig{Name: gateName, ActiveLimit: int64(l.active), ActiveTimeout: 5 * time.Minute, WaitingTimeout: time.Minute}
	// The first start reads every row (the file was written by another
	// process: no snapshot of the index can be trusted, as after a crash);
	// each later one follows a clean Close, which leaves the snapshot.
	type startTimes struct{ opened, loaded, ready, cpu, closed time.Duration }
	var scan startTimes
	best := startTimes{ready: 1 << 62}
	const restarts = 4
	for i := range restarts {
		start, cpu0 := time.Now(), cpuTime()
		st, err := sqlite.Open(dbPath(dir), sqlite.Options{Logger: b.quietLog()})
		if err != nil {
			return nil, err
		}
		var t startTimes
		t.opened = time.Since(start)
		wl, err := session.New(ctx, st, []session.GateConfig{cfg}, session.Options{Clock: clock, TouchInterval: -1, SweepInterval: -1})
		if err != nil {
			st.Close()
			return nil, err
		}
		t.loaded = time.Since(start)
		if _, err := wl.Update(ctx); err != nil {
			wl.Close()
			st.Close()
			return nil, err
		}
		t.ready, t.cpu = time.Since(start), cpuTime()-cpu0
		v, _ := wl.Global(gateName)
		_ = wl.Close()
		c0 := time.Now()
		if err := st.Close(); err != nil {
			return nil, err
		}
		t.closed = time.Since(c0)
		if v.Active != int64(l.active) || v.Waiting != int64(n-l.active) {
			return nil, fmt.Errorf("loaded active=%d waiting=%d, want %d and %d", v.Active, v.Waiting, l.active, n-l.active)
		}
		b.debugf("startup %s #%d: open %s, load %s, ready %s, CPU %s, close %s", sizeName(n), i, t.opened, t.loaded, t.ready, t.cpu, t.closed)
		if i == 0 {
			scan = t
		} else if t.ready < best.ready {
			best = t
		}
	}
	want := float64(n) / 1e6 // 1 s per million
	note := func(t startTimes) string {
		return fmt.Sprintf("store open %.0f ms, Waitlist loaded %.0f ms, first update %.0f ms; %.2f us per session; process CPU %.0f ms; the Close before it %.0f ms",
			ms(t.opened), ms(t.loaded-t.opened), ms(t.ready-t.loaded), float64(t.ready.Microseconds())/float64(n), ms(t.cpu), ms(best.closed))
	}
	return []Result{
		{Metric: "start-up to ready after a clean close, " + sizeName(n) + " sessions", Unit: unitMs, Value: ms(best.ready),
			Check: checkValueMax, Want: want * 1000, Target: fmt.Sprintf("<= %s", time.Duration(want*float64(time.Second))),
			Note: fmt.Sprintf("best of %d restarts (index from the snapshot of the close): ", restarts-1) + note(best)},
		{Metric: "start-up to ready after a foreign write or a crash, " + sizeName(n) + " sessions", Unit: unitMs, Value: ms(scan.ready),
			Note: "one start, every row scanned: " + note(scan)},
	}, nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func fileSize(path string) string {
	var total int64
	for _, p := range []string{path, path + "-wal"} {
		if fi, err := os.Stat(p); err == nil {
			total += fi.Size()
		}
	}
	return fmt.Sprintf("%d MB", total>>20)
}

// update times one Waitlist.Update on a file of n sessions of which stale
// are stale (half active sessions idle past active_timeout, half waiters
// silent past waiting_timeout, spread over the line), and the worst join
// while it runs against the worst join without one, in the same run.
func (b *bench) update(ctx context.Context) ([]Result, error) {
	sizes, err := b.cfg.scaleSizeList()
	if err != nil {
		return nil, err
	}
	var out []Result
	for _, n := range sizes {
		res, err := b.updateAt(ctx, n)
		if err != nil {
			return out, fmt.Errorf("%s sessions: %w", sizeName(n), err)
		}
		out = append(out, res...)
	}
	return out, nil
}

func (b *bench) updateAt(ctx context.Context, n int) ([]Result, error) {
	dir, cleanup, err := tempDir("update")
	if err != nil {
		return nil, err
	}
	defer cleanup()
	stale := n / 100
	if b.cfg.updateStale > 0 {
		stale = b.cfg.updateStale
	}
	clock := sessiontest.NewClock(time.Now().Truncate(time.Second))
	cfg := session.GateConfig{Name: gateName, ActiveTimeout: 5 * time.Minute, WaitingTimeout: time.Minute}
	l := bulkLayout{sessions: n, staleActive: stale / 2, staleWaiting: stale - stale/2, seenSpread: cfg.WaitingTimeout / 4}
	l.active = max(min(10000, n/2), 2*l.staleActive)
	cfg.ActiveLimit = int64(l.active)
	name := sizeName(n)
	now := clock.Now()
	old := now.Add(-10 * cfg.ActiveTimeout)
	t0 := time.Now()
	if err := seedBulk(ctx, dir, l, now.Add(-time.Second), old); err != nil {
		return nil, err
	}
	b.progress("update: %s sessions bulk-loaded in %s (%s), %d stale", sizeName(n), time.Since(t0).Round(time.Millisecond), fileSize(dbPath(dir)), stale)
	waitingCutoff, activeCutoff := session.StaleCutoffs(cfg, now)
	floor, err := updateFloor(ctx, dbPath(dir), dir, waitingCutoff, activeCutoff, int64(l.staleActive), now)
	if err != nil {
		return nil, err
	}
	if floor.purgedWaiting != int64(l.staleWaiting) || floor.purgedActive != int64(l.staleActive) || floor.moved != int64(l.staleActive) {
		return nil, fmt.Errorf("the bare SQL purged %d waiting, %d active and promoted %d; want %d, %d, %d",
			floor.purgedWaiting, floor.purgedActive, floor.moved, l.staleWaiting, l.staleActive, l.staleActive)
	}
	in, err := startInstance(ctx, instanceConfig{
		dir: dir, limit: cfg.ActiveLimit, activeTimeout: cfg.ActiveTimeout, waitingTimeout: cfg.WaitingTimeout,
		interval: b.cfg.interval, clock: clock, touchInterval: -1, sweepInterval: -1,
	})
	if err != nil {
		return nil, err
	}
	defer in.Close()

	stop := make(chan struct{})
	time.AfterFunc(b.cfg.tickQuietPhase, func() { close(stop) })
	quiet, err := latencyLoad(ctx, in.wl, b.cfg.tickJoinRate, stop)
	if err != nil {
		return nil, err
	}
	stop = make(chan struct{})
	var during []joinSample
	var loadErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		during, loadErr = latencyLoad(ctx, in.wl, b.cfg.tickJoinRate, stop)
	}()
	sleepCtx(ctx, 200*time.Millisecond)
	stopTrace, err := startTrace(b.cfg.tracePath, name)
	if err != nil {
		close(stop)
		<-done
		return nil, err
	}
	upStart, cpu0 := time.Now(), cpuTime()
	reports, err := in.wl.Update(ctx)
	upEnd, cpu := time.Now(), cpuTime()-cpu0
	// The rows of the waiters the update purged are deleted after it, by
	// the store's cleaner, while joins go on.
	cleanErr := in.store.WaitClean(ctx)
	cleanEnd, cleanCPU := time.Now(), cpuTime()-cpu0-cpu
	sleepCtx(ctx, updateAftermath+100*time.Millisecond)
	close(stop)
	<-done
	stopTrace()
	if err != nil {
		return nil, fmt.Errorf("update: %w", err)
	}
	if cleanErr != nil {
		return nil, fmt.Errorf("waiting for the cleaner: %w", cleanErr)
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
	if b.cfg.verbose {
		timeline(b, during, upStart)
	}
	worstQuiet, p99Quiet := worst(quiet, time.Time{}, time.Time{})
	worstUp, p99Up := worst(during, upStart, upEnd)
	worstAfter, p99After := worst(during, upEnd, cleanEnd.Add(updateAftermath))
	return []Result{
		{Metric: fmt.Sprintf("Waitlist.Update, %s sessions, %d stale", name, stale), Unit: unitMs, Value: ms(upEnd.Sub(upStart)),
			Check: checkValueMax, Want: 100, Target: "<= 100 ms",
			Note: fmt.Sprintf("bulk-loaded file, live sessions last seen at random over the last %s (a quarter of waiting_timeout); purged %d active + %d waiting, promoted %d in %d tx; %d joins/s offered meanwhile; process CPU during it %.0f ms (%.1f µs per row changed, the joins' included)",
				l.seenSpread, r.PurgedActive, r.PurgedWaiting, r.Promoted, r.Transactions, b.cfg.tickJoinRate, ms(cpu), perRow(cpu, r))},
		Result{Metric: fmt.Sprintf("Waitlist.Update against bare SQL making the same change, %s sessions", name), Unit: unitMs, Value: ms(upEnd.Sub(upStart)),
			Check: checkNone, Target: "-",
			Note: fmt.Sprintf("baseline: three bare statements, a transaction each, and the counters on a copy of the same file, no joins meanwhile (%.0f ms CPU, %.1f µs per row changed): what SQLite alone pays for these rows; of it, %.0f ms for the %d stale waiters (scattered over the line), %.0f ms for the %d stale active sessions and %.0f ms to promote %d waiters (both at the line's front); the Update commits %d times to let joins through",
				ms(floor.cpu), perRowN(floor.cpu, floor.purgedWaiting+floor.purgedActive+floor.moved),
				ms(floor.waitingWall), floor.purgedWaiting, ms(floor.activeWall), floor.purgedActive, ms(floor.promoteWall), floor.moved, r.Transactions)}.withBaseline(ms(floor.wall)),
		Result{Metric: fmt.Sprintf("promoted rows written and purged rows deleted after the update, %s sessions", name), Unit: unitMs, Value: ms(cleanEnd.Sub(upEnd)),
			Check: checkNone, Target: "-",
			Note: fmt.Sprintf("the store's cleaner writes the rows of the waiters the update promoted by a pending range (%d promotions in all), then deletes the rows of the %d waiters and %d idle active sessions it purged by its marks (all of them settled for every reader at its commit), a few rows an op, beside the joins; process CPU meanwhile %.0f ms, the joins' included",
				r.Promoted, r.PurgedWaiting, r.PurgedActive, ms(cleanCPU))},
		Result{Metric: fmt.Sprintf("worst join during the update, %s sessions", name), Unit: unitMs, Value: ms(worstUp),
			Check: checkRatioMax, Want: 2, Target: "<= 2x no update",
			Note: fmt.Sprintf("p99 %.1f ms (no update: p99 %.1f ms, %d joins); baseline: worst join with no update, same file",
				ms(p99Up), ms(p99Quiet), len(quiet))}.withBaseline(ms(worstQuiet)),
		Result{Metric: fmt.Sprintf("worst join after the update, until %s after the cleaner, %s sessions", updateAftermath, name), Unit: unitMs, Value: ms(worstAfter),
			Check: checkRatioMax, Want: 2, Target: "<= 2x no update",
			Note: fmt.Sprintf("p99 %.1f ms; what the update leaves behind (the cleaner deleting the purged rows, the WAL they wrote, checkpointed and restarted after); baseline: worst join with no update, same file",
				ms(p99After))}.withBaseline(ms(worstQuiet)),
	}, nil
}

// updateAftermath is how long after an update the update scenario keeps
// timing joins: the checkpoint of the WAL the update wrote, and the WAL's
// restart, come after it, and a join they hold waits because of the update.
const updateAftermath = 500 * time.Millisecond

// perRow is cpu per row an update purged or promoted, in µs.
func perRow(cpu time.Duration, r session.UpdateReport) float64 {
	return perRowN(cpu, r.PurgedActive+r.PurgedWaiting+r.Promoted)
}

// perRowN is cpu per row of rows, in µs (0 for none).
func perRowN(cpu time.Duration, rows int64) float64 {
	if rows == 0 {
		return 0
	}
	return float64(cpu.Microseconds()) / float64(rows)
}

// quietLog is the logger of the stores the scale scenarios open: warnings
// only.
func (b *bench) quietLog() *slog.Logger {
	return slog.New(slog.NewTextHandler(b.log, &slog.HandlerOptions{Level: slog.LevelWarn}))
}
