package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
	"github.com/anteroomhq/anteroom/session/postgres"
	"github.com/anteroomhq/anteroom/session/postgres/pgtest"
	"github.com/anteroomhq/anteroom/session/sessiontest"
)

// recorder is a Waitlist's Publisher: it keeps the promotion notices.
type recorder struct {
	mu       sync.Mutex
	promoted map[string]int
}

func (r *recorder) PublishGlobal(session.GlobalView) {}

func (r *recorder) PublishSession(v session.SessionView) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.promoted == nil {
		r.promoted = map[string]int{}
	}
	r.promoted[v.Session]++
}

func (r *recorder) count(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.promoted[id]
}

// instance is one sidecar's Store and Waitlist on the shared database.
type instance struct {
	store *postgres.Store
	wl    *session.Waitlist
	pub   *recorder
}

const multiGate = "default"

func startInstances(t *testing.T, url string, n int, limit int64, opts postgres.Options) []*instance {
	t.Helper()
	cfg := sessiontest.GateConfig(multiGate, limit)
	var out []*instance
	for range n {
		in := &instance{store: open(t, url, opts), pub: &recorder{}}
		t.Cleanup(func() { _ = in.store.Close() })
		var err error
		in.wl, err = session.New(context.Background(), in.store, []session.GateConfig{cfg}, session.Options{
			Publisher: in.pub, TouchInterval: -1, Logger: opts.Logger,
		})
		require.NoError(t, err)
		t.Cleanup(func() { _ = in.wl.Close() })
		out = append(out, in)
	}
	return out
}

func TestInstancesShareOneLine(t *testing.T) {
	url := pgtest.DB(t)
	ins := startInstances(t, url, 3, 50, quiet)
	const n = 3000
	ctx := context.Background()
	views := make([]session.SessionView, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 300)
	for i := range n {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			views[i], errs[i] = ins[i%3].wl.Join(ctx, multiGate, fmt.Sprintf("s%04d", i))
		})
	}
	wg.Wait()
	positions := map[int64]bool{}
	var active []string
	for i, err := range errs {
		require.NoError(t, err, "join %d", i)
		require.False(t, positions[views[i].Position], "position %d given twice", views[i].Position)
		positions[views[i].Position] = true
		if views[i].Status == session.StatusActive {
			active = append(active, views[i].Session)
			assert.LessOrEqual(t, views[i].Position, int64(50), "no queue jumping")
		}
	}
	require.Len(t, active, 50, "exactly the limit is active")
	for p := int64(1); p <= n; p++ {
		require.True(t, positions[p], "positions are contiguous: %d missing", p)
	}
	rows, err := ins[0].store.Rows(ctx, multiGate)
	require.NoError(t, err)
	require.Len(t, rows, n)

	// Every instance's memory follows every commit.
	want := session.GlobalView{Gate: multiGate, FirstWaitingPosition: 51, LastWaitingPosition: n, Waiting: n - 50, Active: 50, Limit: 50}
	var buckets [][]int64
	for k, in := range ins {
		require.Eventually(t, func() bool {
			g, _ := in.wl.Global(multiGate)
			g.AdmittedPerMinute = 0
			b := g.Buckets
			g.Buckets = nil
			var sum int64
			for i := 1; i < len(b); i += 2 {
				sum += b[i]
			}
			if !g.Equal(want) || sum != want.Waiting {
				return false
			}
			buckets = append(buckets, b)
			return true
		}, 10*time.Second, 10*time.Millisecond, "instance %d's global view (its buckets count every waiter)", k)
		assert.Equal(t, buckets[0], buckets[k], "instance %d summarises the line as instance 0 does", k)
		for _, id := range active {
			assert.NoError(t, in.wl.ValidateSessionIsActive(multiGate, id), "instance %d: %s", k, id)
		}
		assert.ErrorIs(t, in.wl.ValidateSessionIsActive(multiGate, "s2999"), session.ErrNotActive)
		require.NoError(t, in.store.Ready())
	}

	// A release on B promotes the first waiter; A and C are told.
	first := ""
	for _, r := range rows {
		if r.Position == 51 {
			first = r.ID
		}
	}
	require.NotEmpty(t, first)
	require.NoError(t, ins[1].wl.Release(ctx, multiGate, active[0]))
	for k, in := range ins {
		require.Eventually(t, func() bool {
			return in.wl.ValidateSessionIsActive(multiGate, first) == nil && in.pub.count(first) == 1
		}, 10*time.Second, 10*time.Millisecond, "instance %d sees the promotion of %s", k, first)
		assert.ErrorIs(t, in.wl.ValidateSessionIsActive(multiGate, active[0]), session.ErrNotActive, "instance %d", k)
		g, err := in.wl.Global(multiGate)
		require.NoError(t, err)
		assert.Equal(t, int64(52), g.FirstWaitingPosition, "instance %d", k)
	}
	for k, in := range ins {
		if k != 1 {
			assert.Positive(t, in.store.RemoteCommits(), "instance %d applied commits of the others", k)
		}
	}
}

func TestUpdateRunsOnOneInstanceAtATime(t *testing.T) {
	url := pgtest.DB(t)
	ctx := context.Background()
	a, b := open(t, url, quiet), open(t, url, quiet)
	t.Cleanup(func() { _ = a.Close(); _ = b.Close() })
	cfg := sessiontest.GateConfig(multiGate, 10)
	epoch := sessiontest.Epoch
	for i := range 30 {
		_, err := a.Join(ctx, cfg, fmt.Sprintf("x%02d", i), epoch)
		require.NoError(t, err)
	}
	later := epoch.Add(cfg.ActiveTimeout + time.Second) // the 10 active are stale
	var present []session.Touch                         // the 20 waiters are not: they showed a sign of life
	for i := 10; i < 30; i++ {
		present = append(present, session.Touch{ID: fmt.Sprintf("x%02d", i), LastActive: later})
	}
	require.NoError(t, b.Touch(ctx, multiGate, present))

	// While another session holds the gate's lock, Update does nothing.
	c, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer c.Close(ctx)
	_, err = c.Exec(ctx, "SELECT pg_advisory_lock($1, hashtext($2))", int32(0x616e7465), multiGate)
	require.NoError(t, err)
	r, err := b.Update(ctx, cfg, later, 0)
	require.NoError(t, err)
	assert.Equal(t, session.UpdateReport{Gate: multiGate}, zeroDuration(r), "the tick is another instance's")
	_, err = c.Exec(ctx, "SELECT pg_advisory_unlock($1, hashtext($2))", int32(0x616e7465), multiGate)
	require.NoError(t, err)

	// Concurrent ticks on two instances: one purge, promotions exactly once.
	var wg sync.WaitGroup
	reports := make([]session.UpdateReport, 6)
	for i := range reports {
		wg.Go(func() {
			var err error
			reports[i], err = []*postgres.Store{a, b}[i%2].Update(ctx, cfg, later, 3)
			assert.NoError(t, err)
		})
	}
	wg.Wait()
	var purged, promoted int64
	for _, r := range reports {
		purged += r.PurgedActive
		promoted += r.Promoted
	}
	assert.Equal(t, int64(10), purged)
	assert.Equal(t, int64(10), promoted)
	rows, err := a.Rows(ctx, multiGate)
	require.NoError(t, err)
	require.Len(t, rows, 20)
	snaps, err := b.Load(ctx, []string{multiGate})
	require.NoError(t, err)
	st := snaps[multiGate].State
	assert.Equal(t, session.Counters{NextPosition: 31, Active: 10, Waiting: 10}, st.Counters)
	var act int64
	for _, r := range rows {
		if r.Status == session.StatusActive {
			act++
			assert.True(t, r.Position > 10 && r.Position <= 20, "promoted in position order: %d", r.Position)
		}
	}
	assert.Equal(t, int64(10), act, "counters equal rows")
}

func zeroDuration(r session.UpdateReport) session.UpdateReport {
	r.Duration = 0
	return r
}

// A commit whose outbox row is missing (pruned, or written by a broken
// peer) is a gap: the instance resyncs the gate from the tables.
func TestGapResyncsFromTables(t *testing.T) {
	url := pgtest.DB(t)
	ctx := context.Background()
	ins := startInstances(t, url, 1, 5, quiet)
	a := ins[0]
	_, err := a.wl.Join(ctx, multiGate, "mine")
	require.NoError(t, err)

	c, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer c.Close(ctx)
	// Another "instance" commits two changes but its outbox rows are gone.
	err = pgx.BeginFunc(ctx, c, func(tx pgx.Tx) error {
		now := time.Now().UnixNano()
		if _, err := tx.Exec(ctx, `INSERT INTO anteroom_sessions (gate, position, id, status, last_active, created_at)
			VALUES ($1, 2, 'theirs', 1, $2, $2)`, multiGate, now); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE anteroom_gates SET seq = seq + 2, next_position = 3, active = 2 WHERE name = $1`, multiGate); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `SELECT pg_notify('anteroom_commits', (SELECT seq::text || ' ' || name FROM anteroom_gates WHERE name = $1))`, multiGate)
		return err
	})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		return a.wl.ValidateSessionIsActive(multiGate, "theirs") == nil
	}, 10*time.Second, 10*time.Millisecond)
	assert.Equal(t, int64(1), a.store.Resyncs())
	assert.NoError(t, a.wl.ValidateSessionIsActive(multiGate, "mine"))
	g, err := a.wl.Global(multiGate)
	require.NoError(t, err)
	assert.Equal(t, int64(2), g.Active)

	// The next commit of its own follows on from the resync.
	v, err := a.wl.Join(ctx, multiGate, "third")
	require.NoError(t, err)
	assert.Equal(t, int64(3), v.Position)
	assert.Equal(t, int64(3), v.Active)
}

// An instance whose listening connection is cut is unready until it has
// listened again and resynced; commits made meanwhile reach it.
func TestLostListenerResyncs(t *testing.T) {
	url := pgtest.DB(t)
	ctx := context.Background()
	opts := quiet
	opts.ReconnectDelay = 500 * time.Millisecond
	ins := startInstances(t, url, 2, 5, opts)
	a, b := ins[0], ins[1]
	require.NoError(t, a.store.Ready())

	c, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer c.Close(ctx)
	var killed int
	require.NoError(t, c.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = current_database() AND query LIKE 'LISTEN%' AND pid <> pg_backend_pid()`).Scan(&killed))
	require.Equal(t, 2, killed)
	require.Eventually(t, func() bool { return a.store.Ready() != nil }, 10*time.Second, 5*time.Millisecond, "a goes unready")
	assert.ErrorIs(t, a.store.Ready(), session.ErrUnavailable)
	_, err = b.wl.Join(ctx, multiGate, "while-away")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return a.store.Ready() == nil }, 10*time.Second, 10*time.Millisecond, "a is ready again")
	require.Eventually(t, func() bool {
		return a.wl.ValidateSessionIsActive(multiGate, "while-away") == nil
	}, 10*time.Second, 10*time.Millisecond)
	// And it follows again.
	_, err = b.wl.Join(ctx, multiGate, "after")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		return a.wl.ValidateSessionIsActive(multiGate, "after") == nil
	}, 10*time.Second, 10*time.Millisecond)
}

func TestOpenErrors(t *testing.T) {
	_, err := postgres.Open(context.Background(), "postgres://u:secret@%zz/db", quiet)
	require.ErrorIs(t, err, session.ErrInvalidArgument)
	assert.NotContains(t, err.Error(), "secret", "the password is not echoed")

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = postgres.Open(ctx, "postgres://postgres@/nodb?host=/nonexistent-dir&connect_timeout=1", quiet)
	require.Error(t, err)
	assert.True(t, errors.Is(err, session.ErrUnavailable) || errors.Is(err, session.ErrInvalidArgument), "got %v", err)
}
