package sqlite

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
	"github.com/anteroomhq/anteroom/session/sessiontest"
)

var epoch = sessiontest.Epoch

func openInternal(t testing.TB) *Store {
	t.Helper()
	s, err := Open(filepath.Join(t.TempDir(), "w.db"), Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// setHooks installs test hooks until the end of the test, after the Stores
// the test opens later are closed.
func setHooks(t *testing.T, opDone func(*op) error, beforeCommit func() error) {
	testHookOpDone, testHookBeforeCommit = opDone, beforeCommit
	t.Cleanup(func() { testHookOpDone, testHookBeforeCommit = nil, nil })
}

// blockWriter parks the writer inside a transaction until the returned func
// is called, so that the ops queued meanwhile form the next batch.
func blockWriter(t *testing.T, s *Store) (release func()) {
	t.Helper()
	entered, unblock := make(chan struct{}), make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = s.Secret(context.Background(), func() ([]byte, error) {
			close(entered)
			<-unblock
			return nil, errors.New("blocker")
		})
	}()
	<-entered
	return func() { close(unblock); <-done }
}

// waitQueued waits until n ops wait for the writer.
func waitQueued(t *testing.T, s *Store, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for len(s.ops) < n {
		require.True(t, time.Now().Before(deadline), "ops not queued")
		time.Sleep(time.Millisecond)
	}
}

// requireCountersMatchRows checks that gate's counters, and the active and
// waiting lists Load returns, count the live rows Rows returns, and returns
// Load's snapshot and the rows. where says at which point of the test.
func requireCountersMatchRows(t *testing.T, s *Store, gate, where string) (session.GateSnapshot, []session.Session) {
	t.Helper()
	ctx := context.Background()
	rows, err := s.Rows(ctx, gate)
	require.NoError(t, err, where)
	var active, waiting int64
	for _, r := range rows {
		if r.Status == session.StatusActive {
			active++
		} else {
			waiting++
		}
	}
	snaps, err := s.Load(ctx, []string{gate})
	require.NoError(t, err, where)
	st := snaps[gate]
	require.Equal(t, active, st.State.Active, "%s: active counter vs rows", where)
	require.Equal(t, waiting, st.State.Waiting, "%s: waiting counter vs rows", where)
	require.Len(t, st.Active, int(active), "%s: active list vs rows", where)
	require.Len(t, st.Waiting, int(waiting), "%s: waiting list vs rows", where)
	return st, rows
}

// atUpdateStep runs start after the nth step of s's updates (counted from
// now until the end of the test), once, and waits until start has queued
// queued more ops for the writer (from goroutines of its own): they run
// between that step's transaction and the update's next one, or in it.
func atUpdateStep(t *testing.T, s *Store, n, queued int, start func()) {
	t.Helper()
	steps := 0
	testHookUpdateStep = func() {
		steps++
		if steps != n {
			return
		}
		before := len(s.ops)
		start()
		// On the writer's goroutine: a failure is reported, not a FailNow
		// there, which would stop the writer and hang the test.
		for deadline := time.Now().Add(10 * time.Second); len(s.ops) < before+queued; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Errorf("at update step %d: %d ops not queued", n, queued)
				return
			}
		}
	}
	t.Cleanup(func() { testHookUpdateStep = nil })
}

type result struct {
	s   session.Session
	err error
}

// queue starts fn, which queues one op, and waits until it is queued.
func queue(t *testing.T, s *Store, fn func() (session.Session, error)) chan result {
	t.Helper()
	ch := make(chan result, 1)
	n := len(s.ops)
	go func() {
		sess, err := fn()
		ch <- result{sess, err}
	}()
	waitQueued(t, s, n+1)
	return ch
}

// queueJoins starts a join per id, in order, each queued before the next.
func queueJoins(t *testing.T, s *Store, ctx context.Context, cfg session.GateConfig, ids ...string) []chan result {
	t.Helper()
	out := make([]chan result, len(ids))
	base := len(s.ops)
	for i, id := range ids {
		ch := make(chan result, 1)
		out[i] = ch
		go func() {
			sess, err := s.Join(ctx, cfg, id, epoch)
			ch <- result{sess, err}
		}()
		waitQueued(t, s, base+i+1)
	}
	return out
}

func TestFailedOpRollsBackOnlyItself(t *testing.T) {
	injected := errors.New("injected")
	setHooks(t, func(o *op) error {
		if o.kind == opJoin && o.id == "boom" {
			return injected // after its row and counters were written
		}
		return nil
	}, nil)
	s := openInternal(t)
	var mu sync.Mutex
	var commits []session.Commit
	s.SetCommitListener(func(c session.Commit) { mu.Lock(); commits = append(commits, c); mu.Unlock() })
	cfg := sessiontest.GateConfig("default", 3)
	ctx := context.Background()
	_, err := s.Join(ctx, cfg, "a", epoch)
	require.NoError(t, err)

	release := blockWriter(t, s)
	res := queueJoins(t, s, ctx, cfg, "b", "boom", "c", "d")
	before := s.Stats().Transactions
	release()
	got := make([]result, len(res))
	for i, ch := range res {
		got[i] = <-ch
	}
	assert.Equal(t, int64(2), s.Stats().Transactions-before, "the blocker's and one for the four joins")
	assert.Equal(t, int64(1), s.Stats().FailedTransactions, "the attempt with boom, run again without it")
	assert.GreaterOrEqual(t, s.Stats().MaxBatch, int64(4))

	require.ErrorIs(t, got[1].err, injected)
	assert.Equal(t, session.CodeInternal, session.CodeOf(got[1].err))
	for i, want := range []struct {
		pos    int64
		status session.Status
	}{{2, session.StatusActive}, {}, {3, session.StatusActive}, {4, session.StatusWaiting}} {
		if i == 1 {
			continue
		}
		require.NoError(t, got[i].err)
		assert.Equal(t, want.pos, got[i].s.Position, "the failed op took no position")
		assert.Equal(t, want.status, got[i].s.Status)
	}
	_, err = s.Get(ctx, "default", "boom")
	require.ErrorIs(t, err, session.ErrNotFound)

	snaps, err := s.Load(ctx, []string{"default"})
	require.NoError(t, err)
	assert.Equal(t, session.GateState{
		Counters:             session.Counters{NextPosition: 5, Active: 3, Waiting: 1},
		FirstWaitingPosition: 4, LastWaitingPosition: 4,
	}, snaps["default"].State)

	mu.Lock()
	last := commits[len(commits)-1]
	mu.Unlock()
	var ids []string
	for _, e := range last.Events {
		ids = append(ids, e.Session.ID)
	}
	assert.Equal(t, []string{"b", "c", "d"}, ids, "one commit for the batch (two activated, one queued), without the failed op")
	assert.Equal(t, snaps["default"].State, last.Gates["default"])
}

func TestCommitFailureFailsTheBatch(t *testing.T) {
	var fail atomic.Bool
	setHooks(t, nil, func() error {
		if fail.Load() {
			return errors.New("injected commit failure")
		}
		return nil
	})
	s := openInternal(t)
	var calls atomic.Int32
	s.SetCommitListener(func(session.Commit) { calls.Add(1) })
	cfg := sessiontest.GateConfig("default", 2)
	ctx := context.Background()
	_, err := s.Join(ctx, cfg, "a", epoch)
	require.NoError(t, err)
	require.Equal(t, int32(1), calls.Load())

	release := blockWriter(t, s)
	res := queueJoins(t, s, ctx, cfg, "b", "c")
	fail.Store(true)
	release()
	for _, ch := range res {
		r := <-ch
		require.Error(t, r.err)
		assert.Equal(t, session.CodeInternal, session.CodeOf(r.err))
		assert.Contains(t, r.err.Error(), "injected commit failure")
	}
	assert.Equal(t, int32(1), calls.Load(), "no listener call for a failed commit")
	assert.GreaterOrEqual(t, s.Stats().FailedTransactions, int64(1))

	fail.Store(false)
	b, err := s.Join(ctx, cfg, "b", epoch)
	require.NoError(t, err)
	assert.Equal(t, int64(2), b.Position, "nothing of the failed batch survived, in the file or in memory")
	snaps, err := s.Load(ctx, []string{"default"})
	require.NoError(t, err)
	assert.Equal(t, session.Counters{NextPosition: 3, Active: 2}, snaps["default"].State.Counters)
}

func TestCanceledWhileQueued(t *testing.T) {
	s := openInternal(t)
	cfg := sessiontest.GateConfig("default", 2)
	ctx, cancel := context.WithCancel(context.Background())
	release := blockWriter(t, s)
	res := queueJoins(t, s, ctx, cfg, "x")
	other := queueJoins(t, s, context.Background(), cfg, "y")
	cancel()
	release()
	r := <-res[0]
	require.ErrorIs(t, r.err, context.Canceled)
	r = <-other[0]
	require.NoError(t, r.err)
	assert.Equal(t, int64(1), r.s.Position, "the skipped join took no position")
	_, err := s.Get(context.Background(), "default", "x")
	require.ErrorIs(t, err, session.ErrNotFound)
}

func TestCloseDrainsTheQueue(t *testing.T) {
	s := openInternal(t)
	cfg := sessiontest.GateConfig("default", 2)
	ctx := context.Background()
	release := blockWriter(t, s)
	res := queueJoins(t, s, ctx, cfg, "a", "b")
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	for !s.closed.Load() {
		time.Sleep(time.Millisecond)
	}
	_, err := s.Join(ctx, cfg, "c", epoch)
	require.ErrorIs(t, err, session.ErrUnavailable)
	release()
	for _, ch := range res {
		require.NoError(t, (<-ch).err, "queued before Close: run")
	}
	require.NoError(t, <-closed)

	s, err = Open(s.path, Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	defer s.Close()
	rows, err := s.Rows(ctx, "default")
	require.NoError(t, err)
	require.Len(t, rows, 2)
}

// A release writes several rows (the delete, the promotions): when it fails
// after them, the transaction is run again without it.
func TestFailedReleaseRollsBackOnlyItself(t *testing.T) {
	injected := errors.New("injected")
	setHooks(t, func(o *op) error {
		if o.kind == opRelease && o.id == "a" {
			return injected // after the delete and the promotion
		}
		return nil
	}, nil)
	s := openInternal(t)
	var mu sync.Mutex
	var events []session.Event
	s.SetCommitListener(func(c session.Commit) { mu.Lock(); events = append(events, c.Events...); mu.Unlock() })
	cfg := sessiontest.GateConfig("default", 1)
	ctx := context.Background()
	for _, id := range []string{"a", "w1", "w2"} {
		_, err := s.Join(ctx, cfg, id, epoch)
		require.NoError(t, err)
	}
	mu.Lock()
	events = nil
	mu.Unlock()

	release := blockWriter(t, s)
	rel := queue(t, s, func() (session.Session, error) { return s.Release(ctx, cfg, "a", epoch) })
	joins := queueJoins(t, s, ctx, cfg, "n")
	failedBefore := s.Stats().FailedTransactions
	release()
	require.ErrorIs(t, (<-rel).err, injected)
	j := <-joins[0]
	require.NoError(t, j.err)
	assert.Equal(t, int64(4), j.s.Position)
	assert.Equal(t, failedBefore+1, s.Stats().FailedTransactions, "the attempt with the release, run again without it")

	a, err := s.Get(ctx, "default", "a")
	require.NoError(t, err)
	assert.Equal(t, session.StatusActive, a.Status)
	w1, err := s.Get(ctx, "default", "w1")
	require.NoError(t, err)
	assert.Equal(t, session.StatusWaiting, w1.Status, "the promotion was rolled back with the release")
	mu.Lock()
	for _, e := range events {
		assert.Equal(t, "n", e.Session.ID, "no events of the failed release")
	}
	mu.Unlock()
	snaps, err := s.Load(ctx, []string{"default"})
	require.NoError(t, err)
	assert.Equal(t, session.Counters{NextPosition: 5, Active: 1, Waiting: 3}, snaps["default"].State.Counters)
}

func TestUpdateStepRunAgainAfterPoison(t *testing.T) {
	setHooks(t, func(o *op) error {
		if o.kind == opJoin && o.id == "boom" {
			return errors.New("injected")
		}
		return nil
	}, nil)
	s := openInternal(t)
	cfg := sessiontest.GateConfig("default", 2)
	ctx := context.Background()
	for _, id := range []string{"a", "b", "w1", "w2"} {
		_, err := s.Join(ctx, cfg, id, epoch)
		require.NoError(t, err)
	}
	_, err := s.Leave(ctx, cfg, "w1", epoch)
	require.NoError(t, err)
	now := epoch.Add(cfg.ActiveTimeout + time.Second)
	require.NoError(t, s.Touch(ctx, cfg.Name, []session.Touch{{ID: "w2", LastActive: now}}), "w2 stays present")

	release := blockWriter(t, s)
	type updated struct {
		r   session.UpdateReport
		err error
	}
	upd := make(chan updated, 1)
	n := len(s.ops)
	go func() {
		r, err := s.Update(ctx, cfg, now, 100)
		upd <- updated{r, err}
	}()
	waitQueued(t, s, n+1)
	boom := queueJoins(t, s, ctx, cfg, "boom")
	release()
	require.Error(t, (<-boom[0]).err)
	u := <-upd
	require.NoError(t, u.err)
	assert.Equal(t, session.UpdateReport{Gate: "default", PurgedWaiting: 1, PurgedActive: 2, Promoted: 1, Transactions: 1},
		session.UpdateReport{Gate: u.r.Gate, PurgedWaiting: u.r.PurgedWaiting, PurgedActive: u.r.PurgedActive, Promoted: u.r.Promoted, Transactions: u.r.Transactions})
	rows, err := s.Rows(ctx, "default")
	require.NoError(t, err)
	require.Len(t, rows, 1)
	assert.Equal(t, "w2", rows[0].ID)
	assert.Equal(t, session.StatusActive, rows[0].Status)
}

// An op that wrote and then failed is rolled back whatever its error: a
// domain error (not found, invalid argument, ...) after a write is no proof
// that nothing was written. An op that failed before writing costs the batch
// nothing.
func TestOpFailingAfterItsWritesIsRolledBackWhateverTheError(t *testing.T) {
	cases := []struct {
		name string
		err  error
	}{
		{"not found", session.Errorf(session.CodeNotFound, "injected not found")},
		{"invalid argument", session.Errorf(session.CodeInvalidArgument, "injected invalid argument")},
		{"unavailable", session.Errorf(session.CodeUnavailable, "injected unavailable")},
		{"context canceled", context.Canceled},
		{"internal", errors.New("injected")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			setHooks(t, func(o *op) error {
				if o.kind == opJoin && o.id == "boom" {
					return tc.err // after its row and counters were written
				}
				return nil
			}, nil)
			s := openInternal(t)
			cfg := sessiontest.GateConfig("default", 1)
			ctx := context.Background()
			_, err := s.Join(ctx, cfg, "a", epoch)
			require.NoError(t, err)

			release := blockWriter(t, s)
			res := queueJoins(t, s, ctx, cfg, "b", "boom", "c")
			ghost := queue(t, s, func() (session.Session, error) { return s.Leave(ctx, cfg, "ghost", epoch) })
			failedBefore := s.Stats().FailedTransactions
			release()
			got := make([]result, len(res))
			for i, ch := range res {
				got[i] = <-ch
			}
			require.ErrorIs(t, got[1].err, tc.err)
			require.ErrorIs(t, (<-ghost).err, session.ErrNotFound)
			assert.Equal(t, failedBefore+1, s.Stats().FailedTransactions,
				"one attempt rolled back (boom's), none for the leave that failed before writing")
			require.NoError(t, got[0].err)
			require.NoError(t, got[2].err)
			assert.Equal(t, int64(2), got[0].s.Position)
			assert.Equal(t, int64(3), got[2].s.Position, "the failed join's position was rolled back")

			_, err = s.Get(ctx, "default", "boom")
			require.ErrorIs(t, err, session.ErrNotFound, "the failed join's row was rolled back")
			rows, err := s.Rows(ctx, "default")
			require.NoError(t, err)
			assert.Len(t, rows, 3)
			snaps, err := s.Load(ctx, []string{"default"})
			require.NoError(t, err)
			assert.Equal(t, session.Counters{NextPosition: 4, Active: 1, Waiting: 2}, snaps["default"].State.Counters)
			// The index was rolled back too: boom joins anew at the end.
			again, err := s.Join(ctx, cfg, "x", epoch)
			require.NoError(t, err)
			assert.Equal(t, int64(4), again.Position)
		})
	}
}
