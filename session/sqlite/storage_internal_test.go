package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
	"github.com/anteroomhq/anteroom/session/sessiontest"
)

// collide makes ids share hashes: every id hashes to its length mod 3, so
// most sessions live in the index's map of full keys.
func collide(t *testing.T) {
	testHookHash = func(id string) uint64 { return uint64(len(id) % 3) }
	t.Cleanup(func() { testHookHash = nil })
}

func openWith(tb testing.TB, path string) session.Store {
	tb.Helper()
	s, err := Open(path, Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(tb, err)
	return s
}

// The whole suite again, with an index whose hashes collide all the time:
// a collision never takes one session for another.
func TestStoreSuiteWithHashCollisions(t *testing.T) {
	if testing.Short() {
		t.Skip("the suite again, with colliding hashes")
	}
	collide(t)
	t.Setenv(sessiontest.RandomStepsEnv, "300")
	sessiontest.RunStoreSuite(t, sessiontest.AtPath(openWith))
}

func TestIndexCollisionsSurviveReopen(t *testing.T) {
	collide(t)
	path := filepath.Join(t.TempDir(), "c.db")
	ctx := context.Background()
	cfg := sessiontest.GateConfig("default", 2)
	other := sessiontest.GateConfig("other", 1)
	s := openWith(t, path)
	ids := []string{"a", "bb", "ccc", "d", "ee", "fff", "g"} // three hashes
	for _, id := range ids {
		_, err := s.Join(ctx, cfg, id, epoch)
		require.NoError(t, err)
		_, err = s.Join(ctx, other, id, epoch) // the same ids in another gate
		require.NoError(t, err)
	}
	_, err := s.Release(ctx, cfg, "bb", epoch) // active: frees a slot, promotes ccc
	require.NoError(t, err)
	require.NoError(t, s.Close())

	s = openWith(t, path)
	defer s.Close()
	st := s.(*Store)
	assert.Equal(t, 2*len(ids)-1, st.idx.size())
	for i, id := range ids {
		got, err := s.Get(ctx, "default", id)
		if id == "bb" {
			require.ErrorIs(t, err, session.ErrNotFound)
			continue
		}
		require.NoError(t, err, id)
		assert.Equal(t, int64(i+1), got.Position, id)
		got, err = s.Get(ctx, "other", id)
		require.NoError(t, err, id)
		assert.Equal(t, int64(i+1), got.Position, id)
	}
	// A join of an existing id finds it, whatever shares its hash.
	again, err := s.Join(ctx, cfg, "fff", epoch)
	require.NoError(t, err)
	assert.Equal(t, int64(6), again.Position)
	// A new id whose hash is taken gets a new row.
	n, err := s.Join(ctx, cfg, "hh", epoch)
	require.NoError(t, err)
	assert.Equal(t, int64(8), n.Position)
}

// A file whose rows name a session twice (which the Store never writes) is
// refused at Open rather than half-indexed.
func TestOpenRefusesADuplicateSession(t *testing.T) {
	path := filepath.Join(t.TempDir(), "d.db")
	s := openWith(t, path)
	_, err := s.Join(context.Background(), sessiontest.GateConfig("default", 2), "x", epoch)
	require.NoError(t, err)
	require.NoError(t, s.Close())
	rawExec(t, path, `INSERT INTO sessions (gate, position, id, status, last_active, created_at) VALUES ('default', 2, 'x', 0, NULL, 0)`,
		`UPDATE gates SET next_position = 3, waiting = 1`)
	_, err = Open(path, Options{Logger: slog.New(slog.DiscardHandler)})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "stored twice")
}

func rawExec(t testing.TB, path string, stmts ...string) {
	t.Helper()
	db, err := sqlOpen(path)
	require.NoError(t, err)
	defer db.Close()
	for _, q := range stmts {
		_, err := db.Exec(q)
		require.NoError(t, err, q)
	}
}

// The upgrade from a file of schema 0001: every row, position, counter and
// next_position is kept, and the store goes on from them.
func TestMigrateFrom0001(t *testing.T) {
	path := filepath.Join(t.TempDir(), "old.db")
	init, err := os.ReadFile("migrations/0001_init.sql")
	require.NoError(t, err)
	la := epoch.Add(-time.Minute).UnixNano()
	created := epoch.Add(-time.Hour).UnixNano()
	rawExec(t, path, "PRAGMA journal_mode = WAL", string(init),
		"PRAGMA user_version = 1",
		// default: positions 1-2 active, 3 and 5 waiting (5 left), 4 gone;
		// next_position beyond the last row (a purged tail).
		`INSERT INTO gates VALUES ('default', 8, 2, 2), ('b', 3, 1, 1)`,
		fmt.Sprintf(`INSERT INTO sessions (gate, id, position, status, last_active, created_at) VALUES
			('default', 'zz-active', 1, 1, %[1]d, %[2]d),
			('default', 'aa-active', 2, 1, %[1]d, %[2]d),
			('default', 'mm-wait', 3, 0, NULL, %[2]d),
			('default', 'bb-left', 5, 0, %[1]d, %[2]d),
			('b', 'zz-active', 1, 1, %[1]d, %[2]d),
			('b', 'w', 2, 0, NULL, %[2]d)`, la, created),
		`INSERT INTO meta VALUES ('token_secret', x'0102')`)

	st, err := Open(path, Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	defer st.Close()
	ctx := context.Background()

	db, err := sqlOpen(path)
	require.NoError(t, err)
	var version int
	require.NoError(t, db.QueryRow("PRAGMA user_version").Scan(&version))
	require.NoError(t, db.Close())
	assert.Equal(t, SchemaVersion, version)

	type row struct {
		id     string
		pos    int64
		status session.Status
		left   bool
	}
	want := map[string][]row{
		"default": {{"zz-active", 1, session.StatusActive, true}, {"aa-active", 2, session.StatusActive, true}, {"mm-wait", 3, session.StatusWaiting, false}, {"bb-left", 5, session.StatusWaiting, true}},
		"b":       {{"zz-active", 1, session.StatusActive, true}, {"w", 2, session.StatusWaiting, false}},
	}
	for gate, rows := range want {
		got, err := st.Rows(ctx, gate)
		require.NoError(t, err)
		require.Len(t, got, len(rows), gate)
		for i, r := range rows {
			assert.Equal(t, r.id, got[i].ID)
			assert.Equal(t, r.pos, got[i].Position)
			assert.Equal(t, r.status, got[i].Status)
			if r.left {
				assert.Equal(t, la, got[i].LastActive.UnixNano(), "last_active kept")
			} else {
				// 0003: a waiter that had not left is seen at the upgrade.
				assert.WithinDuration(t, time.Now(), got[i].LastActive, time.Minute)
			}
			assert.Equal(t, created, got[i].CreatedAt.UnixNano())
			g, err := st.Get(ctx, gate, r.id)
			require.NoError(t, err, "the index finds %s/%s", gate, r.id)
			assert.Equal(t, got[i], g)
		}
	}
	snaps, err := st.Load(ctx, []string{"default", "b"})
	require.NoError(t, err)
	assert.Equal(t, session.GateState{Counters: session.Counters{NextPosition: 8, Active: 2, Waiting: 2}, FirstWaitingPosition: 3, LastWaitingPosition: 5}, snaps["default"].State)
	assert.Equal(t, session.GateState{Counters: session.Counters{NextPosition: 3, Active: 1, Waiting: 1}, FirstWaitingPosition: 2, LastWaitingPosition: 2}, snaps["b"].State)
	assert.Len(t, snaps["default"].Active, 2)

	secret, err := st.Secret(ctx, func() ([]byte, error) { return []byte("new"), nil })
	require.NoError(t, err)
	assert.Equal(t, []byte{1, 2}, secret)

	cfg := sessiontest.GateConfig("default", 2)
	n, err := st.Join(ctx, cfg, "new", epoch)
	require.NoError(t, err)
	assert.Equal(t, int64(8), n.Position, "next_position kept: no position handed out again")
	again, err := st.Join(ctx, cfg, "mm-wait", epoch)
	require.NoError(t, err)
	assert.Equal(t, int64(3), again.Position)
	_, err = st.Release(ctx, cfg, "aa-active", epoch)
	require.NoError(t, err)
	p, err := st.Get(ctx, "default", "mm-wait")
	require.NoError(t, err)
	assert.Equal(t, session.StatusActive, p.Status, "the first waiter, promoted")
}

// Under sustained writes the WAL stays bounded: background checkpoints copy
// it, the writer restarts it past the high mark; and once the writer is
// idle it is truncated.
func TestWALStaysBounded(t *testing.T) {
	defer func(i time.Duration, r, h int64) { ckptInterval, restartBytes, highBytes = i, r, h }(ckptInterval, restartBytes, highBytes)
	ckptInterval, restartBytes, highBytes = 20*time.Millisecond, 256<<10, 1<<20
	path := filepath.Join(t.TempDir(), "w.db")
	s, err := Open(path, Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	defer s.Close()
	cfg := sessiontest.GateConfig("default", 100)
	ctx := context.Background()
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 1500 {
				if _, err := s.Join(ctx, cfg, "s"+strconv.Itoa(w)+"-"+strconv.Itoa(i)+"-padding-to-spread-the-rows", epoch); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	st := s.Stats()
	t.Logf("%+v", st)
	assert.Greater(t, st.WALFrames, 4*s.ck.highFrames, "the load wrote more than the high mark")
	assert.Positive(t, st.Checkpoints)
	fi, err := os.Stat(path + "-wal")
	require.NoError(t, err)
	assert.Less(t, fi.Size(), 3*highBytes, "the WAL grew past twice its high mark")

	require.Eventually(t, func() bool {
		fi, err := os.Stat(path + "-wal")
		return err == nil && fi.Size() == 0
	}, 5*time.Second, 10*time.Millisecond, "an idle writer's WAL is truncated")
	require.NoError(t, s.Close())
	_, err = os.Stat(path + "-wal")
	assert.True(t, os.IsNotExist(err), "closed: no WAL left")
}

// Update touches at most the chunk its caller asks for per transaction, the
// one owner of that size (session.Options.UpdateChunk); none asked means
// session.DefaultUpdateChunk.
func TestUpdateHonoursTheChunkAsked(t *testing.T) {
	defer func(q time.Duration) { adaptChunkQuick = q }(adaptChunkQuick)
	adaptChunkQuick = 0 // no transaction is quick enough to grow the next
	cases := []struct {
		chunk, wantTxs int
	}{
		{100, 4},  // 3 × 100 purged, then the (empty) promotion
		{300, 2},  // 300 purged, then the promotion
		{1000, 1}, // a chunk above the default is honoured too
		{0, 2},    // session.DefaultUpdateChunk: 256, then 44
		{-1, 2},   // the same
	}
	for _, tc := range cases {
		t.Run(strconv.Itoa(tc.chunk), func(t *testing.T) {
			s, err := Open(filepath.Join(t.TempDir(), "u.db"), Options{Logger: slog.New(slog.DiscardHandler)})
			require.NoError(t, err)
			defer s.Close()
			cfg := sessiontest.GateConfig("default", 300)
			ctx := context.Background()
			var wg sync.WaitGroup
			for i := range 300 {
				wg.Go(func() {
					_, err := s.Join(ctx, cfg, "a"+strconv.Itoa(i), epoch)
					assert.NoError(t, err)
				})
			}
			wg.Wait()
			r, err := s.Update(ctx, cfg, epoch.Add(cfg.ActiveTimeout+time.Second), tc.chunk)
			require.NoError(t, err)
			assert.EqualValues(t, 300, r.PurgedActive)
			assert.Equal(t, tc.wantTxs, r.Transactions)
		})
	}
}

func sqlOpen(path string) (*sql.DB, error) { return sql.Open("sqlite", path) }

// An update's transactions grow while nobody waits for the writer (fewer
// commits for the same rows), up to session.UpdateChunkGrowth × the chunk.
func TestUpdateChunkGrowsWhileIdle(t *testing.T) {
	defer func(q time.Duration) { adaptChunkQuick = q }(adaptChunkQuick)
	adaptChunkQuick = time.Hour // every transaction counts as quick
	s, err := Open(filepath.Join(t.TempDir(), "u.db"), Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	defer s.Close()
	cfg := sessiontest.GateConfig("default", 300)
	ctx := context.Background()
	for i := range 300 {
		_, err := s.Join(ctx, cfg, "a"+strconv.Itoa(i), epoch)
		require.NoError(t, err)
	}
	var sizes []int
	s.SetCommitListener(func(c session.Commit) { sizes = append(sizes, len(c.Events)) })
	r, err := s.Update(ctx, cfg, epoch.Add(cfg.ActiveTimeout+time.Second), 10)
	require.NoError(t, err)
	assert.EqualValues(t, 300, r.PurgedActive)
	// 10, 20, 40, 80, 80, 70 rows (the last with the empty promotion); at a
	// fixed chunk it would take 31 transactions.
	assert.Equal(t, 6, r.Transactions)
	assert.Equal(t, []int{10, 20, 40, 80, 80, 70}, sizes)
}

func TestAdaptChunk(t *testing.T) {
	cases := []struct {
		name             string
		cur, base, queue int
		took             time.Duration
		want             int
	}{
		{"first transaction: the chunk asked", 0, 256, 0, 0, 256},
		{"idle and quick: doubles", 256, 256, 0, time.Millisecond, 512},
		{"idle and quick: capped at the growth", 2048, 256, 0, time.Millisecond, 256 * session.UpdateChunkGrowth},
		{"idle but slow: stays", 1024, 256, 0, time.Second, 1024},
		{"an op waits: back to the chunk", 2048, 256, 1, time.Millisecond, 256},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, adaptChunk(tc.cur, tc.base, tc.queue, tc.took))
		})
	}
}

// A background checkpoint that copied pages syncs the database itself:
// SQLite syncs it only after a checkpoint that reached the end of the WAL,
// which no pass does while commits keep coming, and the writer's restart
// checkpoint then flushed the whole backlog while joins waited. A failing
// sync makes the store unready until a later pass syncs: one that copies
// nothing new tries the sync again (a failed pass keeps no reading), and
// does not make it ready without it. The test runs the passes itself: the
// checkpointer's own wait an hour, so that no idle TRUNCATE (a full
// checkpoint, which SQLite syncs) makes the store ready behind its back.
func TestBackgroundPassSyncsWhatItCopied(t *testing.T) {
	restoreCheckpointVars(t)
	ckptInterval = time.Hour
	var failing atomic.Bool
	var tries atomic.Int64
	failing.Store(true)
	testHookSyncCopied = func() error {
		tries.Add(1)
		if failing.Load() {
			return errors.New("injected sync failure")
		}
		return nil
	}
	t.Cleanup(func() { testHookSyncCopied = nil }) // after the store's Close
	s, write := openWriting(t)
	ctx := context.Background()
	write()
	require.NoError(t, s.Ready(ctx))

	s.ck.pass()
	assert.EqualValues(t, 1, tries.Load(), "the pass copied pages and synced them")
	assert.ErrorContains(t, s.Ready(ctx), "injected sync failure")
	assert.Zero(t, s.Stats().CheckpointSyncs)

	s.ck.pass()
	assert.EqualValues(t, 2, tries.Load(), "a pass with nothing new to copy tries the sync again")
	assert.ErrorContains(t, s.Ready(ctx), "injected sync failure", "and is not ready without it")

	failing.Store(false)
	s.ck.pass()
	assert.NoError(t, s.Ready(ctx), "a later pass synced")
	assert.EqualValues(t, 1, s.Stats().CheckpointSyncs)

	s.ck.pass()
	assert.EqualValues(t, 3, tries.Load(), "nothing copied, nothing to sync")
}

// While an Update runs, a pass that copies pages short of 3/4 of the high
// mark (one that began before the update) leaves their sync to the first
// pass after it (its fsyncs would hold a CPU from the joins the update
// yields to), and the writer restarts no WAL meanwhile (that checkpoint
// would flush what the passes left, on the writer's path). The test runs
// the passes itself: the checkpointer's own wait an hour.
func TestPassDuringAnUpdateSyncsAfterIt(t *testing.T) {
	restoreCheckpointVars(t)
	ckptInterval, restartBytes, highBytes = time.Hour, 64<<10, 64<<20
	var syncs atomic.Int64
	testHookSyncCopied = func() error { syncs.Add(1); return nil }
	t.Cleanup(func() { testHookSyncCopied = nil }) // after the store's Close
	s, write := openWriting(t)

	s.updating.Add(1) // as Update does while it runs
	write()
	s.ck.pass()
	require.True(t, s.ck.unsynced.Load(), "the pass copied pages and left their sync")
	write()
	s.ck.pass()
	assert.Zero(t, syncs.Load(), "no sync while the update runs")
	assert.Zero(t, s.Stats().WriterCheckpoints, "no restart while copied pages wait for their sync")
	assert.EqualValues(t, 2, s.Stats().Checkpoints)

	s.updating.Add(-1)
	s.ck.pass() // the first pass after the update
	assert.False(t, s.ck.unsynced.Load())
	assert.EqualValues(t, 1, syncs.Load(), "the pass after the update synced")
	write()
	assert.Positive(t, s.Stats().WriterCheckpoints, "then the writer restarts the WAL again")
}

// restoreCheckpointVars restores ckptFrames, ckptInterval, restartBytes and
// highBytes at the end of the test, after the store's Close (a cleanup registered
// before openWriting's runs after it): a deferred restore runs before the
// cleanups, while the checkpointer goroutine, which read ckptInterval when
// it started, still runs, and the race detector reports the write.
func restoreCheckpointVars(t *testing.T) {
	t.Helper()
	f, i, r, h := ckptFrames, ckptInterval, restartBytes, highBytes
	t.Cleanup(func() { ckptFrames, ckptInterval, restartBytes, highBytes = f, i, r, h })
}

// openWriting opens a store in a temporary directory, closed at the end of
// the test, and returns it with a function that commits 50 more joins.
func openWriting(t *testing.T) (*Store, func()) {
	t.Helper()
	s, err := Open(filepath.Join(t.TempDir(), "s.db"), Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	cfg := sessiontest.GateConfig("default", 10)
	n := 0
	return s, func() {
		for range 50 {
			n++
			_, err := s.Join(context.Background(), cfg, "s"+strconv.Itoa(n)+"-padding-to-spread-the-rows", epoch)
			require.NoError(t, err)
		}
	}
}

// A pass during an Update syncs anyway once the WAL is past 3/4 of its high
// mark: the writer's forced checkpoint at the high mark would otherwise
// flush everything the update's passes copied, on the writer's path.
func TestPassDuringALongUpdateSyncsNearTheHighMark(t *testing.T) {
	restoreCheckpointVars(t)
	ckptInterval, restartBytes, highBytes = 5*time.Millisecond, 64<<10, 512<<10
	var syncs atomic.Int64
	testHookSyncCopied = func() error { syncs.Add(1); return nil }
	t.Cleanup(func() { testHookSyncCopied = nil }) // after the store's Close
	s, write := openWriting(t)
	s.updating.Add(1) // as Update does while it runs
	defer s.updating.Add(-1)
	require.Eventually(t, func() bool {
		write()
		return syncs.Load() > 0
	}, 10*time.Second, 10*time.Millisecond, "a pass synced while the update runs, the WAL past 3/4 of its high mark")
}

// While an Update runs, background passes wait, and leave their sync to
// the pass after the update, until the WAL holds 3/4 of the high mark;
// without an Update, neither.
func TestCheckpointerHoldsBackDuringAnUpdate(t *testing.T) {
	k := &checkpointer{highFrames: 1000, updateFrames: 750}
	for _, tc := range []struct {
		name     string
		updating bool
		frames   int64
		want     bool
	}{
		{"no update", false, 100, false},
		{"no update, a long WAL", false, 900, false},
		{"update, a short WAL", true, 100, true},
		{"update, just under 3/4", true, 749, true},
		{"update, at 3/4", true, 750, false},
		{"update, past the high mark", true, 1200, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k.paused = func() bool { return tc.updating }
			assert.Equal(t, tc.want, k.holdsBack(tc.frames))
		})
	}
}

// An Update that writes several times the WAL's high mark waits for room
// past 3/4 of it: a background pass copies and syncs the WAL, the writer
// restarts it before the update's next transaction, and the WAL never
// reaches the high mark, where the writer would checkpoint whatever the
// pass had not caught up with, on the joins' path. ckptFrames is well
// under 3/4 of the high mark, as in production (1,000 of 49,152): else
// the residue is always small enough and the update waits only for the
// sync of a pass that happened to run, which one CPU (-cpu 1) never sees.
func TestUpdateWaitsForRoomInTheWAL(t *testing.T) {
	restoreCheckpointVars(t)
	ckptFrames, ckptInterval, restartBytes, highBytes = 64, 10*time.Millisecond, 64<<10, 2<<20
	path := filepath.Join(t.TempDir(), "u.db")
	s, err := Open(path, Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	cfg := sessiontest.GateConfig("default", 1)
	ctx := context.Background()
	const sessions = 20000
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < sessions; i += 8 {
				if _, err := s.Join(ctx, cfg, "s"+strconv.Itoa(i)+"-padding-to-spread-the-rows", epoch); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	require.Eventually(t, func() bool {
		fi, err := os.Stat(path + "-wal")
		return err == nil && fi.Size() == 0
	}, 10*time.Second, 10*time.Millisecond, "the joins' WAL is truncated once the writer idles")

	before := s.Stats()
	rep, err := s.Update(ctx, cfg, epoch.Add(cfg.WaitingTimeout+cfg.ActiveTimeout+time.Hour), 8)
	require.NoError(t, err)
	// The purged waiters' rows are deleted by the cleaner after the
	// update (clean.go), which waits for room as the update does.
	require.NoError(t, s.WaitClean(ctx))
	after := s.Stats()
	t.Logf("%+v, %d frames, %d waits", rep, after.WALFrames-before.WALFrames, after.UpdateWaits)
	require.EqualValues(t, sessions, rep.PurgedWaiting+rep.PurgedActive)
	assert.Greater(t, after.WALFrames-before.WALFrames, 3*s.ck.highFrames, "the update and the cleaner wrote several times the high mark")
	assert.Greater(t, after.UpdateWaits, before.UpdateWaits, "they waited for room")
	if writebackSupported {
		assert.Zero(t, before.WALWritebacks, "no writeback of the WAL while the joins' passes run")
		assert.Positive(t, after.WALWritebacks, "the checkpointer started the WAL's writeback while it held its passes back")
	}
	fi, err := os.Stat(path + "-wal")
	require.NoError(t, err)
	assert.Less(t, fi.Size(), highBytes, "the WAL stayed under its high mark")
}

// An Update that waited for room asks the writer to checkpoint what the
// pass left and restart the WAL before its next transaction, once; not
// when the WAL restarted meanwhile. The test runs the pass itself: the
// checkpointer's own wait an hour, and while the update runs (updating)
// neither a quiet moment nor the high mark lets the writer checkpoint.
func TestWriterRestartsTheWALWhenAnUpdateAsks(t *testing.T) {
	restoreCheckpointVars(t)
	ckptInterval, restartBytes, highBytes = time.Hour, 64<<10, 64<<20
	s, write := openWriting(t)
	s.updating.Add(1) // as Update does while it runs
	defer s.updating.Add(-1)
	write()
	s.ck.pass()
	write() // what the pass left
	frames, residual := s.ck.wal(s.ck.written.Load())
	require.GreaterOrEqual(t, frames, s.ck.restartFrames)
	require.Positive(t, residual)
	require.Zero(t, s.Stats().WriterCheckpoints)

	join := func(id string) {
		_, err := s.Join(context.Background(), sessiontest.GateConfig("default", 10), id, epoch)
		require.NoError(t, err)
	}
	s.ck.restartWanted.Store(true)
	join("after-the-restart")
	assert.EqualValues(t, 1, s.Stats().WriterCheckpoints, "the writer checkpointed before its next transaction")
	assert.False(t, s.ck.restartWanted.Load())
	frames, residual = s.ck.wal(s.ck.written.Load())
	assert.Less(t, frames, s.ck.restartFrames, "the WAL restarted")
	assert.Equal(t, frames, residual)
	s.ck.pass()
	assert.Less(t, s.ck.reading.Load().log, s.ck.restartFrames, "the WAL restarted, as SQLite sees it")

	s.ck.restartWanted.Store(true) // asked again, the WAL short of restartFrames
	join("asked-again")
	assert.EqualValues(t, 1, s.Stats().WriterCheckpoints, "no checkpoint: the WAL restarted meanwhile")
	assert.False(t, s.ck.restartWanted.Load())
}

// waitForRoom, case by case, on a checkpointer of its own (no goroutine):
// what ends the wait, and what it leaves behind.
func TestWaitForRoom(t *testing.T) {
	failure := errors.New("disk")
	for _, tc := range []struct {
		name        string
		log, done   int64 // the WAL as the last pass saw it
		failed      bool  // the last checkpoint failed
		budget      time.Duration
		cancel      bool // ctx is cancelled while it waits
		close       bool // the store is closed while it waits
		catchUp     bool // a pass catches up while it waits
		wantErr     error
		wantWait    bool // it waited
		wantRestart bool // it asked the writer to restart the WAL
		wantBudget  func(time.Duration) bool
	}{
		{name: "room", log: 99, budget: time.Hour, wantBudget: isHour},
		{name: "a pass has caught up", log: 5000, done: 5000 - ckptFrames, budget: time.Hour, wantRestart: true, wantBudget: isHour},
		{name: "behind: waits for the pass", log: 5000, budget: time.Hour, catchUp: true, wantWait: true, wantRestart: true,
			wantBudget: func(d time.Duration) bool { return d > 0 && d < time.Hour }},
		{name: "behind, no budget left", log: 5000, budget: 0, wantBudget: func(d time.Duration) bool { return d == 0 }},
		// Past its budget an update no longer waits, but it still asks for
		// the restart a pass made cheap: else the WAL grows to the high
		// mark, where the writer checkpoints whatever the passes left.
		{name: "a pass has caught up, no budget left", log: 5000, done: 5000 - ckptFrames, budget: 0, wantRestart: true,
			wantBudget: func(d time.Duration) bool { return d == 0 }},
		{name: "behind, the budget runs out", log: 5000, budget: 20 * time.Millisecond, wantWait: true,
			wantBudget: func(d time.Duration) bool { return d <= 0 }},
		{name: "behind, the checkpoints fail", log: 5000, failed: true, budget: time.Hour, wantBudget: isHour},
		{name: "behind, cancelled", log: 5000, budget: time.Hour, cancel: true, wantWait: true, wantErr: context.Canceled,
			wantBudget: func(d time.Duration) bool { return d > 0 && d < time.Hour }},
		{name: "behind, the store closes", log: 5000, budget: time.Hour, close: true, wantWait: true, wantErr: session.ErrUnavailable,
			wantBudget: func(d time.Duration) bool { return d > 0 && d < time.Hour }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := &checkpointer{updateFrames: 100, nudge: make(chan struct{}, 1), moved: make(chan struct{}), stop: make(chan struct{})}
			k.reading.Store(&ckptReading{log: tc.log, done: tc.done})
			if tc.failed {
				k.lastErr.Store(&failure)
			}
			s := &Store{ck: k}
			s.updating.Store(1) // the Update calling
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tc.cancel || tc.close || tc.catchUp {
				go func() {
					<-k.nudge // it waits, and asked for a pass
					assert.Zero(t, s.updating.Load(), "a waiting update does not hold the passes back")
					switch {
					case tc.cancel:
						cancel()
						return
					case tc.close: // as Close does
						s.closed.Store(true)
						close(k.stop)
						return
					}
					k.setReading(&ckptReading{log: tc.log, done: tc.log})
				}()
			}
			budget := tc.budget
			err := s.waitForRoom(ctx, &budget)
			assert.ErrorIs(t, err, tc.wantErr) // nil: no error
			assert.EqualValues(t, 1, s.updating.Load(), "the update counts as running again")
			assert.Equal(t, tc.wantWait, k.stats.updateWaits.Load() == 1)
			assert.Equal(t, tc.wantRestart, k.restartWanted.Load())
			assert.True(t, tc.wantBudget(budget), "budget left: %v", budget)
		})
	}
}

func isHour(d time.Duration) bool { return d == time.Hour }

// A writer checkpoint that backfilled the whole WAL expects the writer's
// next transaction to restart it, which SQLite does only when no reader
// still reads from the WAL. When a reader prevented it, the estimate goes
// back to the WAL as the checkpoint saw it (else it would count an empty
// WAL while the real one grows: passes would wait and no checkpoint would
// start); when nothing did, the estimate stays at the restarted WAL.
func TestAMissedWALRestartIsNoticed(t *testing.T) {
	restoreCheckpointVars(t)
	// No background pass, and no quiet restart: the residue is above
	// residualFrames by the time the WAL reaches the restart mark.
	ckptFrames, ckptInterval, restartBytes, highBytes = 1<<40, time.Hour, 2<<20, 64<<20
	s, write := openWriting(t)
	cfg := sessiontest.GateConfig("default", 10)
	ctx := context.Background()
	estimate := func() int64 { frames, _ := s.ck.wal(s.ck.written.Load()); return frames }
	// settle returns once the writer has finished with the last batch: a
	// caller is answered before the writer counts the batch's frames, and
	// the writer takes the next op (this Leave of nobody, which writes
	// nothing) only after.
	settle := func() {
		_, err := s.Leave(ctx, cfg, "nobody", epoch)
		require.ErrorIs(t, err, session.ErrNotFound)
	}
	for estimate() < s.ck.restartFrames {
		write()
	}
	before := estimate()

	db, err := sqlOpen(s.path)
	require.NoError(t, err)
	defer db.Close()
	reader, err := db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	require.NoError(t, err)
	var n int
	require.NoError(t, reader.QueryRow("SELECT count(*) FROM sessions").Scan(&n)) // it reads from the WAL
	require.Positive(t, n)

	s.ck.restartWanted.Store(true) // the writer checkpoints before the join
	_, err = s.Join(ctx, cfg, "kept-from-restarting", epoch)
	require.NoError(t, err)
	settle()
	assert.EqualValues(t, 1, s.Stats().MissedRestarts)
	assert.Greater(t, estimate(), before, "the WAL did not restart: its frames are still counted, and the join's")

	require.NoError(t, reader.Rollback())
	s.ck.restartWanted.Store(true)
	_, err = s.Join(ctx, cfg, "restarted", epoch)
	require.NoError(t, err)
	settle()
	assert.EqualValues(t, 1, s.Stats().MissedRestarts, "no reader: the WAL restarted")
	assert.Less(t, estimate(), s.ck.restartFrames, "counted from the restart")
}

// The idle writer's TRUNCATE, blocked by a reader, gives up at once and
// truncates nothing: it neither holds writers back while the reader reads
// (SQLite's TRUNCATE holds the write lock while it waits for readers, for
// the connection's busy timeout), nor counts the WAL as empty; a later
// tick truncates it once the reader is gone.
func TestABlockedTruncateKeepsTheWALCounted(t *testing.T) {
	restoreCheckpointVars(t)
	// The writer is idle for a whole interval before the TRUNCATE. A busy
	// timeout of a minute: a TRUNCATE that waited for the reader would
	// hold the join below for that long.
	ckptFrames, ckptInterval, restartBytes, highBytes = 1<<40, 100*time.Millisecond, 2<<20, 64<<20
	path := filepath.Join(t.TempDir(), "t.db")
	s, err := Open(path, Options{Logger: slog.New(slog.DiscardHandler), BusyTimeout: time.Minute})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	cfg := sessiontest.GateConfig("default", 10)
	ctx := context.Background()
	for i := range 20 {
		_, err := s.Join(ctx, cfg, "s"+strconv.Itoa(i), epoch)
		require.NoError(t, err)
	}
	db, err := sqlOpen(path)
	require.NoError(t, err)
	defer db.Close()
	reader, err := db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	require.NoError(t, err)
	var n int
	require.NoError(t, reader.QueryRow("SELECT count(*) FROM sessions").Scan(&n)) // from the WAL
	require.Equal(t, 20, n)
	require.Eventually(t, func() bool { return s.ck.stats.truncatesBlocked.Load() > 0 },
		5*time.Second, 5*time.Millisecond, "the idle writer's TRUNCATE ran, and the reader blocked it")
	frames, _ := s.ck.wal(s.ck.written.Load())
	assert.Positive(t, frames, "a reader kept the WAL: it is still counted")
	assert.Zero(t, s.ck.stats.truncates.Load())
	joined := make(chan error, 1)
	go func() { _, err := s.Join(ctx, cfg, "while-the-reader-reads", epoch); joined <- err }()
	select {
	case err := <-joined:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("a join waited behind the blocked TRUNCATE")
	}

	require.NoError(t, reader.Rollback())
	require.Eventually(t, func() bool { return s.ck.stats.truncates.Load() > 0 },
		5*time.Second, 5*time.Millisecond, "a later tick truncates it") // counted after its reading
	fi, err := os.Stat(path + "-wal")
	require.NoError(t, err)
	assert.Zero(t, fi.Size())
	frames, _ = s.ck.wal(s.ck.written.Load())
	assert.Zero(t, frames)
}

// The upgrade to 0013 (the marks in sessions_seen's order by seconds):
// the rows the marks of a file of schema 0012 cover, in the exact order
// they were raised in, are deleted, and the marks go below every row. Without that, a row the exact order covers but the new one does not
// (in the mark's second, before the mark's time but after its
// position) would come back to life, counted nowhere.
func TestMigrateTo0013DeletesWhatTheExactMarksCovered(t *testing.T) {
	path := filepath.Join(t.TempDir(), "v12.db")
	at := func(d time.Duration) int64 { return epoch.Add(d).UnixNano() }
	mark := at(50 * time.Millisecond) // inside the second [epoch, epoch+1s)
	oldSchemaFile(t, path, 12,
		// default: waiters at 3..7 and actives at 1..2. The waiting mark
		// (mark, 5) covers 3 (long before) and 6 (the mark's second, before
		// its time, after its position); 4 (at the mark's time, before its
		// position) too; 5 and 7 are live. The active mark (mark, 2)
		// covers 1.
		fmt.Sprintf(`INSERT INTO gates (name, next_position, active, waiting, purged_seen, purged_position, active_purged_seen, active_purged_position)
			VALUES ('default', 8, 1, 2, %[1]d, 5, %[1]d, 2)`, mark),
		fmt.Sprintf(`INSERT INTO sessions (gate, position, id, status, last_active, created_at) VALUES
			('default', 1, 'a-covered', 1, %[1]d, %[5]d),
			('default', 2, 'a-live', 1, %[2]d, %[5]d),
			('default', 3, 'w-covered-long-ago', 0, %[3]d, %[5]d),
			('default', 4, 'w-covered-at-the-mark', 0, %[6]d, %[5]d),
			('default', 5, 'w-live', 0, %[2]d, %[5]d),
			('default', 6, 'w-covered-in-the-second', 0, %[4]d, %[5]d),
			('default', 7, 'w-live-in-the-second', 0, %[7]d, %[5]d)`,
			at(0), at(time.Minute), at(-time.Hour), at(10*time.Millisecond), at(-2*time.Hour), mark, at(60*time.Millisecond)))

	var log sessiontest.LogBuffer
	st, err := Open(path, Options{Logger: slog.New(slog.NewTextHandler(&log, nil))})
	require.NoError(t, err)
	defer st.Close()
	assert.NotContains(t, log.String(), "repaired", "the counters counted what the marks left live")
	rows, err := st.Rows(context.Background(), "default")
	require.NoError(t, err)
	var ids []string
	for _, r := range rows {
		ids = append(ids, r.ID)
	}
	assert.Equal(t, []string{"a-live", "w-live", "w-live-in-the-second"}, ids)
	assert.Equal(t, 3, physicalRows(t, st, "default"), "the covered rows are deleted, not left under a mark")
	snaps, err := st.Load(context.Background(), []string{"default"})
	require.NoError(t, err)
	assert.EqualValues(t, 1, snaps["default"].State.Active)
	assert.EqualValues(t, 2, snaps["default"].State.Waiting)
	db, err := sqlOpen(path)
	require.NoError(t, err)
	defer db.Close()
	var seen, pos int64
	require.NoError(t, db.QueryRow(`SELECT purged_seen, purged_position FROM gates WHERE name = 'default'`).Scan(&seen, &pos))
	assert.Equal(t, noMark, purgeMark{seen, pos})
}

// oldSchemaFile writes a database of schema version (its migrations as
// they are embedded, then user_version) at path, then the statements of
// extra.
func oldSchemaFile(t *testing.T, path string, version int, extra ...string) {
	t.Helper()
	stmts := []string{"PRAGMA journal_mode = WAL"}
	for i := 1; i <= version; i++ {
		matches, err := filepath.Glob(fmt.Sprintf("migrations/%04d_*.sql", i))
		require.NoError(t, err)
		require.Len(t, matches, 1)
		b, err := os.ReadFile(matches[0])
		require.NoError(t, err)
		stmts = append(stmts, string(b))
	}
	stmts = append(stmts, fmt.Sprintf("PRAGMA user_version = %d", version), `INSERT INTO meta VALUES ('token_secret', x'0102')`)
	rawExec(t, path, append(stmts, extra...)...)
}

// A file of schema 0011 or 0012 whose purge mark is damaged is refused at
// its upgrade, nothing deleted, as at any start (TestOpenRefusesADamagedPurgeMark):
// the upgrade checks the marks, in the order they were raised in, before it
// deletes the rows they cover. (A first version of 0013 deleted them in its
// SQL, unchecked, and reset the marks.)
func TestTheUpgradeOfTheMarksRefusesADamagedMark(t *testing.T) {
	for _, tc := range []struct {
		name    string
		version int
		set     string
	}{
		{"far ahead", 12, "purged_seen = 9223372036854775807, purged_position = 0"},
		{"not a number", 12, "purged_seen = 'soon', purged_position = 0"},
		{"covers counted waiters", 12, fmt.Sprintf("purged_seen = %d, purged_position = 0", epoch.Add(time.Second).UnixNano())},
		{"active mark covers counted active sessions", 12, fmt.Sprintf("active_purged_seen = %d, active_purged_position = 0", epoch.Add(time.Second).UnixNano())},
		{"schema 0011, covers counted waiters", 11, fmt.Sprintf("purged_seen = %d, purged_position = 0", epoch.Add(time.Second).UnixNano())},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "old.db")
			la, ca := epoch.UnixNano(), epoch.Add(-time.Hour).UnixNano()
			oldSchemaFile(t, path, tc.version,
				`INSERT INTO gates (name, next_position, active, waiting) VALUES ('default', 5, 2, 2)`,
				fmt.Sprintf(`INSERT INTO sessions (gate, position, id, status, last_active, created_at) VALUES
					('default', 1, 'a1', 1, %[1]d, %[2]d), ('default', 2, 'a2', 1, %[1]d, %[2]d),
					('default', 3, 'w3', 0, %[1]d, %[2]d), ('default', 4, 'w4', 0, %[1]d, %[2]d)`, la, ca),
				"UPDATE gates SET "+tc.set)

			st, err := Open(path, Options{Logger: slog.New(slog.DiscardHandler)})
			if err == nil {
				st.Close()
			}
			require.ErrorIs(t, err, ErrDamaged, "a damaged mark is refused, as on a current file")
			db, err := sqlOpen(path)
			require.NoError(t, err)
			defer db.Close()
			var n int
			require.NoError(t, db.QueryRow(`SELECT count(*) FROM sessions`).Scan(&n))
			assert.Equal(t, 4, n, "nothing was deleted")
		})
	}
}

// A file of schema 0011 (the waiting mark only) with rows under its mark is
// upgraded: the rows go, in the exact order, and the live ones stay.
func TestMigrateFrom0011WithAMarkRaised(t *testing.T) {
	path := filepath.Join(t.TempDir(), "v11.db")
	at := func(d time.Duration) int64 { return epoch.Add(d).UnixNano() }
	oldSchemaFile(t, path, 11,
		fmt.Sprintf(`INSERT INTO gates (name, next_position, active, waiting, purged_seen, purged_position) VALUES ('default', 5, 1, 1, %d, 4)`, at(50*time.Millisecond)),
		fmt.Sprintf(`INSERT INTO sessions (gate, position, id, status, last_active, created_at) VALUES
			('default', 1, 'a1', 1, %[1]d, %[3]d),
			('default', 2, 'w-under', 0, %[2]d, %[3]d),
			('default', 3, 'w-under-too', 0, %[4]d, %[3]d),
			('default', 4, 'w-live', 0, %[5]d, %[3]d)`, at(time.Minute), at(10*time.Millisecond), at(-time.Hour), at(40*time.Millisecond), at(60*time.Millisecond)))
	var log sessiontest.LogBuffer
	st, err := Open(path, Options{Logger: slog.New(slog.NewTextHandler(&log, nil))})
	require.NoError(t, err)
	defer st.Close()
	assert.NotContains(t, log.String(), "repaired")
	rows, err := st.Rows(context.Background(), "default")
	require.NoError(t, err)
	var ids []string
	for _, r := range rows {
		ids = append(ids, r.ID)
	}
	assert.Equal(t, []string{"a1", "w-live"}, ids)
	assert.Equal(t, 2, physicalRows(t, st, "default"))
}
