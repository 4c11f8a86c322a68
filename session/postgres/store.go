// Package postgres is anteroom's shared session.Store, on
// github.com/jackc/pgx/v5: several sidecars (one beside each replica of an
// app) keep one line in one Postgres database.
//
// # The rules stay in session
//
// The Store runs the pure functions of session/rules.go inside its own
// transactions. Every transaction first locks the rows of the gates it
// touches (SELECT ... FOR UPDATE, in name order so that two instances never
// deadlock), reads the counters there, decides with the rules and writes
// the rows and the counters back in the same transaction. Positions and
// promotions are therefore exactly once whichever instance runs them.
//
// # Group commit
//
// Every write of an instance goes through one writer goroutine, which takes
// all operations queued at the time (up to Options.MaxBatch) and runs them
// in one transaction of three round trips: BEGIN; the gates' locks, the rows
// the batch names and the bounds of each line in one pipelined batch; the
// writes, the outbox rows, the notifications, the counters, the history and
// COMMIT in another. The rules run in between against that copy in memory.
// Operations queued while the transaction waited for a lock held by another
// instance join it (their rows read in one more round trip), so under
// contention a transaction carries every caller of its instance. An
// operation that fails on a domain error (not found, ...) writes nothing and
// leaves the others alone; a storage error fails the whole batch (every
// caller gets it, the listener is not called).
//
// # Every instance follows every commit
//
// Each transaction that changed a gate increments the gate's seq, writes an
// outbox row (anteroom_commits: the events and the gate's state after the
// commit) and NOTIFYs "gate seq", all in the same transaction. Each
// instance LISTENs on a connection of its own and applies the commits of
// the others in seq order to its commit listener, reading them from the
// outbox; its own commits it applies directly, after any earlier seq it had
// not seen yet. An instance that finds a gap it cannot fill (outbox pruned)
// or loses its listening connection is not Ready until it has listened
// again and resynchronised from the tables (a session.Commit with Resync).
//
// # The update
//
// Update takes a session advisory lock per gate (pg_try_advisory_lock): the
// instance that gets it runs the tick; the others return an empty report at
// once.
package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/anteroomhq/anteroom/session"
)

// Options tune a Store. The zero value of each field picks its default.
type Options struct {
	// Logger receives migrations applied, resyncs and storage failures.
	// Default: slog.Default().
	Logger *slog.Logger
	// MaxBatch is the most operations one transaction runs. Default 256.
	MaxBatch int
	// QueueLen is how many operations may wait for the writer before callers
	// block. Default 4 × MaxBatch.
	QueueLen int
	// UpdateChunk caps the rows one transaction of Update touches. Default 1000.
	UpdateChunk int
	// MaxConns is the size of the connection pool (writer, reads, update
	// lock); the listening connection comes on top. Default 8.
	MaxConns int32
	// OutboxRetention is how long commits stay in the outbox for the
	// instances that have not read them; an instance that falls further
	// behind resyncs from the tables. Default 10 minutes.
	OutboxRetention time.Duration
	// ReconnectDelay is the pause between attempts to listen again after the
	// listening connection was lost. Default 200ms.
	ReconnectDelay time.Duration
	// DisableHistory turns off the history of sessions' lifecycles
	// (history.go): nothing is written; what was is still read and pruned.
	DisableHistory bool
	// Tracer, when set, traces the queries and batches of every connection
	// of the Store (pgx.ConnConfig.Tracer; a pgx.BatchTracer too sees each
	// batch, one round trip).
	Tracer pgx.QueryTracer
	// SynchronousCommit keeps the writer's COMMIT synchronous: the gate's
	// row stays locked through the WAL flush (durable.go). By default the
	// writer commits asynchronously and flushes before it answers.
	SynchronousCommit bool
	// FollowPoll is how often the follower reads every gate's seq, to apply
	// a commit whose announcement never came (poll.go). Default 2s.
	FollowPoll time.Duration
}

const (
	defaultMaxBatch    = 256
	defaultUpdateChunk = 1000
	defaultMaxConns    = 8
	defaultRetention   = 10 * time.Minute
	defaultReconnect   = 200 * time.Millisecond
	channel            = "anteroom_commits"
	secretKey          = "token_secret"
	updateLockClass    = 0x616e7465 // "ante": the first key of the update's advisory locks
)

// Store is the Postgres session.Store. Create it with Open; it is safe for
// concurrent use.
type Store struct {
	// ownPIDs holds the server process ids of the pool's connections: a
	// notification one of them sent reports this instance's own commit
	// (Commit.Remote false when the follower applies it first).
	ownPIDs   sync.Map // uint32 → struct{}
	log       *slog.Logger
	pool      *pgxpool.Pool
	connCfg   *pgx.ConnConfig
	maxBatch  int
	chunk     int
	retention time.Duration
	reconnect time.Duration

	listener atomic.Pointer[func(session.Commit)]
	outbox   atomic.Pointer[session.OutboxRouting] // webhook routing (webhooks.go)

	// deliverMu serialises the calls of the commit listener; applied is
	// the seq of the last commit of each gate applied to it, for the gates
	// seen so far (loaded or written by this instance).
	deliverMu sync.Mutex
	applied   map[string]int64
	// pending are the gates whose resync failed: the listener may be
	// behind on them, and the Store is not ready until they are resynced.
	pending map[string]bool

	// listening: the follower's connection is up and was resynced;
	// wakeChannel is this instance's own channel, to wake the follower.
	listening   atomic.Bool
	wakeChannel string

	ready     atomic.Bool
	readyErr  atomic.Pointer[error]
	resyncs   atomic.Int64
	remote    atomic.Int64
	follow    context.CancelFunc
	followed  chan struct{}
	mu        sync.RWMutex // held shared by senders, exclusively by Close
	closed    atomic.Bool
	ops       chan *op
	carry     []*op // the writer's: ops taken for the next transaction
	done      chan struct{}
	closeOnce sync.Once

	lb map[string]int64 // writer's lower bounds of first waiting positions
	// held is the writer's decoding of each gate's stored runtime settings
	// (heldConfig), by their JSON.
	held map[string]heldSettings
	// heldEvents is the writer's decoding of the gates' scheduled events,
	// by gate, id and row version (readHeldEvents).
	heldEvents map[string]map[string]heldEvent
	eventReads int64 // the events the writer read whole, for the tests
	// readCache is Events' decoding of the events by row version;
	// eventBodyReads counts the rows it read whole, for the tests.
	readCache      eventCache
	eventBodyReads atomic.Int64
	txs            atomic.Int64

	noHistory bool // Options.DisableHistory
	// async: the writer commits asynchronously, then flushes (durable.go);
	// own are its commits not yet delivered; afterCommit, a test's hook,
	// runs after the COMMIT, before the flush and the delivery; dropNote, a
	// test's hook, makes the follower ignore a notification (a lost one).
	async       bool
	own         ownSeqs
	afterCommit func(*pgx.Conn)
	dropNote    atomic.Pointer[func(*pgconn.Notification) bool]

	// followPoll, polls and unannounced: the follower's poll (poll.go).
	followPoll  time.Duration
	polls       atomic.Int64
	unannounced atomic.Int64
	adopted     atomic.Int64 // gates the poll adopted (settings_follow.go)
	// loadedOnce: a Load was delivered; no gate is adopted before
	// (settings_follow.go).
	loadedOnce atomic.Bool
}

var _ session.Store = (*Store)(nil)

// Open connects to the database at url (postgres://...), applies pending
// migrations under an advisory lock, starts listening for the commits of
// other instances and starts the writer.
//
// Errors: session.ErrInvalidArgument for a URL that does not parse;
// session.ErrUnavailable when the database cannot be reached; a
// session.CodeInternal error when migrating fails or the schema is newer
// than this build's.
func Open(ctx context.Context, url string, opts Options) (*Store, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.MaxBatch <= 0 {
		opts.MaxBatch = defaultMaxBatch
	}
	if opts.QueueLen <= 0 {
		opts.QueueLen = 4 * opts.MaxBatch
	}
	if opts.UpdateChunk <= 0 {
		opts.UpdateChunk = defaultUpdateChunk
	}
	if opts.MaxConns <= 0 {
		opts.MaxConns = defaultMaxConns
	}
	if opts.OutboxRetention <= 0 {
		opts.OutboxRetention = defaultRetention
	}
	if opts.ReconnectDelay <= 0 {
		opts.ReconnectDelay = defaultReconnect
	}
	if opts.FollowPoll <= 0 {
		opts.FollowPoll = defaultFollowPoll
	}
	pcfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, session.Errorf(session.CodeInvalidArgument, "postgres: open: %w", redact(err))
	}
	pcfg.MaxConns = opts.MaxConns
	if opts.Tracer != nil {
		pcfg.ConnConfig.Tracer = opts.Tracer
	}
	s := &Store{
		log:        opts.Logger,
		connCfg:    pcfg.ConnConfig.Copy(),
		maxBatch:   opts.MaxBatch,
		chunk:      opts.UpdateChunk,
		retention:  opts.OutboxRetention,
		reconnect:  opts.ReconnectDelay,
		applied:    make(map[string]int64),
		pending:    make(map[string]bool),
		ops:        make(chan *op, opts.QueueLen),
		done:       make(chan struct{}),
		followed:   make(chan struct{}),
		lb:         make(map[string]int64),
		held:       make(map[string]heldSettings),
		heldEvents: make(map[string]map[string]heldEvent),
		noHistory:  opts.DisableHistory,
	}
	s.followPoll = opts.FollowPoll
	var nonce [8]byte
	_, _ = rand.Read(nonce[:])
	s.wakeChannel = "anteroom_wake_" + hex.EncodeToString(nonce[:])
	pcfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		s.ownPIDs.Store(c.PgConn().PID(), struct{}{})
		return customPlans(ctx, c)
	}
	pcfg.BeforeClose = func(c *pgx.Conn) { s.ownPIDs.Delete(c.PgConn().PID()) }
	s.setUnready(errors.New("not listening yet"))
	s.pool, err = pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, session.Errorf(session.CodeInvalidArgument, "postgres: open: %w", redact(err))
	}
	if err := s.migrate(ctx); err != nil {
		s.pool.Close()
		return nil, err
	}
	if err := s.probeAsyncCommit(ctx, opts.SynchronousCommit); err != nil {
		s.pool.Close()
		return nil, unavailable("open", err)
	}
	// Listen before the first Load, so that no commit after it is missed.
	lc, err := s.listen(ctx)
	if err != nil {
		s.pool.Close()
		return nil, unavailable("open: listen", err)
	}
	s.listening.Store(true)
	s.ready.Store(true)
	fctx, cancel := context.WithCancel(context.Background())
	s.follow = cancel
	go s.run()
	go s.followLoop(fctx, lc)
	return s, nil
}

// customPlans makes a pooled connection plan every execution of a prepared
// statement for its parameters and the tables as they are. A generic plan
// is made once and kept: made while the sessions table was nearly empty (a
// new database), the writer's lookups by id kept scanning the whole table
// as the line grew, in every commit, until autovacuum happened to analyze
// it. Planning these short statements costs far less than one such scan.
// Servers before Postgres 12, which lack the setting, keep their default.
func customPlans(ctx context.Context, c *pgx.Conn) error {
	_, err := c.Exec(ctx, "SET plan_cache_mode = force_custom_plan")
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "42704" { // undefined_object: no such setting
		return nil
	}
	return err
}

func (s *Store) migrate(ctx context.Context) error {
	c, err := s.pool.Acquire(ctx)
	if err != nil {
		return unavailable("open", err)
	}
	defer c.Release()
	applied, err := migrate(ctx, c.Conn())
	if err != nil {
		return session.Errorf(session.CodeInternal, "postgres: migrate: %w", err)
	}
	if len(applied) > 0 {
		s.log.Info("anteroom: database schema migrated", "applied", applied, "version", SchemaVersion)
	}
	return nil
}

// redact drops the URL (and so a password) from a parse error.
func redact(err error) error {
	var pe *pgconn.ParseConfigError
	if errors.As(err, &pe) {
		if pe.Unwrap() != nil {
			return fmt.Errorf("cannot parse the database URL: %w", pe.Unwrap())
		}
		return errors.New("cannot parse the database URL")
	}
	return err
}

func unavailable(what string, err error) error {
	return session.Errorf(session.CodeUnavailable, "postgres: %s: %w", what, err)
}

// storageErr classifies a failure: the connection or the server gone is
// unavailability, anything else an internal error.
func storageErr(what string, err error) error {
	if err == nil {
		return nil
	}
	var se *session.Error
	if errors.As(err, &se) {
		return err
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code[:2] {
		case "08", "57": // connection exception, operator intervention (shutdown)
			return unavailable(what, err)
		}
		return session.Errorf(session.CodeInternal, "postgres: %s: %w", what, err)
	}
	// Not a server error: the connection failed.
	return unavailable(what, err)
}

// SetCommitListener installs fn, called after each commit of this instance
// that changed a gate (before its callers are answered) and after each
// commit of another instance, one call at a time, in each gate's commit
// order.
func (s *Store) SetCommitListener(fn func(session.Commit)) {
	if fn == nil {
		s.listener.Store(nil)
		return
	}
	s.listener.Store(&fn)
}

// Ready returns nil while the Store follows the commits of the other
// instances, and an error matching session.ErrUnavailable while it does not
// (its listening connection lost, or resynchronising), when what the
// listener was told may be stale.
func (s *Store) Ready() error {
	if s.closed.Load() {
		return session.ErrUnavailable
	}
	if s.ready.Load() {
		return nil
	}
	err := errors.New("not following the other instances")
	if p := s.readyErr.Load(); p != nil {
		err = *p
	}
	return session.Errorf(session.CodeUnavailable, "postgres: %w", err)
}

func (s *Store) setUnready(err error) {
	s.readyErr.Store(&err)
	s.ready.Store(false)
}

// Transactions returns the number of write transactions committed by this
// instance since Open (sessiontest.TransactionCounter).
func (s *Store) Transactions() int64 { return s.txs.Load() }

// Resyncs returns how many times this instance resynchronised a gate from
// the tables, and RemoteCommits how many commits of other instances it
// applied.
func (s *Store) Resyncs() int64 { return s.resyncs.Load() }

// RemoteCommits returns how many commits of other instances this instance
// applied to its listener.
func (s *Store) RemoteCommits() int64 { return s.remote.Load() }

// Load ensures a row exists for each named gate and returns each gate's
// state, active sessions (in position order), waiting positions
// (ascending) and persisted runtime settings; every gate with persisted
// settings is returned too (one added at runtime). From then on the gates are
// followed: commits of other instances to them reach the listener.
//
// Errors: session.ErrInvalidArgument for a malformed gate name,
// session.ErrUnavailable after Close or when the database cannot be
// reached, the context's error when it is done before the load ran, a
// session.CodeInternal error on storage failure.
func (s *Store) Load(ctx context.Context, gates []string) (map[string]session.GateSnapshot, error) {
	for _, g := range gates {
		if !session.ValidGateName(g) {
			return nil, session.Errorf(session.CodeInvalidArgument, "postgres: load: gate name %q", g)
		}
	}
	if s.closed.Load() {
		return nil, session.ErrUnavailable
	}
	settings, err := s.allSettings(ctx)
	if err != nil {
		return nil, err
	}
	all := append([]string(nil), gates...)
	for name := range settings {
		if !slices.Contains(all, name) {
			all = append(all, name) // a gate added at runtime
		}
	}
	o := &op{kind: opLoad, ctx: ctx, gates: all}
	if err := s.do(o); err != nil {
		return o.snaps, err
	}
	if err := s.loadEvents(ctx, o.snaps); err != nil {
		return o.snaps, err
	}
	return o.snaps, nil
}

// Join runs session.DecideJoin for id in gate cfg.Name at now, and returns
// the session as stored afterwards. The gate's row is created when missing.
//
// Errors: session.ErrInvalidArgument for an invalid cfg or id,
// session.ErrUnavailable after Close or when the database cannot be
// reached, the context's error when it is done before the join ran (the
// join then did not happen), a session.CodeInternal error on storage
// failure.
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
		return session.Session{}, session.Errorf(session.CodeInvalidArgument, "postgres: %s: invalid session id %q", kind, id)
	}
	o := &op{kind: kind, ctx: ctx, cfg: cfg, id: id, now: normTime(now)}
	err := s.do(o)
	return o.sess, err
}

// Touch runs session.DecideTouch for the given sessions of gate, waiting or
// active, in one transaction under the gate's row lock: the caller bounds
// len(touches) (the Waitlist sends at most session.Options.UpdateChunk).
// Sessions that do not exist are skipped. It reports claims to the commit
// listener of every instance (as refreshes), nothing else.
//
// Errors: session.ErrInvalidArgument for a malformed gate name, and those
// of Join.
func (s *Store) Touch(ctx context.Context, gate string, touches []session.Touch) error {
	if !session.ValidGateName(gate) {
		return session.Errorf(session.CodeInvalidArgument, "postgres: touch: gate name %q", gate)
	}
	if len(touches) == 0 {
		return nil
	}
	o := &op{kind: opTouch, ctx: ctx, cfg: session.GateConfig{Name: gate}, touches: touches}
	return s.do(o)
}

// Update is the cron tick for gate cfg.Name at now: it deletes stale waiting
// sessions, then stale active ones, then promotes waiters in position order
// up to session.PromotionCount, touching at most chunk rows per transaction
// (chunk <= 0 or above Options.UpdateChunk means Options.UpdateChunk). It
// runs only while this instance holds the gate's advisory lock: when another
// instance holds it (runs the tick), Update returns an empty report at
// once. It also prunes the outbox.
//
// Errors: those of Join; on error the report counts what was committed.
func (s *Store) Update(ctx context.Context, cfg session.GateConfig, now time.Time, chunk int) (session.UpdateReport, error) {
	start := time.Now()
	rep := session.UpdateReport{Gate: cfg.Name}
	if err := cfg.Validate(); err != nil {
		return rep, err
	}
	if err := ctx.Err(); err != nil {
		return rep, err
	}
	if s.closed.Load() {
		return rep, session.ErrUnavailable
	}
	if chunk <= 0 || chunk > s.chunk {
		chunk = s.chunk
	}
	c, err := s.pool.Acquire(ctx)
	if err != nil {
		return rep, storageErr("update: lock", err)
	}
	defer c.Release()
	var got bool
	if err := c.QueryRow(ctx, "SELECT pg_try_advisory_lock($1, hashtext($2))", int32(updateLockClass), cfg.Name).Scan(&got); err != nil {
		return rep, storageErr("update: lock", err)
	}
	if !got {
		rep.Duration = time.Since(start)
		return rep, nil
	}
	defer func() {
		if _, err := c.Exec(context.Background(), "SELECT pg_advisory_unlock($1, hashtext($2))", int32(updateLockClass), cfg.Name); err != nil {
			c.Conn().Close(context.Background()) // closing the session releases the lock
		}
	}()
	step := updateStep{chunk: chunk, now: nanos(now)} // the cutoffs: applyUpdate's
	for !step.finished {
		o := &op{kind: opUpdate, ctx: ctx, cfg: cfg, now: normTime(now), updIn: step}
		o.updIn.purgedWaiting, o.updIn.purgedActive, o.updIn.promoted = 0, 0, 0
		err := s.do(o)
		if err != nil {
			rep.Duration = time.Since(start)
			return rep, err
		}
		step = o.upd
		rep.Transactions++
		rep.PurgedWaiting += step.purgedWaiting
		rep.PurgedActive += step.purgedActive
		rep.Promoted += step.promoted
		if testHookUpdateStep != nil && !step.finished {
			testHookUpdateStep()
		}
	}
	if _, err := c.Exec(ctx, "DELETE FROM anteroom_commits WHERE gate = $1 AND committed < now() - make_interval(secs => $2)",
		cfg.Name, s.retention.Seconds()); err != nil {
		s.log.Warn("anteroom: pruning the outbox failed", "gate", cfg.Name, "err", err)
	}
	s.pruneAdmissions(ctx, cfg.Name, now, chunk)
	rep.Duration = time.Since(start)
	return rep, nil
}

// testHookUpdateStep, set only by this package's tests, runs between the
// transactions of an update.
var testHookUpdateStep func()

// Purge deletes those of ids that session.StaleReason calls stale at now,
// then promotes session.PromotionCount waiters into the freed slots, in one
// transaction under the gate's row lock (ids beyond Options.UpdateChunk go
// in further ones). Absent sessions and sessions not stale are left alone.
// It needs no advisory lock: the row lock orders it with every other
// instance's writes, and staleness is decided on the rows read under it.
//
// Errors: those of Join; on error the report counts what was committed.
func (s *Store) Purge(ctx context.Context, cfg session.GateConfig, ids []string, now time.Time) (session.UpdateReport, error) {
	start := time.Now()
	rep := session.UpdateReport{Gate: cfg.Name}
	if err := cfg.Validate(); err != nil {
		return rep, err
	}
	for _, id := range ids {
		if !session.ValidID(id) {
			return rep, session.Errorf(session.CodeInvalidArgument, "postgres: purge: invalid session id %q", id)
		}
	}
	for first := true; first || len(ids) > 0; first = false {
		n := min(len(ids), s.chunk)
		o := &op{kind: opPurge, ctx: ctx, cfg: cfg, now: normTime(now), ids: ids[:n]}
		if err := s.do(o); err != nil {
			rep.Duration = time.Since(start)
			return rep, err
		}
		rep.Transactions++
		rep.PurgedWaiting += o.upd.purgedWaiting
		rep.PurgedActive += o.upd.purgedActive
		rep.Promoted += o.upd.promoted
		ids = ids[n:]
	}
	rep.Duration = time.Since(start)
	return rep, nil
}

// Secret returns the token secret kept in the database, or, on first use,
// stores and returns generate's result; instances starting together all get
// the one that was stored first.
//
// Errors: generate's error (wrapped, session.CodeInternal), an
// ErrInvalidArgument error when it returns an empty secret,
// session.ErrUnavailable, a session.CodeInternal error on storage failure.
func (s *Store) Secret(ctx context.Context, generate func() ([]byte, error)) ([]byte, error) {
	if generate == nil {
		return nil, session.Errorf(session.CodeInvalidArgument, "postgres: secret: nil generator")
	}
	if s.closed.Load() {
		return nil, session.ErrUnavailable
	}
	var v []byte
	err := s.pool.QueryRow(ctx, "SELECT value FROM anteroom_meta WHERE key = $1", secretKey).Scan(&v)
	if err == nil && len(v) > 0 {
		return v, nil
	}
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return nil, storageErr("secret", err)
	}
	gen, err := generate()
	if err != nil {
		return nil, session.Errorf(session.CodeInternal, "postgres: secret: generate: %w", err)
	}
	if len(gen) == 0 {
		return nil, session.Errorf(session.CodeInvalidArgument, "postgres: secret: generator returned an empty secret")
	}
	err = s.pool.QueryRow(ctx, `INSERT INTO anteroom_meta (key, value) VALUES ($1, $2)
		ON CONFLICT (key) DO UPDATE SET key = EXCLUDED.key RETURNING value`, secretKey, gen).Scan(&v)
	if err != nil {
		return nil, storageErr("secret", err)
	}
	return v, nil
}

// Get returns the stored session, read from the pool (it sees every commit
// whose caller was answered).
//
// Errors: session.ErrNotFound, session.ErrUnavailable after Close or when
// the database cannot be reached, a session.CodeInternal error on storage
// failure.
func (s *Store) Get(ctx context.Context, gate, id string) (session.Session, error) {
	if s.closed.Load() {
		return session.Session{}, session.ErrUnavailable
	}
	rows, err := s.pool.Query(ctx, sqlSelectOne, gate, id)
	if err != nil {
		return session.Session{}, storageErr("get", err)
	}
	got, err := scanSessions(rows, nil)
	if err != nil {
		return session.Session{}, storageErr("get", err)
	}
	if len(got) == 0 {
		return session.Session{}, session.NotFoundError(gate, id)
	}
	if s.async && got[0].Status == session.StatusActive {
		// Memory did not have it active yet: its promotion may not be
		// flushed (durable.go).
		if err := flushWAL(ctx, s.pool); err != nil {
			return session.Session{}, storageErr("get", err)
		}
	}
	return got[0], nil
}

// Rows returns every session of gate in position order
// (sessiontest.Inspector). It is meant for tests and tools: it reads the
// whole gate.
//
// Errors: session.ErrUnavailable after Close or when the database cannot be
// reached, a session.CodeInternal error on storage failure.
func (s *Store) Rows(ctx context.Context, gate string) ([]session.Session, error) {
	if s.closed.Load() {
		return nil, session.ErrUnavailable
	}
	rows, err := s.pool.Query(ctx, sqlSelectGate, gate)
	if err != nil {
		return nil, storageErr("rows", err)
	}
	out, err := scanSessions(rows, nil)
	if err != nil {
		return nil, storageErr("rows", err)
	}
	return out, nil
}

// Close stops accepting operations (later calls return
// session.ErrUnavailable), runs those already queued, stops listening and
// closes the pool. It is idempotent.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed.Store(true)
		close(s.ops)
		s.mu.Unlock()
		<-s.done
		s.follow()
		<-s.followed
		s.pool.Close()
	})
	return nil
}

// do hands o to the writer and waits for its answer. Once queued, the
// writer either skips the op (ctx done before it ran) or runs it.
func (s *Store) do(o *op) error {
	if err := o.ctx.Err(); err != nil {
		return err
	}
	o.done = make(chan struct{})
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

func normTime(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return fromNanos(t.UnixNano())
}

// fromNanos is the time of unix nanoseconds n, in UTC: every time the
// Store hands back is, whatever the process's zone (as the SQLite store's).
func fromNanos(n int64) time.Time { return time.Unix(0, n).UTC() }

func nanos(t time.Time) int64 { return t.UnixNano() }

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
