package sqlite

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
	"github.com/anteroomhq/anteroom/session/sessiontest"
)

// snapFixture is a closed store with 5 active and 15 waiting sessions.
func snapFixture(t *testing.T) (string, session.GateConfig, []string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "s.db")
	s, err := Open(path, Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	cfg := sessiontest.GateConfig("default", 5)
	var ids []string
	for i := range 20 {
		id := fmt.Sprintf("snap-%02d", i)
		ids = append(ids, id)
		_, err := s.Join(context.Background(), cfg, id, epoch)
		require.NoError(t, err)
	}
	_, err = s.Release(context.Background(), cfg, ids[0], epoch) // a hole, and a promotion
	require.NoError(t, err)
	require.NoError(t, s.Close())
	return path, cfg, ids[1:]
}

func reopen(t *testing.T, path string, log *sessiontest.LogBuffer) *Store {
	t.Helper()
	var h slog.Handler = slog.DiscardHandler
	if log != nil {
		h = slog.NewTextHandler(log, nil)
	}
	s, err := Open(path, Options{Logger: slog.New(h)})
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

// checkStore asserts that every id is found at its place, that joining
// one again does not store it twice, and that the first Load is right.
func checkStore(t *testing.T, s *Store, cfg session.GateConfig, ids []string) {
	t.Helper()
	ctx := context.Background()
	snaps, err := s.Load(ctx, []string{"default"})
	require.NoError(t, err)
	snap := snaps["default"]
	assert.Equal(t, session.Counters{NextPosition: 21, Active: 5, Waiting: 14}, snap.State.Counters)
	assert.Len(t, snap.Active, 5)
	want := []int64{}
	for p := int64(7); p <= 20; p++ {
		want = append(want, p)
	}
	assert.Equal(t, want, snap.Waiting)
	for i, id := range ids {
		got, err := s.Get(ctx, "default", id)
		require.NoError(t, err, id)
		assert.EqualValues(t, i+2, got.Position, id)
		again, err := s.Join(ctx, cfg, id, epoch)
		require.NoError(t, err)
		assert.EqualValues(t, i+2, again.Position, "%s joined again keeps its place", id)
	}
	rows, err := s.Rows(ctx, "default")
	require.NoError(t, err)
	assert.Len(t, rows, 19, "no session stored twice")
}

// A clean close leaves a snapshot of the index; the next Open takes it
// instead of scanning the rows, and removes it.
func TestSnapshotServesTheNextOpen(t *testing.T) {
	path, cfg, ids := snapFixture(t)
	require.FileExists(t, path+snapshotSuffix)
	s := reopen(t, path, nil)
	assert.True(t, s.fromSnapshot, "index loaded from the snapshot")
	assert.NoFileExists(t, path+snapshotSuffix, "a snapshot serves one start")
	checkStore(t, s, cfg, ids)
}

// Any write after the close (here, counters changed behind the store's
// back) leaves the snapshot unused: the rows are scanned and the counters
// repaired.
func TestSnapshotNotUsedAfterAWrite(t *testing.T) {
	path, cfg, ids := snapFixture(t)
	tamper(t, path, `UPDATE gates SET active = 9, waiting = 1`)
	var log sessiontest.LogBuffer
	s := reopen(t, path, &log)
	assert.False(t, s.fromSnapshot)
	assert.Contains(t, log.String(), "the database changed since the snapshot")
	assert.Contains(t, log.String(), "repaired")
	checkStore(t, s, cfg, ids)
}

// A forged stamp (the file's time put back after the write) does not make
// a tampered counter pass: the snapshot's counts disagree with it, and it
// is repaired as after a scan.
func TestSnapshotCatchesATamperedCounterWithAForgedStamp(t *testing.T) {
	path, cfg, ids := snapFixture(t)
	forged(t, path, `UPDATE gates SET active = 9, waiting = 1`)
	var log sessiontest.LogBuffer
	s := reopen(t, path, &log)
	assert.True(t, s.fromSnapshot)
	assert.Contains(t, log.String(), "repaired")
	assert.Contains(t, log.String(), "active_stored=9")
	checkStore(t, s, cfg, ids)
}

// A row added behind the store's back with a forged stamp is found: the
// snapshot disagrees with the table's largest position and is not used.
func TestSnapshotCatchesAnAddedRowWithAForgedStamp(t *testing.T) {
	path, cfg, ids := snapFixture(t)
	forged(t, path, `INSERT INTO sessions (gate, position, id, status, last_active, created_at) VALUES ('default', 21, 'snap-19', 0, 1, 1)`)
	var log sessiontest.LogBuffer
	_, err := Open(path, Options{Logger: slog.New(slog.NewTextHandler(&log, nil))})
	// snap-19 is now stored twice: the scan refuses the file, where a
	// snapshot taken on trust would have hidden it.
	require.Error(t, err)
	assert.Contains(t, err.Error(), "stored twice")
	assert.Contains(t, log.String(), "disagrees with the table")
	_ = cfg
	_ = ids
}

// A damaged snapshot (one byte changed) is not used.
func TestSnapshotDamagedIsNotUsed(t *testing.T) {
	path, cfg, ids := snapFixture(t)
	b, err := os.ReadFile(path + snapshotSuffix)
	require.NoError(t, err)
	b[len(b)/2] ^= 0x40
	require.NoError(t, os.WriteFile(path+snapshotSuffix, b, 0o600))
	var log sessiontest.LogBuffer
	s := reopen(t, path, &log)
	assert.False(t, s.fromSnapshot)
	assert.Contains(t, log.String(), "checksum mismatch")
	checkStore(t, s, cfg, ids)
}

// Hostile snapshot files never make Open fail or panic: each is refused.
func TestSnapshotHostileFiles(t *testing.T) {
	path, _, _ := snapFixture(t)
	good, err := os.ReadFile(path + snapshotSuffix)
	require.NoError(t, err)
	cases := map[string][]byte{
		"empty":      {},
		"magic only": []byte(snapshotMagic),
		"truncated":  good[:len(good)/2],
		"huge count": func() []byte {
			b := bytes.Clone(good[:len(snapshotMagic)+24])
			b = append(b, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f)
			return b
		}(),
	}
	for name, data := range cases {
		t.Run(name, func(t *testing.T) {
			require.NoError(t, os.WriteFile(path+snapshotSuffix, data, 0o600))
			gates, _, why := takeSnapshot(path)
			assert.Nil(t, gates)
			assert.NotEmpty(t, why)
		})
	}
}

func tamper(t *testing.T, path, stmt string) {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	require.NoError(t, err)
	_, err = db.Exec(stmt)
	require.NoError(t, err)
	require.NoError(t, db.Close())
}

// forged runs stmt on the closed database, then puts back its size-and-time
// stamp as the snapshot recorded it.
func forged(t *testing.T, path, stmt string) {
	t.Helper()
	fi, err := os.Stat(path)
	require.NoError(t, err)
	tamper(t, path, stmt)
	_ = os.Remove(path + "-wal")
	after, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, fi.Size(), after.Size(), "the write kept the file's size")
	require.NoError(t, os.Chtimes(path, time.Now(), fi.ModTime()))
}
