package postgres

import (
	"bytes"
	"context"
	"log/slog"
	"slices"
	"strings"
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

// The poll and the gates added or removed at runtime whose announcement was
// lost (poll.go, settings_follow.go).

// gatePoll is the poll period of these tests.
const gatePoll = 20 * time.Millisecond

// polled is how long a change may take to be polled: a few periods, with a
// margin for a loaded machine.
const polled = 50*gatePoll + 5*time.Second

// fileGate is every instance's gate of the config file.
var fileGate = sessiontest.GateConfig("default", 5)

// waitlistOn starts a Waitlist over s with fileGate.
func waitlistOn(t *testing.T, s *Store) *session.Waitlist {
	t.Helper()
	wl, err := session.New(context.Background(), s, []session.GateConfig{fileGate}, session.Options{
		TouchInterval: -1, SweepInterval: -1, Logger: s.log, Ready: s.Ready,
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = wl.Close() })
	return wl
}

// loseFlushes kills s's writer connection between each commit and its
// flush (every: all of them; else the next one only): the commits are in
// the tables, announced to nobody, and their callers get an error. fired
// says whether a commit was lost so.
func loseFlushes(s *Store, every bool) (fired func() bool) {
	var once sync.Once
	var n atomic.Int64
	s.afterCommit = func(c *pgx.Conn) {
		if every {
			_ = c.Close(context.Background())
			n.Add(1)
			return
		}
		once.Do(func() {
			_ = c.Close(context.Background())
			n.Add(1)
		})
	}
	return func() bool { return n.Load() > 0 }
}

// hasGate says whether wl serves gate with limit (limit < 0: any).
func hasGate(wl *session.Waitlist, gate string, limit int64) bool {
	c, err := wl.GateConfig(gate)
	return err == nil && (limit < 0 || c.ActiveLimit == limit)
}

// settingsRows counts gate's settings rows.
func settingsRows(t *testing.T, s *Store, gate string) int {
	t.Helper()
	var n int
	require.NoError(t, s.pool.QueryRow(context.Background(), `SELECT count(*) FROM anteroom_gate_settings WHERE gate = $1`, gate).Scan(&n))
	return n
}

// A gate added at runtime on an instance killed between the commit and its
// flush is in the tables, announced to nobody: the other instance's poll,
// which compared only the gates it followed, now finds it and adopts it,
// settings and state, and follows its commits from then on.
func TestPollAdoptsAGateAddedUnannounced(t *testing.T) {
	url := pgtest.DB(t)
	ctx := context.Background()
	a := openAsync(t, url, Options{FollowPoll: gatePoll})
	b := openAsync(t, url, Options{FollowPoll: gatePoll})
	wa, wb := waitlistOn(t, a), waitlistOn(t, b)

	loseFlushes(a, false)
	extra := sessiontest.GateConfig("extra", 2)
	require.Error(t, wa.AddGate(ctx, extra), "unacknowledged: killed before the flush")
	require.Equal(t, 1, settingsRows(t, b, "extra"), "the gate was committed")

	require.Eventually(t, func() bool { return hasGate(wb, "extra", 2) }, polled, 5*time.Millisecond,
		"b never found the gate added unannounced")
	assert.Equal(t, int64(1), b.adopted.Load())
	assert.Zero(t, b.unannounced.Load(), "no commit of a followed gate was missed")
	assert.NoError(t, b.Ready())
	st, err := wb.Stats("extra")
	require.NoError(t, err)
	assert.True(t, st.Runtime, "b shows the gate as added at runtime")

	// Followed from then on, both ways.
	require.Eventually(t, func() bool { return hasGate(wa, "extra", 2) && a.Ready() == nil }, polled, 5*time.Millisecond, "a resyncs its own gate")
	_, err = wb.Join(ctx, "extra", "x1")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return wa.ValidateSessionIsActive("extra", "x1") == nil }, polled, 5*time.Millisecond)
	require.NoError(t, wa.Release(ctx, "extra", "x1"))
	require.Eventually(t, func() bool { return wb.ValidateSessionIsActive("extra", "x1") != nil }, polled, 5*time.Millisecond)
	assert.Equal(t, int64(1), b.adopted.Load(), "adopted once")
}

// A gate removed at runtime (and a change of settings) whose announcement
// was lost: a commit of a gate followed, which the poll catches up from
// the outbox.
func TestPollFollowsAChangeAndARemovalUnannounced(t *testing.T) {
	url := pgtest.DB(t)
	ctx := context.Background()
	a := openAsync(t, url, Options{FollowPoll: gatePoll})
	b := openAsync(t, url, Options{FollowPoll: gatePoll})
	wa, wb := waitlistOn(t, a), waitlistOn(t, b)
	extra := sessiontest.GateConfig("extra", 2)
	require.NoError(t, wa.AddGate(ctx, extra))
	require.Eventually(t, func() bool { return hasGate(wb, "extra", 2) }, polled, 5*time.Millisecond)

	loseFlushes(a, false)
	extra.ActiveLimit = 4
	_, err := wa.SetGateConfig(ctx, extra)
	require.Error(t, err, "unacknowledged")
	require.Eventually(t, func() bool { return hasGate(wb, "extra", 4) }, polled, 5*time.Millisecond, "b never followed the change")
	require.Eventually(t, func() bool { return hasGate(wa, "extra", 4) && a.Ready() == nil }, polled, 5*time.Millisecond)

	loseFlushes(a, false)
	require.Error(t, wa.RemoveGate(ctx, "extra"), "unacknowledged")
	require.Zero(t, settingsRows(t, b, "extra"), "the removal was committed")
	require.Eventually(t, func() bool { return !slices.Contains(wb.Gates(), "extra") }, polled, 5*time.Millisecond,
		"b never followed the removal")
	_, err = wb.Join(ctx, "extra", "late")
	require.ErrorIs(t, err, session.ErrUnknownGate)
	assert.Equal(t, int64(2), b.unannounced.Load())
	assert.Zero(t, b.adopted.Load())
	assert.NoError(t, b.Ready())
}

// Gates added and removed in quick succession, every announcement lost,
// some between two polls and some across one: the other instance ends
// with what the tables hold, each time, and stays ready.
func TestPollConvergesOnGatesAddedAndRemovedRapidly(t *testing.T) {
	url := pgtest.DB(t)
	ctx := context.Background()
	a := openAsync(t, url, Options{FollowPoll: gatePoll})
	b := openAsync(t, url, Options{FollowPoll: gatePoll})
	wb := waitlistOn(t, b)
	loseFlushes(a, true)
	save := func(gate string, limit int64) {
		var cfg *session.GateConfig
		if limit > 0 {
			c := sessiontest.GateConfig(gate, limit)
			cfg = &c
		}
		require.Error(t, a.SaveGateSettings(ctx, gate, cfg), "every flush is lost")
	}
	onePoll := func() {
		p := b.polls.Load()
		require.Eventually(t, func() bool { return b.polls.Load() > p }, polled, time.Millisecond)
	}
	for round := range 4 {
		limit := int64(round + 2)
		save("x", limit)
		save("x", 0)
		save("y", limit)
		if round%2 == 1 {
			onePoll() // b sees y before it goes
		}
		save("y", 0)
		save("x", limit+10)
		save("y", limit)
		if round%2 == 0 {
			onePoll()
		}
		save("y", limit+20)
		require.Eventually(t, func() bool { return hasGate(wb, "x", limit+10) && hasGate(wb, "y", limit+20) }, polled, 5*time.Millisecond,
			"round %d: b holds what the tables hold", round)
		save("x", 0)
		save("y", 0)
		require.Eventually(t, func() bool { return slices.Equal(wb.Gates(), []string{"default"}) }, polled, 5*time.Millisecond,
			"round %d: b removed both", round)
	}
	require.Eventually(t, func() bool { return b.Ready() == nil }, polled, 5*time.Millisecond)
	assert.Equal(t, []string{"default"}, wb.Gates())
}

// logBuffer is a slog destination safe for concurrent use.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) count(sub string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.buf.String(), sub)
}

// Rows written behind the store's back: settings that do not validate or
// decode, a gate name no gate may have. The poll adopts none, logs the bad
// settings once (not every period), keeps the instance ready, and adopts
// the gate once a commit gives it good settings, itself unannounced.
func TestPollIgnoresHostileGateRows(t *testing.T) {
	url := pgtest.DB(t)
	ctx := context.Background()
	a := openAsync(t, url, Options{FollowPoll: gatePoll})
	logs := &logBuffer{}
	b := openAsync(t, url, Options{FollowPoll: gatePoll, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	wb := waitlistOn(t, b)
	for _, q := range []string{
		`INSERT INTO anteroom_gates (name, seq) VALUES ('evil', 1), ('junk', 1), ('../x', 1)`,
		`INSERT INTO anteroom_gate_settings (gate, settings) VALUES
			('evil', '{"activeLimit": -5}'), ('junk', '[1, 2]'), ('../x', '{"activeLimit": 1}')`,
	} {
		_, err := a.pool.Exec(ctx, q)
		require.NoError(t, err)
	}
	p := b.polls.Load()
	require.Eventually(t, func() bool { return b.polls.Load() >= p+10 }, polled, time.Millisecond)
	assert.Equal(t, []string{"default"}, wb.Gates())
	assert.Zero(t, b.adopted.Load())
	assert.NoError(t, b.Ready(), "a gate b does not serve does not make it unready")
	assert.Equal(t, 1, logs.count(`adopting a gate added at runtime failed" gate=evil`), "logged once per seq")
	assert.Equal(t, 1, logs.count(`adopting a gate added at runtime failed" gate=junk`), "logged once per seq")
	assert.Zero(t, logs.count("../x"), "a bad name is not even read")

	// Forged notifications naming them, and a resync of everything after
	// the listening connection is lost, adopt none either and leave b
	// ready (a resync that failed on them used to leave b unready).
	for _, n := range []string{"1 evil s", "1 junk s", "1 ../x s"} {
		_, err := a.pool.Exec(ctx, "SELECT pg_notify('anteroom_commits', $1)", n)
		require.NoError(t, err)
	}
	p = b.polls.Load()
	require.Eventually(t, func() bool { return b.polls.Load() >= p+5 }, polled, time.Millisecond)
	assert.NoError(t, b.Ready())
	var killed int
	require.NoError(t, a.pool.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = current_database() AND (query LIKE 'LISTEN%' OR query = $1) AND pid <> pg_backend_pid()`, sqlPollGates).Scan(&killed))
	require.Equal(t, 2, killed, "the two followers' connections, which last polled")
	require.Eventually(t, func() bool { return b.Ready() != nil }, polled, time.Millisecond, "b lost its listening connection")
	require.Eventually(t, func() bool { return b.Ready() == nil }, polled, 5*time.Millisecond, "b resynced")
	p = b.polls.Load()
	require.Eventually(t, func() bool { return b.polls.Load() >= p+5 }, polled, time.Millisecond)
	assert.NoError(t, b.Ready())
	assert.Equal(t, []string{"default"}, wb.Gates())
	assert.Zero(t, b.adopted.Load())

	loseFlushes(a, false)
	good := sessiontest.GateConfig("evil", 3)
	require.Error(t, a.SaveGateSettings(ctx, "evil", &good))
	require.Eventually(t, func() bool { return hasGate(wb, "evil", 3) }, polled, 5*time.Millisecond,
		"the gate's seq moved: b tries it again")
	// The poll counts an adoption after the Waitlist has the gate.
	require.Eventually(t, func() bool { return b.adopted.Load() == 1 }, polled, time.Millisecond)
	assert.NoError(t, b.Ready())
}

// The server is killed and restarted while the instances poll every
// millisecond (some polls are cut in the middle): they listen again,
// resync, poll again, and a gate added unannounced after the restarts is
// still found.
func TestPollSurvivesServerRestarts(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server of its own and kills it")
	}
	srv, url := pgtest.Own(t)
	ctx := context.Background()
	opts := Options{FollowPoll: time.Millisecond, ReconnectDelay: 20 * time.Millisecond}
	a, b := openAsync(t, url, opts), openAsync(t, url, opts)
	wa, wb := waitlistOn(t, a), waitlistOn(t, b)
	for range 3 {
		p := b.polls.Load()
		require.Eventually(t, func() bool { return b.polls.Load() >= p+5 }, polled, time.Millisecond, "b polls")
		require.NoError(t, srv.Restart(true))
		require.Eventually(t, func() bool { return a.Ready() == nil && b.Ready() == nil }, 30*time.Second, 5*time.Millisecond,
			"the instances are ready again")
	}
	lost := loseFlushes(a, false)
	extra := sessiontest.GateConfig("extra", 2)
	// The pool may still hold a connection the crash broke: try again
	// until the commit is made (and its flush lost).
	require.Eventually(t, func() bool {
		if !lost() {
			_ = wa.AddGate(ctx, extra)
		}
		return lost()
	}, 30*time.Second, 10*time.Millisecond)
	require.Eventually(t, func() bool { return hasGate(wb, "extra", 2) }, polled, 5*time.Millisecond,
		"b adopts the gate after the restarts")
	require.Eventually(t, func() bool { return b.Ready() == nil }, polled, 5*time.Millisecond)
}

// Before its first Load (a Waitlist being created) a Store adopts no gate,
// however many polls and notifications name it: Load reads every gate with
// settings, and is where the listener's memory starts.
func TestNoGateIsAdoptedBeforeTheFirstLoad(t *testing.T) {
	url := pgtest.DB(t)
	ctx := context.Background()
	a := openAsync(t, url, Options{FollowPoll: gatePoll})
	b := openAsync(t, url, Options{FollowPoll: gatePoll})
	wa := waitlistOn(t, a)
	extra := sessiontest.GateConfig("extra", 2)
	loseFlushes(a, false)
	require.Error(t, wa.AddGate(ctx, extra), "unacknowledged")
	_, err := a.pool.Exec(ctx, "SELECT pg_notify('anteroom_commits', '1 extra s')")
	require.NoError(t, err)
	p := b.polls.Load()
	require.Eventually(t, func() bool { return b.polls.Load() >= p+10 }, polled, time.Millisecond)
	b.deliverMu.Lock()
	_, known := b.applied["extra"]
	b.deliverMu.Unlock()
	assert.False(t, known, "adopted before the first Load")
	assert.Zero(t, b.adopted.Load())

	wb := waitlistOn(t, b)
	assert.True(t, hasGate(wb, "extra", 2), "Load reads it")
	require.Eventually(t, func() bool { return hasGate(wa, "extra", 2) }, polled, 5*time.Millisecond)
	_, err = wa.Join(ctx, "extra", "x1")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return wb.ValidateSessionIsActive("extra", "x1") == nil }, polled, 5*time.Millisecond)
	p = b.polls.Load()
	require.Eventually(t, func() bool { return b.polls.Load() >= p+3 }, polled, time.Millisecond)
	assert.Zero(t, b.adopted.Load())
	assert.NoError(t, b.Ready())
}
