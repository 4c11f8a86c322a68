package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The commit's WAL flush, out of the gate's row lock.
//
// A gate's transactions take turns on its row, which each holds from
// SELECT … FOR UPDATE to the end of its COMMIT. With synchronous commit the
// end of COMMIT is the WAL flush: one gate's flushes could never overlap,
// however many instances waited. So the writer commits its transaction
// with synchronous_commit = off (the row is free as soon as the commit
// record is in the WAL buffers) and then, on the same connection, runs a
// second transaction with synchronous commit: one WAL record of its own
// (sqlFlushWAL) and the batch's notifications. Its COMMIT flushes the WAL
// up to its own commit record, which follows the first transaction's, so
// when it returns the batch's commit is on disk. Only then are the callers
// answered and memory updated, and only then do the other instances hear
// of the commit: NOTIFY is delivered when the transaction that sent it
// commits, so no instance follows a commit a crash of the server could
// undo. While one instance flushes, the next holds the row; the server
// groups the flushes that meet.
//
// What another instance reads of the outbox on a notification (the seqs up
// to the one notified, committed before it under the gate's lock) was
// flushed with it. What bypasses the notifications reads the tables, which
// may show a commit not yet flushed; each such read is followed by a flush
// before it is used: a resync (readSnapshot) and a session read as active
// by Get.

// sqlFlushWAL writes one WAL record in a transaction (a logical decoding
// message, which any role may write at any wal_level): the transaction has
// an id and wrote WAL, so its synchronous COMMIT flushes the WAL up to its
// own record. A transaction that writes no WAL (a NOTIFY alone, a
// txid_current()) commits without a flush.
const sqlFlushWAL = `SELECT pg_logical_emit_message(true, 'anteroom', '')`

// sqlAsyncCommit makes the writer's transaction commit without waiting
// for its WAL flush (flushCommit waits for it).
const sqlAsyncCommit = `SET LOCAL synchronous_commit = off`

// probeAsyncCommit runs sqlFlushWAL once: where the server refuses it (a
// role without EXECUTE on it), the writer keeps its commits synchronous,
// notifications included.
func (s *Store) probeAsyncCommit(ctx context.Context, disabled bool) error {
	if disabled {
		return nil
	}
	_, err := s.pool.Exec(ctx, sqlFlushWAL)
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		s.log.Warn("anteroom: the server refuses pg_logical_emit_message: commits stay synchronous, the gate's row held through each WAL flush", "err", err)
		return nil
	}
	if err != nil {
		return err
	}
	s.async = true
	return nil
}

// flushCommit flushes the WAL past the commit the writer just made on c
// and sends its notifications, in one round trip: one implicit
// transaction, committed synchronously.
func flushCommit(ctx context.Context, c *pgx.Conn, notes []string) error {
	pb := &pgx.Batch{}
	pb.Queue(sqlFlushWAL)
	for _, n := range notes {
		pb.Queue(sqlNotify, n)
	}
	if err := c.SendBatch(ctx, pb).Close(); err != nil {
		return fmt.Errorf("flush the commit: %w", err)
	}
	return nil
}

// flushWAL flushes the WAL up to now on q: everything committed before it
// is on disk when it returns. It is how a read of the tables (which may
// show a commit not yet flushed) becomes safe to act on.
func flushWAL(ctx context.Context, q interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
}) error {
	if _, err := q.Exec(ctx, sqlFlushWAL); err != nil {
		return fmt.Errorf("flush the WAL: %w", err)
	}
	return nil
}

// ownSeqs are the commits this instance's writer made and has not yet
// delivered (from its COMMIT to the end of deliverLocal, through the flush
// in the default mode), in both commit modes. The follower may read one
// from the outbox first, with another instance's later commit: it is still
// this instance's own (Commit.Remote false), which its metrics count. The
// poll never takes one (poll.go): its writer delivers it, or fails and
// resyncs.
type ownSeqs struct {
	mu sync.Mutex
	m  map[key]bool // key.id is the seq, as text
}

func seqKey(gate string, seq int64) key { return key{gate, fmt.Sprint(seq)} }

func (o *ownSeqs) add(seqs map[string]int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.m == nil {
		o.m = map[key]bool{}
	}
	for g, q := range seqs {
		o.m[seqKey(g, q)] = true
	}
}

func (o *ownSeqs) remove(seqs map[string]int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for g, q := range seqs {
		delete(o.m, seqKey(g, q))
	}
}

// has says whether the commit seq of gate is this instance's, not yet
// delivered by its writer.
func (o *ownSeqs) has(gate string, seq int64) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.m[seqKey(gate, seq)]
}

// flushed flushes the commit the writer just made on c (flushCommit) and
// says whether it may be delivered. When the flush fails the commit may or
// may not last: its callers get the error, and the gates it reported wait
// for a resync from the tables (the Store is unready until then).
func (s *Store) flushed(ctx context.Context, c *pgx.Conn, b *batch, lc localCommit) bool {
	err := flushCommit(ctx, c, b.notes)
	if err == nil {
		return true
	}
	s.own.remove(lc.seqs)
	s.failBatch(b.ops, storageErr("flush", err))
	if len(lc.seqs) == 0 {
		return false
	}
	s.deliverMu.Lock()
	for g := range lc.seqs {
		s.pending[g] = true
	}
	s.setUnready(fmt.Errorf("a commit's flush failed: %w", err))
	s.deliverMu.Unlock()
	s.wake()
	return false
}
