package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"math"
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

// The update purges active sessions idle past the active timeout by raising
// the gate's active purge mark, and the cleaner deletes their rows
// afterwards (migrations/0012), as it does for waiters (purgemark tests).
// These tests hold the cleaner back, so that the purged rows are still in
// the table, and check that nothing reads them as sessions meanwhile.

// activeIDs lists the ids of sessions, in order.
func activeIDs(sessions []session.Session) []string {
	var ids []string
	for _, a := range sessions {
		ids = append(ids, a.ID)
	}
	return ids
}

// storedMarks reads gate's purge marks as stored: purged_seen,
// purged_position, active_purged_seen, active_purged_position.
func storedMarks(t *testing.T, db *sql.DB, gate string) [4]int64 {
	t.Helper()
	var m [4]int64
	require.NoError(t, db.QueryRowContext(context.Background(), `SELECT purged_seen, purged_position, active_purged_seen, active_purged_position FROM gates WHERE name = ?`, gate).Scan(&m[0], &m[1], &m[2], &m[3]))
	return m
}

// activePurgeFixture is an open store (cleaner held) whose gate (limit 3)
// had three active sessions a0, a1, a2 (positions 1..3) and four waiters
// w0..w3 (4..7), all joined at epoch; all but a0 and a2 showed a sign of
// life since, and an update at now purged a0 and a2 as idle and promoted
// w0 and w1 into their slots. It returns the update's events.
func activePurgeFixture(t *testing.T) (s *Store, cfg session.GateConfig, now time.Time, events func() []session.Event, release func()) {
	t.Helper()
	s = openInternal(t)
	release = holdCleaner(t, s)
	ctx := context.Background()
	cfg = sessiontest.GateConfig("default", 3)
	for _, id := range []string{"a0", "a1", "a2", "w0", "w1", "w2", "w3"} {
		_, err := s.Join(ctx, cfg, id, epoch)
		require.NoError(t, err)
	}
	now = epoch.Add(cfg.ActiveTimeout + time.Second)
	var touches []session.Touch
	for _, id := range []string{"a1", "w0", "w1", "w2", "w3"} {
		touches = append(touches, session.Touch{ID: id, LastActive: now.Add(-time.Second)})
	}
	require.NoError(t, s.Touch(ctx, cfg.Name, touches))
	var mu sync.Mutex
	var seen []session.Event
	s.SetCommitListener(func(c session.Commit) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, c.Events...)
	})
	rep, err := s.Update(ctx, cfg, now, session.DefaultUpdateChunk)
	require.NoError(t, err)
	require.EqualValues(t, 2, rep.PurgedActive)
	require.Zero(t, rep.PurgedWaiting)
	require.EqualValues(t, 2, rep.Promoted)
	require.Equal(t, 7, physicalRows(t, s, cfg.Name), "the purged rows are still in the table: the premise of the test")
	events = func() []session.Event {
		mu.Lock()
		defer mu.Unlock()
		return append([]session.Event(nil), seen...)
	}
	return s, cfg, now, events, release
}

func TestIdleActiveSessionsAreGoneBeforeTheirRowsAre(t *testing.T) {
	s, cfg, now, events, release := activePurgeFixture(t)
	ctx := context.Background()

	// Reported once each, as idle, with their rows as they were.
	deactivated := map[string]int{}
	for _, e := range events() {
		if e.Kind == session.EventDeactivated {
			deactivated[e.Session.ID]++
			assert.Equal(t, session.Idle, e.Reason, e.Session.ID)
			assert.Equal(t, epoch, e.Session.LastActive, e.Session.ID)
		}
	}
	assert.Equal(t, map[string]int{"a0": 1, "a2": 1}, deactivated)

	for _, id := range []string{"a0", "a2"} { // the id index dropped them; Rows and Load check the rows
		_, err := s.Get(ctx, cfg.Name, id)
		require.ErrorIs(t, err, session.ErrNotFound, id)
	}
	rows, err := s.Rows(ctx, cfg.Name)
	require.NoError(t, err)
	var ids []string
	for _, r := range rows {
		ids = append(ids, r.ID)
	}
	assert.Equal(t, []string{"a1", "w0", "w1", "w2", "w3"}, ids)

	snaps, err := s.Load(ctx, []string{cfg.Name})
	require.NoError(t, err)
	snap := snaps[cfg.Name]
	assert.EqualValues(t, 3, snap.State.Active)
	assert.Equal(t, []string{"a1", "w0", "w1"}, activeIDs(snap.Active), "the active set leaves a0 and a2 out")

	// A purged session's sign of life, departure or release finds nothing.
	_, err = s.Leave(ctx, cfg, "a0", now)
	require.ErrorIs(t, err, session.ErrNotFound)
	_, err = s.Release(ctx, cfg, "a2", now)
	require.ErrorIs(t, err, session.ErrNotFound)
	require.NoError(t, s.Touch(ctx, cfg.Name, []session.Touch{{ID: "a0", LastActive: now}}))
	_, err = s.Get(ctx, cfg.Name, "a0")
	require.ErrorIs(t, err, session.ErrNotFound, "a touch does not bring a purged session back")

	// One that comes back joins at the end of the line.
	back, err := s.Join(ctx, cfg, "a0", now)
	require.NoError(t, err)
	assert.Equal(t, session.StatusWaiting, back.Status)
	assert.EqualValues(t, 8, back.Position)

	release()
	require.NoError(t, s.WaitClean(ctx))
	assert.Equal(t, 6, physicalRows(t, s, cfg.Name), "the cleaner deleted the purged rows: a1, w0..w3 and a0 again")
	snaps, err = s.Load(ctx, []string{cfg.Name})
	require.NoError(t, err)
	assert.Equal(t, []string{"a1", "w0", "w1"}, activeIDs(snaps[cfg.Name].Active))
}

// An active session written with a sign of life below the active mark (a
// clock set back) stays active: recorded at the mark, counted, found, and
// purged by the next update that finds it idle.
func TestAnActiveSessionDatedBelowTheActiveMarkStaysLive(t *testing.T) {
	s := openInternal(t)
	holdCleaner(t, s)
	ctx := context.Background()
	cfg := sessiontest.GateConfig("default", 2)
	for _, id := range []string{"a0", "a1"} {
		_, err := s.Join(ctx, cfg, id, epoch)
		require.NoError(t, err)
	}
	now := epoch.Add(cfg.ActiveTimeout + time.Second)
	require.NoError(t, s.Touch(ctx, cfg.Name, []session.Touch{{ID: "a1", LastActive: now}}))
	rep, err := s.Update(ctx, cfg, now, session.DefaultUpdateChunk)
	require.NoError(t, err)
	require.EqualValues(t, 1, rep.PurgedActive, "a0")

	late, err := s.Join(ctx, cfg, "late", epoch.Add(-time.Hour))
	require.NoError(t, err)
	require.Equal(t, session.StatusActive, late.Status)
	got, err := s.Get(ctx, cfg.Name, "late")
	require.NoError(t, err, "an active session whose clock was behind is not purged by being written")
	assert.Equal(t, epoch, got.LastActive, "recorded at the start of the mark's second (its position is above the mark's)")
	assert.Equal(t, got.LastActive, late.LastActive, "Join returns the session as stored")
	snaps, err := s.Load(ctx, []string{cfg.Name})
	require.NoError(t, err)
	assert.Equal(t, []string{"a1", "late"}, activeIDs(snaps[cfg.Name].Active))

	later := now.Add(time.Minute)
	require.NoError(t, s.Touch(ctx, cfg.Name, []session.Touch{{ID: "a1", LastActive: later}}))
	rep, err = s.Update(ctx, cfg, later, session.DefaultUpdateChunk)
	require.NoError(t, err)
	assert.EqualValues(t, 1, rep.PurgedActive, "late, idle since the mark")
	_, err = s.Get(ctx, cfg.Name, "late")
	require.ErrorIs(t, err, session.ErrNotFound)
}

// A session promoted with a claim window and never claimed, idle past the
// active timeout, is purged by the active mark and reported as unclaimed
// with its deadline, not as idle: its claim deadline is read from its row
// when the gate has any (sqlAnyClaim). It stays purged when a later update
// runs on a clock set back: the branch that deletes the unclaimed leaves
// the rows below the mark out, or the session would be counted out twice.
func TestAnUnclaimedSessionPurgedByTheActiveMarkIsReportedOnce(t *testing.T) {
	s := openInternal(t)
	holdCleaner(t, s)
	ctx := context.Background()
	cfg := sessiontest.GateConfig("default", 1)
	cfg.ClaimTimeout = 10 * time.Second
	for _, id := range []string{"a0", "w0"} {
		_, err := s.Join(ctx, cfg, id, epoch)
		require.NoError(t, err)
	}
	_, err := s.Release(ctx, cfg, "a0", epoch)
	require.NoError(t, err)
	w0, err := s.Get(ctx, cfg.Name, "w0")
	require.NoError(t, err)
	require.Equal(t, session.StatusActive, w0.Status)
	require.False(t, w0.ClaimDeadline.IsZero(), "promoted with a claim window")

	var mu sync.Mutex
	var purged []session.Event
	s.SetCommitListener(func(c session.Commit) {
		mu.Lock()
		defer mu.Unlock()
		for _, e := range c.Events {
			if e.Kind == session.EventDeactivated {
				purged = append(purged, e)
			}
		}
	})
	rep, err := s.Update(ctx, cfg, epoch.Add(cfg.ActiveTimeout+time.Second), session.DefaultUpdateChunk)
	require.NoError(t, err)
	require.EqualValues(t, 1, rep.PurgedActive, "w0, by the active mark")

	rep, err = s.Update(ctx, cfg, epoch.Add(20*time.Second), session.DefaultUpdateChunk) // the clock set back
	require.NoError(t, err)
	assert.Zero(t, rep.PurgedActive, "w0 is purged already")
	snaps, err := s.Load(ctx, []string{cfg.Name})
	require.NoError(t, err)
	assert.Zero(t, snaps[cfg.Name].State.Active)
	assert.Empty(t, snaps[cfg.Name].Active)

	mu.Lock()
	defer mu.Unlock()
	require.Len(t, purged, 1, "reported once")
	assert.Equal(t, session.Unclaimed, purged[0].Reason)
	assert.Equal(t, w0.ClaimDeadline, purged[0].Session.ClaimDeadline)
}

// A process that stops before the cleaner deleted the purged rows leaves
// them in the file: the next Open deletes them before it reads anything,
// so that its index and counters hold only live sessions. A clean stop
// deletes them itself (Close), so that the next start takes the index's
// snapshot. Either way the marks then cover nothing again. The same for
// the rows of either mark: waiters (purgeFixture, four rows in two
// statements and a checkpoint) or idle active sessions alone
// (activePurgeFixture, two rows).
func TestThePurgedRowsAStopOrACloseLeftAreDeleted(t *testing.T) {
	defer func(n int64) { restChunk = n }(restChunk)
	restChunk = 3
	noMarks := [4]int64{math.MinInt64, math.MinInt64, math.MinInt64, math.MinInt64}
	for _, tc := range []struct {
		name          string
		fixture       func(t *testing.T) (*Store, string)
		purged, live  int
		loadedLiveSet func(t *testing.T, snap session.GateSnapshot)
	}{
		{"waiters", func(t *testing.T) (*Store, string) {
			s, cfg, _, _ := purgeFixture(t)
			return s, cfg.Name
		}, 4, 8, func(t *testing.T, snap session.GateSnapshot) {
			assert.EqualValues(t, 6, snap.State.Waiting)
			assert.Equal(t, []int64{3, 8, 9, 10, 11, 12}, snap.Waiting)
		}},
		{"idle active sessions", func(t *testing.T) (*Store, string) {
			s, cfg, _, _, _ := activePurgeFixture(t)
			return s, cfg.Name
		}, 2, 5, func(t *testing.T, snap session.GateSnapshot) {
			assert.EqualValues(t, 3, snap.State.Active)
			assert.Equal(t, []string{"a1", "w0", "w1"}, activeIDs(snap.Active))
		}},
	} {
		t.Run(tc.name+", after a stop", func(t *testing.T) {
			s, gate := tc.fixture(t)
			crashed := copyFiles(t, s.Path(), t.TempDir(), "", "-wal")
			log := &sessiontest.LogBuffer{}
			r := reopen(t, crashed, log)
			assert.Contains(t, log.String(), "deleted the rows of sessions purged before the last stop")
			assert.Contains(t, log.String(), fmt.Sprintf("rows=%d", tc.purged))
			assert.NotContains(t, log.String(), "did not match", "the counters agree with the rows left")
			assert.Equal(t, tc.live, physicalRows(t, r, gate))
			assert.Equal(t, noMarks, storedMarks(t, r.readDB, gate), "nothing is left below the marks: they cover nothing again")
			snaps, err := r.Load(context.Background(), []string{gate})
			require.NoError(t, err)
			tc.loadedLiveSet(t, snaps[gate])
		})
		t.Run(tc.name+", at close", func(t *testing.T) {
			s, gate := tc.fixture(t)
			path := s.Path()
			require.NoError(t, s.Close()) // with the cleaner held
			db, err := sqlOpen(path)
			require.NoError(t, err)
			assert.Equal(t, noMarks, storedMarks(t, db, gate), "Close deleted every purged row: the marks cover nothing again")
			require.NoError(t, db.Close())
			log := &sessiontest.LogBuffer{}
			r := reopen(t, path, log)
			assert.NotContains(t, log.String(), "purged before the last stop")
			assert.Contains(t, log.String(), "loaded from the snapshot")
			assert.Equal(t, tc.live, physicalRows(t, r, gate))
		})
	}
}

// A waiter promoted on a clock set back below the active mark is stored at
// the mark, as keepLive dates any live active session, and stays active.
func TestAWaiterPromotedBelowTheActiveMarkStaysActive(t *testing.T) {
	s := openInternal(t)
	holdCleaner(t, s)
	ctx := context.Background()
	cfg := sessiontest.GateConfig("default", 1)
	for _, id := range []string{"a0", "w0", "w1"} {
		_, err := s.Join(ctx, cfg, id, epoch)
		require.NoError(t, err)
	}
	now := epoch.Add(cfg.ActiveTimeout + time.Second)
	require.NoError(t, s.Touch(ctx, cfg.Name, []session.Touch{{ID: "w0", LastActive: now}, {ID: "w1", LastActive: now}}))
	rep, err := s.Update(ctx, cfg, now, session.DefaultUpdateChunk)
	require.NoError(t, err)
	require.EqualValues(t, 1, rep.PurgedActive, "a0: the active mark is at epoch")
	require.EqualValues(t, 1, rep.Promoted, "w0")

	_, err = s.Release(ctx, cfg, "w0", epoch.Add(-time.Hour)) // the clock set back
	require.NoError(t, err)
	w1, err := s.Get(ctx, cfg.Name, "w1")
	require.NoError(t, err, "promoted below the mark, w1 would be purged without a word")
	assert.Equal(t, session.StatusActive, w1.Status)
	assert.Equal(t, epoch, w1.LastActive, "the start of the mark's second")
	snaps, err := s.Load(ctx, []string{cfg.Name})
	require.NoError(t, err)
	assert.Equal(t, []string{"w1"}, activeIDs(snaps[cfg.Name].Active))
}

// An active session before the active mark's position, written with a sign
// of life a clock set back dates below the mark, is recorded at the start
// of the second after the mark's (keepLive): at the start of the mark's
// own second its position would still be under the mark. It stays active.
func TestAnActiveSessionBeforeTheActiveMarksPositionIsDatedAtTheNextSecond(t *testing.T) {
	s := openInternal(t)
	holdCleaner(t, s)
	ctx := context.Background()
	cfg := sessiontest.GateConfig("default", 3)
	for _, id := range []string{"a0", "a1", "a2"} {
		_, err := s.Join(ctx, cfg, id, epoch)
		require.NoError(t, err)
	}
	now := epoch.Add(cfg.ActiveTimeout + time.Second)
	require.NoError(t, s.Touch(ctx, cfg.Name, []session.Touch{{ID: "a0", LastActive: now}}))
	rep, err := s.Update(ctx, cfg, now, session.DefaultUpdateChunk)
	require.NoError(t, err)
	require.EqualValues(t, 2, rep.PurgedActive, "a1 and a2: the active mark is at (epoch, a2's position + 1)")

	left, err := s.Leave(ctx, cfg, "a0", epoch.Add(-time.Hour)) // the clock set back
	require.NoError(t, err)
	assert.Equal(t, epoch.Add(time.Second), left.LastActive, "the second after the mark's")
	got, err := s.Get(ctx, cfg.Name, "a0")
	require.NoError(t, err, "written below the mark, a0 would be purged without a word")
	assert.Equal(t, session.StatusActive, got.Status)
	snaps, err := s.Load(ctx, []string{cfg.Name})
	require.NoError(t, err)
	assert.Equal(t, []string{"a0"}, activeIDs(snaps[cfg.Name].Active))
	assert.EqualValues(t, 1, snaps[cfg.Name].State.Active)
}

// The update prunes the expired admissions of sessions that are gone, and
// a session it purges by a mark is gone at its commit, though its row waits
// for the cleaner: its expired admission goes in that same update.
func TestTheAdmissionOfASessionPurgedByTheMarkIsPruned(t *testing.T) {
	s := openInternal(t)
	holdCleaner(t, s)
	ctx := context.Background()
	cfg := sessiontest.GateConfig("default", 2)
	a, err := s.Join(ctx, cfg, "a0", epoch)
	require.NoError(t, err)
	require.Equal(t, session.StatusActive, a.Status)
	_, err = s.IssueAdmission(ctx, session.Admission{ID: "jti-a0", Gate: cfg.Name, Session: "a0", Position: a.Position, IssuedAt: epoch, Expires: epoch.Add(time.Minute)})
	require.NoError(t, err)

	rep, err := s.Update(ctx, cfg, epoch.Add(cfg.ActiveTimeout+time.Hour), session.DefaultUpdateChunk)
	require.NoError(t, err)
	require.EqualValues(t, 1, rep.PurgedActive, "a0, idle")
	require.Equal(t, 1, physicalRows(t, s, cfg.Name), "a0's row waits for the cleaner: the premise of the test")
	var n int
	require.NoError(t, s.readDB.QueryRowContext(ctx, `SELECT count(*) FROM admissions WHERE jti = 'jti-a0'`).Scan(&n))
	assert.Zero(t, n, "the update that purged a0 prunes its expired admission")
}

// A clock that ran ahead for longer than the active timeout leaves the
// active mark ahead of the clock once it is set right (the purged session's
// own sign of life was dated there). Once the cleaner has deleted the rows
// below them, the marks go back to covering nothing: a session written
// afterwards is dated by its own clock, not just above the mark, and is
// idle, and purged, at the next update past the timeout.
func TestTheCleanerLowersAMarkAheadOfTheClock(t *testing.T) {
	s := openInternal(t)
	ctx := context.Background()
	cfg := sessiontest.GateConfig("default", 1)
	ahead := epoch.Add(6 * time.Hour) // the clock runs 6 h ahead for a while
	_, err := s.Join(ctx, cfg, "early", ahead)
	require.NoError(t, err)
	rep, err := s.Update(ctx, cfg, ahead.Add(cfg.ActiveTimeout+time.Minute), session.DefaultUpdateChunk)
	require.NoError(t, err)
	require.EqualValues(t, 1, rep.PurgedActive, "early, idle on the clock that was ahead")
	require.NoError(t, s.WaitClean(ctx))

	// The clock is set right. a0 joins and never shows a sign of life again.
	joined := epoch.Add(time.Minute)
	a0, err := s.Join(ctx, cfg, "a0", joined)
	require.NoError(t, err)
	require.Equal(t, session.StatusActive, a0.Status)
	assert.Equal(t, joined, a0.LastActive, "dated by its own clock")
	_, err = s.Join(ctx, cfg, "w0", joined)
	require.NoError(t, err)

	later := joined.Add(cfg.ActiveTimeout + time.Minute)
	require.NoError(t, s.Touch(ctx, cfg.Name, []session.Touch{{ID: "w0", LastActive: later}}))
	rep, err = s.Update(ctx, cfg, later, session.DefaultUpdateChunk)
	require.NoError(t, err)
	assert.EqualValues(t, 1, rep.PurgedActive, "a0, idle past the active timeout")
	assert.EqualValues(t, 1, rep.Promoted, "its slot goes to w0")
}

// The cleaner lowers only marks as stored: one that an update raised
// earlier in the same transaction covers rows the cleaner's statement did
// not see (it reads the stored marks), which would otherwise come back.
func TestTheCleanerKeepsAMarkRaisedInItsTransaction(t *testing.T) {
	s := openInternal(t)
	holdCleaner(t, s) // the store's own passes stay out of the way
	ctx := context.Background()
	cfg := sessiontest.GateConfig("default", 1)
	for _, id := range []string{"a0", "w0", "w1"} {
		_, err := s.Join(ctx, cfg, id, epoch)
		require.NoError(t, err)
	}
	now := epoch.Add(cfg.WaitingTimeout + time.Second) // w0 and w1 are gone, a0 is not idle yet

	// Hold the writer; queue the update, then a cleaner pass behind it:
	// both run in the writer's next transaction.
	entered, release := make(chan struct{}), make(chan struct{})
	held := make(chan error, 1)
	go func() {
		o := newOp(ctx, opFunc)
		o.fn = func(*batch) error { close(entered); <-release; return nil }
		held <- s.do(o)
	}()
	<-entered
	updated := make(chan error, 1)
	go func() {
		rep, err := s.Update(ctx, cfg, now, session.DefaultUpdateChunk)
		if err == nil && rep.PurgedWaiting != 2 {
			err = fmt.Errorf("purged %d waiters, want 2", rep.PurgedWaiting)
		}
		updated <- err
	}()
	require.Eventually(t, func() bool { return len(s.ops) == 1 }, 5*time.Second, time.Millisecond)
	cleaned := make(chan error, 1)
	go func() { cleaned <- s.cleanGate(ctx, cfg.Name, false) }()
	require.Eventually(t, func() bool { return len(s.ops) == 2 }, 5*time.Second, time.Millisecond)
	close(release)
	require.NoError(t, <-held)
	require.NoError(t, <-updated)
	require.NoError(t, <-cleaned)

	for _, id := range []string{"w0", "w1"} { // the id index dropped them; Rows and Load check the rows
		_, err := s.Get(ctx, cfg.Name, id)
		require.ErrorIs(t, err, session.ErrNotFound, id)
	}
	rows, err := s.Rows(ctx, cfg.Name)
	require.NoError(t, err)
	assert.Len(t, rows, 1, "a0 alone: the purged waiters stay purged")
	snaps, err := s.Load(ctx, []string{cfg.Name})
	require.NoError(t, err)
	assert.Empty(t, snaps[cfg.Name].Waiting)
}

// A cleaner pass that fails is tried again after cleanRetry, the delay
// doubling while it keeps failing, and the rows go once it succeeds.
func TestTheCleanerRetriesAFailedPass(t *testing.T) {
	defer func(r, m time.Duration) { cleanRetry, cleanRetryMax = r, m }(cleanRetry, cleanRetryMax)
	cleanRetry, cleanRetryMax = 5*time.Millisecond, time.Second
	var failures sync.Mutex
	left := 0 // armed once the cleaner is about to start
	setHooks(t, func(o *op) error {
		if o.kind != opFunc {
			return nil
		}
		failures.Lock()
		defer failures.Unlock()
		if left == 0 {
			return nil
		}
		left--
		return fmt.Errorf("injected failure of a cleaner pass")
	}, nil)
	log := &sessiontest.LogBuffer{}
	s, err := Open(filepath.Join(t.TempDir(), "r.db"), Options{Logger: slog.New(slog.NewTextHandler(log, nil))})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	release := holdCleaner(t, s)
	ctx := context.Background()
	cfg := sessiontest.GateConfig("default", 1)
	for _, id := range []string{"a0", "w0", "w1"} {
		_, err := s.Join(ctx, cfg, id, epoch)
		require.NoError(t, err)
	}
	rep, err := s.Update(ctx, cfg, epoch.Add(cfg.ActiveTimeout+time.Second), session.DefaultUpdateChunk)
	require.NoError(t, err)
	require.EqualValues(t, 1, rep.PurgedActive)
	require.EqualValues(t, 2, rep.PurgedWaiting)

	failures.Lock()
	left = 2 // the cleaner's first two passes fail
	failures.Unlock()
	release()
	require.NoError(t, s.WaitClean(ctx))
	assert.Zero(t, physicalRows(t, s, cfg.Name), "the third pass deleted the rows")
	out := log.String()
	assert.Equal(t, 2, strings.Count(out, "deleting purged sessions failed; retrying"), out)
	assert.Contains(t, out, "retry_in=5ms")
	assert.Contains(t, out, "retry_in=10ms", "the delay doubles")
}

// When the cleaner lowers a mark that lay ahead of the clock, the ops that
// share its transaction go on from the lowered mark: a session joined there
// with the right clock (below the old mark) is found by the next op, not
// joined twice, released, and the file opens again.
func TestALoweredMarkHoldsForTheRestOfItsTransaction(t *testing.T) {
	aheadFixture := func(t *testing.T) (*Store, session.GateConfig) {
		t.Helper()
		s := openInternal(t)
		holdCleaner(t, s)
		ctx := context.Background()
		cfg := sessiontest.GateConfig("default", 1)
		ahead := epoch.Add(6 * time.Hour) // the clock ran 6 h ahead
		_, err := s.Join(ctx, cfg, "early", ahead)
		require.NoError(t, err)
		rep, err := s.Update(ctx, cfg, ahead.Add(cfg.ActiveTimeout+time.Minute), session.DefaultUpdateChunk)
		require.NoError(t, err)
		require.EqualValues(t, 1, rep.PurgedActive)
		require.Equal(t, 1, physicalRows(t, s, cfg.Name))
		return s, cfg
	}
	// inOneBatch runs a cleaner pass and then second after a join of a0 at
	// the right clock, in one transaction of the writer.
	inOneBatch := func(t *testing.T, s *Store, cfg session.GateConfig, second func(time.Time) (session.Session, error)) (joined, then result) {
		t.Helper()
		ctx := context.Background()
		at := epoch.Add(time.Minute) // the clock is right again
		release := blockWriter(t, s)
		cleaned := make(chan error, 1)
		n := len(s.ops)
		go func() { cleaned <- s.cleanGate(ctx, cfg.Name, false) }()
		waitQueued(t, s, n+1)
		first := queue(t, s, func() (session.Session, error) { return s.Join(ctx, cfg, "a0", at) })
		next := queue(t, s, func() (session.Session, error) { return second(at) })
		release()
		require.NoError(t, <-cleaned)
		return <-first, <-next
	}
	t.Run("a second join", func(t *testing.T) {
		s, cfg := aheadFixture(t)
		ctx := context.Background()
		r1, r2 := inOneBatch(t, s, cfg, func(at time.Time) (session.Session, error) { return s.Join(ctx, cfg, "a0", at.Add(time.Second)) })
		require.NoError(t, r1.err)
		require.NoError(t, r2.err)
		assert.Equal(t, session.StatusActive, r1.s.Status)
		assert.Equal(t, r1.s.Position, r2.s.Position, "the second join finds a0, it does not queue it again")
		rows, err := s.Rows(ctx, cfg.Name)
		require.NoError(t, err)
		assert.Equal(t, []string{"a0"}, activeIDs(rows))

		path := s.Path()
		require.NoError(t, s.Close())
		r := reopen(t, path, nil) // a0 stored twice would be refused
		snaps, err := r.Load(ctx, []string{cfg.Name})
		require.NoError(t, err)
		assert.EqualValues(t, 1, snaps[cfg.Name].State.Active+snaps[cfg.Name].State.Waiting, "counted once")
	})
	t.Run("a release", func(t *testing.T) {
		s, cfg := aheadFixture(t)
		r1, r2 := inOneBatch(t, s, cfg, func(at time.Time) (session.Session, error) { return s.Release(context.Background(), cfg, "a0", at) })
		require.NoError(t, r1.err)
		assert.NoError(t, r2.err, "a0 was joined just before its release")
	})
}
