package postgres

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
	"github.com/anteroomhq/anteroom/session/postgres/pgtest"
)

// roundTrips records, per connection, each query sent alone and each batch:
// a round trip each.
type roundTrips struct {
	mu    sync.Mutex
	trips []trip
}

type trip struct {
	conn *pgx.Conn
	sql  string   // "batch: ..." for a batch
	all  []string // a batch's statements in full
}

func (r *roundTrips) add(c *pgx.Conn, sql string, all ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.trips = append(r.trips, trip{c, sql, all})
}

func (r *roundTrips) TraceQueryStart(ctx context.Context, c *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	r.add(c, d.SQL)
	return ctx
}
func (r *roundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (r *roundTrips) TraceBatchStart(ctx context.Context, c *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	var sqls, all []string
	for _, q := range d.Batch.QueuedQueries {
		sqls = append(sqls, strings.Fields(q.SQL)[0])
		all = append(all, q.SQL)
	}
	r.add(c, "batch: "+strings.Join(sqls, " "), all...)
	return ctx
}
func (r *roundTrips) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (r *roundTrips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

// writerTx returns the round trips of the first writer transaction
// recorded: from its BEGIN on, on its connection, to the batch that
// commits.
func (r *roundTrips) writerTx(t *testing.T) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var conn *pgx.Conn
	var out []string
	for _, tr := range r.trips {
		if conn == nil && strings.EqualFold(tr.sql, "begin") {
			conn = tr.conn
		}
		if conn == nil || tr.conn != conn {
			continue
		}
		out = append(out, tr.sql)
		if strings.HasSuffix(tr.sql, " COMMIT") {
			return out
		}
	}
	t.Fatalf("no writer transaction among %d round trips", len(r.trips))
	return nil
}

// A join is three round trips: BEGIN; the gate's lock, the batch's rows
// and the line's bounds in one batch; the writes, the outbox row, the
// counters, the history and an asynchronous COMMIT in another. The row
// lock is held for the last two only (it was five round trips and more).
// A fourth, after the lock, flushes the commit and sends the notification
// (durable.go) before the join is answered.
func TestJoinTakesThreeRoundTrips(t *testing.T) {
	url := pgtest.DB(t)
	ctx := context.Background()
	rt := &roundTrips{}
	s, err := Open(ctx, url, Options{Logger: slog.New(slog.DiscardHandler), Tracer: rt})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	cfg := session.GateConfig{Name: "g", ActiveLimit: 1, ActiveTimeout: time.Hour, WaitingTimeout: time.Hour}
	_, err = s.Load(ctx, []string{"g"})
	require.NoError(t, err)
	for i, want := range []session.Status{session.StatusActive, session.StatusWaiting, session.StatusWaiting} {
		rt.mu.Lock()
		rt.trips = nil
		rt.mu.Unlock()
		got, err := s.Join(ctx, cfg, fmt.Sprint("s", i), time.Now())
		require.NoError(t, err)
		assert.Equal(t, want, got.Status)
		trips := rt.writerTx(t)
		assert.Len(t, trips, 3, "round trips of join %d: %q", i, trips)
		commit, flush := rt.commitAndFlush(t)
		assert.Equal(t, sqlAsyncCommit, commit[0], "join %d", i)
		assert.NotContains(t, commit, sqlNotify, "join %d: notified before the flush", i)
		assert.Equal(t, []string{sqlFlushWAL, sqlNotify}, flush, "join %d", i)
	}
	rows, err := s.Rows(ctx, "g")
	require.NoError(t, err)
	assert.Len(t, rows, 3)
}

// Ops queued while a transaction waits for its gate's lock join it: held
// by another instance, the lock is granted to one transaction that commits
// all three joins.
func TestOpsQueuedDuringTheLockWaitShareItsCommit(t *testing.T) {
	url := pgtest.DB(t)
	ctx := context.Background()
	s, err := Open(ctx, url, Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	cfg := session.GateConfig{Name: "g", ActiveLimit: 2, ActiveTimeout: time.Hour, WaitingTimeout: time.Hour}
	_, err = s.Load(ctx, []string{"g"})
	require.NoError(t, err)

	other, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer other.Close(ctx)
	tx, err := other.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "SELECT 1 FROM anteroom_gates WHERE name = 'g' FOR UPDATE")
	require.NoError(t, err)

	before := s.Transactions()
	var wg sync.WaitGroup
	errs := make([]error, 3)
	join := func(i int) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = s.Join(ctx, cfg, fmt.Sprint("s", i), time.Now())
		}()
	}
	join(0)
	// The writer waits for the lock ...
	require.Eventually(t, func() bool {
		var n int
		err := other.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()").Scan(&n)
		return err == nil && n == 1
	}, 10*time.Second, 5*time.Millisecond)
	// ... while two more joins are queued.
	join(1)
	join(2)
	require.Eventually(t, func() bool { return len(s.ops) == 2 }, 10*time.Second, time.Millisecond)
	require.NoError(t, tx.Rollback(ctx))
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	assert.Equal(t, int64(1), s.Transactions()-before, "transactions for the three joins")
	rows, err := s.Rows(ctx, "g")
	require.NoError(t, err)
	require.Len(t, rows, 3)
	var active int
	for i, r := range rows {
		assert.Equal(t, int64(i+1), r.Position)
		if r.Status == session.StatusActive {
			active++
		}
	}
	assert.Equal(t, 2, active)
}
