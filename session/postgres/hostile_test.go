package postgres_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
	"github.com/anteroomhq/anteroom/session/postgres/pgtest"
	"github.com/anteroomhq/anteroom/session/sessiontest"
)

// Ids are data: quotes, comment markers and SQL in an id are stored and
// found as they are.
func TestHostileIDsAreData(t *testing.T) {
	url := pgtest.DB(t)
	s := open(t, url, quiet)
	t.Cleanup(func() { _ = s.Close() })
	ctx := context.Background()
	cfg := sessiontest.GateConfig(multiGate, 3)
	ids := []string{`a'b`, `x');DROP/**/TABLE/**/anteroom_sessions;--`, `"quoted"`, `back\slash`, `$1`, `%_*`}
	for i, id := range ids {
		got, err := s.Join(ctx, cfg, id, sessiontest.Epoch)
		require.NoError(t, err, id)
		assert.Equal(t, int64(i+1), got.Position)
	}
	for _, id := range ids {
		got, err := s.Get(ctx, multiGate, id)
		require.NoError(t, err, id)
		assert.Equal(t, id, got.ID)
	}
	rows, err := s.Rows(ctx, multiGate)
	require.NoError(t, err)
	assert.Len(t, rows, len(ids))
	_, err = s.Get(ctx, multiGate, `a'b' OR '1'='1`)
	assert.ErrorIs(t, err, session.ErrNotFound)
}

// Notifications are hints: garbage on the channel, and seqs of unknown
// gates, change nothing, and the instance keeps following.
func TestForgedNotificationsAreIgnored(t *testing.T) {
	url := pgtest.DB(t)
	ins := startInstances(t, url, 2, 5, quiet)
	ctx := context.Background()
	c, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer c.Close(ctx)
	for _, p := range []string{"", "x", "12", "-1 default", "1 ../etc", "99999999999999999999 default", "5 unknown-gate", "0 default", "1 default extra"} {
		_, err := c.Exec(ctx, "SELECT pg_notify('anteroom_commits', $1)", p)
		require.NoError(t, err)
	}
	_, err = ins[1].wl.Join(ctx, multiGate, "after-garbage")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		return ins[0].wl.ValidateSessionIsActive(multiGate, "after-garbage") == nil
	}, 10*time.Second, 10*time.Millisecond)
	assert.NoError(t, ins[0].store.Ready())
	g, err := ins[0].wl.Global(multiGate)
	require.NoError(t, err)
	assert.Equal(t, int64(1), g.Active)
}

// Touches and purges are told ids by memory that a client fed: ids that are
// SQL, absent, repeated, of another gate, a claim for a waiter or a time in
// the past change nothing they must not, and purge nothing that is not stale.
func TestHostileTouchesAndPurges(t *testing.T) {
	url := pgtest.DB(t)
	s := open(t, url, quiet)
	t.Cleanup(func() { _ = s.Close() })
	ctx := context.Background()
	cfg := sessiontest.GateConfig(multiGate, 1)
	epoch := sessiontest.Epoch
	for _, id := range []string{"a", "w"} {
		_, err := s.Join(ctx, cfg, id, epoch)
		require.NoError(t, err)
	}
	later := epoch.Add(time.Minute)
	require.NoError(t, s.Touch(ctx, multiGate, []session.Touch{
		{ID: `x');DROP/**/TABLE/**/anteroom_sessions;--`, LastActive: later},
		{ID: "", LastActive: later},
		{ID: "bad id", LastActive: later},
		{ID: "nope", LastActive: later, ClaimDeadline: later},
		{ID: "w", LastActive: later},
		{ID: "w", LastActive: epoch.Add(-time.Hour), ClaimDeadline: later},
	}))
	require.NoError(t, s.Touch(ctx, "other", []session.Touch{{ID: "w", LastActive: later.Add(time.Hour)}}))
	w, err := s.Get(ctx, multiGate, "w")
	require.NoError(t, err)
	assert.Equal(t, later.UnixNano(), w.LastActive.UnixNano(), "never back in time, never from another gate")
	assert.Equal(t, session.StatusWaiting, w.Status)
	assert.True(t, w.ClaimDeadline.IsZero(), "a claim does not touch a waiter's deadline")
	rows, err := s.Rows(ctx, multiGate)
	require.NoError(t, err)
	assert.Len(t, rows, 2, "no row created by a touch")

	r, err := s.Purge(ctx, cfg, []string{"a", "w", "a", "nope", `a'b`}, later)
	require.NoError(t, err)
	assert.Equal(t, session.UpdateReport{Gate: multiGate, Transactions: 1}, zeroDuration(r), "nothing stale, nothing purged")
	_, err = s.Purge(ctx, cfg, []string{"w", "bad id"}, later.Add(time.Hour))
	require.ErrorIs(t, err, session.ErrInvalidArgument)
	_, err = s.Get(ctx, multiGate, "w")
	require.NoError(t, err, "a purge with an invalid id purges nothing")
}

// A stray outbox row at the gate's next seq (a restore of anteroom_gates
// older than anteroom_commits, a hand edit) does not block the gate: the
// commit of that seq takes the row over, and every instance follows it.
func TestAStrayOutboxRowDoesNotBlockTheGate(t *testing.T) {
	url := pgtest.DB(t)
	ctx := context.Background()
	cfg := sessiontest.GateConfig(multiGate, 1)
	s := open(t, url, quiet)
	t.Cleanup(func() { _ = s.Close() })
	_, err := s.Load(ctx, []string{multiGate})
	require.NoError(t, err)
	_, err = s.Join(ctx, cfg, "a", sessiontest.Epoch)
	require.NoError(t, err)
	admin, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer admin.Close(ctx)
	_, err = admin.Exec(ctx, `INSERT INTO anteroom_commits (gate, seq, payload) SELECT name, seq + 1, '{"stray":true}' FROM anteroom_gates WHERE name = $1`, multiGate)
	require.NoError(t, err)
	for i, id := range []string{"b", "c", "d"} {
		got, err := s.Join(ctx, cfg, id, sessiontest.Epoch)
		require.NoError(t, err, "join %s", id)
		assert.Equal(t, int64(i+2), got.Position)
	}
	var stray int
	require.NoError(t, admin.QueryRow(ctx, `SELECT count(*) FROM anteroom_commits WHERE payload @> '{"stray":true}'`).Scan(&stray))
	assert.Zero(t, stray, "the commit of that seq took the row over")
}

// Counters damaged by hand or a partial restore are checked against the
// rows at open and repaired (counts, and next_position above every
// position), with a warning; the gate keeps its limit afterwards, and
// another instance already open follows the repair.
func TestDamagedCountersAreRepairedAtOpen(t *testing.T) {
	for _, tc := range []struct {
		name, damage string
	}{
		{"active below the rows", `UPDATE anteroom_gates SET active = -3 WHERE name = $1`},
		{"active above the rows", `UPDATE anteroom_gates SET active = 40 WHERE name = $1`},
		{"waiting off", `UPDATE anteroom_gates SET waiting = 7 WHERE name = $1`},
		{"next position behind the rows", `UPDATE anteroom_gates SET next_position = 2 WHERE name = $1`},
		{"waiting far too high", `UPDATE anteroom_gates SET waiting = 1::bigint << 47 WHERE name = $1`},
		{"waiting negative", `UPDATE anteroom_gates SET waiting = -5 WHERE name = $1`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url := pgtest.DB(t)
			ctx := context.Background()
			cfg := sessiontest.GateConfig(multiGate, 1)
			s := open(t, url, quiet)
			_, err := s.Load(ctx, []string{multiGate})
			require.NoError(t, err)
			for _, id := range []string{"first", "second", "third"} { // one active, two waiting
				_, err = s.Join(ctx, cfg, id, sessiontest.Epoch)
				require.NoError(t, err)
			}
			require.NoError(t, s.Close())
			admin, err := pgx.Connect(ctx, url)
			require.NoError(t, err)
			defer admin.Close(ctx)
			other := open(t, url, quiet) // open before the damage: it follows the repair
			t.Cleanup(func() { _ = other.Close() })
			_, err = other.Load(ctx, []string{multiGate})
			require.NoError(t, err)
			_, err = admin.Exec(ctx, tc.damage, multiGate)
			require.NoError(t, err)

			logs := &sessiontest.LogBuffer{}
			o := quiet
			o.Logger = slog.New(slog.NewTextHandler(logs, nil))
			s = open(t, url, o)
			t.Cleanup(func() { _ = s.Close() })
			snaps, err := s.Load(ctx, []string{multiGate})
			require.NoError(t, err)
			assert.Equal(t, session.Counters{NextPosition: 4, Active: 1, Waiting: 2}, snaps[multiGate].State.Counters)
			assert.Contains(t, logs.String(), "gate counters did not match the stored sessions; repaired")
			var next, active, waiting int64
			require.NoError(t, admin.QueryRow(ctx, `SELECT next_position, active, waiting FROM anteroom_gates WHERE name = $1`, multiGate).Scan(&next, &active, &waiting))
			assert.Equal(t, []int64{4, 1, 2}, []int64{next, active, waiting}, "repaired in the database")

			for _, id := range []string{"x", "y", "z"} {
				got, err := other.Join(ctx, cfg, id, sessiontest.Epoch)
				require.NoError(t, err)
				assert.Equal(t, session.StatusWaiting, got.Status, "%s: the gate is full", id)
				assert.Greater(t, got.Position, int64(3), "%s: a position never given before", id)
			}
			require.NoError(t, admin.QueryRow(ctx, `SELECT count(*) FROM anteroom_sessions WHERE gate = $1 AND status = 1`, multiGate).Scan(&active))
			assert.Equal(t, int64(1), active, "the limit holds")
		})
	}
}

// A newcomer refused by a gate whose next position is damaged fails alone:
// the ops batched with it, other gates' among them, go through.
func TestADamagedGateFailsOnlyItsOwnJoins(t *testing.T) {
	url := pgtest.DB(t)
	ctx := context.Background()
	bad := sessiontest.GateConfig(multiGate, 1)
	good := sessiontest.GateConfig("healthy", 1000)
	s := open(t, url, quiet)
	t.Cleanup(func() { _ = s.Close() })
	_, err := s.Load(ctx, []string{multiGate, "healthy"})
	require.NoError(t, err)
	_, err = s.Join(ctx, bad, "a", sessiontest.Epoch)
	require.NoError(t, err)
	admin, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer admin.Close(ctx)
	_, err = admin.Exec(ctx, `UPDATE anteroom_gates SET next_position = 0 WHERE name = $1`, multiGate)
	require.NoError(t, err)

	var healthyFailed atomic.Int64
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Go(func() {
			if i%10 == 0 {
				_, _ = s.Join(ctx, bad, fmt.Sprint("new", i), sessiontest.Epoch)
				return
			}
			if _, err := s.Join(ctx, good, fmt.Sprint("h", i), sessiontest.Epoch); err != nil {
				healthyFailed.Add(1)
				if healthyFailed.Load() == 1 {
					t.Logf("healthy gate join failed: %v", err)
				}
			}
		})
	}
	wg.Wait()
	_, err = s.Join(ctx, good, "alone", sessiontest.Epoch)
	t.Logf("a healthy join alone afterwards: %v", err)
	assert.Zero(t, healthyFailed.Load(), "joins of a healthy gate failed because of another gate's damaged counter: %d of 180", healthyFailed.Load())
}
