package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
	"github.com/anteroomhq/anteroom/session/sessiontest"
)

// fillAndClose creates n gates (padded names, so that their rows fill many
// pages) in a new store at path and closes it.
func fillAndClose(t *testing.T, path string, n int) {
	t.Helper()
	s, err := Open(path, Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	var gates []string
	for i := range n {
		gates = append(gates, fmt.Sprintf("gate-%05d-padding-padding-padding-padding", i))
	}
	_, err = s.Load(context.Background(), gates)
	require.NoError(t, err)
	require.NoError(t, s.Close())
}

// corruptLeaf overwrites the header of a leaf page of table in the middle of
// the file, so that a scan of the table fails part way.
func corruptLeaf(t *testing.T, path, table string) {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	require.NoError(t, err)
	var pageSize int64
	require.NoError(t, db.QueryRow("PRAGMA page_size").Scan(&pageSize))
	var pages []int64
	rows, err := db.Query(`SELECT pageno FROM dbstat WHERE name = ? AND pagetype = 'leaf' ORDER BY pageno`, table)
	require.NoError(t, err)
	for rows.Next() {
		var p int64
		require.NoError(t, rows.Scan(&p))
		pages = append(pages, p)
	}
	require.NoError(t, rows.Err())
	require.NoError(t, db.Close())
	require.Greater(t, len(pages), 4, "the table spans several leaves")
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	require.NoError(t, err)
	defer f.Close()
	junk := make([]byte, 64)
	for i := range junk {
		junk[i] = 0xEE
	}
	_, err = f.WriteAt(junk, (pages[len(pages)/2]-1)*pageSize)
	require.NoError(t, err)
}

// joinAndClose joins n sessions (long ids, so that their rows fill many
// pages) to the default gate of a new store at path and closes it.
func joinAndClose(t *testing.T, path string, n int) {
	t.Helper()
	s, err := Open(path, Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	cfg := sessiontest.GateConfig("default", 10)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			_, err := s.Join(context.Background(), cfg, fmt.Sprintf("session-%06d-padding-padding-padding-padding", i), epoch)
			assert.NoError(t, err)
		})
	}
	wg.Wait()
	require.NoError(t, s.Close())
}

// A scan that fails part way (a damaged page) is an error, not the end of
// the rows: the start-up scan must not build the index, nor count the rows
// for the counters' check, from a partial view.
func TestStartupScanStopsOnAFailedScan(t *testing.T) {
	path := filepath.Join(t.TempDir(), "v.db")
	joinAndClose(t, path, 3000)
	corruptLeaf(t, path, "sessions")

	db, err := sql.Open("sqlite", path)
	require.NoError(t, err)
	defer db.Close()
	ctx := context.Background()
	conn, err := db.Conn(ctx)
	require.NoError(t, err)
	defer conn.Close()
	var counted map[string]*gateScan
	err = conn.Raw(func(dc any) error {
		var err error
		counted, err = scanSessions(ctx, dc.(driver.Conn), newIDIndex())
		return err
	})
	require.Error(t, err, "counted: %v", counted)
	assert.Contains(t, err.Error(), "malformed")
}

// The same damage refuses Open with the quick_check's verdict, which runs
// beside the scan (and is waited for even when the scan failed first).
func TestOpenRefusesDamagedSessionsRows(t *testing.T) {
	path := filepath.Join(t.TempDir(), "v.db")
	joinAndClose(t, path, 3000)
	corruptLeaf(t, path, "sessions")
	_, err := Open(path, Options{Logger: slog.New(slog.DiscardHandler)})
	require.ErrorIs(t, err, ErrDamaged)
	assert.Contains(t, err.Error(), "failed PRAGMA quick_check")
}

// A database that fails PRAGMA quick_check is refused at Open.
func TestOpenRefusesAFileThatFailsQuickCheck(t *testing.T) {
	path := filepath.Join(t.TempDir(), "q.db")
	fillAndClose(t, path, 3000)
	corruptLeaf(t, path, "gates")
	_, err := Open(path, Options{Logger: slog.New(slog.DiscardHandler)})
	require.ErrorIs(t, err, ErrDamaged)
	assert.Contains(t, err.Error(), "failed PRAGMA quick_check")
	assert.Contains(t, err.Error(), "Restore it from a backup")
}

// copyFiles copies the named files of src's database to dir, as a crash
// would leave them (the store stays open).
func copyFiles(t testing.TB, src, dir string, suffixes ...string) string {
	t.Helper()
	dst := filepath.Join(dir, filepath.Base(src))
	for _, suf := range suffixes {
		b, err := os.ReadFile(src + suf)
		require.NoError(t, err, src+suf)
		require.NoError(t, os.WriteFile(dst+suf, b, 0o600))
	}
	return dst
}

// A WAL truncated after a crash loses the joins it held: when the identity
// file recorded them (it is written every second while positions are handed
// out), Open refuses rather than hand their positions out again. The same
// crash image with its WAL intact opens and goes on where it stopped.
func TestOpenRefusesATruncatedWAL(t *testing.T) {
	defer func(c, r time.Duration) { ckptInterval, recordInterval = c, r }(ckptInterval, recordInterval)
	ckptInterval, recordInterval = time.Hour, 5*time.Millisecond // no checkpoint: the joins stay in the WAL
	path := filepath.Join(t.TempDir(), "t.db")
	s, err := Open(path, Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	defer s.Close()
	ctx := context.Background()
	cfg := sessiontest.GateConfig("default", 2)
	for i := range 50 {
		_, err := s.Join(ctx, cfg, fmt.Sprintf("s%d", i), epoch)
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool {
		id, err := readIdentity(path + ".id")
		return err == nil && id != nil && id.NextPosition["default"] == 51
	}, 10*time.Second, 5*time.Millisecond, "the identity file records the joins")
	fi, err := os.Stat(path + "-wal")
	require.NoError(t, err)
	require.Positive(t, fi.Size(), "the joins are in the WAL")

	intact := copyFiles(t, path, t.TempDir(), "", "-wal", ".id")
	truncated := copyFiles(t, path, t.TempDir(), "", "-wal", ".id")
	require.NoError(t, os.Truncate(truncated+"-wal", 0))

	_, err = Open(truncated, Options{Logger: slog.New(slog.DiscardHandler)})
	require.ErrorIs(t, err, ErrDamaged)
	assert.Contains(t, err.Error(), "lost committed writes")

	s2, err := Open(intact, Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err, "the crash image with its WAL is healthy")
	defer s2.Close()
	next, err := s2.Join(ctx, cfg, "next", epoch)
	require.NoError(t, err)
	assert.EqualValues(t, 51, next.Position)
}

// An unreadable identity file is refused with the way out.
func TestOpenRefusesAnUnreadableIdentityFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "i.db")
	s, err := Open(path, Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	require.NoError(t, s.Close())
	require.NoError(t, os.WriteFile(path+".id", []byte("{garbage"), 0o600))
	_, err = Open(path, Options{Logger: slog.New(slog.DiscardHandler)})
	require.ErrorIs(t, err, ErrDamaged)
	assert.Contains(t, err.Error(), "delete it")
}

// onWriter runs fn on the writer goroutine, between two ops.
func onWriter(t *testing.T, s *Store, fn func(w *wconn) error) {
	t.Helper()
	var once sync.Once
	var err error
	testHookOpDone = func(o *op) error {
		if o.kind == opSecret {
			once.Do(func() { err = fn(&s.wc) })
		}
		return nil
	}
	defer func() { testHookOpDone = nil }()
	_, serr := s.Secret(context.Background(), func() ([]byte, error) { return []byte("k"), nil })
	require.NoError(t, serr)
	require.NoError(t, err)
}

func execOn(w *wconn, q string) error {
	_, err := w.c.(driver.ExecerContext).ExecContext(context.Background(), q, nil)
	return err
}

// A store that cannot write (the disk full, simulated with max_page_count)
// is not ready until a write succeeds again; Ready's probe finds out.
func TestReadyReportsAFullDatabase(t *testing.T) {
	defer func(p time.Duration) { probeInterval = p }(probeInterval)
	probeInterval = 0
	s := openInternal(t)
	ctx := context.Background()
	require.NoError(t, s.Ready(ctx))
	cfg := sessiontest.GateConfig("default", 2)
	_, err := s.Join(ctx, cfg, "first", epoch)
	require.NoError(t, err)

	onWriter(t, s, func(w *wconn) error {
		return execOn(w, "PRAGMA max_page_count = 1") // clamped to the current size
	})
	var joinErr error
	for i := 0; i < 20000 && joinErr == nil; i++ {
		_, joinErr = s.Join(ctx, cfg, fmt.Sprintf("fill-%06d-padding-padding-padding-padding", i), epoch)
	}
	require.Error(t, joinErr, "the database filled up")
	assert.Contains(t, joinErr.Error(), "full")
	err = s.Ready(ctx)
	require.Error(t, err)
	assert.Equal(t, session.CodeUnavailable, session.CodeOf(err))
	assert.Contains(t, err.Error(), "full")
	require.Error(t, s.Ready(ctx), "still full: the probe fails too")

	onWriter(t, s, func(w *wconn) error { return execOn(w, "PRAGMA max_page_count = 1073741823") })
	require.NoError(t, s.Ready(ctx), "room again: the probe succeeds")
	_, err = s.Join(ctx, cfg, "after", epoch)
	require.NoError(t, err)
}

// A database file removed or replaced while open is not ready: its writes
// would be lost at the next start.
func TestReadyReportsARemovedFile(t *testing.T) {
	s := openInternal(t)
	ctx := context.Background()
	require.NoError(t, s.Ready(ctx))
	require.NoError(t, os.Rename(s.path, s.path+".moved"))
	err := s.Ready(ctx)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "removed or replaced")
	require.NoError(t, os.WriteFile(s.path, nil, 0o600))
	require.Error(t, s.Ready(ctx), "another file at the path")
	require.NoError(t, os.Rename(s.path+".moved", s.path))
	require.NoError(t, s.Ready(ctx))
	require.NoError(t, s.Close())
	require.ErrorIs(t, s.Ready(ctx), session.ErrUnavailable)
}

// A gate deleted on purpose while the store runs is dropped from the
// identity file at its next record, so the next Open does not take it for
// lost; a gate that vanished behind the store's back is refused.
func TestIdentityForgetsADeletedGate(t *testing.T) {
	defer func(r time.Duration) { recordInterval = r }(recordInterval)
	recordInterval = 5 * time.Millisecond
	path := filepath.Join(t.TempDir(), "g.db")
	s, err := Open(path, Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	ctx := context.Background()
	for _, g := range []string{"a", "b"} {
		_, err := s.Join(ctx, sessiontest.GateConfig(g, 1), "x", epoch)
		require.NoError(t, err)
	}
	recorded := func(gate string) (int64, bool) {
		id, err := readIdentity(path + ".id")
		if err != nil || id == nil {
			return 0, false
		}
		n, ok := id.NextPosition[gate]
		return n, ok
	}
	require.Eventually(t, func() bool { n, _ := recorded("b"); return n == 2 }, 10*time.Second, 5*time.Millisecond)
	onWriter(t, s, func(w *wconn) error {
		return execOn(w, "DELETE FROM sessions WHERE gate = 'b'; DELETE FROM gates WHERE name = 'b'")
	})
	require.Eventually(t, func() bool { _, ok := recorded("b"); return !ok }, 10*time.Second, 5*time.Millisecond)
	require.NoError(t, s.Close())
	s, err = Open(path, Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err, "the deleted gate is not missed")
	require.NoError(t, s.Close())

	db, err := sql.Open("sqlite", path)
	require.NoError(t, err)
	_, err = db.Exec(`DELETE FROM sessions WHERE gate = 'a'; DELETE FROM gates WHERE name = 'a'`)
	require.NoError(t, err)
	require.NoError(t, db.Close())
	_, err = Open(path, Options{Logger: slog.New(slog.DiscardHandler)})
	require.ErrorIs(t, err, ErrDamaged)
	assert.Contains(t, err.Error(), `gate "a" is missing, but 1 positions were already handed out`)
}

// While an Update runs, the identity record (and its fsyncs of the WAL the
// update writes) waits for the update to end and then for the
// checkpointer's next pass, up to recordDeferLimit since the last record;
// past it, or after a failed record, it is made during the update. The
// test calls recordOnce itself (recordLoop never ticks), so each step is
// one tick.
func TestIdentityRecordWaitsForAnUpdate(t *testing.T) {
	for _, tc := range []struct {
		name string
		// before sets the Store up before the tick during the update.
		before func(s *Store)
		// recordedDuring: that tick records.
		recordedDuring bool
	}{
		{"within the limit it waits", func(*Store) {}, false},
		{"while the update waits for room in the WAL it waits", func(s *Store) { s.updating.Store(0) }, false},
		{"past the limit it records", func(s *Store) { s.lastRecord = time.Now().Add(-recordDeferLimit) }, true},
		{"after a failed record it records", func(s *Store) {
			err := errors.New("disk full")
			s.recordErr.Store(&err)
		}, true},
		{"after a failed checkpoint it records", func(s *Store) {
			err := errors.New("disk full")
			s.ck.lastErr.Store(&err) // no pass may come to wait for
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer func(r, c time.Duration) { recordInterval, ckptInterval = r, c }(recordInterval, ckptInterval)
			// No tick of recordLoop, no checkpoint pass unless kicked.
			recordInterval, ckptInterval = time.Hour, time.Hour
			path := filepath.Join(t.TempDir(), "r.db")
			s, err := Open(path, Options{Logger: slog.New(slog.DiscardHandler)})
			require.NoError(t, err)
			defer s.Close()
			ctx := context.Background()
			recorded := func() int64 {
				id, err := readIdentity(path + ".id")
				require.NoError(t, err)
				require.NotNil(t, id)
				return id.NextPosition["a"]
			}
			_, err = s.Join(ctx, sessiontest.GateConfig("a", 1), "x", epoch)
			require.NoError(t, err)
			s.recordOnce()
			require.EqualValues(t, 2, recorded(), "no update: recorded")

			// An Update runs (as Update counts itself), then ends.
			s.updating.Store(1)
			s.updates.Store(1)
			endUpdate := func() { s.updating.Store(0); s.updates.Store(0) }
			_, err = s.Join(ctx, sessiontest.GateConfig("a", 1), "y", epoch)
			require.NoError(t, err)
			tc.before(s)
			deferred := s.Stats().RecordsDeferred
			s.recordOnce()
			if tc.recordedDuring {
				assert.EqualValues(t, 3, recorded(), "recorded during the update")
				assert.Equal(t, deferred, s.Stats().RecordsDeferred)
				assert.Nil(t, s.recordErr.Load(), "the record succeeded")
				endUpdate()
				return
			}
			s.recordOnce()
			assert.EqualValues(t, 2, recorded(), "no record while the update runs")
			assert.Equal(t, deferred+2, s.Stats().RecordsDeferred)
			endUpdate()
			s.recordOnce()
			assert.EqualValues(t, 2, recorded(), "no record after the update before a checkpoint pass")
			before := s.ck.reading.Load()
			s.ck.kick()
			require.Eventually(t, func() bool { return s.ck.reading.Load() != before }, 10*time.Second, time.Millisecond, "a pass")
			s.recordOnce()
			assert.EqualValues(t, 3, recorded(), "recorded after the pass")
			assert.Equal(t, deferred+3, s.Stats().RecordsDeferred)
		})
	}
}
