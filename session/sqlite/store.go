// Package sqlite is anteroom's embedded session.Store, on modernc.org/sqlite
// (pure Go, no cgo).
//
// # Durability
//
// The database runs in WAL mode with synchronous=NORMAL. A committed
// transaction survives a crash of the process (the WAL is in the OS page
// cache and is replayed at the next open), which is what anteroom promises.
// A power loss or kernel crash may lose the last transactions committed
// before it, never corrupt the file.
//
// # One process per file
//
// Open resolves symbolic links in path (two names of one file are one
// database), then takes an exclusive lock on path+".lock" and, on Linux, an
// flock on the database file itself, which deleting or renaming the lock
// file cannot defeat (flock and SQLite's POSIX locks do not interact there).
// It fails at once when another process holds either (ErrLocked). Owning the
// file alone is what lets the service answer hot reads from memory, updated
// only by this Store's commit listener, and lets the Store keep each gate's
// counters in memory between transactions.
//
// # Files and damage
//
// The database, its WAL, shared-memory and lock files are created readable
// by their owner only (0600; the token secret is in the database), and an
// existing one readable by others is restricted at Open, with a warning
// naming it. Beside the database, path+".id" records its random identity
// and, per gate, the highest next_position known to be on disk (written
// with fsync and rename at Open, every second while positions are handed
// out, and at Close, always after the WAL and the database are synced).
// Open refuses (ErrDamaged) a database that has lost what that file
// records: an empty or zero-length file, another database, a gate whose
// next_position went back (a truncated WAL, an older copy), one that
// fails PRAGMA quick_check, and one whose purge marks are damaged (not a
// number, over a year ahead, or covering rows the counters count); the
// error says how to override. Ready reports a
// Store that cannot write (its last write failed on storage, a checkpoint
// or the identity record failed, the file was removed).
//
// # Group commit
//
// Every write goes through one writer goroutine on one connection. It takes
// all operations queued at the time (up to Options.MaxBatch) and runs them in
// one transaction. An operation that fails before it writes (not found, ...)
// leaves the others alone; one that fails on a storage error, which may have
// left writes behind, has the transaction rolled back and run again without
// it. So a failing operation rolls back only itself, without a SAVEPOINT per
// operation, whose sub-journal would copy every page it touches. After
// COMMIT the writer calls the commit listener once with the merged
// session.Commit, then answers the callers. If COMMIT fails, every caller of
// the batch gets the error and the listener is not called. An Update runs
// as a series of transactions of at most the chunk its caller asks for
// (session.Options.UpdateChunk), between which the joins queued meanwhile
// run. Reads (Get, Rows) use a separate
// pool of read-only connections.
//
// # Storage layout
//
// Sessions are keyed by (gate, position), so joins append to the end of
// their gate's range and a transaction writes a handful of pages however
// many joins it holds (migrations/0002). A session is found by its id
// through an index kept in memory and rebuilt at Open (index.go): an SQL
// index on random ids would cost a page written per join.
//
// # Checkpoints
//
// Commits only append to the WAL: a checkpointer goroutine on its own
// connection copies the WAL back into the database file and fsyncs, off the
// writer's path (checkpoint.go).
package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/anteroomhq/anteroom/session"
	sqlite "modernc.org/sqlite" // also registers the "sqlite" driver
)

// Options tune a Store. The zero value of each field picks its default.
type Options struct {
	// Logger receives migrations applied and storage failures. Default:
	// slog.Default().
	Logger *slog.Logger
	// MaxBatch is the most operations one transaction runs. Default 256.
	MaxBatch int
	// QueueLen is how many operations may wait for the writer before callers
	// block. Default 4 × MaxBatch.
	QueueLen int
	// BusyTimeout is how long a connection waits for a lock held inside the
	// process (a checkpoint, a reader). Default 5s.
	BusyTimeout time.Duration
	// ReadConns is the size of the read pool (Get, Rows). Default
	// max(4, GOMAXPROCS).
	ReadConns int
	// CacheKiB is the page cache of the writer connection, in KiB. Default
	// 16384 (16 MiB).
	CacheKiB int
	// OnCommit, when set, is called by the writer after each committed
	// transaction, once its callers are answered, with the number of
	// operations the transaction ran and the time from the writer taking
	// them to the commit. It is on the writer's path: it must not block
	// (an observation of a histogram is fine).
	OnCommit func(ops int, d time.Duration)
	// DisableHistory turns off the history of sessions' lifecycles
	// (history.go): nothing is written; what was is still read and pruned.
	DisableHistory bool
}

const (
	defaultMaxBatch    = 256
	defaultBusyTimeout = 5 * time.Second
	defaultCacheKiB    = 16 << 10
	secretKey          = "token_secret"
)

// ErrLocked is matched (errors.Is) by the error Open returns when another
// process holds the database's lock file. That error also matches
// session.ErrUnavailable.
var ErrLocked = errors.New("anteroom: database is in use by another process")

type lockedError struct{ path, lockPath string }

func (e *lockedError) Error() string {
	return fmt.Sprintf("anteroom: database %q is in use by another process (lock %s held)", e.path, e.lockPath)
}

func (e *lockedError) Is(target error) bool { return target == ErrLocked }

func (e *lockedError) Unwrap() error { return session.ErrUnavailable }

// Stats are counters of a Store's writer since Open.
type Stats struct {
	// Ops is the number of operations the writer ran (or skipped because
	// their context was done).
	Ops int64
	// Transactions is the number of transactions committed.
	Transactions int64
	// FailedTransactions is the number of transactions rolled back whole:
	// a failed BEGIN or COMMIT (the batch fails), or an op that failed on a
	// storage error (the batch is run again without it).
	FailedTransactions int64
	// MaxBatch is the largest number of operations one transaction ran.
	MaxBatch int64
	// WALFrames is the number of pages the writer appended to the WAL.
	WALFrames int64
	// Checkpoints counts the WAL checkpoints of the background
	// checkpointer, WriterCheckpoints those the writer ran itself to let the
	// WAL restart (see checkpoint.go).
	Checkpoints, WriterCheckpoints int64
	// CheckpointSyncs counts the database syncs that followed a background
	// checkpoint which copied pages (checkpoint.go).
	CheckpointSyncs int64
	// UpdateWaits counts the Update transactions that waited for a
	// background pass to make room in the WAL (checkpoint.go).
	UpdateWaits int64
	// MissedRestarts counts the WAL restarts a writer checkpoint expected
	// and a reader prevented (checkpoint.go).
	MissedRestarts int64
	// WALWritebacks counts the writebacks of the WAL the checkpointer
	// started while it held its passes back for an Update (checkpoint.go;
	// Linux only).
	WALWritebacks int64
	// RecordsDeferred counts the identity records (files.go) put off
	// while an Update ran or until the checkpoint pass after it.
	RecordsDeferred int64
}

// Store is the SQLite session.Store. Create it with Open; it is safe for
// concurrent use.
type Store struct {
	path     string
	log      *slog.Logger
	maxBatch int
	// logical is logicalPromotion as Open found it (promoted.go).
	logical bool

	lock   *os.File
	dbFile *os.File // the database file, flocked; closed after SQLite's connections
	wc     wconn    // the one writer connection, used only by the writer goroutine
	ck     *checkpointer
	idx    *idIndex // (gate, id) -> row; see index.go
	clean  *cleaner // deletes the rows of purged sessions (clean.go)
	readDB *sql.DB
	r      readerStmts

	listener atomic.Pointer[func(session.Commit)]
	onCommit func(ops int, d time.Duration)        // Options.OnCommit
	outbox   atomic.Pointer[session.OutboxRouting] // webhook routing (outbox.go)

	mu         sync.RWMutex // held shared by senders, exclusively by Close
	closed     atomic.Bool
	ops        chan *op
	writerDone chan struct{}
	closeOnce  sync.Once
	closeErr   error

	// Update calls running: updating less those waiting for room in the
	// WAL (what holds background passes back, checkpoint.go), updates all
	// of them (what holds the identity record back, files.go).
	updating, updates atomic.Int32

	// The identity file: as found at Open (nil when there was none), and as
	// last written (under idMu).
	side       *identity
	idMu       sync.Mutex
	id         identity
	recordStop chan struct{}
	recordDone chan struct{}
	// The last record of recordLoop (or Open's); whether it waits for a
	// checkpoint pass after an Update, and the checkpointer's reading
	// during that update. recordLoop's goroutine only (deferRecord).
	lastRecord  time.Time
	recordWaits bool
	recordAfter *ckptReading

	// Health, for Ready: the last storage failure of a write (cleared by a
	// successful probe) and of the identity record (cleared by the next
	// record).
	writeErr  atomic.Pointer[error]
	recordErr atomic.Pointer[error]
	probeMu   sync.Mutex
	lastProbe time.Time

	busy time.Duration // Options.BusyTimeout

	// Owned by the writer goroutine.
	cache map[string]*gateEntry
	// startScan is what Open's scan found per gate; a gate's waiting
	// positions serve its first Load, unless a transaction changed its
	// rows first (startup.go).
	startScan map[string]*gateScan
	// The snapshot taken at Open (snapshot.go), until the start-up uses it
	// or not (snapWhy says why not), and whether it did.
	snap         []snapGate
	snapKey      uint64
	snapWhy      string
	fromSnapshot bool
	b            batch
	hist         historyState

	stats struct {
		ops, txs, failed, maxBatch atomic.Int64
		recordsDeferred            atomic.Int64
	}
}

var _ session.Store = (*Store)(nil)

// Open opens (creating it when needed) the database at path, takes the
// exclusive process locks (path+".lock" and the database file itself),
// checks the file against its identity file path+".id", applies pending
// migrations and starts the writer. Symbolic links in path are resolved
// first: Path returns the resolved path. The directory must exist.
//
// Errors: an error matching ErrLocked and session.ErrUnavailable when
// another process (or another Store of this process) holds the lock;
// session.ErrInvalidArgument for an empty, in-memory or URI path, or one
// with a '?'; an error matching ErrDamaged and session.CodeInternal when the
// file fails PRAGMA quick_check or has lost what its identity file records;
// a session.CodeInternal error when the file cannot be opened or migrated,
// or was written by a newer schema.
func Open(path string, opts Options) (*Store, error) {
	if path == "" || path == ":memory:" || strings.HasPrefix(path, "file:") || strings.ContainsRune(path, '?') {
		return nil, session.Errorf(session.CodeInvalidArgument, "sqlite: open: want a file path without '?', got %q", path)
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.MaxBatch <= 0 {
		opts.MaxBatch = defaultMaxBatch
	}
	if opts.QueueLen <= 0 {
		opts.QueueLen = 4 * opts.MaxBatch
	}
	if opts.BusyTimeout <= 0 {
		opts.BusyTimeout = defaultBusyTimeout
	}
	if opts.ReadConns <= 0 {
		opts.ReadConns = max(4, runtime.GOMAXPROCS(0))
	}
	if opts.CacheKiB <= 0 {
		opts.CacheKiB = defaultCacheKiB
	}

	resolved, err := resolvePath(path)
	if err != nil {
		return nil, session.Errorf(session.CodeInternal, "sqlite: open %q: %w", path, err)
	}
	path = resolved
	if err := checkDBFile(path); err != nil {
		return nil, session.Errorf(session.CodeInvalidArgument, "sqlite: open %q: %w", path, err)
	}
	tightenFiles(path, opts.Logger) // before anything opens them
	lock, err := acquireLock(path, path+".lock")
	if err != nil {
		var le *lockedError
		if errors.As(err, &le) {
			return nil, err
		}
		return nil, session.Errorf(session.CodeInternal, "sqlite: open: %w", err)
	}
	fail := func(err error) (*Store, error) {
		_ = releaseLock(lock)
		var le *lockedError
		if errors.As(err, &le) {
			return nil, err
		}
		return nil, session.Errorf(session.CodeInternal, "sqlite: open %q: %w", path, err)
	}
	dbFile, _, err := openDBFile(path)
	if err != nil {
		return fail(err)
	}
	if err := lockDBFile(dbFile, path); err != nil {
		dbFile.Close()
		return fail(err)
	}
	side, err := readIdentity(path + ".id")
	if err != nil {
		dbFile.Close()
		return fail(err)
	}
	snap, snapKey, snapWhy := takeSnapshot(path) // under the lock: the file is ours
	s := &Store{
		path:       path,
		log:        opts.Logger,
		maxBatch:   opts.MaxBatch,
		logical:    logicalPromotion,
		onCommit:   opts.OnCommit,
		lock:       lock,
		dbFile:     dbFile,
		side:       side,
		ops:        make(chan *op, opts.QueueLen),
		writerDone: make(chan struct{}),
		recordStop: make(chan struct{}),
		recordDone: make(chan struct{}),
		cache:      make(map[string]*gateEntry),
		idx:        newIDIndex(),
		clean:      newCleaner(),
		hist:       historyState{off: opts.DisableHistory},
		snap:       snap,
		snapKey:    snapKey,
		snapWhy:    snapWhy,
	}
	if err := s.open(opts); err != nil {
		_ = s.closeDBs()
		dbFile.Close() // after SQLite's connections: closing it drops their locks
		return fail(err)
	}
	go s.ck.run()
	go s.run()
	go s.runCleaner()
	s.lastRecord = time.Now() // Open recorded the identity
	go s.recordLoop()
	return s, nil
}

func busyPragma(d time.Duration) string {
	return fmt.Sprintf("busy_timeout(%d)", d.Milliseconds())
}

func dsn(path string, pragmas ...string) string {
	q := url.Values{}
	for _, p := range pragmas {
		q.Add("_pragma", p)
	}
	return path + "?" + q.Encode()
}

func (s *Store) open(opts Options) error {
	ctx := context.Background()
	s.busy = opts.BusyTimeout
	busy := busyPragma(s.busy)
	writerDSN := dsn(s.path, busy,
		"journal_mode(WAL)",
		"synchronous(NORMAL)",
		"temp_store(MEMORY)",
		"wal_autocheckpoint(0)",
		fmt.Sprintf("cache_size(-%d)", opts.CacheKiB))

	if err := s.migrate(ctx, writerDSN); err != nil {
		return err
	}

	c, err := (&sqlite.Driver{}).Open(writerDSN)
	if err != nil {
		return err
	}
	s.wc.c = c
	if err := s.wc.prepare(ctx); err != nil {
		return err
	}

	var dest [1]driver.Value
	if _, err := s.wc.queryRow(s.wc.pageSize, dest[:]); err != nil {
		return fmt.Errorf("page size: %w", err)
	}
	pageSize := max(asInt(dest[0]), 512)
	// No busy timeout for the checkpointer: PASSIVE never waits, and a
	// TRUNCATE that waited for a reader would hold the write lock, and
	// every join, that long; blocked, it gives up and a later tick retries.
	s.ck, err = openCheckpointer(ctx, dsn(s.path, busyPragma(0), "synchronous(NORMAL)", "wal_autocheckpoint(0)"), pageSize,
		func() bool { return s.updating.Load() > 0 }, s.syncCopied, s.log, s.path)
	if err != nil {
		return err
	}

	s.readDB, err = sql.Open("sqlite", dsn(s.path, busy, "query_only(1)"))
	if err != nil {
		return err
	}
	s.readDB.SetMaxOpenConns(opts.ReadConns)
	s.readDB.SetMaxIdleConns(opts.ReadConns)
	s.readDB.SetConnMaxLifetime(0)
	s.readDB.SetConnMaxIdleTime(0)
	if err := s.r.prepare(ctx, s.readDB); err != nil {
		return err
	}
	// Record the identity now: a database that was just given one, or that
	// the identity file does not know yet, is protected from its first
	// start.
	if err := s.recordIdentity(ctx, true); err != nil {
		return fmt.Errorf("record identity: %w", err)
	}
	return nil
}

// migrate checks the journal mode and applies pending migrations, on a
// connection of its own that it closes before the writer opens.
func (s *Store) migrate(ctx context.Context, writerDSN string) error {
	db, err := sql.Open("sqlite", writerDSN)
	if err != nil {
		return err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	var mode string
	if err := conn.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		return err
	}
	if mode != "wal" {
		return fmt.Errorf("journal_mode is %q, want wal", mode)
	}
	// PRAGMA quick_check reads every page. Before migrations it runs
	// first; otherwise beside the start-up scan, on a connection of its
	// own, and Open waits for both.
	var version int
	if err := conn.QueryRowContext(ctx, "PRAGMA user_version").Scan(&version); err != nil {
		return err
	}
	var checked <-chan error
	if version < SchemaVersion {
		// Migrations may change rows: a snapshot of the old schema's
		// rows is not trusted.
		if s.snap != nil {
			s.snap, s.snapWhy = nil, "the schema is migrated"
		}
		if err := quickCheck(ctx, conn, s.path); err != nil {
			return err
		}
	} else {
		checked = quickCheckAsync(ctx, dsn(s.path, busyPragma(s.busy), "query_only(1)"), s.path)
	}
	// A file of schema 0011 or 0012 holds purge marks in the exact order
	// of (last_active, position); 0013 orders them by seconds,
	// in which they would cover other rows. Its rows under the marks are
	// deleted first, in the order they were purged in, once the marks are
	// checked against the counters as at any start (a damaged mark refuses
	// the file, nothing deleted); 0013 then resets the marks.
	var applied []string
	if version >= exactMarksFrom && version < secondMarksFrom {
		var err error
		if applied, err = migrateTo(ctx, conn, secondMarksFrom-1); err != nil { // 0012: both marks' columns
			return fmt.Errorf("migrate: %w", err)
		}
		cleaned, err := settlePurged(ctx, conn, s.path, exactOrder, func() error { return nil }) // quick_check ran before the migrations
		if err != nil {
			return err
		}
		if cleaned > 0 {
			s.log.Info("anteroom: deleted the rows of sessions purged before the last stop, before the upgrade of the purge marks", "path", s.path, "rows", cleaned)
		}
	}
	more, err := migrate(ctx, conn)
	if err != nil {
		if checked != nil {
			if cerr := <-checked; cerr != nil {
				return cerr
			}
		}
		return fmt.Errorf("migrate: %w", err)
	}
	applied = append(applied, more...)
	if len(applied) > 0 {
		s.log.Info("anteroom: database schema migrated", "path", s.path, "applied", applied, "version", SchemaVersion)
	}
	verdict := func() error {
		if checked == nil {
			return nil
		}
		c := checked
		checked = nil
		return <-c
	}
	// The promotions a process stopped before writing (promoted.go), with
	// the waiting mark as stored: before anything counts the rows by
	// status (the marks' check among them), once quick_check found the
	// file sound.
	promoted, err := settlePromoted(ctx, conn, s.path, verdict)
	if err != nil {
		return err
	}
	if promoted > 0 {
		s.log.Info("anteroom: wrote the rows of the promotions pending at the last stop", "path", s.path, "rows", promoted)
		if s.snap != nil {
			s.snap, s.snapWhy = nil, "pending promotions were written at start"
		}
	}
	// The rows of purged sessions that a process stopped before deleting
	// (clean.go): gone before anything counts or indexes the rows, and
	// only once quick_check found the file sound and the marks agree with
	// the counters.
	cleaned, err := settlePurged(ctx, conn, s.path, secondOrder, verdict)
	if err != nil {
		return err
	}
	if cleaned > 0 {
		s.log.Info("anteroom: deleted the rows of sessions purged before the last stop", "path", s.path, "rows", cleaned)
		if s.snap != nil {
			s.snap, s.snapWhy = nil, "purged sessions were deleted at start"
		}
	}
	// One pass over the rows builds the id index and counts them.
	var scan map[string]*gateScan
	err = conn.Raw(func(dc any) error {
		c, ok := dc.(driver.Conn)
		if !ok {
			return errors.New("not a driver connection")
		}
		if s.snap != nil {
			scan, err = useSnapshot(c, s.idx, s.snap, s.snapKey)
			if err != nil || scan != nil {
				s.fromSnapshot = err == nil
				return err
			}
			s.snapWhy = "it disagrees with the table"
		}
		scan, err = scanSessions(ctx, c, s.idx)
		return err
	})
	s.snap = nil
	if s.fromSnapshot {
		s.log.Info("anteroom: session index loaded from the snapshot of the last clean close", "path", s.path)
	} else if s.snapWhy != "none" {
		s.log.Info("anteroom: session index built by a scan: the snapshot of the last close was not used", "path", s.path, "why", s.snapWhy)
	}
	if checked != nil {
		if cerr := <-checked; cerr != nil {
			return cerr // a damaged file: say so, whatever the scan met
		}
	}
	if err != nil {
		return fmt.Errorf("index sessions: %w", err)
	}
	// No row is left below a purge mark (purgedDelete): the marks go back
	// to covering nothing (clean.go, resetMarks). A Close that finished its
	// deletion did it already; after a crash, or a Close that stopped early
	// or failed, this writes, once quick_check found the file sound (as
	// purgedDelete and the counter repair, before the identity check).
	if _, err := conn.ExecContext(ctx, sqlResetMarks); err != nil {
		return fmt.Errorf("reset purge marks: %w", err)
	}
	s.startScan = scan
	// The counters must equal the rows they count before the writer trusts
	// them: repair a mismatch (a file edited by hand, restored from parts)
	// and say so.
	if _, err := verifyCounters(ctx, conn, scan, s.log); err != nil {
		return err
	}
	// The database must still hold what its identity file records.
	id, err := checkIdentity(ctx, conn, s.path, s.side)
	if err != nil {
		return err
	}
	s.id = id
	return nil
}

func (s *Store) closeDBs() error {
	var errs []error
	if s.ck != nil {
		errs = append(errs, s.ck.close())
	}
	errs = append(errs, s.wc.close())
	if s.readDB != nil {
		s.r.close()
		errs = append(errs, s.readDB.Close())
	}
	return errors.Join(errs...)
}

// Path returns the database file's path.
func (s *Store) Path() string { return s.path }

// SetCommitListener installs fn, called by the writer goroutine after each
// commit that wrote a session row (Touch excepted), before the callers of
// that commit are answered. Commits come one at a time, in commit order.
func (s *Store) SetCommitListener(fn func(session.Commit)) {
	if fn == nil {
		s.listener.Store(nil)
		return
	}
	s.listener.Store(&fn)
}

// Stats returns the writer's counters.
func (s *Store) Stats() Stats {
	return Stats{
		Ops:                s.stats.ops.Load(),
		Transactions:       s.stats.txs.Load(),
		FailedTransactions: s.stats.failed.Load(),
		MaxBatch:           s.stats.maxBatch.Load(),
		WALFrames:          s.ck.written.Load(),
		Checkpoints:        s.ck.stats.background.Load() + s.ck.stats.truncates.Load(),
		WriterCheckpoints:  s.ck.stats.writer.Load(),
		CheckpointSyncs:    s.ck.stats.synced.Load(),
		UpdateWaits:        s.ck.stats.updateWaits.Load(),
		MissedRestarts:     s.ck.stats.restartsMissed.Load(),
		WALWritebacks:      s.ck.stats.writebacks.Load(),
		RecordsDeferred:    s.stats.recordsDeferred.Load(),
	}
}

// Transactions returns the number of transactions committed since Open
// (sessiontest.TransactionCounter).
func (s *Store) Transactions() int64 { return s.stats.txs.Load() }

// Load ensures a row exists for each named gate and returns each gate's state
// and active sessions (in position order). It runs through the writer, so
// the snapshot is consistent with the commits the listener sees.
//
// Errors: session.ErrInvalidArgument for a malformed gate name,
// session.ErrUnavailable after Close, the context's error when it is done
// before the load ran, a session.CodeInternal error on storage failure.
func (s *Store) Load(ctx context.Context, gates []string) (map[string]session.GateSnapshot, error) {
	for _, g := range gates {
		if !session.ValidGateName(g) {
			return nil, session.Errorf(session.CodeInvalidArgument, "sqlite: load: gate name %q", g)
		}
	}
	o := newOp(ctx, opLoad)
	o.gates = gates
	err := s.do(o)
	snaps := o.snaps
	putOp(o)
	return snaps, err
}

// Join runs session.DecideJoin for id in gate cfg.Name at now, and returns
// the session as stored afterwards. The gate's row is created when missing.
//
// Errors: session.ErrInvalidArgument for an invalid cfg or id,
// session.ErrUnavailable after Close, the context's error when it is done
// before the join ran (the join then did not happen), a session.CodeInternal
// error on storage failure.
func (s *Store) Join(ctx context.Context, cfg session.GateConfig, id string, now time.Time) (session.Session, error) {
	return s.sessionOp(ctx, opJoin, cfg, id, now)
}

// Leave runs session.DecideLeave and returns the session as stored
// afterwards.
//
// Errors: session.ErrNotFound when the session does not exist, and those of
// Join.
func (s *Store) Leave(ctx context.Context, cfg session.GateConfig, id string, now time.Time) (session.Session, error) {
	return s.sessionOp(ctx, opLeave, cfg, id, now)
}

// Release runs session.DecideRelease: it deletes the session and, when it
// was active, promotes the first waiters into the freed slot, in the same
// transaction. It returns the released row.
//
// Errors: session.ErrNotFound when the session does not exist, and those of
// Join.
func (s *Store) Release(ctx context.Context, cfg session.GateConfig, id string, now time.Time) (session.Session, error) {
	return s.sessionOp(ctx, opRelease, cfg, id, now)
}

func (s *Store) sessionOp(ctx context.Context, kind opKind, cfg session.GateConfig, id string, now time.Time) (session.Session, error) {
	if err := cfg.Validate(); err != nil {
		return session.Session{}, err
	}
	if !session.ValidID(id) {
		return session.Session{}, session.Errorf(session.CodeInvalidArgument, "sqlite: %s: invalid session id %q", kind, id)
	}
	o := newOp(ctx, kind)
	o.cfg, o.id, o.now = cfg, id, now
	err := s.do(o)
	sess := o.sess
	putOp(o)
	return sess, err
}

// Touch runs session.DecideTouch for the given sessions of gate, waiting or
// active, in one transaction: the caller bounds len(touches) (the Waitlist
// sends at most session.Options.UpdateChunk). Sessions that do not exist are
// skipped. It reports claims to the commit listener (as refreshes), nothing
// else.
//
// Errors: session.ErrInvalidArgument for a malformed gate name,
// session.ErrUnavailable after Close, the context's error when it is done
// before the touch ran, a session.CodeInternal error on storage failure.
func (s *Store) Touch(ctx context.Context, gate string, touches []session.Touch) error {
	if !session.ValidGateName(gate) {
		return session.Errorf(session.CodeInvalidArgument, "sqlite: touch: gate name %q", gate)
	}
	if len(touches) == 0 {
		return nil
	}
	o := newOp(ctx, opTouch)
	o.cfg.Name, o.touches = gate, touches
	err := s.do(o)
	putOp(o)
	return err
}

// Update is the cron tick for gate cfg.Name at now: it purges stale waiting
// sessions (by the gate's purge mark: their rows are deleted by the cleaner
// after the update, clean.go), then the active sessions idle past the
// active timeout (by the active purge mark, the same way), then deletes
// the other stale active ones (called back and never claimed, unclaimed
// past their claim deadline, or without a sign of life),
// then promotes waiters in position order
// up to session.PromotionCount, touching at most chunk rows per transaction
// (chunk <= 0 means session.DefaultUpdateChunk). The steps go through the
// writer, so they
// serialise with joins, and each transaction's commit is reported to the
// listener. A tick with little to do takes one transaction. Once the WAL
// holds 3/4 of its high mark, the update waits before its next
// transaction until a background checkpoint has made room (30 s at most
// in all; checkpoint.go), the joins going on meanwhile.
//
// Errors: those of Join (ctx's also when it ends that wait); on error the
// report counts what was committed.
func (s *Store) Update(ctx context.Context, cfg session.GateConfig, now time.Time, chunk int) (session.UpdateReport, error) {
	start := time.Now()
	rep := session.UpdateReport{Gate: cfg.Name}
	if err := cfg.Validate(); err != nil {
		return rep, err
	}
	if chunk <= 0 {
		chunk = session.DefaultUpdateChunk
	}
	s.updating.Add(1)
	s.updates.Add(1)
	defer func() {
		s.updates.Add(-1)
		s.updating.Add(-1)
		s.ck.kick() // the checkpointer waited for the update
		s.cleanStart()
	}()
	step := updateStep{chunk: chunk, now: now.UnixNano()} // the cutoffs: applyUpdate's
	var took time.Duration
	waitBudget := updateWaitLimit
	for !step.finished {
		if err := s.waitForRoom(ctx, &waitBudget); err != nil {
			rep.Duration = time.Since(start)
			return rep, err
		}
		step.chunk = adaptChunk(step.chunk, chunk, len(s.ops), took)
		t0 := time.Now()
		o := newOp(ctx, opUpdate)
		o.cfg, o.now = cfg, now
		o.updIn = step
		o.updIn.purgedWaiting, o.updIn.purgedActive, o.updIn.promoted = 0, 0, 0
		err := s.do(o)
		step = o.upd
		putOp(o)
		if err != nil {
			rep.Duration = time.Since(start)
			return rep, err
		}
		took = time.Since(t0)
		rep.Transactions++
		rep.PurgedWaiting += step.purgedWaiting
		rep.PurgedActive += step.purgedActive
		rep.Promoted += step.promoted
	}
	s.pruneAdmissions(ctx, cfg.Name, now, chunk)
	rep.Duration = time.Since(start)
	return rep, nil
}

// adaptChunkQuick is how long an update's transaction (with the wait for
// the writer) may have taken for the next one to grow. A variable for the
// tests.
var adaptChunkQuick = 3 * time.Millisecond

// adaptChunk returns the row budget of an update's next transaction, after
// one of cur rows that took took (0 before the first): base (the caller's
// chunk) while other operations wait for the writer (queued > 0), else
// double the last while it was quick, up to session.UpdateChunkGrowth ×
// base. Idle, the update takes fewer, larger transactions; a join that
// arrives waits for one transaction of a few milliseconds at most.
func adaptChunk(cur, base, queued int, took time.Duration) int {
	switch {
	case queued > 0 || took == 0:
		return base
	case took < adaptChunkQuick:
		return min(cur*2, base*session.UpdateChunkGrowth)
	}
	return cur
}

// Purge deletes those of ids that session.StaleReason calls stale at now,
// then promotes session.Promotions waiters into the freed slots (as the
// gate's pacing allows), in one transaction (ids beyond session.DefaultUpdateChunk
// go in further ones). Absent sessions are skipped. With no ids it only
// promotes: the Waitlist's sweeper fills slots so as pacing tokens come back.
//
// Errors: those of Join.
func (s *Store) Purge(ctx context.Context, cfg session.GateConfig, ids []string, now time.Time) (session.UpdateReport, error) {
	start := time.Now()
	rep := session.UpdateReport{Gate: cfg.Name}
	if err := cfg.Validate(); err != nil {
		return rep, err
	}
	for _, id := range ids {
		if !session.ValidID(id) {
			return rep, session.Errorf(session.CodeInvalidArgument, "sqlite: purge: invalid session id %q", id)
		}
	}
	for first := true; first || len(ids) > 0; first = false {
		n := min(len(ids), session.DefaultUpdateChunk)
		o := newOp(ctx, opPurge)
		o.cfg, o.now, o.ids = cfg, now, ids[:n]
		err := s.do(o)
		step := o.upd
		putOp(o)
		if err != nil {
			rep.Duration = time.Since(start)
			return rep, err
		}
		rep.Transactions++
		rep.PurgedWaiting += step.purgedWaiting
		rep.PurgedActive += step.purgedActive
		rep.Promoted += step.promoted
		ids = ids[n:]
	}
	rep.Duration = time.Since(start)
	return rep, nil
}

// Secret returns the token secret kept in the database, or, on first use,
// stores and returns generate's result. generate runs on the writer, once.
//
// Errors: generate's error (wrapped, session.CodeInternal), an
// ErrInvalidArgument error when it returns an empty secret, and those of
// Touch.
func (s *Store) Secret(ctx context.Context, generate func() ([]byte, error)) ([]byte, error) {
	if generate == nil {
		return nil, session.Errorf(session.CodeInvalidArgument, "sqlite: secret: nil generator")
	}
	o := newOp(ctx, opSecret)
	o.gen = generate
	err := s.do(o)
	secret := o.secret
	putOp(o)
	return secret, err
}

// Get returns the stored session, read from the read pool (it sees every
// commit whose caller was answered).
//
// ctx is checked once, before the read; the read itself is one row by its
// key, microseconds, and is not cancelled, nor is its wait for a pooled
// connection (bounded by the reads that hold them). With a context that
// can be cancelled (every request's), database/sql and the driver each
// started a goroutine to watch it: about a fifth of the read's time and
// 400 B of garbage more on every waiter's status and every socket's
// opening.
//
// Errors: session.ErrNotFound, session.ErrUnavailable after Close, ctx's
// error when it is done, a session.CodeInternal error on storage failure.
func (s *Store) Get(ctx context.Context, gate, id string) (session.Session, error) {
	if s.closed.Load() {
		return session.Session{}, session.ErrUnavailable
	}
	if err := ctx.Err(); err != nil {
		return session.Session{}, s.readErr("get", err)
	}
	pos, ok := s.idx.get(gate, id)
	if !ok {
		return session.Session{}, session.NotFoundError(gate, id)
	}
	row := s.r.get.QueryRowContext(context.WithoutCancel(ctx), gate, pos, id)
	sess, err := scanSession(row, gate, id, pos)
	if err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return session.Session{}, session.NotFoundError(gate, id)
		}
		return session.Session{}, s.readErr("get", err)
	}
	return sess, nil
}

// Rows returns every session of gate in position order, from the read pool
// (sessiontest.Inspector). It is meant for tests and tools: it reads the
// whole gate.
//
// Errors: session.ErrUnavailable after Close, a session.CodeInternal error on
// storage failure.
func (s *Store) Rows(ctx context.Context, gate string) ([]session.Session, error) {
	if s.closed.Load() {
		return nil, session.ErrUnavailable
	}
	rows, err := s.r.rows.QueryContext(ctx, gate)
	if err != nil {
		return nil, s.readErr("rows", err)
	}
	defer rows.Close()
	var out []session.Session
	for rows.Next() {
		var r rawRow
		if err := rows.Scan(&r.id, &r.position, &r.status, &r.lastActive, &r.createdAt, &r.claim, &r.notify, &r.lane); err != nil {
			return nil, s.readErr("rows", err)
		}
		out = append(out, r.session(gate))
	}
	if err := rows.Err(); err != nil {
		return nil, s.readErr("rows", err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Position < out[j].Position })
	return out, nil
}

func (s *Store) readErr(what string, err error) error {
	if s.closed.Load() {
		return session.Errorf(session.CodeUnavailable, "sqlite: %s: store closed: %w", what, err)
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return session.Errorf(session.CodeInternal, "sqlite: %s: %w", what, err)
}

// Ready reports whether the Store can serve writes now (for /readyz,
// through session.Waitlist.Ready). It fails while the last write failed on
// storage (full, I/O error, read-only, corrupt) until a probe succeeds: a
// transaction that writes and deletes a row of about a page, run by Ready
// itself at most every second; while a checkpoint or the recording of the
// identity file fails; and when the database's path no longer names the
// open file (removed or replaced). Otherwise it costs two stats.
//
// Errors: session.ErrUnavailable after Close; otherwise a
// session.CodeUnavailable error saying what fails.
func (s *Store) Ready(ctx context.Context) error {
	if s.closed.Load() {
		return session.ErrUnavailable
	}
	if err := s.sameFile(); err != nil {
		return session.Errorf(session.CodeUnavailable, "sqlite: database %s was %w while open: its writes would be lost at restart", s.path, err)
	}
	if p := s.writeErr.Load(); p != nil {
		if err := s.probe(ctx, p); err != nil {
			return session.Errorf(session.CodeUnavailable, "sqlite: database %s cannot write: %w", s.path, err)
		}
	}
	if p := s.ck.lastErr.Load(); p != nil {
		return session.Errorf(session.CodeUnavailable, "sqlite: database %s: WAL checkpoint failed: %w", s.path, *p)
	}
	if p := s.recordErr.Load(); p != nil {
		return session.Errorf(session.CodeUnavailable, "sqlite: database %s: recording its identity file failed: %w", s.path, *p)
	}
	return nil
}

// probe runs a probe transaction, unless one ran less than probeInterval
// ago or runs now, and clears the write failure failed when it commits. It
// returns nil when the Store can write again, else the failure.
func (s *Store) probe(ctx context.Context, failed *error) error {
	if !s.probeMu.TryLock() {
		return *failed
	}
	defer s.probeMu.Unlock()
	if !s.lastProbe.IsZero() && time.Since(s.lastProbe) < probeInterval {
		return *failed
	}
	s.lastProbe = time.Now()
	o := newOp(ctx, opProbe)
	err := s.do(o)
	putOp(o)
	if err != nil {
		if p := s.writeErr.Load(); p != nil {
			return *p
		}
		return err
	}
	s.writeErr.CompareAndSwap(failed, nil)
	if p := s.writeErr.Load(); p != nil {
		return *p // another write failed meanwhile
	}
	return nil
}

// Close stops accepting operations (later calls return
// session.ErrUnavailable), runs those already queued, deletes the rows of
// purged sessions (waiting and idle active) the cleaner left and then
// lowers the purge marks (for at most 5 s; the next Open does the rest),
// closes the database and releases the lock. It is idempotent and returns
// the first close error.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.clean.halt() // its ops first: the writer answers them
		s.mu.Lock()
		s.closed.Store(true)
		close(s.ops)
		s.mu.Unlock()
		<-s.writerDone
		close(s.ck.stop)
		<-s.ck.done
		close(s.recordStop)
		<-s.recordDone
		// What the cleaner left: the next start would do it otherwise,
		// and read every row for its index instead of the snapshot. The
		// pending promotions first: the snapshot counts rows by status.
		if perr := s.materializeRest(); perr != nil {
			s.log.Warn("anteroom: writing the pending promotions at close failed; the next start writes them", "path", s.path, "err", perr)
		}
		n, stopped, cerr := s.cleanRest()
		switch {
		case cerr != nil:
			s.log.Warn("anteroom: cleaning purged sessions at close failed (deleting them or lowering the marks); the next start finishes it", "path", s.path, "err", cerr)
		case stopped:
			s.log.Info("anteroom: stopped deleting purged sessions at close (its time for them was up); the next start deletes what is left", "path", s.path, "rows_deleted", n)
		case n > 0:
			s.log.Debug("anteroom: purged sessions deleted at close", "path", s.path, "rows", n)
		}
		// The last checkpoint: backfill every frame and empty the WAL.
		var err error
		if _, _, _, cerr := checkpoint(&s.wc, s.wc.truncate); cerr != nil {
			err = fmt.Errorf("checkpoint: %w", cerr)
		}
		if rerr := s.recordIdentity(context.Background(), false); rerr != nil {
			err = errors.Join(err, fmt.Errorf("record identity: %w", rerr))
		}
		// The index's snapshot for the next start (snapshot.go): read while
		// the writer's connection is open, written once every connection
		// closed, stamped with the file as they left it.
		snap, serr := s.snapshotGates()
		err = errors.Join(err, s.closeDBs())
		if serr == nil && err == nil {
			serr = writeSnapshot(s.path, s.idx, snap)
		}
		if serr != nil {
			s.log.Warn("anteroom: no snapshot of the session index for the next start (it will scan the sessions)", "path", s.path, "err", serr)
		}
		err = errors.Join(err, s.dbFile.Close())
		if lerr := releaseLock(s.lock); lerr != nil {
			err = errors.Join(err, lerr)
		}
		if err != nil {
			s.closeErr = session.Errorf(session.CodeInternal, "sqlite: close: %w", err)
		}
	})
	return s.closeErr
}

// do hands o to the writer and waits for its answer. The wait is not cut
// short by ctx: once queued, the writer either skips the op (ctx done before
// it ran) or runs it, and the caller learns which.
func (s *Store) do(o *op) error {
	if err := o.ctx.Err(); err != nil {
		return err
	}
	s.mu.RLock()
	if s.closed.Load() {
		s.mu.RUnlock()
		return session.ErrUnavailable
	}
	select {
	case s.ops <- o:
	case <-o.ctx.Done():
		s.mu.RUnlock()
		return o.ctx.Err()
	}
	s.mu.RUnlock()
	<-o.done
	return o.err
}
