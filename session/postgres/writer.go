package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/anteroomhq/anteroom/session"
)

type opKind uint8

const (
	opJoin opKind = iota + 1
	opLeave
	opRelease
	opTouch
	opUpdate
	opLoad
	opPurge
	opFunc     // fn runs in the transaction (events.go)
	opNotify   // outbox.go
	opSettings // settings.go
)

func (k opKind) String() string {
	return [...]string{"op", "join", "leave", "release", "touch", "update", "load", "purge", "func", "notify", "settings"}[k]
}

// op is one operation queued for the writer, with its answer.
type op struct {
	kind    opKind
	ctx     context.Context
	cfg     session.GateConfig
	id      string
	now     time.Time
	touches []session.Touch
	ids     []string
	gates   []string
	notify  bool // opNotify
	updIn   updateStep
	upd     updateStep
	fn      func(ctx context.Context, b *batch) error // opFunc
	// settings are opSettings's: the gate's new runtime settings, nil to
	// forget them.
	settings *session.GateConfig
	code     string  // opJoin: the priority code given, "" none
	codes    *codeOp // opJoin with a code: the code's answer

	sess  session.Session
	snaps map[string]session.GateSnapshot
	err   error
	done  chan struct{}
}

type updateStep struct {
	chunk                       int
	waitingCutoff, activeCutoff int64 // set by each transaction (applyUpdate)
	now                         int64 // unclaimed past their deadline before it
	phase                       int
	finished                    bool
	// lineEnd is the gate's next position at the update's first
	// transaction: it promotes only the sessions in line before it
	// (session.Promotable).
	lineEnd int64

	purgedWaiting, purgedActive, promoted int64
}

const (
	dbWaiting = 0
	dbActive  = 1
)

const (
	sqlCols       = `gate, position, id, status, last_active, created_at, claim_deadline, notify, lane`
	sqlSelectOne  = `SELECT ` + sqlCols + ` FROM anteroom_sessions WHERE gate = $1 AND id = $2`
	sqlSelectGate = `SELECT ` + sqlCols + ` FROM anteroom_sessions WHERE gate = $1 ORDER BY position`
	sqlSelectKeys = `SELECT ` + sqlCols + ` FROM anteroom_sessions WHERE (gate, id) IN (SELECT * FROM unnest($1::text[], $2::text[]))`
	sqlActive     = `SELECT ` + sqlCols + ` FROM anteroom_sessions WHERE gate = $1 AND status = 1 ORDER BY position`
	sqlWaitingPos = `SELECT position FROM anteroom_sessions WHERE gate = $1 AND status = 0 ORDER BY position`
	sqlWaiters    = `SELECT ` + sqlCols + ` FROM anteroom_sessions WHERE gate = $1 AND status = 0 AND position >= $2 ORDER BY position LIMIT $3`
	// Both ends of the line, one index entry each: min()/max() would read
	// every waiting position under a generic plan without statistics.
	sqlBounds    = `SELECT ` + sqlBoundsRow
	sqlBoundsRow = `(SELECT position FROM anteroom_sessions WHERE gate = $1 AND status = 0 ORDER BY position LIMIT 1),
		(SELECT position FROM anteroom_sessions WHERE gate = $1 AND status = 0 ORDER BY position DESC LIMIT 1)`
	sqlEnsure = `INSERT INTO anteroom_gates (name) SELECT n FROM unnest($1::text[]) AS n ORDER BY n ON CONFLICT (name) DO NOTHING`
	sqlLock   = `SELECT name, next_position, active, waiting, seq, pace_tokens, pace_at FROM anteroom_gates WHERE name = ANY($1) ORDER BY name FOR UPDATE`
	sqlDelete = `DELETE FROM anteroom_sessions WHERE (gate, position) IN (SELECT * FROM unnest($1::text[], $2::bigint[]))`
	sqlUpsert = `INSERT INTO anteroom_sessions (gate, position, id, status, last_active, created_at, claim_deadline, notify, lane)
		SELECT * FROM unnest($1::text[], $2::bigint[], $3::text[], $4::smallint[], $5::bigint[], $6::bigint[], $7::bigint[], $8::boolean[], $9::smallint[])
		ON CONFLICT (gate, position) DO UPDATE SET status = EXCLUDED.status, last_active = EXCLUDED.last_active, claim_deadline = EXCLUDED.claim_deadline, notify = EXCLUDED.notify`
	// sqlHeldSettings reads the runtime settings of the gates a batch
	// locked, after the lock (a statement of its own, so its snapshot
	// holds every change committed before the lock was granted).
	sqlHeldSettings = `SELECT gate, settings FROM anteroom_gate_settings WHERE gate = ANY($1)`
	// sqlHeldEvents reads the versions (xmin) of the scheduled events of
	// the gates: a decision with the stored settings applies the events
	// over them, as memory does (session.EventConfig), and every decision
	// holds the gate while a pre-queue is open as stored
	// (session.PrequeueHold). Only
	// versions: an event's row holds its whole drawn line (positions,
	// megabytes after a large launch), which the writer reads again
	// (sqlHeldEvent, without the line) only when the row changed
	// (Store.heldEvents).
	sqlHeldEvents = `SELECT e.gate, e.id, e.xmin::text FROM anteroom_events e WHERE e.gate = ANY($1)`
	sqlHeldEvent  = `SELECT xmin::text, ` + eventNoLine + ` FROM anteroom_events WHERE gate = $1 AND id = $2`
	sqlSaveGate   = `UPDATE anteroom_gates SET next_position = $2, active = $3, waiting = $4, seq = $5, pace_tokens = $6, pace_at = $7 WHERE name = $1`
	// A row already at the seq can only be a stray (a restore of the gates
	// older than the outbox, a hand edit): the gate's lock makes this
	// commit the only one of that seq, so it takes the row over.
	sqlOutbox = `INSERT INTO anteroom_commits (gate, seq, payload) VALUES ($1, $2, $3)
		ON CONFLICT (gate, seq) DO UPDATE SET payload = EXCLUDED.payload, committed = now()`
	sqlNotify = `SELECT pg_notify('` + channel + `', $1)`
	// sqlCheckBounds fails when the bounds of the line are not $2 and $3
	// (verifyBounds): the cast of the message to int raises an error that
	// aborts the transaction before its COMMIT.
	sqlCheckBounds = `SELECT CASE WHEN b.f IS NOT DISTINCT FROM $2::bigint AND b.l IS NOT DISTINCT FROM $3::bigint THEN 1
		ELSE ('anteroom: bounds worked out ' || coalesce($2::bigint::text, 'none') || '..' || coalesce($3::bigint::text, 'none') ||
			', stored ' || coalesce(b.f::text, 'none') || '..' || coalesce(b.l::text, 'none'))::int END
		FROM (SELECT ` + sqlBoundsRow + `) AS b(f, l)`
	// The purges select exactly the rows session.StaleReason calls stale,
	// with the cutoffs of session.StaleCutoffs: a waiter last seen before
	// $2; an active session last seen before $2, or unclaimed past its
	// deadline at $4. A row without last_active is last seen at its
	// creation.
	sqlPurgeWaiting = `DELETE FROM anteroom_sessions WHERE (gate, position) IN (
		SELECT gate, position FROM anteroom_sessions WHERE gate = $1 AND status = 0 AND NOT notify AND coalesce(last_active, created_at) < $2 ORDER BY position LIMIT $3)
		RETURNING ` + sqlCols
	sqlPurgeActive = `DELETE FROM anteroom_sessions WHERE (gate, position) IN (
		SELECT gate, position FROM anteroom_sessions WHERE gate = $1 AND status = 1 AND ((coalesce(last_active, created_at) < $2 AND NOT (notify AND claim_deadline IS NOT NULL)) OR claim_deadline < $4) ORDER BY position LIMIT $3)
		RETURNING ` + sqlCols
)

func scanSessions(rows pgx.Rows, out []session.Session) ([]session.Session, error) {
	defer rows.Close()
	for rows.Next() {
		var s session.Session
		var status int16
		var la, claim *int64
		var created int64
		var lane int16
		if err := rows.Scan(&s.Gate, &s.Position, &s.ID, &status, &la, &created, &claim, &s.Notify, &lane); err != nil {
			return out, err
		}
		s.Status = session.StatusWaiting
		if status == dbActive {
			s.Status = session.StatusActive
		}
		if la != nil {
			s.LastActive = fromNanos(*la)
		}
		if claim != nil {
			s.ClaimDeadline = fromNanos(*claim)
		}
		s.CreatedAt = fromNanos(created)
		s.Lane = session.Lane(lane)
		out = append(out, s)
	}
	return out, rows.Err()
}

// gateTx is a gate locked by the current transaction.
type gateTx struct {
	name   string
	c      session.Counters
	pace   session.Pace // the gate's pacing, shared by every instance (its row)
	seq    int64
	save   bool // counters changed
	report bool // rows changed: a new seq, an outbox row, a notification
	events []session.Event
	// settings is the change of runtime settings an opSettings made.
	settings *settingsChange
	// pre are the bounds of the line when the gate was locked.
	pre bounds
	// held are the gate's runtime settings as stored, read under its lock
	// (nil: none). They win over the config file's on every instance, so
	// every decision of the batch uses them (decidedWith), whatever
	// configuration the instance that queued the op had applied by then: a
	// limit lowered on another instance holds here before its notification
	// arrives, and while this instance is not following.
	held *session.GateConfig
	// scheduled are the gate's scheduled events as stored, read with held,
	// and as the batch's event ops change them; damagedEvents: one
	// of them does not decode, and the batch decides with the ops'
	// configuration; damagedHold: such an event may be a pre-queue, and
	// holds the gate (session.DamagedEventHolds).
	scheduled     []session.ScheduledEvent
	damagedEvents bool
	damagedHold   bool
	// settingsRow: the gate had a settings row at its lock (held is nil
	// for one that does not decode).
	settingsRow bool
	// lb is the writer's lower bound of the first waiting position
	// (Store.lb) as this transaction moves it: it reaches Store.lb only once
	// the transaction committed and its commit is durable, so a promotion
	// rolled back, or lost in a crash before its flush, leaves the bound
	// where its waiters still are.
	lb int64
}

type key struct{ gate, id string }

// entry is the transaction's copy of one session row.
type entry struct {
	s     session.Session
	live  bool  // the row exists (after the ops so far)
	dbPos int64 // position of the row in the database as last flushed; 0 none
	dirty bool
}

// batch is the writer's state for one transaction.
type batch struct {
	tx      pgx.Tx
	gates   map[string]*gateTx
	rows    map[key]*entry
	events  []session.Event
	ops     []*op
	touched map[string]bool
	// pipelined: every row the batch changes is one of rows, and nothing
	// was written before the end (no update, load, func or settings op),
	// so the bounds of the line after the batch follow from those before
	// it (bounds.after) and the writes go in the commit's round trip.
	pipelined bool
	// notes are the notifications of an asynchronous commit, sent once it
	// is flushed (durable.go).
	notes []string
}

// run is the writer goroutine.
func (s *Store) run() {
	defer close(s.done)
	ops := make([]*op, 0, s.maxBatch)
	for {
		// An op a transaction took but could not run (takeLate) opens the
		// next one.
		ops = append(ops[:0], s.carry...)
		clear(s.carry)
		s.carry = s.carry[:0]
		if len(ops) == 0 {
			o, ok := <-s.ops
			if !ok {
				return
			}
			ops = append(ops, o)
		}
		if len(s.ops) == 0 {
			runtime.Gosched()
		}
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
		s.runBatch(ops)
		clear(ops)
	}
}

func (s *Store) runBatch(ops []*op) {
	live := ops[:0:0]
	for _, o := range ops {
		if err := o.ctx.Err(); err != nil {
			o.err = err
			close(o.done)
			continue
		}
		live = append(live, o)
	}
	if len(live) == 0 {
		return
	}
	ctx := context.Background()
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		s.failBatch(live, storageErr("connect", err))
		return
	}
	defer conn.Release()
	b := &batch{ops: live, gates: map[string]*gateTx{}, rows: map[key]*entry{}, touched: map[string]bool{}}
	commit, err := s.attempt(ctx, conn.Conn(), b)
	if err != nil {
		if b.tx != nil {
			_ = b.tx.Rollback(ctx)
		}
		s.failBatch(b.ops, storageErr("transaction", err))
		return
	}
	s.txs.Add(1)
	// Until delivered the commit is the writer's: the follower's poll leaves
	// it alone (poll.go), in both commit modes.
	s.own.add(commit.seqs)
	if s.afterCommit != nil {
		s.afterCommit(conn.Conn())
	}
	if s.async && !s.flushed(ctx, conn.Conn(), b, commit) {
		// The commit may be lost (a crash before its flush undoes a
		// promotion): the bounds it moved may be past a waiter again, so
		// the next transaction of these gates reads from the start.
		for name := range b.gates {
			delete(s.lb, name)
		}
		// A lost transaction's id may be used again after the crash: the
		// versions (xmin) the writer cached events under may name other
		// rows now.
		clear(s.heldEvents)
		return
	}
	for name, g := range b.gates {
		s.lb[name] = g.lb // committed and durable: the bounds it moved hold
	}
	s.deliverLocal(ctx, conn.Conn(), commit)
	s.own.remove(commit.seqs)
	for _, o := range b.ops {
		close(o.done)
	}
}

func (s *Store) failBatch(ops []*op, err error) {
	s.log.Error("anteroom: postgres transaction failed", "ops", len(ops), "err", err)
	for _, o := range ops {
		o.err = err
		close(o.done)
	}
}

// localCommit is what the writer's transaction did, for the listener.
type localCommit struct {
	commit session.Commit
	seqs   map[string]int64
	loaded map[string]int64 // seq of each gate a Load read
}

func (s *Store) attempt(ctx context.Context, c *pgx.Conn, b *batch) (localCommit, error) {
	var lc localCommit
	tx, err := c.Begin(ctx)
	if err != nil {
		return lc, err
	}
	b.tx = tx
	// Lock every gate of the batch, in name order.
	names := map[string]bool{}
	var keys []key
	b.pipelined = true
	for _, o := range b.ops {
		switch o.kind {
		case opLoad:
			for _, g := range o.gates {
				names[g] = true
			}
		default:
			names[o.cfg.Name] = true
		}
		var byKey bool
		if keys, byKey = o.appendRowKeys(keys); !byKey {
			// It writes rows with statements of its own or reads the
			// table mid-batch: the line's bounds are read after the writes.
			b.pipelined = false
		}
	}
	if len(names) > 0 {
		if err := s.lockAndRead(ctx, b, sortedKeys(names), keys); err != nil {
			return lc, err
		}
		if b.pipelined {
			if err := s.takeLate(ctx, b); err != nil {
				return lc, err
			}
		}
	}
	for _, o := range b.ops {
		first := len(b.events)
		if err := s.apply(ctx, b, o); err != nil {
			if session.CodeOf(err) == session.CodeInternal {
				return lc, fmt.Errorf("%s: %w", o.kind, err)
			}
			o.err = err // a domain error: the op wrote nothing
		}
		session.StampEvents(b.events[first:], o.now)
		if o.kind == opLoad && o.err == nil {
			if lc.loaded == nil {
				lc.loaded = map[string]int64{}
			}
			for _, g := range o.gates {
				lc.loaded[g] = b.gates[g].seq
			}
		}
	}
	lc.commit, lc.seqs, err = s.finish(ctx, b)
	if err != nil {
		return lc, err
	}
	return lc, nil
}

// takeLate adds to the batch the ops queued while it waited for its gates'
// locks, so that they share its commit rather than wait for the next: the
// instances take turns on a gate's row, and under load the callers answered
// by one transaction come back while the next waits for the row. Only ops
// on the gates already locked whose rows are read by id join (their rows
// are read in one more round trip); the first other op is kept for the next
// transaction (Store.carry).
func (s *Store) takeLate(ctx context.Context, b *batch) error {
	var keys []key
	added := false
take:
	for len(b.ops) < s.maxBatch {
		var o *op
		select {
		case x, ok := <-s.ops:
			if !ok {
				break take
			}
			o = x
		default:
			break take
		}
		if err := o.ctx.Err(); err != nil {
			o.err = err
			close(o.done)
			continue
		}
		if b.gates[o.cfg.Name] == nil {
			s.carry = append(s.carry, o)
			break
		}
		var byKey bool
		if keys, byKey = o.appendRowKeys(keys); !byKey {
			s.carry = append(s.carry, o)
			break take
		}
		b.ops = append(b.ops, o)
		added = true
	}
	if !added {
		return nil
	}
	var gates, ids []string
	for _, k := range keys {
		if b.rows[k] == nil {
			b.rows[k] = &entry{}
			gates, ids = append(gates, k.gate), append(ids, k.id)
		}
	}
	if len(gates) == 0 {
		return nil
	}
	rows, err := b.tx.Query(ctx, sqlSelectKeys, gates, ids)
	if err != nil {
		return fmt.Errorf("read sessions: %w", err)
	}
	return b.keepRead(rows)
}

// keepRead scans the sessions rows holds (sqlSelectKeys) into the batch's
// rows, as stored. It returns the scan's error.
func (b *batch) keepRead(rows pgx.Rows) error {
	got, err := scanSessions(rows, nil)
	if err != nil {
		return fmt.Errorf("read sessions: %w", err)
	}
	for _, r := range got {
		b.rows[key{r.Gate, r.ID}] = &entry{s: r, live: true, dbPos: r.Position}
	}
	return nil
}

// lockAndRead ensures the gates' rows exist, locks them (in name order),
// reads the sessions the batch names and the bounds of each gate's line,
// in one round trip: the reads run as soon as the locks are granted.
func (s *Store) lockAndRead(ctx context.Context, b *batch, names []string, keys []key) error {
	pb := &pgx.Batch{}
	pb.Queue(sqlEnsure, names)
	pb.Queue(sqlLock, names)
	pb.Queue(sqlHeldSettings, names)
	pb.Queue(sqlHeldEvents, names)
	var gates, ids []string
	if len(keys) > 0 {
		gates, ids = make([]string, len(keys)), make([]string, len(keys))
		for i, k := range keys {
			gates[i], ids[i] = k.gate, k.id
			if b.rows[k] == nil {
				b.rows[k] = &entry{}
			}
		}
		pb.Queue(sqlSelectKeys, gates, ids)
	}
	for _, name := range names {
		pb.Queue(sqlBounds, name)
	}
	br := b.tx.SendBatch(ctx, pb)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return fmt.Errorf("gates: %w", err)
	}
	rows, err := br.Query()
	if err != nil {
		return fmt.Errorf("lock gates: %w", err)
	}
	for rows.Next() {
		g := &gateTx{}
		var paceAt int64
		if err := rows.Scan(&g.name, &g.c.NextPosition, &g.c.Active, &g.c.Waiting, &g.seq, &g.pace.Tokens, &paceAt); err != nil {
			rows.Close()
			return fmt.Errorf("lock gates: %w", err)
		}
		if paceAt != 0 {
			g.pace.At = fromNanos(paceAt)
		}
		g.lb = s.lb[g.name]
		b.gates[g.name] = g
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("lock gates: %w", err)
	}
	if rows, err = br.Query(); err != nil {
		return fmt.Errorf("read settings: %w", err)
	}
	for rows.Next() {
		var gate string
		var raw []byte
		if err := rows.Scan(&gate, &raw); err != nil {
			rows.Close()
			return fmt.Errorf("read settings: %w", err)
		}
		if g := b.gates[gate]; g != nil {
			g.held, g.settingsRow = s.heldConfig(gate, raw), true
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read settings: %w", err)
	}
	for name, g := range b.gates {
		if !g.settingsRow {
			delete(s.held, name) // forgotten, or the gate removed: nothing to keep
		}
	}
	stale, err := s.readHeldEvents(b, br)
	if err != nil {
		return err
	}
	if len(keys) > 0 {
		rows, err := br.Query()
		if err != nil {
			return fmt.Errorf("read sessions: %w", err)
		}
		if err := b.keepRead(rows); err != nil {
			return err
		}
	}
	for _, name := range names {
		var first, last *int64
		if err := br.QueryRow().Scan(&first, &last); err != nil {
			return fmt.Errorf("waiting bounds of gate %q: %w", name, err)
		}
		if g := b.gates[name]; g != nil {
			g.pre = bounds{read: true, first: first, last: last}
		}
	}
	if err := br.Close(); err != nil {
		return err
	}
	return s.fetchHeldEvents(ctx, b, stale)
}

// find returns the transaction's copy of the row (gate, id), reading it when
// the batch has not yet.
func (s *Store) find(ctx context.Context, b *batch, gate, id string) (*entry, error) {
	k := key{gate, id}
	if e := b.rows[k]; e != nil {
		return e, nil
	}
	rows, err := b.tx.Query(ctx, sqlSelectOne, gate, id)
	if err != nil {
		return nil, fmt.Errorf("read session: %w", err)
	}
	got, err := scanSessions(rows, nil)
	if err != nil {
		return nil, fmt.Errorf("read session: %w", err)
	}
	e := &entry{}
	if len(got) == 1 {
		e = &entry{s: got[0], live: true, dbPos: got[0].Position}
	}
	b.rows[k] = e
	return e, nil
}

// write applies what a rule decided to the transaction's copy of the row
// and the gate's counters.
func (b *batch) write(g *gateTx, e *entry, out session.Outcome) {
	switch out.Action {
	case session.ActionNone:
		return
	case session.ActionInsert, session.ActionUpdate:
		e.s, e.live, e.dirty = out.Session, true, true
	case session.ActionDelete:
		e.live, e.dirty = false, true
	}
	g.report = true
	if out.Delta != (session.Counters{}) {
		g.c = g.c.Add(out.Delta)
		g.save = true
	}
}

func (b *batch) event(g *gateTx, kind session.EventKind, s session.Session) {
	b.eventWhy(g, kind, s, session.NotStale)
}

// eventWhy records an event with the reason a session left (Event.Reason).
func (b *batch) eventWhy(g *gateTx, kind session.EventKind, s session.Session, why session.PurgeReason) {
	ev := session.Event{Kind: kind, Session: s, Reason: why}
	b.events = append(b.events, ev)
	g.events = append(g.events, ev)
}

// flush writes the changed rows, in one round trip.
func (s *Store) flush(ctx context.Context, b *batch) error {
	pb := &pgx.Batch{}
	queueFlush(pb, b)
	if pb.Len() == 0 {
		return nil
	}
	if err := b.tx.SendBatch(ctx, pb).Close(); err != nil {
		return fmt.Errorf("write sessions: %w", err)
	}
	return nil
}

// queueFlush queues the writes of the changed rows in pb: deletes first (a
// session released and joined again in one batch has a new position), then
// inserts and updates. The rows count as written from then on.
func queueFlush(pb *pgx.Batch, b *batch) {
	var dg, ug, uid []string
	var dp, up []int64
	var ust []int16
	var ula, ucd []*int64
	var uc []int64
	var un []bool
	var ulane []int16
	for _, e := range b.rows {
		if !e.dirty {
			continue
		}
		if e.dbPos != 0 && (!e.live || e.s.Position != e.dbPos) {
			dg, dp = append(dg, e.s.Gate), append(dp, e.dbPos)
		}
		if e.live {
			ug, up, uid = append(ug, e.s.Gate), append(up, e.s.Position), append(uid, e.s.ID)
			st := int16(dbWaiting)
			if e.s.Status == session.StatusActive {
				st = dbActive
			}
			ust = append(ust, st)
			var la *int64
			if !e.s.LastActive.IsZero() {
				v := e.s.LastActive.UnixNano()
				la = &v
			}
			var cd *int64
			if !e.s.ClaimDeadline.IsZero() {
				v := e.s.ClaimDeadline.UnixNano()
				cd = &v
			}
			ula, uc, ucd = append(ula, la), append(uc, e.s.CreatedAt.UnixNano()), append(ucd, cd)
			un = append(un, e.s.Notify)
			ulane = append(ulane, int16(e.s.Lane))
		}
	}
	if len(dg) > 0 {
		pb.Queue(sqlDelete, dg, dp)
	}
	if len(ug) > 0 {
		pb.Queue(sqlUpsert, ug, up, uid, ust, ula, uc, ucd, un, ulane)
	}
	for _, e := range b.rows {
		if e.dirty {
			e.dirty = false
			e.dbPos = 0
			if e.live {
				e.dbPos = e.s.Position
			}
		}
	}
}

// payload is an outbox row: what one commit did to one gate.
type payload struct {
	Events []wireEvent `json:"e,omitempty"`
	State  wireState   `json:"s"`
	// Settings: the commit changed the gate's runtime settings (see
	// wireSettings).
	Settings *wireSettings `json:"g,omitempty"`
}

type wireEvent struct {
	Kind       session.EventKind `json:"k"`
	ID         string            `json:"i"`
	Position   int64             `json:"p"`
	Active     bool              `json:"a,omitempty"`
	LastActive int64             `json:"l,omitempty"`
	CreatedAt  int64             `json:"c"`
	// Claim is the claim deadline of a promoted, unclaimed session.
	Claim int64 `json:"d,omitempty"`
	// Reason is why a session left (session.PurgeReason).
	Reason session.PurgeReason `json:"r,omitempty"`
	// Lane is the session's lane (session.Lane), absent for the normal one.
	Lane session.Lane `json:"q,omitempty"`
	// Claimed, At and Notify are session.Event's Claimed and At and the
	// session's Notify (absent when false or zero).
	Claimed bool  `json:"m,omitempty"`
	At      int64 `json:"t,omitempty"`
	Notify  bool  `json:"n,omitempty"`
}

type wireState struct {
	Next    int64 `json:"n"`
	Active  int64 `json:"a"`
	Waiting int64 `json:"w"`
	First   int64 `json:"f"`
	Last    int64 `json:"l"`
}

func toWire(evs []session.Event, st session.GateState) payload {
	p := payload{State: wireState{Next: st.NextPosition, Active: st.Active, Waiting: st.Waiting, First: st.FirstWaitingPosition, Last: st.LastWaitingPosition}}
	for _, ev := range evs {
		w := wireEvent{Kind: ev.Kind, ID: ev.Session.ID, Position: ev.Session.Position, Active: ev.Session.Status == session.StatusActive, CreatedAt: ev.Session.CreatedAt.UnixNano(), Reason: ev.Reason, Lane: ev.Session.Lane,
			Claimed: ev.Claimed, Notify: ev.Session.Notify}
		if !ev.At.IsZero() {
			w.At = ev.At.UnixNano()
		}
		if !ev.Session.LastActive.IsZero() {
			w.LastActive = ev.Session.LastActive.UnixNano()
		}
		if !ev.Session.ClaimDeadline.IsZero() {
			w.Claim = ev.Session.ClaimDeadline.UnixNano()
		}
		p.Events = append(p.Events, w)
	}
	return p
}

func (p payload) commit(gate string) session.Commit {
	c := session.Commit{Gates: map[string]session.GateState{gate: {
		Counters:             session.Counters{NextPosition: p.State.Next, Active: p.State.Active, Waiting: p.State.Waiting},
		FirstWaitingPosition: p.State.First,
		LastWaitingPosition:  p.State.Last,
	}}}
	for _, w := range p.Events {
		s := session.Session{Gate: gate, ID: w.ID, Position: w.Position, Status: session.StatusWaiting, CreatedAt: fromNanos(w.CreatedAt), Lane: w.Lane}
		if w.Active {
			s.Status = session.StatusActive
		}
		if w.LastActive != 0 {
			s.LastActive = fromNanos(w.LastActive)
		}
		if w.Claim != 0 {
			s.ClaimDeadline = fromNanos(w.Claim)
		}
		s.Notify = w.Notify
		ev := session.Event{Kind: w.Kind, Session: s, Reason: w.Reason, Claimed: w.Claimed}
		if w.At != 0 {
			ev.At = fromNanos(w.At)
		}
		c.Events = append(c.Events, ev)
	}
	return c
}

// state reads the gate's state inside the transaction (after flush).
func state(ctx context.Context, q pgx.Tx, g *gateTx) (session.GateState, error) {
	st := session.GateState{Counters: g.c, FirstWaitingPosition: g.c.NextPosition, LastWaitingPosition: g.c.NextPosition - 1}
	if g.c.Waiting == 0 {
		return st, nil
	}
	var first, last *int64
	if err := q.QueryRow(ctx, sqlBounds, g.name).Scan(&first, &last); err != nil {
		return st, fmt.Errorf("waiting bounds of gate %q: %w", g.name, err)
	}
	if first != nil && last != nil {
		st.FirstWaitingPosition, st.LastWaitingPosition = *first, *last
	}
	return st, nil
}

// finish writes what the batch changed and commits, in one round trip when
// the batch is pipelined: the changed rows, and for each gate whose rows
// changed the next seq, the outbox row and the notification, the gates'
// counters, the history, the webhook outbox rows, then COMMIT. The bounds
// of the line each outbox row reports are worked out from those read under
// the lock and the batch's own changes (bounds.after); when they cannot be
// (the first or the last waiter left), or the batch is not pipelined, the
// rows are written first and the bounds read back, one more round trip.
func (s *Store) finish(ctx context.Context, b *batch) (session.Commit, map[string]int64, error) {
	c := session.Commit{Events: b.events}
	var seqs map[string]int64
	names := sortedKeys(b.gates)
	states := map[string]session.GateState{}
	var unknown []*gateTx
	for _, name := range names {
		g := b.gates[name]
		if !g.report {
			continue
		}
		if b.pipelined {
			if st, ok := b.after(g); ok {
				states[name] = st
				continue
			}
		}
		unknown = append(unknown, g)
	}
	pb := &pgx.Batch{}
	if s.async {
		pb.Queue(sqlAsyncCommit)
	}
	if len(unknown) > 0 || !b.pipelined {
		if err := s.flush(ctx, b); err != nil {
			return c, nil, err
		}
		for _, g := range unknown {
			st, err := state(ctx, b.tx, g)
			if err != nil {
				return c, nil, err
			}
			states[g.name] = st
		}
	} else {
		queueFlush(pb, b)
		if verifyBounds {
			for _, name := range names {
				if st, ok := states[name]; ok {
					var first, last *int64
					if st.Waiting > 0 {
						first, last = &st.FirstWaitingPosition, &st.LastWaitingPosition
					}
					pb.Queue(sqlCheckBounds, name, first, last)
				}
			}
		}
	}
	for _, name := range names {
		g := b.gates[name]
		if !g.save && !g.report {
			continue
		}
		if g.report {
			st := states[name]
			g.seq++
			if c.Gates == nil {
				c.Gates, seqs = map[string]session.GateState{}, map[string]int64{}
			}
			c.Gates[name], seqs[name] = st, g.seq
			p := toWire(g.events, st)
			note := fmt.Sprintf("%d %s", g.seq, name)
			if g.settings != nil {
				if err := s.finishSettings(ctx, b, g, st, &c, &p); err != nil {
					return c, nil, err
				}
				note += " " + noteSettings
			}
			body, err := json.Marshal(p)
			if err != nil {
				return c, nil, err
			}
			pb.Queue(sqlOutbox, name, g.seq, body)
			if s.async {
				b.notes = append(b.notes, note)
			} else {
				pb.Queue(sqlNotify, note)
			}
		}
		var paceAt int64
		if !g.pace.At.IsZero() {
			paceAt = g.pace.At.UnixNano()
		}
		pb.Queue(sqlSaveGate, name, g.c.NextPosition, g.c.Active, g.c.Waiting, g.seq, g.pace.Tokens, paceAt)
	}
	s.queueHistory(pb, b.events)
	s.queueOutbox(pb, b.events)
	pb.Queue("COMMIT")
	br := b.tx.SendBatch(ctx, pb)
	var tag pgconn.CommandTag
	var err error
	for range pb.Len() {
		if tag, err = br.Exec(); err != nil {
			break
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return c, nil, fmt.Errorf("commit: %w", err)
	}
	if tag.String() != "COMMIT" {
		// COMMIT of a transaction that had failed answers ROLLBACK.
		return c, nil, fmt.Errorf("commit: the transaction was rolled back (%s)", tag)
	}
	return c, seqs, nil
}

// bounds are the first and last waiting positions of a gate's line (nil:
// nobody waits), as read when it was locked.
type bounds struct {
	read        bool
	first, last *int64
}

// after returns the gate's state after the batch, the bounds of its line
// worked out from those read under the lock and the batch's rows, without
// reading them again: every row the batch changed is in b.rows (the batch
// is pipelined), and positions are unique within a gate. The first
// waiting position afterwards is the least of the first before and the
// positions of the batch's waiting rows, unless the row at the first
// position before left it (deleted, promoted or moved); the last likewise.
// ok is false when a bound's waiter left (the next one is not known here)
// or the result does not agree with the counters.
func (b *batch) after(g *gateTx) (st session.GateState, ok bool) {
	st = session.GateState{Counters: g.c, FirstWaitingPosition: g.c.NextPosition, LastWaitingPosition: g.c.NextPosition - 1}
	if g.c.Waiting == 0 {
		return st, true
	}
	if !g.pre.read {
		return st, false
	}
	var first, last int64
	found := false
	if g.pre.first != nil && g.pre.last != nil {
		first, last, found = *g.pre.first, *g.pre.last, true
	}
	var lo, hi int64
	any := false
	for k, e := range b.rows {
		if k.gate != g.name {
			continue
		}
		waiting := e.live && e.s.Status == session.StatusWaiting
		if found && e.dirty && e.dbPos != 0 && (e.dbPos == first || e.dbPos == last) && !(waiting && e.s.Position == e.dbPos) {
			return st, false // a bound's waiter left its place
		}
		if waiting {
			if !any || e.s.Position < lo {
				lo = e.s.Position
			}
			if !any || e.s.Position > hi {
				hi = e.s.Position
			}
			any = true
		}
	}
	switch {
	case found && any:
		first, last = min(first, lo), max(last, hi)
	case any:
		first, last = lo, hi
	case !found:
		return st, false // waiters counted, none known
	}
	st.FirstWaitingPosition, st.LastWaitingPosition = first, last
	return st, true
}

func (s *Store) apply(ctx context.Context, b *batch, o *op) error {
	decidedWith(b, o)
	switch o.kind {
	case opJoin:
		g := b.gates[o.cfg.Name]
		e, err := s.find(ctx, b, g.name, o.id)
		if err != nil {
			return err
		}
		var existing *session.Session
		if e.live {
			existing = &e.s
		}
		out, err := session.DecideJoin(o.cfg, g.c, g.pace, existing, o.id, o.now)
		if err != nil {
			return err // gate_closed: nothing written
		}
		if o.code != "" {
			if out, err = s.applyCode(ctx, b, g, o, out); err != nil {
				return err
			}
		}
		g.pace = out.Pace
		b.write(g, e, out)
		switch {
		case out.Session.Status == session.StatusActive && out.Action == session.ActionInsert:
			b.event(g, session.EventActivated, out.Session)
		case out.Session.Status == session.StatusActive && out.Action == session.ActionUpdate:
			b.claimEvent(g, out.Session, out.Note == session.EventClaimed)
		case out.Action == session.ActionInsert:
			b.event(g, session.EventQueued, out.Session)
		}
		b.note(g, out)
		o.sess = out.Session
	case opLeave:
		g := b.gates[o.cfg.Name]
		e, err := s.find(ctx, b, g.name, o.id)
		if err != nil {
			return err
		}
		if !e.live {
			return session.NotFoundError(g.name, o.id)
		}
		out := session.DecideLeave(&e.s, o.now)
		b.write(g, e, out)
		if out.Action == session.ActionUpdate && out.Session.Status == session.StatusActive {
			b.event(g, session.EventRefreshed, out.Session)
		}
		b.note(g, out)
		o.sess = out.Session
	case opRelease:
		g := b.gates[o.cfg.Name]
		e, err := s.find(ctx, b, g.name, o.id)
		if err != nil {
			return err
		}
		if !e.live {
			return session.NotFoundError(g.name, o.id)
		}
		existing := e.s
		out := session.DecideRelease(o.cfg, g.c, &existing)
		b.write(g, e, out)
		if existing.Status == session.StatusActive {
			b.eventWhy(g, session.EventDeactivated, existing, session.Released)
		} else {
			b.eventWhy(g, session.EventDequeued, existing, session.Released)
		}
		if _, err := s.promote(ctx, b, g, o.cfg, out.Promote, o.now, 0); err != nil {
			return err
		}
		o.sess = out.Session
	case opTouch:
		return s.applyTouch(ctx, b, o)
	case opUpdate:
		return s.applyUpdate(ctx, b, o)
	case opLoad:
		return s.applyLoad(ctx, b, o)
	case opPurge:
		return s.applyPurge(ctx, b, o)
	case opFunc:
		return o.fn(ctx, b)
	case opNotify:
		return s.applyNotify(ctx, b, o)
	case opSettings:
		return s.applySettings(ctx, b, o)
	default:
		return fmt.Errorf("unknown op %d", o.kind)
	}
	return nil
}

// promote promotes the first n waiters of the gate, in position order: the
// database's waiters merged with the transaction's copies, which override
// them.
func (s *Store) promote(ctx context.Context, b *batch, g *gateTx, cfg session.GateConfig, n int64, now time.Time, below int64) (done int64, err error) {
	// Pacing (session.Pace) admits no more than its tokens allow; what was
	// promoted is taken from them.
	n = min(n, g.pace.Available(cfg, now))
	if n <= 0 {
		return 0, nil
	}
	defer func() {
		if err == nil && done > 0 {
			_, g.pace = g.pace.Allow(cfg, done, now)
		}
	}()
	// The priority lane first (session.PromotionLanes); the normal lane gets
	// what it leaves, and only once it is empty.
	if done, err = s.promotePriority(ctx, b, g, cfg, n, now, below); err != nil || done == n {
		return done, err
	}
	limit := n - done + int64(len(b.rows))
	rows, err := b.tx.Query(ctx, sqlWaiters, g.name, g.lb, limit)
	if err != nil {
		return 0, fmt.Errorf("read waiters: %w", err)
	}
	fromDB, err := scanSessions(rows, nil)
	if err != nil {
		return 0, fmt.Errorf("read waiters: %w", err)
	}
	cands := b.waiters(g, fromDB, limit, session.LaneNormal)

	for _, e := range cands {
		if done == n || !session.Promotable(e.s, below) {
			break
		}
		out := session.Promote(cfg, e.s, now)
		b.write(g, e, out)
		b.event(g, session.EventPromoted, out.Session)
		g.lb = e.s.Position + 1
		done++
	}
	return done, nil
}

// waiters merges the waiters of one lane of g that the database returned
// (fromDB, the first limit of them by position) with the transaction's
// copies, which decide for the rows they hold, in position order. Rows read
// become the batch's copies. When the read was cut at limit, copies past the
// last row read are left out: unread waiters may come before them.
func (b *batch) waiters(g *gateTx, fromDB []session.Session, limit int64, lane session.Lane) []*entry {
	cands := make([]*entry, 0, len(fromDB))
	for k, e := range b.rows {
		if k.gate == g.name && e.live && e.s.Status == session.StatusWaiting && e.s.Lane == lane {
			cands = append(cands, e)
		}
	}
	for _, r := range fromDB {
		k := key{g.name, r.ID}
		if _, ok := b.rows[k]; ok || r.Lane != lane {
			continue
		}
		e := &entry{s: r, live: true, dbPos: r.Position}
		b.rows[k] = e
		cands = append(cands, e)
	}
	sort.Slice(cands, func(i, j int) bool { return cands[i].s.Position < cands[j].s.Position })
	if int64(len(fromDB)) == limit {
		last := fromDB[len(fromDB)-1].Position
		for i, e := range cands {
			if e.s.Position > last {
				return cands[:i]
			}
		}
	}
	return cands
}

// applyTouch runs session.DecideTouch for each touch against the
// transaction's copy of the row (read with the batch's other rows). A touch
// moves no counter and no bound: the gate's state is reported (a new seq,
// an outbox row) only when a touch claimed a slot, as an EventRefreshed
// without ClaimDeadline, so that every instance stops counting down its
// claim window.
func (s *Store) applyTouch(ctx context.Context, b *batch, o *op) error {
	g := b.gates[o.cfg.Name]
	report := g.report
	for _, t := range o.touches {
		if (t.LastActive.IsZero() && t.ClaimDeadline.IsZero()) || !session.ValidID(t.ID) {
			continue
		}
		e, err := s.find(ctx, b, g.name, t.ID)
		if err != nil {
			return err
		}
		if !e.live {
			continue
		}
		t.LastActive = normTime(t.LastActive)
		before := e.s
		out := session.DecideTouch(&before, t)
		b.write(g, e, out)
		if out.Action == session.ActionUpdate && !before.ClaimDeadline.Equal(out.Session.ClaimDeadline) {
			b.claimEvent(g, out.Session, true)
			report = true
		}
		b.note(g, out)
	}
	g.report = report
	return nil
}

// applyPurge runs one transaction of a Purge: each named session that is
// stale (session.IsStale, on the row read under the gate's lock) goes with
// session.DecidePurge, then session.PromotionCount waiters are promoted
// into the freed slots.
func (s *Store) applyPurge(ctx context.Context, b *batch, o *op) error {
	g := b.gates[o.cfg.Name]
	var step updateStep
	for _, id := range o.ids {
		e, err := s.find(ctx, b, g.name, id)
		if err != nil {
			return err
		}
		if !e.live || !session.IsStale(o.cfg, e.s, o.now) {
			continue
		}
		row := e.s
		b.write(g, e, session.DecidePurge(row))
		why := session.StaleReason(o.cfg, row, o.now)
		if row.Status == session.StatusActive {
			step.purgedActive++
			b.eventWhy(g, session.EventDeactivated, row, why)
		} else {
			step.purgedWaiting++
			b.eventWhy(g, session.EventDequeued, row, why)
		}
	}
	n, err := s.promote(ctx, b, g, o.cfg, session.Promotions(o.cfg, g.c), o.now, 0)
	if err != nil {
		return err
	}
	step.promoted = n
	o.upd = step
	return nil
}

func (s *Store) applyUpdate(ctx context.Context, b *batch, o *op) error {
	step := o.updIn
	st := &step
	defer func() { o.upd = step }()
	g := b.gates[o.cfg.Name]
	// The cutoffs of the configuration the batch decides with
	// (decidedWith): stored settings changed on another instance may set
	// other timeouts than the caller's, and a purge the rule does not
	// call stale fails the update.
	wc, ac := session.StaleCutoffs(o.cfg, o.now)
	st.waitingCutoff, st.activeCutoff = wc.UnixNano(), ac.UnixNano()
	if err := s.flush(ctx, b); err != nil {
		return err
	}
	if st.lineEnd == 0 {
		st.lineEnd = g.c.NextPosition
	}
	budget := int64(st.chunk)
	// purge runs a purge statement and accounts for the rows it deleted
	// with session.DecidePurge. A row that session.IsStale does not call
	// stale means the SQL and the rule disagree: the op fails (its
	// transaction is rolled back) rather than purge it.
	purge := func(sql string, args ...any) ([]session.Session, error) {
		rows, err := b.tx.Query(ctx, sql, args...)
		if err != nil {
			return nil, fmt.Errorf("purge: %w", err)
		}
		got, err := scanSessions(rows, nil)
		if err != nil {
			return nil, fmt.Errorf("purge: %w", err)
		}
		for _, r := range got {
			if !session.IsStale(o.cfg, r, o.now) {
				return nil, fmt.Errorf("purge: the statement selected session %q, which is not stale", r.ID)
			}
			delete(b.rows, key{g.name, r.ID})
			b.write(g, &entry{}, session.DecidePurge(r))
			kind := session.EventDequeued
			if r.Status == session.StatusActive {
				kind = session.EventDeactivated
			}
			b.eventWhy(g, kind, r, session.StaleReason(o.cfg, r, o.now))
		}
		return got, nil
	}
	if st.phase == 0 {
		got, err := purge(sqlPurgeWaiting, g.name, st.waitingCutoff, budget)
		if err != nil {
			return err
		}
		n := int64(len(got))
		st.purgedWaiting = n
		if budget -= n; budget == 0 {
			return nil
		}
		st.phase = 1
	}
	if st.phase == 1 {
		got, err := purge(sqlPurgeActive, g.name, st.activeCutoff, budget, st.now)
		if err != nil {
			return err
		}
		n := int64(len(got))
		st.purgedActive = n
		if budget -= n; budget == 0 {
			return nil
		}
		st.phase = 2
	}
	want := session.Promotions(o.cfg, g.c)
	n, err := s.promote(ctx, b, g, o.cfg, min(want, budget), o.now, st.lineEnd)
	if err != nil {
		return err
	}
	st.promoted = n
	st.finished = n == want || n < min(want, budget)
	return nil
}

func (s *Store) applyLoad(ctx context.Context, b *batch, o *op) error {
	if err := s.flush(ctx, b); err != nil {
		return err
	}
	o.snaps = make(map[string]session.GateSnapshot, len(o.gates))
	for _, name := range o.gates {
		g := b.gates[name]
		if g == nil {
			return errors.New("gate not locked")
		}
		rows, err := b.tx.Query(ctx, sqlActive, name)
		if err != nil {
			return fmt.Errorf("read active sessions: %w", err)
		}
		active, err := scanSessions(rows, nil)
		if err != nil {
			return fmt.Errorf("read active sessions: %w", err)
		}
		waiting, err := waitingPositions(ctx, b.tx, name, g.c.Waiting)
		if err != nil {
			return err
		}
		s.repairCounters(g, active, waiting)
		st, err := state(ctx, b.tx, g)
		if err != nil {
			return err
		}
		// The settings under the gate's lock, so that a change committed
		// after the load reaches the listener and none before it does.
		settings, err := readSettings(ctx, b.tx, name)
		if errors.Is(err, errBadSettings) {
			// Left out, as the decisions leave them out (heldConfig): the
			// gate runs on the instance's own settings until they are
			// saved or reset.
			s.log.Warn("anteroom: a gate's stored runtime settings are damaged and left out; save or reset them", "gate", name, "err", err)
			settings, err = nil, nil
		}
		if err != nil {
			return err
		}
		prio, err := priorityPositions(ctx, b.tx, name)
		if err != nil {
			return err
		}
		o.snaps[name] = session.GateSnapshot{State: st, Active: active, Waiting: waiting, Settings: settings, PriorityWaiting: prio}
	}
	return nil
}

// repairCounters checks, under the gate's lock, the counters of g against
// the rows a load read (session.RepairCounters): counters damaged by a hand
// edit or a partial restore are repaired in the load's commit, which every
// instance follows, and logged as a warning with the numbers.
func (s *Store) repairCounters(g *gateTx, active []session.Session, waiting []int64) {
	var maxPos int64
	for _, a := range active {
		maxPos = max(maxPos, a.Position)
	}
	if len(waiting) > 0 {
		maxPos = max(maxPos, waiting[len(waiting)-1])
	}
	fixed, repaired := session.RepairCounters(g.c, int64(len(active)), int64(len(waiting)), maxPos)
	if !repaired {
		return
	}
	s.log.Warn("anteroom: gate counters did not match the stored sessions; repaired",
		"gate", g.name,
		"active_stored", g.c.Active, "active_rows", fixed.Active,
		"waiting_stored", g.c.Waiting, "waiting_rows", fixed.Waiting,
		"next_position_stored", g.c.NextPosition, "largest_position", maxPos)
	g.c = fixed
	g.save, g.report = true, true
}

// decidedWith makes o, an op that decides by its gate's configuration,
// decide with the runtime settings its gate holds in the database (held),
// when it holds some, and the gate's scheduled events over them
// (session.EventConfig at the op's time: a pre-queue holds everyone, a
// started event's overrides apply), as memory's configuration would be
// once it has followed every commit; and held while a pre-queue is open
// as stored, whatever the op's time (session.PrequeueHold).
func decidedWith(b *batch, o *op) {
	switch o.kind {
	case opJoin, opLeave, opRelease, opUpdate, opPurge, opNotify:
		g := b.gates[o.cfg.Name]
		if g == nil {
			return
		}
		if g.held != nil {
			o.cfg = session.EventConfig(*g.held, g.scheduled, o.now)
		}
		o.cfg = session.PrequeueHold(o.cfg, g.scheduled, g.damagedHold)
	}
}

// eventVersion names one version of a stored event row.
type eventVersion struct{ gate, id, xmin string }

// heldEvent is a stored event as the writer last decoded it (nil: damaged).
type heldEvent struct {
	xmin string
	ev   *session.ScheduledEvent
	hold bool // damaged, and holds its gate (session.DamagedEventHolds)
	// damage is what does not decode, for session.DamagedEvent (the read
	// side's cache).
	damage string
}

// readHeldEvents reads the versions of the locked gates' events
// (sqlHeldEvents, the next result of br) and puts those it has decoded in
// their gates; it returns the versions it has not. The writer's cache of a
// gate keeps only the events still stored.
func (s *Store) readHeldEvents(b *batch, br pgx.BatchResults) ([]eventVersion, error) {
	rows, err := br.Query()
	if err != nil {
		return nil, fmt.Errorf("read events: %w", err)
	}
	defer rows.Close()
	seen := map[string]map[string]heldEvent{}
	var stale []eventVersion
	for rows.Next() {
		var v eventVersion
		if err := rows.Scan(&v.gate, &v.id, &v.xmin); err != nil {
			return nil, fmt.Errorf("read events: %w", err)
		}
		if b.gates[v.gate] == nil {
			continue
		}
		if seen[v.gate] == nil {
			seen[v.gate] = map[string]heldEvent{}
		}
		h, ok := s.heldEvents[v.gate][v.id]
		if !ok || h.xmin != v.xmin {
			stale = append(stale, v)
			continue
		}
		seen[v.gate][v.id] = h
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read events: %w", err)
	}
	for name := range b.gates {
		if len(seen[name]) == 0 {
			delete(s.heldEvents, name)
		} else {
			s.heldEvents[name] = seen[name]
		}
	}
	return stale, nil
}

// fetchHeldEvents reads the events whose versions the writer has not
// decoded (without their drawn line), caches them, and puts every cached
// event of a locked gate in it. An event that does not decode is logged
// once per version and makes its gate decide with the ops' own
// configuration (held dropped): memory has its own view of the events.
func (s *Store) fetchHeldEvents(ctx context.Context, b *batch, stale []eventVersion) error {
	for _, v := range stale {
		var xmin string
		var raw []byte
		if err := b.tx.QueryRow(ctx, sqlHeldEvent, v.gate, v.id).Scan(&xmin, &raw); err != nil {
			return fmt.Errorf("read event %q of gate %q: %w", v.id, v.gate, err)
		}
		s.eventReads++
		h := heldEvent{xmin: xmin}
		if ev, err := session.DecodeStoredEvent(v.gate, v.id, raw); err != nil {
			h.hold = session.DamagedEventHolds(v.id, raw)
			s.log.Warn("anteroom: a gate's stored event is damaged; its gate decides with the instance's own settings, and admits nobody new unless the event still reads as started: delete it",
				"gate", v.gate, "event", v.id, "holds", h.hold, "err", err)
		} else {
			h.ev = &ev
		}
		if s.heldEvents[v.gate] == nil {
			s.heldEvents[v.gate] = map[string]heldEvent{}
		}
		s.heldEvents[v.gate][v.id] = h
	}
	for name, g := range b.gates {
		for _, h := range s.heldEvents[name] {
			if h.ev == nil {
				g.held, g.damagedEvents = nil, true
				g.damagedHold = g.damagedHold || h.hold
				continue
			}
			g.scheduled = append(g.scheduled, *h.ev)
		}
		// In memory's order: EventConfig picks the first of two started
		// events of one start, and a map's order is random.
		session.SortEvents(g.scheduled)
	}
	return nil
}

// heldSettings is a gate's settings row as the writer last decoded it.
type heldSettings struct {
	raw string
	cfg *session.GateConfig // nil: the row does not decode or validate
}

// heldConfig decodes a gate's stored runtime settings, once per change of
// the row; a row that does not decode or validate is logged once and
// ignored (the ops keep their own configuration).
func (s *Store) heldConfig(gate string, raw []byte) *session.GateConfig {
	if h, ok := s.held[gate]; ok && h.raw == string(raw) {
		return h.cfg
	}
	h := heldSettings{raw: string(raw)}
	cfg, err := decodeSettings(gate, raw)
	if err == nil {
		h.cfg = &cfg
	} else {
		s.log.Warn("anteroom: a gate's stored runtime settings are damaged; deciding with the instance's own", "gate", gate, "err", err)
	}
	s.held[gate] = h
	return h.cfg
}

// maxPositionsHint bounds the capacity waitingPositions takes from the
// waiting counter: a counter damaged to 1<<47 made it panic before the
// load could repair it.
const maxPositionsHint = 1 << 20

// waitingPositions reads the positions of the gate's waiters, ascending.
func waitingPositions(ctx context.Context, q pgx.Tx, gate string, hint int64) ([]int64, error) {
	rows, err := q.Query(ctx, sqlWaitingPos, gate)
	if err != nil {
		return nil, fmt.Errorf("read waiting positions: %w", err)
	}
	defer rows.Close()
	out := make([]int64, 0, min(max(hint, 0), maxPositionsHint)) // hint: a counter, maybe damaged
	for rows.Next() {
		var p int64
		if err := rows.Scan(&p); err != nil {
			return nil, fmt.Errorf("read waiting positions: %w", err)
		}
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read waiting positions: %w", err)
	}
	return out, nil
}

// appendRowKeys appends the sessions op o reads by id (join, leave,
// release, notify, touch, purge) and reports true; an op that reads or
// writes rows with statements of its own (update, load, func, settings)
// appends nothing and reports false.
func (o *op) appendRowKeys(keys []key) ([]key, bool) {
	switch o.kind {
	case opJoin, opLeave, opRelease, opNotify:
		return append(keys, key{o.cfg.Name, o.id}), true
	case opTouch:
		for _, t := range o.touches {
			if session.ValidID(t.ID) {
				keys = append(keys, key{o.cfg.Name, t.ID})
			}
		}
		return keys, true
	case opPurge:
		for _, id := range o.ids {
			keys = append(keys, key{o.cfg.Name, id})
		}
		return keys, true
	}
	return keys, false
}
