package postgres

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
	"github.com/anteroomhq/anteroom/session/postgres/pgtest"
)

// seenEvents records, per session id, the events a listener was handed
// and whether they came as Remote.
type seenEvents struct {
	mu     sync.Mutex
	kinds  map[string][]session.EventKind
	remote map[string][]bool
}

func recordEvents(s *Store) *seenEvents {
	e := &seenEvents{kinds: map[string][]session.EventKind{}, remote: map[string][]bool{}}
	s.SetCommitListener(func(c session.Commit) {
		e.mu.Lock()
		defer e.mu.Unlock()
		for _, ev := range c.Events {
			e.kinds[ev.Session.ID] = append(e.kinds[ev.Session.ID], ev.Kind)
			e.remote[ev.Session.ID] = append(e.remote[ev.Session.ID], c.Remote)
		}
	})
	return e
}

func (e *seenEvents) of(id string) ([]session.EventKind, []bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]session.EventKind(nil), e.kinds[id]...), append([]bool(nil), e.remote[id]...)
}

// An instance killed between its commit and its flush made a commit that
// is in the tables but announced to nobody (here: its flush never runs,
// then it closes). The other instances apply it within a few poll periods,
// without any further commit: the waiter the release promoted is active in
// their memory.
func TestUnannouncedCommitIsPolled(t *testing.T) {
	url := pgtest.DB(t)
	ctx := context.Background()
	const poll = 20 * time.Millisecond
	a := openAsync(t, url, Options{FollowPoll: poll})
	b := openAsync(t, url, Options{FollowPoll: poll})
	cfg := session.GateConfig{Name: "g", ActiveLimit: 1, ActiveTimeout: time.Hour, WaitingTimeout: time.Hour}
	for _, s := range []*Store{a, b} {
		_, err := s.Load(ctx, []string{"g"})
		require.NoError(t, err)
	}
	seen := recordEvents(b)
	_, err := a.Join(ctx, cfg, "x", time.Now())
	require.NoError(t, err)
	_, err = b.Join(ctx, cfg, "y", time.Now())
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		kinds, _ := seen.of("x")
		return len(kinds) == 1
	}, 10*time.Second, 5*time.Millisecond, "b follows a's announced commit")

	var once sync.Once
	a.afterCommit = func(c *pgx.Conn) {
		once.Do(func() { _ = c.Close(ctx) }) // killed: the flush never runs
	}
	_, err = a.Release(ctx, cfg, "x", time.Now())
	require.Error(t, err, "unacknowledged")
	require.NoError(t, a.Close())
	var stored int64
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT seq FROM anteroom_gates WHERE name = 'g'").Scan(&stored))
	require.Equal(t, int64(3), stored, "the release committed")

	require.Eventually(t, func() bool {
		kinds, _ := seen.of("y")
		return len(kinds) == 2
	}, 50*poll+5*time.Second, 5*time.Millisecond, "b never applied the unannounced commit")
	kinds, remote := seen.of("y")
	assert.Equal(t, []session.EventKind{session.EventQueued, session.EventPromoted}, kinds)
	assert.Equal(t, []bool{false, true}, remote)
	kinds, _ = seen.of("x")
	assert.Equal(t, []session.EventKind{session.EventActivated, session.EventDeactivated}, kinds)
	b.deliverMu.Lock()
	assert.Equal(t, stored, b.applied["g"])
	b.deliverMu.Unlock()
	assert.Equal(t, int64(1), b.unannounced.Load())
	assert.NoError(t, b.Ready())
}

// A commit of this instance between its COMMIT and its delivery is its
// writer's to deliver, however many polls see it behind, in both commit
// modes: the poll does not take it, and the listener gets it once, as its
// own, when the writer goes on. In the synchronous mode the commit's
// notification is sent with it; here it is lost (as when the follower is
// too busy to read it before two polls), so only the poll could take it.
func TestPollLeavesAnOwnCommitToItsWriter(t *testing.T) {
	for _, tc := range []struct {
		name string
		sync bool
	}{{"async commit and flush", false}, {"synchronous commit", true}} {
		t.Run(tc.name, func(t *testing.T) {
			url := pgtest.DB(t)
			ctx := context.Background()
			a := openMode(t, url, Options{FollowPoll: 5 * time.Millisecond, SynchronousCommit: tc.sync})
			loseCommitNotes(a)
			cfg := session.GateConfig{Name: "g", ActiveLimit: 10, ActiveTimeout: time.Hour, WaitingTimeout: time.Hour}
			_, err := a.Load(ctx, []string{"g"})
			require.NoError(t, err)
			seen := recordEvents(a)
			reached, release := paused(a)
			var released sync.Once
			free := func() { released.Do(func() { close(release) }) }
			defer free() // a failed assertion must not leave the writer paused
			joined := make(chan error, 1)
			go func() {
				_, err := a.Join(ctx, cfg, "mine", time.Now())
				joined <- err
			}()
			<-reached
			polls := a.polls.Load()
			require.Eventually(t, func() bool { return a.polls.Load() >= polls+5 }, 10*time.Second, time.Millisecond, "the follower polls")
			kinds, remote := seen.of("mine")
			assert.Empty(t, kinds, "the poll took the writer's commit before its delivery (remote: %v)", remote)
			free()
			require.NoError(t, <-joined)
			kinds, remote = seen.of("mine")
			assert.Equal(t, []session.EventKind{session.EventActivated}, kinds, "applied once")
			assert.Equal(t, []bool{false}, remote)
			assert.Zero(t, a.unannounced.Load())
			// Later polls find nothing more to apply.
			polls = a.polls.Load()
			require.Eventually(t, func() bool { return a.polls.Load() >= polls+3 }, 10*time.Second, time.Millisecond)
			kinds, _ = seen.of("mine")
			assert.Len(t, kinds, 1, "applied twice")
			assert.NoError(t, a.Ready())
		})
	}
}

// openMode opens a Store in the commit mode opts asks for.
func openMode(t *testing.T, url string, opts Options) *Store {
	t.Helper()
	if !opts.SynchronousCommit {
		return openAsync(t, url, opts)
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	s, err := Open(context.Background(), url, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	require.False(t, s.async)
	return s
}

// loseCommitNotes makes s's follower ignore every commit notification: only
// its poll follows.
func loseCommitNotes(s *Store) {
	drop := func(n *pgconn.Notification) bool { return n.Channel == channel }
	s.dropNote.Store(&drop)
}

// In normal operation, with a poll far shorter than it takes to follow,
// two instances writing at once still apply each commit once, each
// instance's own as its own, the others' as Remote, and never resync, in
// both commit modes.
func TestPollDoesNotDoubleApply(t *testing.T) {
	for _, sync := range []bool{false, true} {
		t.Run(fmt.Sprintf("synchronous=%v", sync), func(t *testing.T) { pollDoesNotDoubleApply(t, sync) })
	}
}

func pollDoesNotDoubleApply(t *testing.T, synchronous bool) {
	url := pgtest.DB(t)
	ctx := context.Background()
	cfg := session.GateConfig{Name: "g", ActiveLimit: 1000, ActiveTimeout: time.Hour, WaitingTimeout: time.Hour}
	var stores [2]*Store
	var seen [2]*seenEvents
	for i := range stores {
		stores[i] = openMode(t, url, Options{FollowPoll: 20 * time.Millisecond, SynchronousCommit: synchronous})
		_, err := stores[i].Load(ctx, []string{"g"})
		require.NoError(t, err)
		seen[i] = recordEvents(stores[i])
	}
	const n = 40
	var wg sync.WaitGroup
	for i, s := range stores {
		for k := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := s.Join(ctx, cfg, fmt.Sprintf("s%d-%d", i, k), time.Now())
				assert.NoError(t, err)
			}()
		}
	}
	wg.Wait()
	for i := range stores {
		require.Eventually(t, func() bool {
			seen[i].mu.Lock()
			defer seen[i].mu.Unlock()
			return len(seen[i].kinds) == 2*n
		}, 10*time.Second, 5*time.Millisecond, "instance %d follows every join", i)
	}
	// The polls that follow find nothing to do.
	for i, s := range stores {
		polls := s.polls.Load()
		require.Eventually(t, func() bool { return s.polls.Load() >= polls+3 }, 10*time.Second, time.Millisecond)
		for j := range stores {
			for k := range n {
				kinds, remote := seen[i].of(fmt.Sprintf("s%d-%d", j, k))
				assert.Equal(t, []session.EventKind{session.EventActivated}, kinds, "instance %d, join s%d-%d", i, j, k)
				assert.Equal(t, []bool{i != j}, remote, "instance %d, join s%d-%d", i, j, k)
			}
		}
		assert.Zero(t, s.Resyncs(), "instance %d", i)
		assert.NoError(t, s.Ready())
	}
}
