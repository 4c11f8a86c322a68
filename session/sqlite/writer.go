package sqlite

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync"
	"time"

	"github.com/anteroomhq/anteroom/session"
	sqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// opKind names what an op does.
type opKind uint8

const (
	opJoin opKind = iota + 1
	opLeave
	opRelease
	opTouch
	opUpdate
	opLoad
	opSecret
	opPurge
	opProbe
	opSettings
	opFunc // fn runs in the transaction (events.go)
	opPruneHistory
	opCodes
)

func (k opKind) String() string {
	switch k {
	case opJoin:
		return "join"
	case opLeave:
		return "leave"
	case opRelease:
		return "release"
	case opTouch:
		return "touch"
	case opUpdate:
		return "update"
	case opLoad:
		return "load"
	case opSecret:
		return "secret"
	case opPurge:
		return "purge"
	case opProbe:
		return "probe"
	case opSettings:
		return "settings"
	case opFunc:
		return "func"
	case opPruneHistory:
		return "prune history"
	case opCodes:
		return "codes"
	}
	return "op"
}

// op is one operation queued for the writer, with its answer. ops are pooled:
// the writer never touches an op after signalling done.
type op struct {
	kind    opKind
	ctx     context.Context
	cfg     session.GateConfig
	id      string
	now     time.Time
	touches []session.Touch
	ids     []string
	gates   []string
	gen     func() ([]byte, error)
	setting *session.GateConfig  // opSettings: what to save; nil deletes
	fn      func(b *batch) error // opFunc
	code    string               // opJoin: the priority code given, "" none
	codes   *codeOp              // opCodes: the request and its answer; opJoin: the code's answer
	updIn   updateStep           // where an update step starts
	upd     updateStep           // where it ended, and what it did

	sess   session.Session
	snaps  map[string]session.GateSnapshot
	secret []byte
	err    error
	done   chan struct{}
}

var opPool = sync.Pool{New: func() any { return &op{done: make(chan struct{}, 1)} }}

func newOp(ctx context.Context, kind opKind) *op {
	o := opPool.Get().(*op)
	o.kind, o.ctx = kind, ctx
	return o
}

func putOp(o *op) {
	done := o.done
	*o = op{done: done}
	opPool.Put(o)
}

// updateStep is the state of an Update carried from one transaction to the
// next, and what one transaction did.
type updateStep struct {
	chunk                       int
	waitingCutoff, activeCutoff int64 // unix nanos; set by each transaction (applyUpdate)
	now                         int64 // unix nanos: unclaimed past their deadline before it
	phase                       int   // phasePurgeSeen, … phasePromote (update.go)
	finished                    bool
	// lineEnd is the gate's next position at the update's first
	// transaction: it promotes only the sessions in line before it
	// (session.Promotable).
	lineEnd int64

	purgedWaiting, purgedActive, promoted int64

	// inPlace is where the deletion of the stale rows of the cutoff's own
	// second (sqlPurgeWaitingInPlace, sqlPurgeActive) goes on from: the
	// last position it deleted in that second. It holds in the same phase,
	// at the same exact cutoff (stored settings saved between two
	// transactions may move it), and while no write may have left such a
	// row below it (a lottery drawn, a call-back turned off between two
	// transactions: wconn.cursorResets); otherwise the second is read from
	// its start again.
	inPlace inPlaceFrom
}

// inPlaceFrom is a position in the cutoff's second of the marks' order, in
// a phase of an update: the steps after it read that second from there on.
// Its zero value holds for no phase that deletes in place.
type inPlaceFrom struct {
	phase       int
	cutoff, pos int64  // the cutoff it was taken at (unix nanoseconds): a later one makes rows below pos stale
	resets      uint64 // wconn.cursorResets when it was taken: after another, a row to delete may lie below pos
}

// gateEntry is the writer's copy of a gate's counters. Owning the file alone,
// the writer keeps them between transactions and writes them back at the end
// of each transaction that changed them; it drops its copies when a
// transaction fails.
type gateEntry struct {
	name string
	c    session.Counters
	// lb is a lower bound of the gate's first waiting position (0 when
	// unknown), where the search for it starts: positions never move, and
	// no session goes from active back to waiting, so it stays one.
	lb int64
	// pace is the gate's admission pacing (session.Pace), saved with the
	// counters (pace.go); it is restored with the rest of the entry when an
	// op is undone.
	pace session.Pace
	// mark is the gate's purge mark (migrations/0011), saved with the
	// counters: the waiting rows it covers are purged, and left for the
	// cleaner to delete.
	mark purgeMark
	// activeMark is the gate's active purge mark (migrations/0012), the
	// same for its active rows.
	activeMark purgeMark
	// pend is the gate's pending promotion (migrations/0014, promoted.go),
	// saved with the counters.
	pend pendingPromotion
	// held is the gate's runtime settings as stored (nil: none, or a row
	// that does not decode), and events its scheduled events as stored
	// (sorted; damagedEvents: one does not decode, and is left out). The
	// ops that decide (join, leave, release, purge, update) decide with
	// held and the events over it (decidedWith), as the shared store does:
	// an op queued with the configuration its caller read moments before
	// a change committed (a limit lowered) is decided as of its own
	// commit, and held while a pre-queue is open as stored
	// (session.PrequeueHold; damagedHold: a damaged event may be one,
	// session.DamagedEventHolds). Read with the entry (readStored), kept
	// by the ops that change them.
	held          *session.GateConfig
	events        []session.ScheduledEvent
	damagedEvents bool
	damagedHold   bool

	inBatch bool // listed in batch.touched
	save    bool // counters changed in this transaction
	report  bool // a row changed in this transaction: report the gate's state
}

// purgeMark is a gate's purge mark: a row of the mark's status (waiting for
// gateEntry.mark, active for activeMark) not to be called back (notify 0)
// with a last sign of life, whose (seenSecond(last_active), position) is
// below (seenSecond(seen), pos), is purged: the order of sessions_seen
// (migrations/0013). seen is the last sign of life of the last session
// purged (unix nanoseconds). It rises with each purge, and goes back to
// noMark once no row is left below it (resetMarks, sqlResetMarks). The
// zero mark is not valid; noMark covers nothing.
type purgeMark struct{ seen, pos int64 }

// noMark is the mark of a gate that purged nothing yet, or whose purged
// rows are all deleted: below every row.
var noMark = purgeMark{math.MinInt64, math.MinInt64}

// seenSecondNanos is the width of the first term of the marks' order: a
// second (sqlSeenSecond in SQL).
const seenSecondNanos = 1_000_000_000

// seenSecond is the second of a last sign of life seen (unix
// nanoseconds), truncated toward zero as SQLite's integer division is.
func seenSecond(seen int64) int64 { return seen / seenSecondNanos }

// covers reports whether the mark covers a row of last sign of life seen
// (unix nanoseconds) at pos.
func (m purgeMark) covers(seen, pos int64) bool {
	t, mt := seenSecond(seen), seenSecond(m.seen)
	return t < mt || t == mt && pos < m.pos
}

// less reports whether m is below n.
func (m purgeMark) less(n purgeMark) bool { return n.covers(m.seen, m.pos) }

type undoEntry struct {
	name string
	prev gateEntry
	had  bool
}

// batch is the writer's state for one transaction.
type batch struct {
	live    []*op
	touched []*gateEntry
	events  []session.Event
	undo    []undoEntry // gates the current op touched, as they were before it
	broken  error       // the transaction can no longer be committed
	// poisoned is an op that failed after it wrote, or on a storage error:
	// the transaction is rolled back and run again without it.
	poisoned *op
	rows     []session.Session // rows read by an op
	// purged are the gates whose purge marks the transaction raised, or
	// that it left a pending promotion (promoted.go): the cleaner is told
	// of them once it commits (clean.go).
	purged []string
}

// maxPoisoned is how many poisoned ops a batch survives before it fails as a
// whole: past that, the storage is failing, not an op.
const maxPoisoned = 3

// Test hooks, set only by this package's tests before Open: an error from
// testHookOpDone fails an op after it wrote its rows; one from
// testHookBeforeCommit fails the whole transaction.
var (
	testHookOpDone       func(o *op) error
	testHookBeforeCommit func() error
)

// run is the writer goroutine.
func (s *Store) run() {
	defer close(s.writerDone)
	ops := make([]*op, 0, s.maxBatch)
	for o := range s.ops {
		ops = s.gather(append(ops[:0], o), runtime.Gosched)
		s.ck.restartIfWanted(&s.wc)
		s.runBatch(ops)
		clear(ops)
		s.ck.committed(&s.wc, s.wc.framesWritten(), len(s.ops) == 0 && s.updating.Load() == 0)
	}
}

// maxGatherYields bounds how many times the writer yields to let callers
// queue before it runs a batch.
const maxGatherYields = 8

// gather adds to ops what is queued, up to the batch size. When the queue
// is empty it first yields, so that the callers that are about to queue
// do so (a batch formed a moment later is larger, and a commit costs more
// than an op), and it yields again as long as each yield brought more
// (joins over HTTP arrive a few at a time, as their handlers get the CPU).
// A lone caller costs one yield, as before. yield is runtime.Gosched
// (a test's stand-in makes callers arrive).
func (s *Store) gather(ops []*op, yield func()) []*op {
	for range maxGatherYields {
		if len(s.ops) == 0 {
			yield()
		}
		n := len(ops)
	fill:
		for len(ops) < s.maxBatch {
			select {
			case o, ok := <-s.ops:
				if !ok {
					break fill
				}
				ops = append(ops, o)
			default:
				break fill
			}
		}
		if len(ops) == n || len(ops) >= s.maxBatch {
			break
		}
	}
	return ops
}

func answer(o *op) { o.done <- struct{}{} }

// runBatch runs ops in one transaction, commits, tells the listener, then
// answers every caller.
func (s *Store) runBatch(ops []*op) {
	var start time.Time
	if s.onCommit != nil {
		start = time.Now()
	}
	b := &s.b
	b.live = b.live[:0]
	for _, o := range ops {
		s.admit(b, o)
	}
	for poisoned := 0; len(b.live) > 0; poisoned++ {
		b.purged = b.purged[:0]
		gates, err := s.attempt(b)
		if err == nil {
			s.stats.txs.Add(1)
			s.idx.commit()
			for _, g := range b.purged {
				e := s.cache[g]
				s.cleanWanted(g, e != nil && e.pend.active())
			}
			if fn := s.listener.Load(); fn != nil && (len(b.events) > 0 || len(gates) > 0) {
				s.notify(*fn, session.Commit{Events: b.events, Gates: gates})
			}
			n := len(b.live)
			for _, o := range b.live {
				answer(o)
			}
			if s.onCommit != nil {
				s.onCommit(n, time.Since(start))
			}
			return
		}
		if b.poisoned == nil || poisoned == maxPoisoned {
			s.failBatch(b, err)
			return
		}
		// One op failed on a storage error, which may have left writes
		// behind: roll back, answer it, and run the others again.
		s.stats.failed.Add(1)
		_, _ = s.wc.exec(s.wc.rollback)
		s.idx.rollback()
		clear(s.cache)
		s.log.Warn("anteroom: sqlite operation failed; running the rest of its batch again", "path", s.path, "op", b.poisoned.kind.String(), "err", b.poisoned.err)
		live := b.live[:0]
		for _, o := range b.live {
			if o == b.poisoned {
				answer(o)
				continue
			}
			live = append(live, o)
		}
		b.live = live
	}
}

// notify calls the commit listener. A listener that panics is a bug, but it
// must not kill the writer and leave every caller waiting forever.
func (s *Store) notify(fn func(session.Commit), c session.Commit) {
	defer func() {
		if p := recover(); p != nil {
			s.log.Error("anteroom: commit listener panicked", "path", s.path, "panic", p)
		}
	}()
	fn(c)
}

// admit counts op o and adds it to the batch b runs, unless its context is
// done (then it is answered with that error: it never ran).
func (s *Store) admit(b *batch, o *op) {
	s.stats.ops.Add(1)
	if err := o.ctx.Err(); err != nil {
		o.err = err
		answer(o)
		return
	}
	b.live = append(b.live, o)
	if n := int64(len(b.live)); n > s.stats.maxBatch.Load() {
		s.stats.maxBatch.Store(n)
	}
}

// attempt runs b.live in one transaction and commits it. On error the
// transaction is still open (or gone) and b.poisoned may name the op to
// blame.
func (s *Store) attempt(b *batch) (map[string]session.GateState, error) {
	b.touched = b.touched[:0]
	b.events = nil // handed to the listener, which may keep it
	b.broken, b.poisoned = nil, nil
	s.idx.rollback()
	if _, err := s.wc.exec(s.wc.begin); err != nil {
		return nil, fmt.Errorf("begin: %w", err)
	}
	for i := 0; i < len(b.live); i++ {
		o := b.live[i]
		o.err = nil
		s.runOp(b, o)
		if b.poisoned != nil {
			return nil, b.poisoned.err
		}
		if b.broken != nil {
			return nil, b.broken
		}
		if o.kind == opUpdate {
			s.takeQueued(b) // what queued during an update's steps shares its commit (update.go)
		}
	}
	gates, err := s.finish(b)
	if err == nil {
		err = s.writeOutbox(b.events)
	}
	if err == nil && testHookBeforeCommit != nil {
		err = testHookBeforeCommit()
	}
	if err == nil {
		if _, err = s.wc.exec(s.wc.commit); err != nil {
			err = fmt.Errorf("commit: %w", err)
		}
	}
	return gates, err
}

// failBatch rolls the transaction back and answers every caller of the batch
// with err; the listener is not called.
func (s *Store) failBatch(b *batch, err error) {
	s.stats.failed.Add(1)
	_, _ = s.wc.exec(s.wc.rollback) // fails harmlessly when no transaction is open
	s.idx.rollback()
	clear(s.cache)
	s.noteWriteFailure(err)
	s.log.Error("anteroom: sqlite transaction failed", "path", s.path, "ops", len(b.live), "err", err)
	for _, o := range b.live {
		o.err = session.Errorf(session.CodeInternal, "sqlite: %s: transaction failed: %w", o.kind, err)
		answer(o)
	}
}

// runOp runs o. When o fails, the writer's copies of what it changed are
// undone and o keeps its error. An op that failed before it wrote anything
// (not found, an invalid argument, a secret generator's error) leaves the
// transaction as it was: the rest of the batch goes on. Any other failure
// poisons the transaction, which is rolled back and run again without o
// (see runBatch): one that came after o ran a row-changing statement,
// whatever its error, and one on a storage error, after which SQLite may
// have rolled the transaction back itself. So every op that wrote and then
// failed is rolled back, without a savepoint per op, whose sub-journal would
// copy every page an op touches.
func (s *Store) runOp(b *batch, o *op) {
	b.undo = b.undo[:0]
	nEvents := len(b.events)
	writes := s.wc.writes
	err := s.apply(b, o)
	if err == nil && testHookOpDone != nil {
		err = testHookOpDone(o)
	}
	if err == nil {
		session.StampEvents(b.events[nEvents:], normTime(o.now))
		return
	}
	o.err = err
	b.events = b.events[:nEvents]
	for i := len(b.undo) - 1; i >= 0; i-- {
		u := b.undo[i]
		e := s.cache[u.name]
		if !u.had {
			if e != nil {
				e.inBatch, e.save, e.report = false, false, false
			}
			delete(s.cache, u.name)
			continue
		}
		*e = u.prev
	}
	var storage *sqlite.Error
	if s.wc.writes != writes || errors.As(err, &storage) {
		b.poisoned = o
	}
	s.noteWriteFailure(err)
}

// noteWriteFailure remembers err for Ready when it says the storage cannot
// write (full, I/O error, read-only, corrupt, ...), not when one op was
// refused.
func (s *Store) noteWriteFailure(err error) {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return
	}
	switch se.Code() & 0xff {
	case sqlite3.SQLITE_IOERR, sqlite3.SQLITE_FULL, sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_READONLY,
		sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB, sqlite3.SQLITE_NOMEM, sqlite3.SQLITE_PROTOCOL:
		s.writeErr.Store(&err)
	}
}

// apply runs o in the batch's transaction, the ops that decide with the
// gate's stored settings and events (decidedWith); an error that carries no
// code of the contract's comes back as an internal one.
func (s *Store) apply(b *batch, o *op) error {
	var err error
	switch {
	case pendingSafe(o):
	case o.kind == opUpdate:
		// Only the update's gate: it raises its gate's marks, no other
		// gate's.
		_, err = s.materialize(b, o.cfg.Name, -1)
	default:
		err = s.materializeAll(b)
	}
	switch o.kind {
	case opJoin, opLeave, opRelease, opPurge, opUpdate:
		if err == nil {
			err = s.decidedWith(b, o)
		}
	}
	if err == nil {
		err = s.applyKind(b, o)
	}
	if err != nil && session.CodeOf(err) == session.CodeInternal {
		var se *session.Error
		if !errors.As(err, &se) {
			err = session.Errorf(session.CodeInternal, "sqlite: %s: %w", o.kind, err)
		}
	}
	return err
}

// applyKind runs o by its kind.
func (s *Store) applyKind(b *batch, o *op) error {
	switch o.kind {
	case opJoin:
		return s.applyJoin(b, o)
	case opLeave:
		return s.applyLeave(b, o)
	case opRelease:
		return s.applyRelease(b, o)
	case opTouch:
		return s.applyTouch(b, o)
	case opPurge:
		return s.applyPurge(b, o)
	case opUpdate:
		return s.applyUpdate(b, o)
	case opLoad:
		return s.applyLoad(b, o)
	case opSecret:
		return s.applySecret(o)
	case opProbe:
		return s.applyProbe()
	case opSettings:
		return s.applySettings(b, o)
	case opFunc:
		return o.fn(b)
	case opPruneHistory:
		return s.applyPruneHistory(o)
	case opCodes:
		return s.applyCodes(o)
	}
	return fmt.Errorf("unknown op %d", o.kind)
}
