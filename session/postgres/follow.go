package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/anteroomhq/anteroom/session"
)

// catchUpTimeout bounds the reads made while deliverMu is held.
const catchUpTimeout = 5 * time.Second

// querier is what catching up needs of a connection.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}

// notifyListener calls the commit listener; a listener that panics is a bug,
// but must not kill the writer or the follower.
func (s *Store) notifyListener(c session.Commit) {
	fn := s.listener.Load()
	if fn == nil {
		return
	}
	defer func() {
		if p := recover(); p != nil {
			s.log.Error("anteroom: commit listener panicked", "panic", p)
		}
	}()
	(*fn)(c)
}

// deliverLocal hands the writer's commit to the listener, after any commit
// of another instance to the same gates it has not applied yet.
func (s *Store) deliverLocal(ctx context.Context, c *pgx.Conn, lc localCommit) {
	s.deliverMu.Lock()
	defer s.deliverMu.Unlock()
	for g, seq := range lc.loaded {
		if _, known := s.applied[g]; !known {
			s.applied[g] = seq
		}
	}
	if lc.loaded != nil { // a Load ran, even of no gate
		s.loadedOnce.Store(true) // gates may be adopted from now on (adoptGate)
	}
	if len(lc.seqs) == 0 {
		return
	}
	skip := map[string]bool{}
	for _, g := range sortedKeys(lc.seqs) {
		seq := lc.seqs[g]
		a, known := s.applied[g]
		if !known {
			s.applied[g] = seq
			continue
		}
		if a < seq-1 && !s.pending[g] {
			s.catchUp(ctx, c, g, seq-1, false)
		}
		if s.pending[g] || s.applied[g] >= seq {
			// Pending: the listener is behind on g and the Store unready
			// until the follower's resync, which includes this commit.
			// Otherwise a resync read this commit already.
			skip[g] = true
			continue
		}
		s.applied[g] = seq
	}
	if len(s.pending) > 0 {
		s.wake()
	}
	commit := lc.commit
	if len(skip) > 0 {
		commit = session.Commit{Gates: map[string]session.GateState{}}
		for _, ev := range lc.commit.Events {
			if !skip[ev.Session.Gate] {
				commit.Events = append(commit.Events, ev)
			}
		}
		for g, st := range lc.commit.Gates {
			if !skip[g] {
				commit.Gates[g] = st
			}
		}
		commit.Settings, commit.Resync = keepGates(lc.commit.Settings, skip), keepGates(lc.commit.Resync, skip)
	}
	if len(commit.Events) > 0 || len(commit.Gates) > 0 {
		s.notifyListener(commit)
	}
}

// catchUp applies the commits of gate after the last applied one, up to
// upTo, from the outbox; when one is missing it resynchronises the gate
// from the tables. ownLast says the commit upTo is this instance's own (its
// notification came from one of the pool's connections): every other
// commit applied is Remote. deliverMu is held.
func (s *Store) catchUp(ctx context.Context, q querier, gate string, upTo int64, ownLast bool) {
	// deliverMu is held: a connection that hangs must not stall the writer.
	ctx, cancel := context.WithTimeout(ctx, catchUpTimeout)
	defer cancel()
	a := s.applied[gate]
	rows, err := q.Query(ctx, `SELECT seq, payload FROM anteroom_commits WHERE gate = $1 AND seq > $2 AND seq <= $3 ORDER BY seq`, gate, a, upTo)
	if err != nil {
		s.log.Warn("anteroom: reading the outbox failed", "gate", gate, "err", err)
		s.resyncGate(ctx, q, gate)
		return
	}
	type rec struct {
		seq  int64
		body []byte
	}
	var recs []rec
	for rows.Next() {
		var r rec
		if err := rows.Scan(&r.seq, &r.body); err != nil {
			break
		}
		recs = append(recs, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		s.log.Warn("anteroom: reading the outbox failed", "gate", gate, "err", err)
		s.resyncGate(ctx, q, gate)
		return
	}
	for _, r := range recs {
		if r.seq != s.applied[gate]+1 {
			s.resyncGate(ctx, q, gate) // pruned: a gap the outbox cannot fill
			return
		}
		var p payload
		if err := json.Unmarshal(r.body, &p); err != nil {
			s.log.Error("anteroom: unreadable outbox row", "gate", gate, "seq", r.seq, "err", err)
			s.resyncGate(ctx, q, gate)
			return
		}
		if p.Settings != nil && p.Settings.Added {
			// A gate added (or first changed) at runtime: its whole state.
			s.resyncGate(ctx, q, gate)
			return
		}
		s.applied[gate] = r.seq
		s.remote.Add(1)
		c := p.commit(gate)
		c.Remote = (!ownLast || r.seq != upTo) && !s.own.has(gate, r.seq) // another instance's: its metrics counted it
		c.Settings = s.settingsMap(gate, p.Settings)
		s.notifyListener(c)
	}
	if s.applied[gate] < upTo {
		s.resyncGate(ctx, q, gate)
	}
}

// resyncGate reads the gate's whole state in one snapshot and hands it to
// the listener as a Resync. deliverMu is held. On failure the gate is
// pending and the Store unready until the follower resyncs it.
func (s *Store) resyncGate(ctx context.Context, q querier, gate string) {
	snap, seq, err := readSnapshot(ctx, q, gate)
	keep := s.damagedSettings(gate, err)
	if err != nil && !keep {
		s.log.Error("anteroom: resync from the tables failed", "gate", gate, "err", err)
		s.pending[gate] = true
		s.setUnready(fmt.Errorf("resync of gate %q failed: %w", gate, err))
		return
	}
	delete(s.pending, gate)
	s.updateReady()
	if s.applySnapshot(gate, snap, seq, keep) {
		s.log.Info("anteroom: resynchronised a gate from the tables", "gate", gate, "seq", seq)
	}
}

// damagedSettings reports whether err, a readSnapshot's, says only that
// the gate's settings do not decode, and logs it: the snapshot is whole
// but for them, and the listener keeps the settings it has (a Waitlist,
// the config file's, or those it last followed), as the writer's decisions
// leave the row out.
func (s *Store) damagedSettings(gate string, err error) bool {
	if !errors.Is(err, errBadSettings) {
		return false
	}
	s.log.Warn("anteroom: a gate's stored runtime settings are damaged; resynchronised without them (save or reset them)", "gate", gate, "err", err)
	return true
}

// applySnapshot hands the listener gate's whole state read at seq, unless
// the gate is followed at seq or later already; it reports whether it did.
// keepSettings leaves the listener's settings of the gate as they are
// (the snapshot's did not decode). deliverMu is held.
func (s *Store) applySnapshot(gate string, snap session.GateSnapshot, seq int64, keepSettings bool) bool {
	if a, known := s.applied[gate]; known && a >= seq {
		return false
	}
	s.applied[gate] = seq
	s.resyncs.Add(1)
	s.notifyListener(resyncCommit(gate, snap, keepSettings))
	return true
}

// resyncCommit is the commit that hands the listener gate's whole state as
// read from the tables: its counters, its active sessions, its settings
// (unless keepSettings).
func resyncCommit(gate string, snap session.GateSnapshot, keepSettings bool) session.Commit {
	c := session.Commit{
		Gates:  map[string]session.GateState{gate: snap.State},
		Resync: map[string]session.GateSnapshot{gate: snap},
	}
	if !keepSettings {
		c.Settings = map[string]*session.GateConfig{gate: snap.Settings}
	}
	return c
}

// readSnapshot reads the gate's whole state in one snapshot, and the seq it
// is at. Errors: a failed read; one wrapping errBadSettings when the
// gate's settings do not decode, with the snapshot and seq read whole but
// for them (snap.Settings nil).
func readSnapshot(ctx context.Context, q querier, gate string) (session.GateSnapshot, int64, error) {
	// Every caller holds deliverMu (resync, adoption): a connection that
	// hangs must not stall the writer.
	ctx, cancel := context.WithTimeout(ctx, catchUpTimeout)
	defer cancel()
	var snap session.GateSnapshot
	var seq int64
	tx, err := q.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return snap, 0, err
	}
	defer tx.Rollback(context.Background())
	g := &gateTx{name: gate}
	err = tx.QueryRow(ctx, `SELECT next_position, active, waiting, seq FROM anteroom_gates WHERE name = $1`, gate).
		Scan(&g.c.NextPosition, &g.c.Active, &g.c.Waiting, &seq)
	if errors.Is(err, pgx.ErrNoRows) {
		err = nil
		g.c.NextPosition = 1
	}
	if err != nil {
		return snap, 0, err
	}
	if snap.State, err = state(ctx, tx, g); err != nil {
		return snap, 0, err
	}
	var bad error
	if snap.Settings, err = readSettings(ctx, tx, gate); errors.Is(err, errBadSettings) {
		bad, err = err, nil
	}
	if err != nil {
		return snap, 0, err
	}
	rows, err := tx.Query(ctx, sqlActive, gate)
	if err != nil {
		return snap, 0, err
	}
	if snap.Active, err = scanSessions(rows, nil); err != nil {
		return snap, 0, err
	}
	if snap.Waiting, err = waitingPositions(ctx, tx, gate, g.c.Waiting); err != nil {
		return snap, 0, err
	}
	if snap.PriorityWaiting, err = priorityPositions(ctx, tx, gate); err != nil {
		return snap, 0, err
	}
	// The snapshot may show a commit not flushed yet (durable.go): this
	// transaction's commit flushes past every commit it saw.
	if err := flushWAL(ctx, tx); err != nil {
		return snap, 0, err
	}
	if err := tx.Commit(ctx); err != nil {
		return snap, 0, err
	}
	return snap, seq, bad
}

// listen opens the follower's own connection and LISTENs on it.
func (s *Store) listen(ctx context.Context) (*pgx.Conn, error) {
	c, err := pgx.ConnectConfig(ctx, s.connCfg)
	if err != nil {
		return nil, err
	}
	if _, err := c.Exec(ctx, "LISTEN "+channel+"; LISTEN "+s.wakeChannel); err != nil {
		_ = c.Close(context.Background())
		return nil, err
	}
	return c, nil
}

// followLoop applies the notified commits of every instance; when the
// connection is lost it marks the Store unready, listens again, resyncs
// every gate followed, and only then marks it ready.
func (s *Store) followLoop(ctx context.Context, c *pgx.Conn) {
	defer close(s.followed)
	for {
		err := s.followConn(ctx, c)
		_ = c.Close(context.Background())
		if ctx.Err() != nil {
			return
		}
		s.listening.Store(false)
		s.setUnready(fmt.Errorf("lost the listening connection: %w", err))
		s.log.Warn("anteroom: not following the other instances; reconnecting", "err", err)
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(s.reconnect):
			}
			if c, err = s.listen(ctx); err == nil {
				break
			}
		}
		s.listening.Store(true)
		if s.resyncAll(ctx, c) {
			s.log.Info("anteroom: following the other instances again")
		} // else the connection failed again, which followConn sees
	}
}

// resyncAll resyncs every gate followed, after listening again.
func (s *Store) resyncAll(ctx context.Context, c *pgx.Conn) bool {
	ctx, cancel := context.WithTimeout(ctx, catchUpTimeout)
	defer cancel()
	s.deliverMu.Lock()
	defer s.deliverMu.Unlock()
	for _, g := range sortedKeys(s.applied) {
		snap, seq, err := readSnapshot(ctx, c, g)
		keep := s.damagedSettings(g, err)
		if err != nil && !keep {
			s.setUnready(fmt.Errorf("resync of gate %q failed: %w", g, err))
			return false
		}
		delete(s.pending, g)
		s.applySnapshot(g, snap, seq, keep)
	}
	if err := s.adoptGates(ctx, c); err != nil {
		s.setUnready(fmt.Errorf("reading the gates added at runtime failed: %w", err))
		return false
	}
	s.updateReady()
	return true
}

// updateReady marks the Store ready when it listens and no gate awaits a
// resync. deliverMu is held.
func (s *Store) updateReady() {
	if s.listening.Load() && len(s.pending) == 0 {
		s.ready.Store(true)
	}
}

// wake asks the follower to retry the pending resyncs: a notification on
// this instance's own channel.
func (s *Store) wake() {
	ctx, cancel := context.WithTimeout(context.Background(), catchUpTimeout)
	defer cancel()
	if _, err := s.pool.Exec(ctx, "SELECT pg_notify($1, '')", s.wakeChannel); err != nil {
		s.log.Warn("anteroom: waking the follower failed", "err", err)
	}
}

func (s *Store) followConn(ctx context.Context, c *pgx.Conn) error {
	p := s.newPoller()
	for {
		n, err := s.nextNotification(ctx, c, p)
		if err != nil {
			return err
		}
		if drop := s.dropNote.Load(); drop != nil && (*drop)(n) {
			continue
		}
		if n.Channel == s.wakeChannel {
			s.deliverMu.Lock()
			for _, g := range sortedKeys(s.pending) {
				s.resyncGate(ctx, c, g)
			}
			s.deliverMu.Unlock()
			continue
		}
		seqText, gate, ok := strings.Cut(n.Payload, " ")
		gate, mark, _ := strings.Cut(gate, " ")
		seq, err := strconv.ParseInt(seqText, 10, 64)
		if !ok || err != nil || !session.ValidGateName(gate) {
			s.log.Warn("anteroom: ignoring a malformed notification", "payload", n.Payload)
			continue
		}
		s.deliverMu.Lock()
		if a, known := s.applied[gate]; known && s.pending[gate] {
			s.resyncGate(ctx, c, gate)
		} else if known && seq > a {
			_, own := s.ownPIDs.Load(n.PID)
			s.catchUp(ctx, c, gate, seq, own)
		} else if !known && mark == noteSettings {
			// A gate added at runtime elsewhere.
			if err := s.adoptGate(ctx, c, gate); err != nil {
				s.log.Error("anteroom: adopting a gate added at runtime failed", "gate", gate, "err", err)
			}
		}
		s.deliverMu.Unlock()
		if c.IsClosed() {
			return errors.New("connection closed")
		}
	}
}

// keepGates returns m without the gates of skip (nil when none is left).
func keepGates[V any](m map[string]V, skip map[string]bool) map[string]V {
	var out map[string]V
	for g, v := range m {
		if !skip[g] {
			if out == nil {
				out = map[string]V{}
			}
			out[g] = v
		}
	}
	return out
}
