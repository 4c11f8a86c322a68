package sqlite

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
)

// pendingOverPurged is a store (cleaner held) whose gate of limit 2 had
// w0..w9 waiting behind a0, a1 (positions 1, 2); w1..w4 are
// purged by the update's waiting mark (rows still in the table) and the
// update promoted w0 (3) and w5 (8) by a pending range [3, 9) that spans
// the purged rows 4..7. It returns the path of a crash copy of the file.
func pendingOverPurged(t *testing.T) (s *Store, cfg session.GateConfig, crash string) {
	t.Helper()
	s = openWithLogical(t, t.TempDir()+"/p.db", true)
	t.Cleanup(func() { _ = s.Close() })
	holdCleaner(t, s)
	ctx := context.Background()
	cfg = session.GateConfig{Name: "default", ActiveLimit: 2, ActiveTimeout: time.Minute, WaitingTimeout: 10 * time.Minute}
	now := epoch.Add(cfg.WaitingTimeout + 2*time.Second)
	joinPurgeLine(t, s, cfg, now)
	rep, err := s.Update(ctx, cfg, now, session.DefaultUpdateChunk)
	require.NoError(t, err)
	require.EqualValues(t, 4, rep.PurgedWaiting)
	require.EqualValues(t, 2, rep.Promoted)
	var from, to int64
	require.NoError(t, s.readDB.QueryRow(`SELECT promoted_from, promoted_to FROM gates WHERE name = 'default'`).Scan(&from, &to))
	require.Equal(t, [2]int64{3, 9}, [2]int64{from, to}, "the premise: a pending range over the purged rows")
	return s, cfg, copyFiles(t, s.path, t.TempDir(), "", "-wal")
}

// statusOf reads the stored status of every row of the file at path, by id.
func statusOf(t *testing.T, path string) map[string]int64 {
	t.Helper()
	db, err := sqlOpen(path)
	require.NoError(t, err)
	defer db.Close()
	rows, err := db.Query(`SELECT id, status FROM sessions UNION ALL SELECT 'range ' || name, promoted_to - promoted_from FROM gates`)
	require.NoError(t, err)
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var id string
		var st int64
		require.NoError(t, rows.Scan(&id, &st))
		out[id] = st
	}
	require.NoError(t, rows.Err())
	return out
}

// An Open that refuses a file for a damaged purge mark writes nothing
// (settlePurged: "a damaged mark refuses the file, nothing deleted"). With
// a pending promotion, settlePromoted runs first, with the damaged mark
// read as 0 (anyInt), and commits: the purged waiters w1..w4 inside the
// range are written active before the refusal.
func TestADamagedMarkRefusesBeforeThePendingPromotionIsWritten(t *testing.T) {
	for _, set := range []string{
		`purged_position = 'x'`,
		`purged_seen = 'x'`,
		`purged_seen = 9000000000000000000`, // more than a year ahead
	} {
		t.Run(set, func(t *testing.T) {
			_, _, path := pendingOverPurged(t)
			rawExec(t, path, `UPDATE gates SET `+set)
			before := statusOf(t, path)
			require.EqualValues(t, 0, before["w1"])
			_, err := Open(path, Options{Logger: slog.New(slog.DiscardHandler)})
			require.ErrorIs(t, err, ErrDamaged)
			after := statusOf(t, path)
			assert.Equal(t, before, after, "the refused Open changed the rows")
		})
	}
}

// A pending range that is a range of integers within the gate's positions,
// but not the one the update wrote (a value edited or damaged on disk:
// here over a line that no update promoted), is taken as it is: every
// waiter in it is made active, past the gate's limit, and Open goes on
// (verifyCounters only logs a repair). The counters were written in the
// same transaction as the range, so they say the range is wrong: the live
// waiting rows after the range no longer match the waiting counter.
func TestAHostileRangeIsRefused(t *testing.T) {
	ctx := context.Background()
	s := openWithLogical(t, t.TempDir()+"/h.db", true)
	cfg := session.GateConfig{Name: "default", ActiveLimit: 2, ActiveTimeout: time.Minute, WaitingTimeout: 10 * time.Minute}
	for i := range 8 {
		_, err := s.Join(ctx, cfg, fmt.Sprintf("s%d", i), epoch)
		require.NoError(t, err)
	}
	path := s.path
	require.NoError(t, s.Close())
	rawExec(t, path, fmt.Sprintf(`UPDATE gates SET promoted_from = 1, promoted_to = 9, promoted_at = %d`, epoch.UnixNano()))
	s2, err := Open(path, Options{Logger: slog.New(slog.DiscardHandler)})
	if err == nil {
		defer s2.Close()
		snaps, lerr := s2.Load(ctx, []string{cfg.Name})
		require.NoError(t, lerr)
		t.Logf("opened: %d active of limit %d", snaps[cfg.Name].State.Active, cfg.ActiveLimit)
	}
	require.ErrorIs(t, err, ErrDamaged)
}

// A pending promotion's time far ahead of the clock (a damaged value: it
// was the update's now) is written as the promoted rows' last sign of
// life: they are never idle until the clock catches up, and hold their
// slots. A purge mark that far ahead refuses the file (markHorizon).
func TestAPendingPromotionFarAheadIsRefused(t *testing.T) {
	p := newPendingPair(t, 0)
	path := copyFiles(t, p.paths[0], t.TempDir(), "", "-wal")
	rawExec(t, path, `UPDATE gates SET promoted_at = 9000000000000000000`)
	s, err := Open(path, Options{Logger: slog.New(slog.DiscardHandler)})
	if err == nil {
		defer s.Close()
		w0, gerr := s.Get(context.Background(), p.cfg.Name, "w0")
		require.NoError(t, gerr)
		t.Logf("opened: w0 %s, last active %v", w0.Status, w0.LastActive)
	}
	require.ErrorIs(t, err, ErrDamaged)
}

// bigPending is a store (cleaner held) whose gate "a" has n waiters
// promoted by a pending range, and a gate "b" with a few sessions.
func bigPending(t *testing.T, n int) (s *Store, a, b session.GateConfig, now time.Time) {
	t.Helper()
	ctx := context.Background()
	s = openWithLogical(t, t.TempDir()+"/big.db", true)
	t.Cleanup(func() { _ = s.Close() })
	holdCleaner(t, s)
	a = session.GateConfig{Name: "a", ActiveLimit: 1, ActiveTimeout: time.Hour, WaitingTimeout: time.Hour, ClaimTimeout: time.Minute}
	b = session.GateConfig{Name: "b", ActiveLimit: 1, ActiveTimeout: time.Hour, WaitingTimeout: time.Hour}
	for i := range n + 1 {
		_, err := s.Join(ctx, a, fmt.Sprintf("a%d", i), epoch)
		require.NoError(t, err)
	}
	for i := range 3 {
		_, err := s.Join(ctx, b, fmt.Sprintf("b%d", i), epoch)
		require.NoError(t, err)
	}
	a.ActiveLimit = int64(n + 1)
	now = epoch.Add(time.Second)
	rep, err := s.Update(ctx, a, now, session.DefaultUpdateChunk)
	require.NoError(t, err)
	require.EqualValues(t, n, rep.Promoted)
	require.Equal(t, 1, writtenActive(t, s, "a"), "the premise: the promotion is pending, not written")
	return s, a, b, now
}

// writtenActive counts gate's rows stored as active.
func writtenActive(t *testing.T, s *Store, gate string) int {
	t.Helper()
	var n int
	require.NoError(t, s.readDB.QueryRow(`SELECT count(*) FROM sessions WHERE gate = ? AND status = 1`, gate).Scan(&n))
	return n
}

// An update of gate b writes, in its first transaction, every pending row
// of gate a: materializeAll writes every gate's ranges, though only the
// op's own gate's marks rise. The update's chunk (at most chunk rows a
// transaction) does not bound it, nor does the cleaner's 64 rows an op:
// with several gates updated each tick, each gate's promotions are written
// whole by the next gate's update, in one transaction the joins wait for.
func TestAnUpdateOfAnotherGateLeavesAPendingPromotionAlone(t *testing.T) {
	const n = 2000
	s, _, b, now := bigPending(t, n)
	rep, err := s.Update(context.Background(), b, now, 10)
	require.NoError(t, err)
	t.Logf("gate b's update: %d transactions", rep.Transactions)
	assert.Equal(t, 1, writtenActive(t, s, "a"), "gate b's update wrote gate a's pending rows")
}

// A claim by a claim link reads the row by its id (find), as a touch's
// claim does, but it goes through eventOp, an op that is not pendingSafe:
// the first claim link after a promotion writes every pending row of every
// gate in its transaction (the hot path right after a promotion: each
// promoted visitor follows a link), where a touch's claim leaves them to
// the cleaner.
func TestAClaimLinkLeavesAPendingPromotionAlone(t *testing.T) {
	const n = 2000
	s, a, _, now := bigPending(t, n)
	ctx := context.Background()
	cur, err := s.Get(ctx, a.Name, "a1")
	require.NoError(t, err)
	require.Equal(t, session.StatusActive, cur.Status)
	_, err = s.ClaimLink(ctx, a.Name, "a1", cur.ClaimDeadline, now.Add(time.Second))
	require.NoError(t, err)
	got, err := s.Get(ctx, a.Name, "a1")
	require.NoError(t, err)
	assert.True(t, got.ClaimDeadline.IsZero(), "claimed")
	assert.LessOrEqual(t, writtenActive(t, s, "a"), 2, "a claim link wrote the pending rows")
}

// With ClaimLink beside a pending promotion (pendingSafe), a claim link on
// a pending session answers as on a store that wrote the rows, the range
// stays pending, and once cleaned the tables are the same.
func TestAClaimLinkOnAPendingPromotionReadsAsWritten(t *testing.T) {
	ctx := context.Background()
	p := newPendingPair(t, 30*time.Second)
	for _, id := range []string{"w0", "w1"} {
		p.same(t, "claim link "+id, func(s *Store) (any, error) {
			cur, err := s.Get(ctx, p.cfg.Name, id)
			if err != nil {
				return nil, err
			}
			return s.ClaimLink(ctx, p.cfg.Name, id, cur.ClaimDeadline, p.now.Add(time.Second))
		})
	}
	p.same(t, "a stale link", func(s *Store) (any, error) {
		return s.ClaimLink(ctx, p.cfg.Name, "w0", p.now, p.now.Add(time.Second))
	})
	assert.True(t, p.pending(t))
	p.cleanBoth(t)
	assert.Equal(t, table(t, p.rows), table(t, p.logical))
}

// The admissions' prune runs beside a pending promotion (pendingSafe): it
// reads the session's row with liveStored, the waiting mark for a pending
// row, and keeps the admission of a promoted session as for a written row.
func TestThePruneKeepsAPendingSessionsAdmission(t *testing.T) {
	ctx := context.Background()
	p := newPendingPair(t, 30*time.Second)
	for _, s := range p.both() {
		w0, err := s.Get(ctx, p.cfg.Name, "w0")
		require.NoError(t, err)
		require.Equal(t, session.StatusActive, w0.Status)
		_, err = s.IssueAdmission(ctx, session.Admission{ID: "jti-w0", Gate: p.cfg.Name, Session: "w0", Position: w0.Position, IssuedAt: epoch, Expires: epoch.Add(time.Second)})
		require.NoError(t, err)
		// a0, purged by the update (its row still in the table): its
		// admission goes, so the prune is not a no-op.
		_, err = s.IssueAdmission(ctx, session.Admission{ID: "jti-a0", Gate: p.cfg.Name, Session: "a0", Position: 1, IssuedAt: epoch, Expires: epoch.Add(time.Second)})
		require.NoError(t, err)
		s.pruneAdmissions(ctx, p.cfg.Name, p.now.Add(time.Hour), 10)
		var w0n, a0n int
		require.NoError(t, s.readDB.QueryRow(`SELECT count(*) FILTER (WHERE jti = 'jti-w0'), count(*) FILTER (WHERE jti = 'jti-a0') FROM admissions`).Scan(&w0n, &a0n))
		assert.Equal(t, 1, w0n, "the pending session's admission was pruned")
		assert.Equal(t, 0, a0n, "the purged session's admission was kept")
	}
	assert.True(t, p.pending(t))
}

// markAdvice's repair (reset the marks) on a file with a pending range over
// purged rows revives those rows inside the range as promoted: on HEAD
// Open then makes w1..w4 active past the limit and only logs a counter
// repair; with the counter check it refuses, and the range's advice
// (empty it) then opens the file with every row waiting.
func TestTheMarksAdviceWithAPendingRange(t *testing.T) {
	_, _, path := pendingOverPurged(t)
	rawExec(t, path, `UPDATE gates SET `+setNoMarks)
	s, err := Open(path, Options{Logger: slog.New(slog.DiscardHandler)})
	if err == nil {
		defer s.Close()
		t.Logf("opened: %v", statusOf(t, path))
	}
	require.ErrorIs(t, err, ErrDamaged)
	assert.Contains(t, err.Error(), "pending promotion")
}

// The ops that write no session row run beside a pending promotion, and
// Load: an
// admin's change of settings, of an event, of a code, or a gate's removal
// right after an update does not write its promotions in one transaction
// the joins wait for, nor does another gate's event advance (an advance
// writes its own gate's first: a lottery moves rows), nor Load (it adds
// the range's rows to the active set it reads).
func TestOpsThatLeaveAPendingPromotionAlone(t *testing.T) {
	const n = 500
	ctx := context.Background()
	for _, c := range []struct {
		name  string
		op    func(s *Store, a, b session.GateConfig, now time.Time) error
		keeps bool // the rows stay pending
	}{
		{"settings", func(s *Store, a, _ session.GateConfig, _ time.Time) error {
			return s.SaveGateSettings(ctx, a.Name, &a)
		}, true},
		{"an event saved and deleted", func(s *Store, a, _ session.GateConfig, now time.Time) error {
			ev := session.ScheduledEvent{Gate: a.Name, ID: "later", PrequeueAt: now.Add(time.Hour), StartsAt: now.Add(2 * time.Hour), Seed: make([]byte, session.LotterySeedSize)}
			if _, err := s.SaveEvent(ctx, ev); err != nil {
				return err
			}
			return s.DeleteEvent(ctx, a.Name, ev.ID)
		}, true},
		{"a code", func(s *Store, a, _ session.GateConfig, now time.Time) error {
			code, err := session.NewPriorityCode(a.Name, "code-0123456789", "c", 3, now.Add(time.Hour), now)
			if err != nil {
				return err
			}
			return s.CreateCode(ctx, code)
		}, true},
		{"another gate removed", func(s *Store, _, _ session.GateConfig, now time.Time) error {
			return s.RemoveGate(ctx, session.GateConfig{Name: "c", ActiveLimit: 1, ActiveTimeout: time.Hour, WaitingTimeout: time.Hour}, now)
		}, true},
		{"another gate's event advanced", func(s *Store, _, b session.GateConfig, now time.Time) error {
			ev := session.ScheduledEvent{Gate: b.Name, ID: "now", PrequeueAt: now, StartsAt: now.Add(time.Hour), Seed: make([]byte, session.LotterySeedSize)}
			if _, err := s.SaveEvent(ctx, ev); err != nil {
				return err
			}
			got, changed, err := s.AdvanceEvent(ctx, b.Name, ev.ID, now)
			if err == nil && (!changed || got.Phase != session.EventPrequeue) {
				err = fmt.Errorf("advance: %+v, changed %v", got, changed)
			}
			return err
		}, true},
		{"load", func(s *Store, a, _ session.GateConfig, _ time.Time) error {
			snaps, err := s.Load(ctx, []string{a.Name})
			if err == nil && len(snaps[a.Name].Active) != n+1 {
				err = fmt.Errorf("load: %d active sessions, want %d", len(snaps[a.Name].Active), n+1)
			}
			return err
		}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, a, b, now := bigPending(t, n)
			require.NoError(t, c.op(s, a, b, now))
			if c.keeps {
				assert.Equal(t, 1, writtenActive(t, s, "a"), "it wrote the pending rows")
			} else {
				assert.Equal(t, n+1, writtenActive(t, s, "a"), "it left the pending rows")
			}
			got, err := s.Get(ctx, a.Name, "a1")
			require.NoError(t, err)
			assert.Equal(t, session.StatusActive, got.Status)
		})
	}
}
