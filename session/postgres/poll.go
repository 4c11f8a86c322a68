package postgres

import (
	"context"
	"errors"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/anteroomhq/anteroom/session"
)

// The follower's poll of the gates' seqs.
//
// The other instances hear of a commit from the NOTIFY its flush sends
// (durable.go). An instance killed between its commit and its flush made a
// commit (unacknowledged, but in the tables) that nobody announces: without
// more, the others would apply it only with the gate's next commit, which
// in a quiet gate may be long (a release that promoted a waiter whose
// socket is on another instance). So the follower reads every gate's seq,
// and whether it has runtime settings, every Options.FollowPoll, in one
// query on its own connection. A gate whose stored seq was above the seq
// applied at one poll and is still behind that seq at the next was not
// announced for a whole period: its NOTIFY is not merely in flight. The
// follower flushes the WAL (nothing not on disk is applied) and catches the
// gate up to that seq from the outbox, as for a notification. A change of
// settings, a gate's removal at runtime included, is a commit of the gate
// (its seq), so it is caught up with the rest (settings_follow.go).
//
// A gate this instance does not follow at all has no seq applied to
// compare: a gate added at runtime elsewhere whose announcement was lost.
// One that has runtime settings at two polls in a row, and is still not
// followed, is adopted: resynced from the tables, its settings with it.
// A gate without settings is another instance's config file's: not ours to
// follow. Before the Store's first Load nothing is adopted (Load reads every
// gate with settings; see adoptGate). Settings that do not decode are logged once per seq, and the
// gate left alone until its seq moves (an instance is not made unready by
// a gate it does not serve).
//
// A seq this instance's writer committed and has not delivered yet is its
// writer's, in both commit modes: left to it (it delivers or fails, and a
// failure resyncs). Pending gates are left to their resync, and nothing is
// polled while the follower is not connected (it resyncs every gate, and
// adopts the gates with settings, when it listens again).

// defaultFollowPoll is Options.FollowPoll's default.
const defaultFollowPoll = 2 * time.Second

// poller is the follower's state between polls.
type poller struct {
	every time.Duration
	next  time.Time
	// behind: the gates behind at the last poll, with the seq stored then.
	behind map[string]int64
	// unknown: the gates with runtime settings not followed at the last
	// poll, with the seq stored then; bad: those whose settings did not
	// decode, with the seq they did not decode at.
	unknown, bad map[string]int64
}

func (s *Store) newPoller() *poller {
	return &poller{
		every: s.followPoll, next: time.Now().Add(s.followPoll),
		behind: map[string]int64{}, unknown: map[string]int64{}, bad: map[string]int64{},
	}
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

// pollGates reads every gate's seq, catches up the gates behind since the
// last poll and adopts the gates with settings not followed since the
// last poll. It returns an error only when the connection is lost.
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
	unknown, bad := map[string]int64{}, map[string]int64{}
	var adopt []string
	s.deliverMu.Lock()
	for g, row := range stored {
		a, known := s.applied[g]
		if s.pending[g] {
			continue
		}
		if !known {
			if !row.settings || !session.ValidGateName(g) || !s.loadedOnce.Load() {
				continue
			}
			unknown[g] = row.seq
			if seq, ok := p.bad[g]; ok && seq == row.seq {
				bad[g] = seq
				continue
			}
			if prev, ok := p.unknown[g]; ok && !s.own.has(g, prev) && !s.own.has(g, row.seq) {
				adopt = append(adopt, g)
			}
			continue
		}
		if row.seq <= a {
			continue
		}
		behind[g] = row.seq
		if prev, ok := p.behind[g]; ok && prev > a && !s.own.has(g, prev) {
			due[g] = prev
		}
	}
	s.deliverMu.Unlock()
	p.behind, p.unknown, p.bad = behind, unknown, bad
	if len(due) == 0 && len(adopt) == 0 {
		return nil
	}
	// What the tables show may not be on disk yet: flush past it (an
	// adoption's snapshot flushes on its own).
	if len(due) > 0 {
		if err := flushWAL(qctx, c); err != nil {
			if c.IsClosed() {
				return err
			}
			s.log.Warn("anteroom: polling the gates' seqs failed", "err", err)
			return nil
		}
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
	sort.Strings(adopt)
	for _, g := range adopt {
		if _, known := s.applied[g]; known || s.pending[g] {
			continue // a notification or the writer got there first
		}
		s.log.Warn("anteroom: a gate added at runtime was not announced; adopt it from the tables", "gate", g)
		err := s.adoptGate(ctx, c, g)
		if _, known := s.applied[g]; known {
			s.adopted.Add(1)
		}
		if c.IsClosed() {
			return errors.New("connection closed")
		}
		if errors.Is(err, errBadSettings) {
			p.bad[g] = unknown[g]
		}
		if err != nil {
			s.log.Error("anteroom: adopting a gate added at runtime failed", "gate", g, "err", err)
		}
	}
	return nil
}

// gateRow is what the poll reads of a gate.
type gateRow struct {
	seq      int64
	settings bool // it has runtime settings
}

// sqlPollGates reads every gate's seq and whether it has runtime settings
// (a settings row without a gate row, which the store never writes, counts
// as seq 0).
const sqlPollGates = `SELECT coalesce(g.name, s.gate), coalesce(g.seq, 0), s.gate IS NOT NULL
	FROM anteroom_gates g FULL JOIN anteroom_gate_settings s ON s.gate = g.name`

// gateSeqs reads the seq of every gate, and whether it has settings.
func gateSeqs(ctx context.Context, c *pgx.Conn) (map[string]gateRow, error) {
	rows, err := c.Query(ctx, sqlPollGates)
	if err != nil {
		return nil, err
	}
	out := map[string]gateRow{}
	var name string
	var r gateRow
	_, err = pgx.ForEachRow(rows, []any{&name, &r.seq, &r.settings}, func() error {
		out[name] = r
		return nil
	})
	return out, err
}
