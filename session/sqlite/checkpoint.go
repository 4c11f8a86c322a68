package sqlite

import (
	"context"
	"database/sql/driver"
	"encoding/binary"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/anteroomhq/anteroom/session"
	sqlite "modernc.org/sqlite"
)

// WAL checkpoints run off the writer's commit path. The writer connection
// has wal_autocheckpoint=0, so a COMMIT only appends frames to the WAL and
// never copies them back, nor fsyncs. A checkpointer goroutine on its own
// connection copies them (PASSIVE: it never blocks the writer) when the
// writer has appended ckptFrames frames since it last asked, and every
// ckptInterval when anything was written. Its fsyncs stall nobody. While an
// Update runs, it waits until the WAL holds 3/4 of highFrames (updateFrames)
// and catches up after: on a machine of few CPUs its copying and fsyncs take
// the CPU and the disk from the joins the update yields to, and an update's
// burst of scattered pages, many rewritten by its later transactions, is
// better copied once, after it. At 5M sessions with 1% stale (an update that
// writes 127 MB of WAL), passes from restartFrames on gave the joins during
// the update a p99 of 14-44 ms (21 on average over nine runs), against 7-14
// ms (10) with passes held back to updateFrames, and made the update 10%
// slower.
//
// Held back, a pass does not sync the WAL either, and SQLite fsyncs the WAL
// at the start of every checkpoint: after an update at 5M sessions the
// first pass found 50 MB and more of its pages dirty, and wrote them all in
// that fsync while the writer's appends to the WAL waited in the kernel
// (a join's commit took 26 ms) and the checkpointer's goroutine held its P.
// So while it holds a pass back (at a nudge or a tick), the checkpointer
// starts the writeback of the WAL instead (writeback: sync_file_range on
// Linux, which queues the writes without waiting for them, unless the
// device's queue is full, and makes nothing durable), and that fsync finds
// little left: the first large pass after an update at 5M took
// 83-96 ms instead of 111-248 (docs/performance.md, the thirteenth round).
//
// An Update does not write far past updateFrames (Store.waitForRoom):
// before each of its transactions, once the WAL holds updateFrames, it
// stops counting as running (passes run and sync, and the writer may
// restart the WAL at a quiet moment) until a pass has copied and synced
// all but ckptFrames of the WAL; then the writer checkpoints that residue
// and restarts the WAL before its next transaction (restartWanted). The
// joins go on meanwhile, beside the pass. Without the wait, an update
// writing past highFrames (3% stale at 5M sessions) met the writer's
// forced checkpoint, which found what the pass had not caught up with: the
// worst join during it took 300 ms.
//
// The WAL restarts from its beginning only when a write transaction begins
// while every frame is backfilled and synced, which a background checkpoint
// alone seldom achieves under load: the writer appends while it copies. So
// a restart costs the writer a pause: it checkpoints what the last
// background pass left, with an fsync, and its next commit syncs the new WAL
// header. fsyncs are slow and erratic on shared disks (tens of ms), so the
// writer does it only when the WAL has passed restartFrames, the residue is
// small (residualFrames) and the moment is quiet: no op queued, no Update
// running. Should the WAL pass highFrames anyway (a load the checkpointer
// cannot follow, or one without pauses), the writer checkpoints at the next
// transaction whatever it costs. A writer checkpoint that backfilled every
// frame counts the WAL as restarted; SQLite restarts it at the next write
// transaction only when no reader still reads from it, so the writer's next
// commit checks the WAL's salt (checkRestart) and, when a reader kept it,
// counts the WAL as it was. When the writer has been idle for a whole
// interval, the checkpointer truncates the WAL file (TRUNCATE), which also
// restarts it, unless a reader blocks it: SQLite's TRUNCATE holds the
// write lock while it waits for readers, so the checkpointer's connection
// has no busy timeout, and a blocked TRUNCATE gives up at once, truncates
// nothing, and the next tick tries again. Close checkpoints and truncates
// it last.
//
// SQLite syncs the database file only after a checkpoint that reached the
// end of the WAL. Under a steady stream of commits (an Update and the joins
// beside it) no background pass does, so each leaves the pages it copied
// dirty in the OS, and the writer's restart checkpoint, the first to reach
// the end, flushed them all on the writer's path: after an Update at 5M
// sessions that stalled every join for 50-150 ms. So every background pass
// that copied pages syncs the database itself (sync, off the writer), and
// the writer's checkpoint flushes only its residue. While an Update runs,
// a pass short of updateFrames (one that began before the update) leaves
// that sync to the first pass after it (unsynced), whose fsyncs would hold
// a CPU from the joins the update yields to; meanwhile the writer does not
// restart the WAL at a quiet moment, which would flush what the passes
// left. Past updateFrames a pass syncs at once: the restart that lets the
// update go on must not find the backlog.
const residualFrames = 256

// Variables for the tests, which set them before Open.
var (
	ckptFrames   int64 = 1000
	ckptInterval       = time.Second
	restartBytes int64 = 64 << 20
	highBytes    int64 = 256 << 20
)

// ckptReading is what a checkpoint saw: the WAL's length in frames, the
// frames backfilled, and the writer's frame count when it started.
type ckptReading struct {
	log, done, writtenAt int64
}

type checkpointer struct {
	log  *slog.Logger
	path string
	c    driver.Conn
	st   struct{ passive, truncate *stmt }
	args wconn // to run st on c

	// mu is held while a checkpoint runs, by the checkpointer goroutine or
	// the writer: one at a time.
	mu sync.Mutex

	nudge chan struct{}
	stop  chan struct{}
	done  chan struct{}
	// paused reports whether an Update runs (and does not wait for room):
	// then background passes wait while the WAL is short of updateFrames.
	paused func() bool
	// sync makes durable what a background pass copied (see above).
	sync func() error

	// unsynced is set while pages a pass copied during an Update wait for
	// the sync of the first pass after it.
	unsynced atomic.Bool
	// written counts the frames the writer appended to the WAL since Open.
	written atomic.Int64
	// nudged is written when the writer last nudged (writer only).
	nudged  int64
	reading atomic.Pointer[ckptReading]
	// movedMu guards moved, closed and replaced whenever reading changes or
	// a checkpoint fails: what an Update waiting for room waits on.
	movedMu sync.Mutex
	moved   chan struct{}
	// restartWanted asks the writer to checkpoint and restart the WAL
	// before its next transaction (set by an Update that waited for room).
	restartWanted atomic.Bool
	// assumed is the restart a writer checkpoint that backfilled every
	// frame took for granted, checked at the writer's next commit (writer
	// only; nil when none).
	assumed *assumedRestart
	// restartFrames and highFrames are restartBytes and highBytes in pages;
	// while an Update runs, background passes wait, and leave their sync
	// to the first pass after it, until the WAL holds updateFrames (3/4 of
	// highFrames).
	restartFrames, highFrames, updateFrames int64
	// pageSize is the database's page size: a WAL frame holds a page.
	pageSize int64

	stats struct {
		background, writer, truncates, synced, failed, updateWaits atomic.Int64
		// writebacks counts the rounds in which the writeback of some of
		// the WAL was started while passes were held back (writeback).
		writebacks atomic.Int64
		// restartsMissed counts the restarts a reader prevented
		// (checkRestart), truncatesBlocked the idle TRUNCATEs one did.
		restartsMissed, truncatesBlocked atomic.Int64
	}
	// noWriteback is set once the file system or the kernel refused
	// sync_file_range (checkpointer goroutine only).
	noWriteback bool
	// lastErr is the last checkpoint's error, nil once one succeeds.
	lastErr atomic.Pointer[error]
}

func openCheckpointer(ctx context.Context, dsn string, pageSize int64, paused func() bool, sync func() error, log *slog.Logger, path string) (*checkpointer, error) {
	c, err := (&sqlite.Driver{}).Open(dsn)
	if err != nil {
		return nil, err
	}
	k := &checkpointer{
		log: log, path: path, c: c, paused: paused, sync: sync,
		nudge: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
		moved:         make(chan struct{}),
		restartFrames: restartBytes / pageSize, highFrames: highBytes / pageSize, pageSize: pageSize,
	}
	k.updateFrames = k.highFrames * 3 / 4
	k.args.c = c
	k.reading.Store(&ckptReading{})
	pc, ok := c.(driver.ConnPrepareContext)
	if !ok {
		_ = c.Close()
		return nil, fmt.Errorf("driver connection cannot prepare with a context")
	}
	for _, p := range []struct {
		dst **stmt
		sql string
	}{{&k.st.passive, "PRAGMA wal_checkpoint(PASSIVE)"}, {&k.st.truncate, "PRAGMA wal_checkpoint(TRUNCATE)"}} {
		st, err := pc.PrepareContext(ctx, p.sql)
		if err != nil {
			_ = k.close()
			return nil, fmt.Errorf("prepare %q: %w", p.sql, err)
		}
		q, ok := st.(driver.StmtQueryContext)
		if !ok {
			_ = st.Close()
			_ = k.close()
			return nil, fmt.Errorf("driver statement cannot query with a context")
		}
		*p.dst = &stmt{st: st, q: q}
	}
	return k, nil
}

func (k *checkpointer) close() error {
	for _, s := range []*stmt{k.st.passive, k.st.truncate} {
		if s != nil {
			_ = s.st.Close()
		}
	}
	return k.c.Close()
}

// checkpoint runs st (a PRAGMA wal_checkpoint) on w, the checkpointer's or
// the writer's connection, and returns its answer: whether it was blocked,
// the WAL's length in frames, the frames backfilled. The caller holds k.mu.
func checkpoint(w *wconn, st *stmt) (busy bool, log, done int64, err error) {
	var dest [3]driver.Value
	if _, err := w.queryRow(st, dest[:]); err != nil {
		return false, 0, 0, err
	}
	return asInt(dest[0]) != 0, asInt(dest[1]), asInt(dest[2]), nil
}

// appendsAt estimates the frame the writer appends next, as wal does,
// except after a reading that found every frame backfilled: the writer's
// next commit then restarts the WAL from its start, unless a reader kept it
// (checkRestart), so only the frames written since are sure to be below.
func (k *checkpointer) appendsAt(written int64) int64 {
	r := k.reading.Load()
	since := written - r.writtenAt
	if r.done == r.log {
		return since
	}
	return r.log + since
}

// wal estimates the WAL's length in frames, and the frames not backfilled,
// from the last reading and what the writer appended since.
func (k *checkpointer) wal(written int64) (frames, residual int64) {
	r := k.reading.Load()
	since := written - r.writtenAt
	return r.log + since, r.log - r.done + since
}

// run is the checkpointer goroutine.
func (k *checkpointer) run() {
	defer close(k.done)
	t := time.NewTicker(ckptInterval)
	defer t.Stop()
	var lastRun, lastTick, truncatedAt int64
	for {
		select {
		case <-k.stop:
			return
		case <-k.nudge:
		case <-t.C:
			w := k.written.Load()
			idle := w == lastTick
			lastTick = w
			if idle && w != truncatedAt {
				// Nothing written for a whole interval: backfill all and
				// give the disk space back.
				k.mu.Lock()
				busy, log, done, err := checkpoint(&k.args, k.st.truncate)
				k.mu.Unlock()
				if err != nil {
					k.failed(err)
					continue
				}
				k.succeeded()
				// Blocked by a reader, it truncated nothing: the WAL is
				// as it says, and the next tick tries again.
				k.setReading(&ckptReading{log: log, done: done, writtenAt: w})
				if busy {
					k.stats.truncatesBlocked.Add(1)
					continue
				}
				k.stats.truncates.Add(1)
				truncatedAt, lastRun = w, w
				continue
			}
			if w == lastRun {
				continue
			}
		}
		w := k.written.Load()
		if frames, _ := k.wal(w); k.holdsBack(frames) {
			k.writeback(k.appendsAt(w))
			continue
		}
		lastRun = k.pass()
	}
}

// pass runs one PASSIVE checkpoint, then syncs the database when it or a
// pass during an Update copied pages (unless an Update runs), and returns
// the writer's frame count when it started.
func (k *checkpointer) pass() int64 {
	w := k.written.Load()
	before := k.reading.Load().done
	k.mu.Lock()
	_, log, done, err := checkpoint(&k.args, k.st.passive)
	k.mu.Unlock()
	if err == nil && (done > before || k.unsynced.Load()) {
		if frames, _ := k.wal(w); k.holdsBack(frames) {
			k.unsynced.Store(true)
		} else if err = k.sync(); err == nil {
			k.unsynced.Store(false)
			k.stats.synced.Add(1)
		}
	}
	if err != nil {
		k.failed(err)
		return w
	}
	k.stats.background.Add(1)
	k.succeeded()
	k.setReading(&ckptReading{log: log, done: done, writtenAt: w})
	return w
}

// writeback starts the writeback of the WAL's dirty pages while passes are
// held back (see above), up to where the writer appends: before frame
// appendAt (appendsAt). Where the file system
// or the kernel refuses sync_file_range it says so once and does nothing
// more: the fsyncs are only longer. Another failure (an open refused for
// want of descriptors) skips this round. Called by the checkpointer
// goroutine only.
func (k *checkpointer) writeback(appendAt int64) {
	if !writebackSupported || k.noWriteback {
		return
	}
	n, err := startWriteback(k.path+"-wal", walHeaderSize+appendAt*(k.pageSize+walFrameHeaderSize))
	if err != nil {
		if writebackRefused(err) {
			k.noWriteback = true
			k.log.Warn("anteroom: the file system does not start a WAL's writeback; the checkpoints after an update will sync more at once", "path", k.path, "err", err)
			return
		}
		k.log.Debug("anteroom: starting the WAL's writeback failed", "path", k.path, "err", err)
		return
	}
	if n > 0 {
		k.stats.writebacks.Add(1)
	}
}

// holdsBack reports whether an Update runs and the WAL, holding frames,
// is short of updateFrames: then a background pass waits, and one that
// ran anyway (it began before the update) leaves its sync to the first
// pass after the update.
func (k *checkpointer) holdsBack(frames int64) bool {
	return k.paused() && frames < k.updateFrames
}

// setReading records what a checkpoint saw and wakes those waiting on
// changed.
func (k *checkpointer) setReading(r *ckptReading) {
	k.reading.Store(r)
	k.wake()
}

func (k *checkpointer) wake() {
	k.movedMu.Lock()
	close(k.moved)
	k.moved = make(chan struct{})
	k.movedMu.Unlock()
}

// changed returns a channel closed at the next reading or failure.
func (k *checkpointer) changed() <-chan struct{} {
	k.movedMu.Lock()
	defer k.movedMu.Unlock()
	return k.moved
}

// kick asks for a background pass now.
func (k *checkpointer) kick() {
	select {
	case k.nudge <- struct{}{}:
	default:
	}
}

func (k *checkpointer) failed(err error) {
	k.stats.failed.Add(1)
	k.lastErr.Store(&err)
	k.log.Warn("anteroom: WAL checkpoint failed", "path", k.path, "err", err)
	k.wake()
}

// succeeded clears the last checkpoint error.
func (k *checkpointer) succeeded() {
	if k.lastErr.Load() != nil {
		k.lastErr.Store(nil)
	}
}

// committed is called by the writer after each transaction with the frames
// it appended. It nudges the checkpointer every ckptFrames frames, and
// checkpoints on w itself to let the WAL restart (see above); quiet says
// that no op is queued and no Update runs.
func (k *checkpointer) committed(w *wconn, frames int64, quiet bool) {
	if frames <= 0 {
		return
	}
	written := k.written.Add(frames)
	k.checkRestart()
	if written-k.nudged >= ckptFrames {
		k.nudged = written
		k.kick()
	}
	wal, residual := k.wal(written)
	switch {
	case wal < k.restartFrames:
		return
	case wal >= 2*k.highFrames:
		k.mu.Lock()
	case wal >= k.highFrames || quiet && residual <= residualFrames && !k.unsynced.Load():
		// While a background pass runs, let it finish: it shortens this one.
		if !k.mu.TryLock() {
			return
		}
	default:
		return
	}
	k.writerCheckpoint(w, written)
}

// restartIfWanted runs, on the writer's connection w before its next
// transaction, the checkpoint an Update that waited for room asked for
// (restartWanted), unless the WAL restarted meanwhile.
func (k *checkpointer) restartIfWanted(w *wconn) {
	// Called before every batch: a plain load while nothing is asked, so
	// that the joins' path does not write the flag's cache line.
	if !k.restartWanted.Load() || !k.restartWanted.Swap(false) {
		return
	}
	written := k.written.Load()
	if frames, _ := k.wal(written); frames < k.restartFrames {
		return
	}
	k.mu.Lock()
	k.writerCheckpoint(w, written)
}

// writerCheckpoint checkpoints on the writer's connection w, which has
// appended written frames since Open, and releases k.mu, which the caller
// holds. When it backfills every frame, the writer's next transaction
// restarts the WAL.
func (k *checkpointer) writerCheckpoint(w *wconn, written int64) {
	busy, log, done, err := checkpoint(w, w.checkpoint)
	k.mu.Unlock()
	if err != nil {
		k.failed(err)
		return
	}
	k.stats.writer.Add(1)
	k.succeeded()
	r := &ckptReading{log: log, done: done, writtenAt: written}
	k.assumed = nil
	if !busy && done == log {
		// The writer's next transaction restarts the WAL, unless a reader
		// still reads from it then: committed checks the WAL's salt.
		empty := &ckptReading{writtenAt: written}
		if salt, ok := walSalt(k.path); ok {
			k.assumed = &assumedRestart{salt: salt, reading: empty, was: *r}
		}
		r = empty
	}
	k.setReading(r)
}

// assumedRestart is a WAL restart that a writer checkpoint took for
// granted: the WAL's salt then, the reading it stored (the WAL empty) and
// the one it would have stored otherwise.
type assumedRestart struct {
	salt    uint64
	reading *ckptReading
	was     ckptReading
}

// checkRestart runs after the writer's first commit that followed an
// assumed restart. SQLite restarts the WAL at a write transaction only when
// no reader still reads from it; when one did, the salt is unchanged and
// the commit's frames went on at the WAL's end, so the reading goes back to
// what the checkpoint saw (unless a background pass has stored a newer one
// meanwhile). Left alone, the estimate would count the WAL empty: passes
// would wait and no checkpoint would start while the real WAL grew.
func (k *checkpointer) checkRestart() {
	a := k.assumed
	if a == nil {
		return
	}
	k.assumed = nil
	if salt, ok := walSalt(k.path); ok && salt == a.salt {
		if k.reading.CompareAndSwap(a.reading, &a.was) {
			k.stats.restartsMissed.Add(1)
			k.wake()
		}
	}
}

// walSalt reads the salt of the WAL of the database at path from the WAL
// file's header (salt-1 and salt-2, bytes 16 to 23, big-endian), which
// SQLite writes anew, with a new salt, when the WAL restarts. ok is false
// when it cannot be read (no WAL, or an empty one).
//
// It reads the WAL, not the wal-index (the -shm file), whose header holds
// the same salt: SQLite keeps POSIX locks on the -shm, and closing any
// descriptor of a file drops every POSIX lock the process holds on it. A
// read of the -shm dropped SQLite's lock that tells another process (a
// sqlite3 shell, a backup tool) the wal-index is in use, and that process
// would then have rebuilt it under the running store. No SQLite lock lives
// on the WAL (see onWALFile).
func walSalt(path string) (salt uint64, ok bool) {
	var hdr [walHeaderSize]byte
	err := onWALFile(path+"-wal", func(f *os.File) error {
		_, err := f.ReadAt(hdr[:], 0)
		ok = err == nil
		return err
	})
	if err != nil || !ok {
		return 0, false
	}
	return binary.BigEndian.Uint64(hdr[16:24]), true
}

// walHeaderSize is the size of a WAL file's header, walFrameHeaderSize
// that of a frame's, before its page.
const (
	walHeaderSize      = 32
	walFrameHeaderSize = 24
)

// updateWaitLimit bounds how long one Update waits for room in the WAL, in
// all: past it (a disk that cannot follow) the update goes on, and the
// writer's forced checkpoint at highFrames bounds the WAL. A variable for
// the tests.
var updateWaitLimit = 30 * time.Second

// waitForRoom is called by an Update before each of its transactions. While
// the WAL holds updateFrames or more, it waits (see above) until a
// background pass has copied and synced all but ckptFrames, then asks the
// writer to restart the WAL before its next transaction. budget is what
// remains of updateWaitLimit for this Update; waitForRoom lowers it by the
// time it waited. Past the budget it no longer waits, but still asks for
// the restart once a pass has caught up. It does not wait after a
// checkpoint failed (Ready reports it).
//
// Errors: ctx's, when it is done while waiting; session.ErrUnavailable
// when the store is closed.
func (s *Store) waitForRoom(ctx context.Context, budget *time.Duration) error {
	k := s.ck
	var timeout <-chan time.Time
	start := time.Now()
	defer func() {
		if timeout != nil {
			*budget -= time.Since(start)
		}
	}()
	for {
		if s.closed.Load() {
			return session.ErrUnavailable
		}
		moved := k.changed()
		frames, residual := k.wal(k.written.Load())
		switch {
		case frames < k.updateFrames || k.lastErr.Load() != nil:
			return nil
		case residual <= ckptFrames && !k.unsynced.Load():
			k.restartWanted.Store(true)
			return nil
		case *budget <= 0:
			return nil // no more waiting; a restart when a pass catches up
		}
		if timeout == nil {
			k.stats.updateWaits.Add(1)
			t := time.NewTimer(*budget)
			defer t.Stop()
			timeout = t.C
		}
		s.updating.Add(-1) // passes run and sync meanwhile
		k.kick()
		select {
		case <-moved:
		case <-ctx.Done():
		case <-k.stop: // Close
		case <-timeout:
			*budget = 0
		}
		s.updating.Add(1)
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}
