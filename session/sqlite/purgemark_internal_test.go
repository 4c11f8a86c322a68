package sqlite

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
	"github.com/anteroomhq/anteroom/session/sessiontest"
)

// The update purges stale waiters by raising the gate's purge mark, and the
// cleaner deletes their rows afterwards (migrations/0011, clean.go). These
// tests hold the cleaner back, so that the purged rows are still in the
// table, and check that nothing reads them as sessions meanwhile.

// holdCleaner keeps s's cleaner from starting until release (called at the
// latest when the test ends) or until s closes.
func holdCleaner(t *testing.T, s *Store) (release func()) {
	t.Helper()
	hold := make(chan struct{})
	hook := func() {
		select {
		case <-hold:
		case <-s.clean.ctx.Done():
		}
	}
	testHookClean.Store(&hook)
	var once sync.Once
	release = func() { once.Do(func() { close(hold) }) }
	t.Cleanup(func() {
		release()
		testHookClean.Store(nil)
	})
	return release
}

// physicalRows counts the gate's rows in the table, purged or not.
func physicalRows(t *testing.T, s *Store, gate string) int {
	t.Helper()
	var n int
	require.NoError(t, s.readDB.QueryRowContext(context.Background(), `SELECT count(*) FROM sessions WHERE gate = ?`, gate).Scan(&n))
	return n
}

// purgeFixture is an open store (cleaner held) whose gate has two active
// sessions (a0, a1: positions 1, 2) and ten waiters w0..w9 (3..12) joined
// at epoch, of which w0 and w5..w9 showed a sign of life since; an update
// at now purged w1..w4, between live waiters.
func purgeFixture(t *testing.T) (s *Store, cfg session.GateConfig, now time.Time, release func()) {
	t.Helper()
	s = openInternal(t)
	release = holdCleaner(t, s)
	ctx := context.Background()
	cfg = sessiontest.GateConfig("default", 2)
	now = epoch.Add(cfg.WaitingTimeout + time.Second)
	joinPurgeLine(t, s, cfg, now)
	rep, err := s.Update(ctx, cfg, now, session.DefaultUpdateChunk)
	require.NoError(t, err)
	require.EqualValues(t, 4, rep.PurgedWaiting)
	require.Zero(t, rep.PurgedActive)
	require.Equal(t, 12, physicalRows(t, s, cfg.Name), "the purged rows are still in the table: the premise of the test")
	return s, cfg, now, release
}

// joinPurgeLine joins a0, a1 and w0..w9 to cfg's gate at epoch, and
// touches w0 and w5..w9 a second before now: an update at now past the
// waiting timeout purges w1..w4, between live waiters.
func joinPurgeLine(t *testing.T, s *Store, cfg session.GateConfig, now time.Time) {
	t.Helper()
	ctx := context.Background()
	for _, id := range []string{"a0", "a1"} {
		_, err := s.Join(ctx, cfg, id, epoch)
		require.NoError(t, err)
	}
	for i := range 10 {
		_, err := s.Join(ctx, cfg, fmt.Sprintf("w%d", i), epoch)
		require.NoError(t, err)
	}
	var touches []session.Touch
	for _, i := range []int{0, 5, 6, 7, 8, 9} {
		touches = append(touches, session.Touch{ID: fmt.Sprintf("w%d", i), LastActive: now.Add(-time.Second)})
	}
	require.NoError(t, s.Touch(ctx, cfg.Name, touches))
}

func TestPurgedWaitersAreGoneBeforeTheirRowsAre(t *testing.T) {
	s, cfg, now, release := purgeFixture(t)
	ctx := context.Background()

	for i := 1; i <= 4; i++ {
		_, err := s.Get(ctx, cfg.Name, fmt.Sprintf("w%d", i))
		require.ErrorIs(t, err, session.ErrNotFound, "w%d", i)
	}
	rows, err := s.Rows(ctx, cfg.Name)
	require.NoError(t, err)
	var ids []string
	for _, r := range rows {
		ids = append(ids, r.ID)
	}
	assert.Equal(t, []string{"a0", "a1", "w0", "w5", "w6", "w7", "w8", "w9"}, ids)

	snaps, err := s.Load(ctx, []string{cfg.Name})
	require.NoError(t, err)
	snap := snaps[cfg.Name]
	assert.EqualValues(t, 6, snap.State.Waiting)
	assert.EqualValues(t, 3, snap.State.FirstWaitingPosition)
	assert.EqualValues(t, 12, snap.State.LastWaitingPosition)
	assert.Equal(t, []int64{3, 8, 9, 10, 11, 12}, snap.Waiting)

	// A purged waiter's sign of life or departure finds nothing.
	_, err = s.Leave(ctx, cfg, "w1", now)
	require.ErrorIs(t, err, session.ErrNotFound)
	require.NoError(t, s.Touch(ctx, cfg.Name, []session.Touch{{ID: "w2", LastActive: now}}))
	_, err = s.Get(ctx, cfg.Name, "w2")
	require.ErrorIs(t, err, session.ErrNotFound, "a touch does not bring a purged waiter back")

	// A purged waiter that comes back joins at the end of the line.
	back, err := s.Join(ctx, cfg, "w1", now)
	require.NoError(t, err)
	assert.Equal(t, session.StatusWaiting, back.Status)
	assert.EqualValues(t, 13, back.Position)

	// Freed slots go to the first live waiters, not to purged ones.
	for _, id := range []string{"a0", "a1"} {
		_, err = s.Release(ctx, cfg, id, now)
		require.NoError(t, err)
	}
	for _, id := range []string{"w0", "w5"} {
		w, err := s.Get(ctx, cfg.Name, id)
		require.NoError(t, err)
		assert.Equal(t, session.StatusActive, w.Status, id)
	}

	release()
	require.NoError(t, s.WaitClean(ctx))
	assert.Equal(t, 7, physicalRows(t, s, cfg.Name), "the cleaner deleted the purged rows: w0, w5..w9 and w1 again")
	rows, err = s.Rows(ctx, cfg.Name)
	require.NoError(t, err)
	assert.Len(t, rows, 7)
}

// The events of a purge are those of the rows it purged, once each, in the
// transaction that raised the mark, even when a transaction ends inside a
// run of waiters last seen at the same instant (the mark then names a
// position too).
func TestAPurgeInSmallTransactionsReportsEachWaiterOnce(t *testing.T) {
	s := openInternal(t)
	ctx := context.Background()
	cfg := sessiontest.GateConfig("default", 1)
	const waiters = 40
	for i := range waiters + 1 {
		_, err := s.Join(ctx, cfg, fmt.Sprintf("s%02d", i), epoch) // one instant: one run
		require.NoError(t, err)
	}
	var mu sync.Mutex
	seen := map[string]int{}
	s.SetCommitListener(func(c session.Commit) {
		mu.Lock()
		defer mu.Unlock()
		for _, e := range c.Events {
			if e.Kind == session.EventDequeued {
				seen[e.Session.ID]++
				assert.Equal(t, session.Gone, e.Reason)
				assert.Equal(t, epoch, e.Session.LastActive)
				assert.Equal(t, epoch, e.Session.CreatedAt)
			}
		}
	})
	// The active session stays: only the waiters are stale.
	now := epoch.Add(cfg.WaitingTimeout + time.Second)
	require.NoError(t, s.Touch(ctx, cfg.Name, []session.Touch{{ID: "s00", LastActive: now}}))
	rep, err := s.Update(ctx, cfg, now, 3)
	require.NoError(t, err)
	assert.EqualValues(t, waiters, rep.PurgedWaiting)
	assert.Greater(t, rep.Transactions, 1, "transactions that end inside the run")
	mu.Lock()
	assert.Len(t, seen, waiters)
	for id, n := range seen {
		assert.Equal(t, 1, n, id)
	}
	mu.Unlock()
	require.NoError(t, s.WaitClean(ctx))
	assert.Equal(t, 1, physicalRows(t, s, cfg.Name))
	snaps, err := s.Load(ctx, []string{cfg.Name})
	require.NoError(t, err)
	assert.Zero(t, snaps[cfg.Name].State.Waiting)
}

// A waiter written with a sign of life below the mark (a clock set back)
// stays a waiter: recorded at the mark, counted, found, and purged by the
// next update that finds it stale, with its events.
func TestAWaiterDatedBelowTheMarkStaysLive(t *testing.T) {
	s, cfg, now, _ := purgeFixture(t)
	ctx := context.Background()
	late, err := s.Join(ctx, cfg, "late", now.Add(-time.Hour))
	require.NoError(t, err)
	assert.Equal(t, session.StatusWaiting, late.Status)
	got, err := s.Get(ctx, cfg.Name, "late")
	require.NoError(t, err, "a waiter whose clock was behind is not purged by being written")
	assert.Equal(t, epoch, got.LastActive, "recorded at the start of the mark's second, the last purged waiters' (its position is above the mark's)")
	snaps, err := s.Load(ctx, []string{cfg.Name})
	require.NoError(t, err)
	assert.EqualValues(t, 7, snaps[cfg.Name].State.Waiting)
	assert.Len(t, snaps[cfg.Name].Waiting, 7)

	rep, err := s.Update(ctx, cfg, now.Add(cfg.WaitingTimeout), session.DefaultUpdateChunk)
	require.NoError(t, err)
	assert.EqualValues(t, 7, rep.PurgedWaiting, "w0, w5..w9 and late")
	_, err = s.Get(ctx, cfg.Name, "late")
	require.ErrorIs(t, err, session.ErrNotFound)
}

// One update purges stale waiters by the mark, then promotes into the slots
// its purge of idle sessions freed: the promotions step over the purged
// rows, still in the table, to the live waiters behind them, and the line's
// bounds leave out the purged rows at its end.
func TestAnUpdatePromotesPastPurgedWaiters(t *testing.T) {
	s := openInternal(t)
	holdCleaner(t, s)
	ctx := context.Background()
	cfg := sessiontest.GateConfig("default", 2)
	for _, id := range []string{"a0", "a1", "w0", "w1", "w2", "w3", "w4", "w5", "w6", "w7", "w8", "w9"} {
		_, err := s.Join(ctx, cfg, id, epoch)
		require.NoError(t, err)
	}
	now := epoch.Add(cfg.ActiveTimeout + time.Second)
	var touches []session.Touch
	for _, id := range []string{"w0", "w5", "w6", "w7", "w8"} {
		touches = append(touches, session.Touch{ID: id, LastActive: now.Add(-time.Second)})
	}
	require.NoError(t, s.Touch(ctx, cfg.Name, touches))
	rep, err := s.Update(ctx, cfg, now, session.DefaultUpdateChunk)
	require.NoError(t, err)
	assert.EqualValues(t, 5, rep.PurgedWaiting, "w1..w4 and w9")
	assert.EqualValues(t, 2, rep.PurgedActive, "a0 and a1, idle")
	assert.EqualValues(t, 2, rep.Promoted)
	require.Equal(t, 12, physicalRows(t, s, cfg.Name), "the purged sessions' rows, waiting and active, are still in the table")
	for id, want := range map[string]session.Status{"w0": session.StatusActive, "w5": session.StatusActive, "w6": session.StatusWaiting} {
		got, err := s.Get(ctx, cfg.Name, id)
		require.NoError(t, err, id)
		assert.Equal(t, want, got.Status, id)
	}
	snaps, err := s.Load(ctx, []string{cfg.Name})
	require.NoError(t, err)
	st := snaps[cfg.Name].State
	assert.EqualValues(t, 2, st.Active)
	assert.EqualValues(t, 3, st.Waiting)
	assert.EqualValues(t, 9, st.FirstWaitingPosition, "w6")
	assert.EqualValues(t, 11, st.LastWaitingPosition, "w8: w9 is purged")
	assert.Equal(t, []int64{9, 10, 11}, snaps[cfg.Name].Waiting)
	var activeIDs []string
	for _, a := range snaps[cfg.Name].Active {
		activeIDs = append(activeIDs, a.ID)
	}
	assert.Equal(t, []string{"w0", "w5"}, activeIDs, "a0 and a1 are purged")
}

// The priority lane is promoted first, from its own index: a purged
// priority waiter, still in the table, is neither promoted nor loaded.
func TestPurgedPriorityWaitersAreNotPromoted(t *testing.T) {
	s := openInternal(t)
	holdCleaner(t, s)
	ctx := context.Background()
	cfg := sessiontest.GateConfig("default", 1)
	code, err := session.NewPriorityCode(cfg.Name, "vip-code-0123", "vip", 10, epoch.Add(time.Hour), epoch)
	require.NoError(t, err)
	require.NoError(t, s.CreateCode(ctx, code))
	_, err = s.Join(ctx, cfg, "a0", epoch)
	require.NoError(t, err)
	_, err = s.Join(ctx, cfg, "w0", epoch)
	require.NoError(t, err)
	for _, id := range []string{"p0", "p1"} {
		got, codeErr, err := s.JoinWithCode(ctx, cfg, id, "vip-code-0123", epoch)
		require.NoError(t, err)
		require.NoError(t, codeErr)
		require.Equal(t, session.LanePriority, got.Lane)
	}
	now := epoch.Add(cfg.WaitingTimeout + time.Second)
	require.NoError(t, s.Touch(ctx, cfg.Name, []session.Touch{{ID: "a0", LastActive: now}, {ID: "w0", LastActive: now}, {ID: "p1", LastActive: now}}))
	rep, err := s.Update(ctx, cfg, now, session.DefaultUpdateChunk)
	require.NoError(t, err)
	require.EqualValues(t, 1, rep.PurgedWaiting, "p0")
	snaps, err := s.Load(ctx, []string{cfg.Name})
	require.NoError(t, err)
	assert.Equal(t, []int64{4}, snaps[cfg.Name].PriorityWaiting, "p1 only")

	_, err = s.Release(ctx, cfg, "a0", now)
	require.NoError(t, err)
	p1, err := s.Get(ctx, cfg.Name, "p1")
	require.NoError(t, err)
	assert.Equal(t, session.StatusActive, p1.Status, "the live priority waiter, not the purged one before it")
}

// The purge marks come from disk, and the rows they cover are deleted at
// Open: a mark edited or damaged so that it covers live sessions, or that
// is not a number, or that lies far ahead, is refused with ErrDamaged
// before anything is deleted, with a way on; the way on (resetting the
// marks) opens the file with every row live.
func TestOpenRefusesADamagedPurgeMark(t *testing.T) {
	for _, tc := range []struct {
		name, set, says string
	}{
		{"covers live waiters", fmt.Sprintf("purged_seen = %d, purged_position = 0", epoch.Add(time.Second).UnixNano()), "covers 10 of its 10 waiting rows, but its counter counts 10 waiting sessions, not 0"},
		{"not a number", "purged_seen = 'soon'", "is not a number"},
		{"a real number", "purged_position = 1.5", "is not a number"},
		{"far ahead", "purged_seen = 9223372036854775807", "more than a year ahead"},
		// The active mark (migrations/0012), checked the same way.
		{"active mark covers live active sessions", fmt.Sprintf("active_purged_seen = %d, active_purged_position = 0", epoch.Add(time.Second).UnixNano()),
			"the active purge mark of gate \"default\" covers 2 of its 2 active rows, but its counter counts 2 active sessions, not 0"},
		{"active mark not a number", "active_purged_position = 'x'", "is not a number"},
		{"active mark far ahead", "active_purged_seen = 9223372036854775807", "more than a year ahead"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "d.db")
			s, err := Open(path, Options{Logger: slog.New(slog.DiscardHandler)})
			require.NoError(t, err)
			cfg := sessiontest.GateConfig("default", 2)
			for i := range 12 {
				_, err := s.Join(context.Background(), cfg, fmt.Sprintf("s%d", i), epoch)
				require.NoError(t, err)
			}
			require.NoError(t, s.Close())
			rawExec(t, path, "UPDATE gates SET "+tc.set)

			_, err = Open(path, Options{Logger: slog.New(slog.DiscardHandler)})
			require.ErrorIs(t, err, ErrDamaged)
			msg := err.Error()
			assert.Contains(t, err.Error(), tc.says)
			assert.Contains(t, err.Error(), `gate "default"`)
			assert.Contains(t, err.Error(), "Restore it from a backup")
			db, err := sqlOpen(path)
			require.NoError(t, err)
			var n int
			require.NoError(t, db.QueryRow(`SELECT count(*) FROM sessions`).Scan(&n))
			require.NoError(t, db.Close())
			assert.Equal(t, 12, n, "nothing was deleted")

			// The way on that the message gives.
			rawExec(t, path, msg[strings.Index(msg, "UPDATE gates"):])
			r := reopen(t, path, nil)
			snaps, err := r.Load(context.Background(), []string{"default"})
			require.NoError(t, err)
			assert.EqualValues(t, 10, snaps["default"].State.Waiting)
			assert.Len(t, snaps["default"].Waiting, 10)
			assert.EqualValues(t, 2, snaps["default"].State.Active)
			assert.Len(t, snaps["default"].Active, 2)
		})
	}
}

// One update run on a clock that was ahead (a step corrected at once) must
// not leave the mark in the future: keepLive would date every later
// waiter there, and a waiter who left would stay in line, and take a freed
// slot, until the clock caught up. The mark is a purged waiter's own sign
// of life, never the cutoff.
func TestAnUpdateOnAClockAheadLeavesNoMarkAhead(t *testing.T) {
	s := openInternal(t)
	ctx := context.Background()
	cfg := sessiontest.GateConfig("default", 1)
	_, err := s.Join(ctx, cfg, "a0", epoch)
	require.NoError(t, err)
	_, err = s.Join(ctx, cfg, "w0", epoch)
	require.NoError(t, err)

	_, err = s.Update(ctx, cfg, epoch.Add(365*24*time.Hour), session.DefaultUpdateChunk) // a year ahead
	require.NoError(t, err)

	now := epoch.Add(time.Minute) // the clock is right again
	b0, err := s.Join(ctx, cfg, "b0", now)
	require.NoError(t, err)
	require.Equal(t, session.StatusActive, b0.Status)
	ghost, err := s.Join(ctx, cfg, "ghost", now)
	require.NoError(t, err)
	require.Equal(t, session.StatusWaiting, ghost.Status)
	assert.Equal(t, now, ghost.LastActive, "dated by its own clock")

	later := now.Add(cfg.WaitingTimeout + time.Second)
	require.True(t, session.IsStale(cfg, ghost, later))
	rep, err := s.Update(ctx, cfg, later, session.DefaultUpdateChunk)
	require.NoError(t, err)
	assert.EqualValues(t, 1, rep.PurgedWaiting, "the waiter who left is purged at the next update")

	rep, err = s.Update(ctx, cfg, now.Add(24*time.Hour), session.DefaultUpdateChunk)
	require.NoError(t, err)
	assert.EqualValues(t, 1, rep.PurgedActive)
	assert.Zero(t, rep.Promoted, "nobody live waits: the freed slot goes to nobody")
	_, err = s.Get(ctx, cfg.Name, "ghost")
	assert.ErrorIs(t, err, session.ErrNotFound)
}

// A waiter that keepLive dated at the mark is returned, and reported, as
// stored.
func TestAJoinBelowTheMarkReturnsTheSessionAsStored(t *testing.T) {
	s, cfg, now, _ := purgeFixture(t)
	ctx := context.Background()
	var mu sync.Mutex
	var queued []session.Session
	s.SetCommitListener(func(c session.Commit) {
		mu.Lock()
		defer mu.Unlock()
		for _, e := range c.Events {
			if e.Kind == session.EventQueued {
				queued = append(queued, e.Session)
			}
		}
	})
	late, err := s.Join(ctx, cfg, "late", now.Add(-time.Hour))
	require.NoError(t, err)
	stored, err := s.Get(ctx, cfg.Name, "late")
	require.NoError(t, err)
	assert.Equal(t, stored.LastActive, late.LastActive, "Join returns the session as stored")
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, queued, 1)
	assert.Equal(t, stored.LastActive, queued[0].LastActive, "the event reports the session as stored")
}

// A failed transaction drops the writer's cache of gates, and the cleaner
// forgets a gate when it starts on it: Close still finds every gate with
// purged rows left (from the table), so a clean stop leaves none and the
// next start takes the snapshot.
func TestCloseAfterAFailedBatchLeavesNoPurgedRows(t *testing.T) {
	s, cfg, now, _ := purgeFixture(t)
	path := s.Path()
	setHooks(t, nil, func() error { return errors.New("injected commit failure") })
	_, err := s.Join(context.Background(), cfg, "x", now)
	require.Error(t, err, "the batch failed: the writer's cache is cleared")
	testHookBeforeCommit = nil
	require.NoError(t, s.Close())

	log := &sessiontest.LogBuffer{}
	r := reopen(t, path, log)
	assert.NotContains(t, log.String(), "purged before the last stop", "a clean stop leaves no purged row")
	assert.Contains(t, log.String(), "loaded from the snapshot")
	assert.Equal(t, 8, physicalRows(t, r, cfg.Name))
}

// WaitClean does not wait for a cleaner that Close stopped.
func TestWaitCleanReturnsAtClose(t *testing.T) {
	s, _, _, _ := purgeFixture(t) // the cleaner is held with work to do
	s.clean.mu.Lock()
	busy := s.clean.busy
	s.clean.mu.Unlock()
	require.True(t, busy, "the premise: the cleaner has work")
	done := make(chan error, 1)
	go func() { done <- s.WaitClean(context.Background()) }()
	require.Never(t, func() bool { return len(done) > 0 }, 50*time.Millisecond, 5*time.Millisecond, "WaitClean waits while the cleaner has work")
	require.NoError(t, s.Close())
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("WaitClean still waits after Close")
	}
}

// Open writes nothing to a file it refuses: purged rows left by a crash
// are deleted only once quick_check found the file sound.
func TestOpenDeletesNothingFromAFileItRefuses(t *testing.T) {
	s, cfg, _, _ := purgeFixture(t)
	ctx := context.Background()
	for i := range 2000 { // a table of many pages, one of which is damaged below
		c, err := session.NewPriorityCode(cfg.Name, fmt.Sprintf("code-%04d-padding-padding", i), "a label long enough to fill pages", 1, epoch.Add(time.Hour), epoch)
		require.NoError(t, err)
		require.NoError(t, s.CreateCode(ctx, c))
	}
	crashed := copyFiles(t, s.Path(), t.TempDir(), "", "-wal")
	rawExec(t, crashed, "PRAGMA wal_checkpoint(TRUNCATE)") // the purged rows, in the database file itself
	corruptLeaf(t, crashed, "priority_codes")

	_, err := Open(crashed, Options{Logger: slog.New(slog.DiscardHandler)})
	require.ErrorIs(t, err, ErrDamaged)
	assert.Contains(t, err.Error(), "quick_check")
	db, err := sqlOpen(crashed)
	require.NoError(t, err)
	defer db.Close()
	var n int
	require.NoError(t, db.QueryRow(`SELECT count(*) FROM sessions`).Scan(&n))
	assert.Equal(t, 12, n, "the refused file still holds every row, the purged ones included")
}

// Close spends at most closeCleanBudget on the purged rows the cleaner
// left, and says so; the next Open deletes the rest.
func TestCloseLeavesWhatItsBudgetDoesNotCover(t *testing.T) {
	defer func(b time.Duration) { closeCleanBudget = b }(closeCleanBudget)
	closeCleanBudget = 0
	path := filepath.Join(t.TempDir(), "m.db")
	closeLog := &sessiontest.LogBuffer{}
	s, err := Open(path, Options{Logger: slog.New(slog.NewTextHandler(closeLog, nil))})
	require.NoError(t, err)
	holdCleaner(t, s)
	ctx := context.Background()
	cfg := sessiontest.GateConfig("default", 1)
	for _, id := range []string{"a0", "w0", "w1", "w2"} {
		_, err := s.Join(ctx, cfg, id, epoch)
		require.NoError(t, err)
	}
	now := epoch.Add(cfg.WaitingTimeout + time.Second)
	require.NoError(t, s.Touch(ctx, cfg.Name, []session.Touch{{ID: "a0", LastActive: now}}))
	rep, err := s.Update(ctx, cfg, now, session.DefaultUpdateChunk)
	require.NoError(t, err)
	require.EqualValues(t, 3, rep.PurgedWaiting)
	require.NoError(t, s.Close())
	assert.Contains(t, closeLog.String(), "stopped deleting purged sessions at close")

	log := &sessiontest.LogBuffer{}
	r := reopen(t, path, log)
	assert.Contains(t, log.String(), "deleted the rows of sessions purged before the last stop")
	assert.Contains(t, log.String(), "rows=3")
	assert.Equal(t, 1, physicalRows(t, r, cfg.Name))
}

// The cleaner is told of a gate only once the transaction that raised its
// mark committed: told before, a running cleaner's op could be taken into
// that same transaction, see the mark as stored before it, delete nothing
// of the new purge and forget the gate. A transaction that fails tells it
// nothing.
func TestTheCleanerHearsOfAPurgeOnlyAfterItsCommit(t *testing.T) {
	s := openInternal(t)
	ctx := context.Background()
	cfg := sessiontest.GateConfig("default", 1)
	for _, id := range []string{"a0", "w0", "w1"} {
		_, err := s.Join(ctx, cfg, id, epoch)
		require.NoError(t, err)
	}
	now := epoch.Add(cfg.WaitingTimeout + time.Second)
	require.NoError(t, s.Touch(ctx, cfg.Name, []session.Touch{{ID: "a0", LastActive: now}}))
	setHooks(t, nil, func() error { return errors.New("injected commit failure") })
	_, err := s.Update(ctx, cfg, now, session.DefaultUpdateChunk)
	require.Error(t, err)
	s.clean.mu.Lock()
	gates, busy := len(s.clean.gates), s.clean.busy
	s.clean.mu.Unlock()
	assert.Zero(t, gates, "no gate was handed to the cleaner")
	assert.False(t, busy)

	testHookBeforeCommit = nil
	rep, err := s.Update(ctx, cfg, now, session.DefaultUpdateChunk)
	require.NoError(t, err)
	require.EqualValues(t, 2, rep.PurgedWaiting)
	require.NoError(t, s.WaitClean(ctx))
	assert.Equal(t, 1, physicalRows(t, s, cfg.Name))
}

// A waiter before the mark's position whose sign of life a clock set back
// dates below the mark is recorded at the start of the second
// after the mark's: at the start of the mark's own second, its position
// would still be under the mark (migrations/0013). It stays a waiter, in
// its place.
func TestAWaiterBeforeTheMarksPositionIsDatedAtTheNextSecond(t *testing.T) {
	s, cfg, _, _ := purgeFixture(t)
	ctx := context.Background()
	// w0 was touched (live), and sits before the purged w1..w4.
	left, err := s.Leave(ctx, cfg, "w0", epoch.Add(-time.Hour))
	require.NoError(t, err)
	assert.Equal(t, epoch.Add(time.Second), left.LastActive, "the second after the mark's")
	got, err := s.Get(ctx, cfg.Name, "w0")
	require.NoError(t, err, "written below the mark, w0 would be purged without a word")
	assert.Equal(t, session.StatusWaiting, got.Status)
	assert.Equal(t, left.LastActive, got.LastActive)
	snaps, err := s.Load(ctx, []string{cfg.Name})
	require.NoError(t, err)
	assert.EqualValues(t, 6, snaps[cfg.Name].State.Waiting)
	assert.Len(t, snaps[cfg.Name].Waiting, 6)
}

// The update purges exactly what is stale at its cutoff although the mark
// covers whole seconds (migrations/0013): a waiter last seen in
// the cutoff's own second, before the cutoff, is deleted with its row; one
// of an earlier second goes under the mark; one of the same second at or
// after the cutoff stays.
func TestTheCutoffsSecondIsPurgedExactly(t *testing.T) {
	s := openInternal(t)
	holdCleaner(t, s)
	ctx := context.Background()
	cfg := sessiontest.GateConfig("default", 1)
	for _, id := range []string{"a0", "w-old", "w-edge", "w-live"} {
		_, err := s.Join(ctx, cfg, id, epoch)
		require.NoError(t, err)
	}
	now := epoch.Add(cfg.WaitingTimeout + time.Second + 50*time.Millisecond)
	cutoff := now.Add(-cfg.WaitingTimeout)
	require.NoError(t, s.Touch(ctx, cfg.Name, []session.Touch{
		{ID: "a0", LastActive: now},
		{ID: "w-edge", LastActive: cutoff.Add(-time.Nanosecond)},
		{ID: "w-live", LastActive: cutoff},
	}))
	require.Equal(t, seenSecond(cutoff.UnixNano()), seenSecond(cutoff.Add(-30*time.Millisecond).UnixNano()), "the premise: w-edge and w-live share the cutoff's second")

	rep, err := s.Update(ctx, cfg, now, session.DefaultUpdateChunk)
	require.NoError(t, err)
	assert.EqualValues(t, 2, rep.PurgedWaiting, "w-old and w-edge")
	assert.Zero(t, rep.Promoted)
	rows, err := s.Rows(ctx, cfg.Name)
	require.NoError(t, err)
	var ids []string
	for _, r := range rows {
		ids = append(ids, r.ID)
	}
	assert.Equal(t, []string{"a0", "w-live"}, ids)
	assert.Equal(t, 3, physicalRows(t, s, cfg.Name), "w-old's row waits under the mark for the cleaner; w-edge's is deleted")
	_, err = s.Get(ctx, cfg.Name, "w-edge")
	assert.ErrorIs(t, err, session.ErrNotFound)
	snaps, err := s.Load(ctx, []string{cfg.Name})
	require.NoError(t, err)
	assert.EqualValues(t, 1, snaps[cfg.Name].State.Waiting)
}

// A session the mark purged, whose row waits for the cleaner, lies in the
// cutoff's own second when the clock is set back: the statement that
// deletes the stale rows of that second in place (sqlPurgeWaitingInPlace,
// sqlPurgeActive) must leave it out, or it is counted out and reported a
// second time and the counter drifts below the rows.
func TestARowUnderTheMarkInTheCutoffsSecondIsNotPurgedTwice(t *testing.T) {
	for _, tc := range []struct {
		name   string
		active bool
	}{{"waiting", false}, {"active", true}} {
		t.Run(tc.name, func(t *testing.T) {
			s := openInternal(t)
			holdCleaner(t, s) // the purged row stays under the mark
			ctx := context.Background()
			limit := int64(1)
			if tc.active {
				limit = 2
			}
			cfg := sessiontest.GateConfig("default", limit)
			timeout := cfg.WaitingTimeout
			if tc.active {
				timeout = cfg.ActiveTimeout
			}
			for _, id := range []string{"keep", "gone"} {
				_, err := s.Join(ctx, cfg, id, epoch)
				require.NoError(t, err)
			}
			seen := epoch.Add(200 * time.Millisecond) // gone's last sign of life, in second S
			now1 := seen.Add(timeout + 2*time.Second)
			require.NoError(t, s.Touch(ctx, cfg.Name, []session.Touch{{ID: "gone", LastActive: seen}, {ID: "keep", LastActive: now1}}))
			rep, err := s.Update(ctx, cfg, now1, session.DefaultUpdateChunk)
			require.NoError(t, err)
			require.EqualValues(t, 1, rep.PurgedWaiting+rep.PurgedActive, "gone, by the mark")
			require.Equal(t, 2, physicalRows(t, s, cfg.Name), "gone's row waits under the mark")

			// The clock goes back: the cutoff falls in S, after gone's sign of life.
			now2 := epoch.Add(500*time.Millisecond + timeout)
			require.Equal(t, seenSecond(seen.UnixNano()), seenSecond(now2.Add(-timeout).UnixNano()))
			rep, err = s.Update(ctx, cfg, now2, session.DefaultUpdateChunk)
			require.NoError(t, err)
			assert.Zero(t, rep.PurgedWaiting+rep.PurgedActive, "gone was purged already")

			snaps, err := s.Load(ctx, []string{cfg.Name})
			require.NoError(t, err)
			st := snaps[cfg.Name].State
			assert.EqualValues(t, 1, st.Active+st.Waiting, "keep is counted")
			rows, err := s.Rows(ctx, cfg.Name)
			require.NoError(t, err)
			require.Len(t, rows, 1)
			assert.Equal(t, "keep", rows[0].ID)
		})
	}
}

// The lottery at an event's start moves pre-queued waiters to other
// positions of the draw. A waiter dated in the mark's second above its
// position (keepLive, a clock set back) that the draw moves before the
// mark's position would fall under the mark (migrations/0013: the mark
// orders by second, then position): moveSessions dates it again
// (keepLive), and it stays a waiter, counted and found.
func TestAWaiterTheLotteryMovesBeforeTheMarksPositionStaysLive(t *testing.T) {
	s := openInternal(t)
	holdCleaner(t, s) // the purged rows stay under the mark
	ctx := context.Background()
	cfg := sessiontest.GateConfig("default", 1)
	held := cfg
	held.Mode = session.ModeQueueAll
	_, err := s.Join(ctx, cfg, "a0", epoch)
	require.NoError(t, err)
	ev := session.ScheduledEvent{Gate: "default", ID: "drop", PrequeueAt: epoch, StartsAt: epoch.Add(time.Hour),
		Shuffle: true, Seed: []byte("0123456789abcdef0123456789abcdef")}
	_, err = s.SaveEvent(ctx, ev)
	require.NoError(t, err)
	_, changed, err := s.AdvanceEvent(ctx, "default", "drop", epoch)
	require.NoError(t, err)
	require.True(t, changed, "the pre-queue opens")

	var keep, gone, late []string
	for i := range 5 {
		keep = append(keep, fmt.Sprintf("keep%d", i))
		gone = append(gone, fmt.Sprintf("gone%d", i))
		late = append(late, fmt.Sprintf("late%d", i))
	}
	for _, id := range append(append([]string{}, keep...), gone...) {
		_, err := s.Join(ctx, held, id, epoch)
		require.NoError(t, err)
	}
	now := epoch.Add(cfg.WaitingTimeout + 2*time.Second)
	var ts []session.Touch
	for _, id := range append([]string{"a0"}, keep...) {
		ts = append(ts, session.Touch{ID: id, LastActive: now})
	}
	require.NoError(t, s.Touch(ctx, cfg.Name, ts))
	rep, err := s.Update(ctx, cfg, now, session.DefaultUpdateChunk)
	require.NoError(t, err)
	require.EqualValues(t, len(gone), rep.PurgedWaiting, "the gone waiters go under the mark (epoch's second, after their positions)")

	// A clock set back: new waiters are dated at the start of the mark's
	// second, after its position.
	for _, id := range late {
		w, err := s.Join(ctx, held, id, epoch.Add(-time.Hour))
		require.NoError(t, err)
		require.Equal(t, epoch, w.LastActive, "keepLive: the start of the mark's second")
	}

	_, changed, err = s.AdvanceEvent(ctx, "default", "drop", ev.StartsAt)
	require.NoError(t, err)
	require.True(t, changed, "the lottery is drawn")

	snaps, err := s.Load(ctx, []string{cfg.Name})
	require.NoError(t, err)
	assert.EqualValues(t, len(keep)+len(late), snaps[cfg.Name].State.Waiting)
	rows, err := s.Rows(ctx, cfg.Name)
	require.NoError(t, err)
	assert.Len(t, rows, 1+len(keep)+len(late), "every waiter of the draw is live")
	for _, id := range append(append([]string{}, keep...), late...) {
		_, err := s.Get(ctx, cfg.Name, id)
		assert.NoError(t, err, "%s, moved by the draw", id)
	}
}

// The stale rows of the cutoff's own second are deleted in place through
// steps of a few rows, in position order, each going on where the last
// stopped (updateStep.inPlace): the second's live rows stay.
func TestTheCutoffsSecondIsDeletedInPlaceThroughSmallSteps(t *testing.T) {
	for _, active := range []bool{false, true} {
		t.Run(fmt.Sprint("active ", active), func(t *testing.T) {
			s := openInternal(t)
			holdCleaner(t, s)
			ctx := context.Background()
			const n = 60
			limit := int64(1)
			if active {
				limit = n
			}
			cfg := sessiontest.GateConfig("default", limit)
			timeout := cfg.WaitingTimeout
			if active {
				timeout = cfg.ActiveTimeout
			}
			now := epoch.Add(timeout + time.Second + 500*time.Millisecond)
			cutoff := now.Add(-timeout)
			var touches []session.Touch
			stale := map[string]bool{}
			for i := range n {
				id := fmt.Sprintf("s%02d", i)
				_, err := s.Join(ctx, cfg, id, epoch)
				require.NoError(t, err)
				// In the cutoff's second: every third one after the
				// cutoff (live), the others before it (stale).
				la := cutoff.Add(-time.Duration(i+1) * time.Millisecond)
				if i%3 == 0 {
					la = cutoff.Add(time.Duration(i) * time.Millisecond)
				} else {
					stale[id] = true
				}
				touches = append(touches, session.Touch{ID: id, LastActive: la})
			}
			if !active {
				touches[0].LastActive = now // the one active session stays
				delete(stale, "s00")
			}
			require.NoError(t, s.Touch(ctx, cfg.Name, touches))
			rep, err := s.Update(ctx, cfg, now, 3)
			require.NoError(t, err)
			assert.EqualValues(t, len(stale), rep.PurgedWaiting+rep.PurgedActive)
			rows, err := s.Rows(ctx, cfg.Name)
			require.NoError(t, err)
			for _, r := range rows {
				assert.False(t, stale[r.ID], "%s is stale and stays", r.ID)
			}
			assert.Len(t, rows, n-len(stale))
			assert.Equal(t, n-len(stale), physicalRows(t, s, cfg.Name), "deleted in place, not under a mark")
		})
	}
}
