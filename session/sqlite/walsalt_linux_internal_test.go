//go:build linux

package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
)

// shmChildEnv names the -shm file the helper process inspects.
const shmChildEnv = "ANTEROOM_SQLITE_SHM_CHILD"

// shmDMSByte is the byte of the wal-index (-shm) file on which every
// process that uses it holds a shared POSIX lock (SQLite's UNIX_SHM_DMS): a
// process that finds no lock there takes the wal-index for abandoned and
// rebuilds it.
const shmDMSByte = 128

// TestShmLockChild is the helper process of the tests below: it asks the
// kernel (F_GETLK, which takes nothing) whether another process holds a lock
// that would keep it from writing the DMS byte, as a sqlite3 shell would
// try to.
func TestShmLockChild(t *testing.T) {
	path := os.Getenv(shmChildEnv)
	if path == "" {
		t.Skip("helper process of TestReadingTheWALSaltKeepsSQLitesLocks")
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	require.NoError(t, err)
	defer f.Close()
	lk := syscall.Flock_t{Type: syscall.F_WRLCK, Whence: 0, Start: shmDMSByte, Len: 1}
	require.NoError(t, syscall.FcntlFlock(f.Fd(), syscall.F_GETLK, &lk))
	if lk.Type == syscall.F_UNLCK {
		fmt.Println("CHILD dms free")
		return
	}
	fmt.Printf("CHILD dms held by %d\n", lk.Pid)
}

// dmsHolder runs the helper process on the -shm of the database at path and
// returns what it found: "free", or "held by <pid>".
func dmsHolder(t *testing.T, path string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestShmLockChild$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), shmChildEnv+"="+path+"-shm")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "helper process:\n%s", out)
	for _, line := range strings.Split(string(out), "\n") {
		if rest, ok := strings.CutPrefix(line, "CHILD dms "); ok {
			return rest
		}
	}
	t.Fatalf("helper process said nothing:\n%s", out)
	return ""
}

// Reading the WAL's salt (checkRestart, writerCheckpoint) must leave
// SQLite's locks alone: closing a descriptor of a file drops every POSIX
// lock the process holds on it, and the salt used to be read from the -shm
// file, whose DMS lock tells a sqlite3 shell or a backup tool that the
// wal-index is in use. Without it, such a process rebuilds the wal-index
// under the running store.
func TestReadingTheWALSaltKeepsSQLitesLocks(t *testing.T) {
	s := openInternal(t)
	cfg := session.GateConfig{Name: "g", ActiveLimit: 1, ActiveTimeout: time.Minute, WaitingTimeout: time.Minute}
	_, err := s.Join(context.Background(), cfg, "aaaaaaaaaaaaaaaaaaaaaa", epoch)
	require.NoError(t, err)
	self := fmt.Sprintf("held by %d", os.Getpid())
	require.Equal(t, self, dmsHolder(t, s.path), "SQLite holds the wal-index's DMS lock while the store is open")

	_, ok := walSalt(s.path)
	require.True(t, ok, "the WAL holds a commit")
	require.Equal(t, self, dmsHolder(t, s.path), "reading the salt dropped SQLite's lock on the wal-index")
}

// The salt walSalt reads changes when the WAL restarts, and only then:
// checkRestart compares it to tell a restart from one a reader prevented.
func TestTheWALSaltChangesWhenTheWALRestarts(t *testing.T) {
	// No idle TRUNCATE between the reads: it would restart the WAL too.
	restoreCheckpointVars(t)
	ckptInterval = time.Hour
	s := openInternal(t)
	ctx := context.Background()
	cfg := session.GateConfig{Name: "g", ActiveLimit: 1, ActiveTimeout: time.Minute, WaitingTimeout: time.Minute}
	join := func(id string) {
		t.Helper()
		_, err := s.Join(ctx, cfg, id, epoch)
		require.NoError(t, err)
	}
	_, ok := walSalt(s.path + ".absent")
	require.False(t, ok, "no WAL, no salt")

	join("aaaaaaaaaaaaaaaaaaaaaa")
	first, ok := walSalt(s.path)
	require.True(t, ok)
	join("bbbbbbbbbbbbbbbbbbbbbb")
	same, ok := walSalt(s.path)
	require.True(t, ok)
	require.Equal(t, first, same, "a commit appended to the WAL keeps its salt")

	// Backfill every frame (on a connection of the test's own, as the
	// checkpointer's is): the writer's next commit restarts the WAL.
	db, err := sql.Open("sqlite", s.path)
	require.NoError(t, err)
	var busy, log, done int64
	require.NoError(t, db.QueryRow("PRAGMA wal_checkpoint(PASSIVE)").Scan(&busy, &log, &done))
	require.NoError(t, db.Close())
	require.Zero(t, busy)
	require.Equal(t, log, done, "the checkpoint backfilled the WAL")
	join("cccccccccccccccccccccc")
	restarted, ok := walSalt(s.path)
	require.True(t, ok)
	require.NotEqual(t, first, restarted, "the WAL restarted at the commit after a full checkpoint")
}
