package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The follower's poll of the gates' seqs.
//
// The other instances hear of a commit from the NOTIFY its flush sends
// (durable.go). An instance killed between its commit and its flush made a
// commit (unacknowledged, but in the tables) that nobody announces: without
// more, the others would apply it only with the gate's next commit, which
// in a quiet gate may be long (a release that promoted a waiter whose
// socket is on another instance). So the follower reads every gate's seq
// every Options.FollowPoll, in one query on its own connection. A gate
// whose stored seq was above the seq applied at one poll and is still
// behind that seq at the next was not announced for a whole period: its
// NOTIFY is not merely in flight. The follower flushes the WAL (nothing not
// on disk is applied) and catches the gate up to that seq from the outbox,
// as for a notification. A seq this instance's writer committed and has
// not delivered yet is its writer's: left to it (it delivers or fails, and
// a failure resyncs). Pending gates are left to their resync, and nothing
// is polled while the follower is not connected (it resyncs every gate
// when it listens again).

// defaultFollowPoll is Options.FollowPoll's default.
const defaultFollowPoll = 2 * time.Second

// poller is the follower's state between polls.
type poller struct {
	every time.Duration
	next  time.Time
	// behind: the gates behind at the last poll, with the seq stored then.
	behind map[string]int64
}

func (s *Store) newPoller() *poller {
	return &poller{every: s.followPoll, next: time.Now().Add(s.followPoll), behind: map[string]int64{}}
}

// nextNotification waits for the next notification on c, polling the
// gates' seqs whenever a poll period has passed. Errors: the connection's
// (the caller listens again) or ctx's.
func (s *Store) nextNotification(ctx context.Context, c *pgx.Conn, p *poller) (*pgconn.Notification, error) {
	for {
		if !time.Now().Before(p.next) {
			if err := s.pollGates(ctx, c, p); err != nil {
				return nil, err
			}
			p.next = time.Now().Add(p.every)
		}
		wctx, cancel := context.WithDeadline(ctx, p.next)
		n, err := c.WaitForNotification(wctx)
		cancel()
		if err == nil {
			return n, nil
		}
		if ctx.Err() != nil || wctx.Err() == nil || !pgconn.Timeout(err) || c.IsClosed() {
			return nil, err
		}
		// The poll period is over: the connection stays usable.
	}
}

// pollGates reads every gate's seq and catches up the gates behind since
// the last poll. It returns an error only when the connection is lost.
func (s *Store) pollGates(ctx context.Context, c *pgx.Conn, p *poller) error {
	s.polls.Add(1)
	qctx, cancel := context.WithTimeout(ctx, catchUpTimeout)
	defer cancel()
	stored, err := gateSeqs(qctx, c)
	if err != nil {
		if c.IsClosed() {
			return err
		}
		s.log.Warn("anteroom: polling the gates' seqs failed", "err", err)
		return nil
	}
	due := map[string]int64{}
	behind := map[string]int64{}
	s.deliverMu.Lock()
	for g, seq := range stored {
		a, known := s.applied[g]
		if !known || s.pending[g] || seq <= a {
			continue
		}
		behind[g] = seq
		if prev, ok := p.behind[g]; ok && prev > a && !s.own.has(g, prev) {
			due[g] = prev
		}
	}
	s.deliverMu.Unlock()
	p.behind = behind
	if len(due) == 0 {
		return nil
	}
	// What the tables show may not be on disk yet: flush past it.
	if err := flushWAL(qctx, c); err != nil {
		if c.IsClosed() {
			return err
		}
		s.log.Warn("anteroom: polling the gates' seqs failed", "err", err)
		return nil
	}
	s.deliverMu.Lock()
	defer s.deliverMu.Unlock()
	for _, g := range sortedKeys(due) {
		if s.pending[g] || s.applied[g] >= due[g] {
			continue // a notification or the writer got there first
		}
		s.log.Warn("anteroom: a commit was not announced; read it from the outbox", "gate", g, "seq", due[g])
		s.unannounced.Add(1)
		s.catchUp(ctx, c, g, due[g], false)
	}
	return nil
}

// gateSeqs reads the seq of every gate.
func gateSeqs(ctx context.Context, c *pgx.Conn) (map[string]int64, error) {
	rows, err := c.Query(ctx, `SELECT name, seq FROM anteroom_gates`)
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	var name string
	var seq int64
	_, err = pgx.ForEachRow(rows, []any{&name, &seq}, func() error {
		out[name] = seq
		return nil
	})
	return out, err
}
