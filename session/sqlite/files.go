package sqlite

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// The files of a database at path: the database itself, SQLite's WAL and
// shared-memory index, the process lock, and the identity sidecar.
func dbFiles(path string) []string {
	return []string{path, path + "-wal", path + "-shm", path + ".lock", path + ".id"}
}

// fileMode is the mode of every file of a database: it holds the token
// secret, so only its owner may read it.
const fileMode fs.FileMode = 0o600

// resolvePath returns path with every symbolic link resolved, so that two
// names of one file (b.db -> a.db) take the same lock and the same WAL. A
// path that does not exist yet is resolved through its directory; a dangling
// link is an error.
func resolvePath(path string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	if _, err := os.Lstat(abs); errors.Is(err, fs.ErrNotExist) {
		dir, err := filepath.EvalSymlinks(filepath.Dir(abs))
		if err != nil {
			return "", err
		}
		return filepath.Join(dir, filepath.Base(abs)), nil
	}
	resolved, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return "", fmt.Errorf("resolve %s: %w", path, err)
	}
	return resolved, nil
}

// sqliteHeader begins every SQLite database file.
const sqliteHeader = "SQLite format 3\x00"

// checkDBFile refuses, before anything touches it (tightenFiles changes
// modes, the lock takes a file beside it), a path that names something
// other than a database: not a regular file (a directory, a device such as
// /dev/null, a FIFO), or a file whose content is not an SQLite database (a
// config file given by mistake). A missing or empty file is fine: Open
// makes the database there.
func checkDBFile(path string) error {
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	switch {
	case fi.IsDir():
		return fmt.Errorf("%s is a directory, not a database file", path)
	case !fi.Mode().IsRegular():
		return fmt.Errorf("%s is not a regular file (%s), not a database file", path, fi.Mode().Type())
	case fi.Size() == 0:
		return nil
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	var hdr [len(sqliteHeader)]byte
	if _, err := io.ReadFull(f, hdr[:]); err != nil || string(hdr[:]) != sqliteHeader {
		return fmt.Errorf("%s is not an SQLite database (it does not begin with the SQLite header); refusing to touch it", path)
	}
	return nil
}

// openDBFile opens the database file, creating it with fileMode when it
// does not exist (whatever the umask), before SQLite opens it: SQLite
// creates the WAL and shared-memory files with the database file's mode. It
// reports whether the file was created. The caller keeps the file open
// until every SQLite connection is closed: closing a descriptor of the file
// drops the process's POSIX locks on it, SQLite's included.
func openDBFile(path string) (*os.File, bool, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, fileMode)
	if err == nil {
		if err := f.Chmod(fileMode); err != nil { // the umask may have taken bits away
			f.Close()
			return nil, false, err
		}
		return f, true, nil
	}
	if !errors.Is(err, fs.ErrExist) {
		return nil, false, err
	}
	f, err = os.OpenFile(path, os.O_RDWR, 0)
	return f, false, err
}

// tightenFiles removes every permission of group and others from the
// database's files that exist, and warns, naming each file it changed: they
// hold the token secret and every session. A file it cannot change is
// warned about too; opening goes on.
func tightenFiles(path string, log *slog.Logger) {
	for _, p := range dbFiles(path) {
		fi, err := os.Stat(p)
		if err != nil {
			continue
		}
		mode := fi.Mode().Perm()
		if mode&0o077 == 0 {
			continue
		}
		want := mode &^ 0o077
		if err := os.Chmod(p, want); err != nil {
			log.Warn("anteroom: database file is readable by other users and could not be restricted", "file", p, "mode", mode.String(), "err", err)
			continue
		}
		log.Warn("anteroom: database file was readable by other users; permissions restricted to its owner", "file", p, "was", mode.String(), "now", want.String())
	}
}

// ErrDamaged is matched (errors.Is) by the error Open returns when the
// database is not the one its identity file describes (empty, replaced,
// rolled back, its WAL truncated), fails SQLite's quick_check, or holds a
// damaged purge mark (waiting or active). The error says what was found and how to go on. It also matches a
// session.CodeInternal error.
var ErrDamaged = errors.New("anteroom: database damaged")

type damagedError struct{ msg string }

func (e *damagedError) Error() string        { return e.msg }
func (e *damagedError) Is(target error) bool { return target == ErrDamaged }

func damaged(format string, args ...any) error {
	return &damagedError{msg: "anteroom: " + fmt.Sprintf(format, args...)}
}

// identity is the content of the sidecar file path+".id": the database's
// random identity and, per gate, the highest next_position known to be
// durable in it. It lives beside the database, not in it, so that a
// truncated, emptied or older database file cannot take it along.
type identity struct {
	Note         string           `json:"note,omitempty"`
	DatabaseID   string           `json:"database_id"`
	NextPosition map[string]int64 `json:"next_position"`
}

const identityNote = "written by anteroom: the identity of the database beside it and the positions it has handed out. " +
	"Do not restore it with a backup of the database. Delete it only to accept, knowingly, a database that lost data."

const metaDatabaseID = "database_id"

// readIdentity reads the sidecar; it returns nil when there is none.
func readIdentity(file string) (*identity, error) {
	b, err := os.ReadFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var id identity
	if err := json.Unmarshal(b, &id); err != nil || id.DatabaseID == "" {
		return nil, damaged("identity file %s is unreadable (%v): delete it to open the database beside it anyway", file, err)
	}
	return &id, nil
}

// writeIdentity replaces the sidecar atomically: a temporary file, synced,
// renamed over it, and the directory synced.
func writeIdentity(file string, id identity) error {
	id.Note = identityNote
	b, err := json.MarshalIndent(id, "", "  ")
	if err != nil {
		return err
	}
	dir := filepath.Dir(file)
	tmp, err := os.CreateTemp(dir, filepath.Base(file)+".tmp*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // fails harmlessly after the rename
	err = tmp.Chmod(fileMode)
	if err == nil {
		_, err = tmp.Write(append(b, '\n'))
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), file)
	}
	if err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// checkIdentity compares the database, on conn before the writer starts,
// with the sidecar side (nil when there is none). It refuses a database that
// has lost what the sidecar records; else it gives the database an identity
// when it has none and returns the identity to record.
func checkIdentity(ctx context.Context, conn *sql.Conn, path string, side *identity) (identity, error) {
	var dbID string
	err := conn.QueryRowContext(ctx, `SELECT CAST(value AS TEXT) FROM meta WHERE key = ?`, metaDatabaseID).Scan(&dbID)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return identity{}, fmt.Errorf("read database id: %w", err)
	}
	next := map[string]int64{}
	rows, err := conn.QueryContext(ctx, `SELECT name, next_position FROM gates`)
	if err != nil {
		return identity{}, fmt.Errorf("read gates: %w", err)
	}
	for rows.Next() {
		var name string
		var n int64
		if err := rows.Scan(&name, &n); err != nil {
			rows.Close()
			return identity{}, fmt.Errorf("read gates: %w", err)
		}
		next[name] = n
	}
	if err := rows.Err(); err != nil {
		rows.Close()
		return identity{}, fmt.Errorf("read gates: %w", err)
	}
	if err := rows.Close(); err != nil {
		return identity{}, fmt.Errorf("read gates: %w", err)
	}

	sideFile := path + ".id"
	if side != nil {
		if dbID == "" {
			gate, n := highest(side.NextPosition)
			return identity{}, damaged("database %s is empty or new, but %s says it is database %s, which had handed out positions up to %d (gate %q): "+
				"the database file was truncated, emptied, replaced or lost, and its sessions with it. "+
				"Restore it from a backup; to start over with an empty database knowingly, delete %s",
				path, sideFile, side.DatabaseID, n-1, gate, sideFile)
		}
		if dbID != side.DatabaseID {
			return identity{}, damaged("database %s is database %s, but %s records database %s: this is another database file (a copy from elsewhere, or a restore over a newer one). "+
				"Put the right file back; to use this one knowingly, delete %s",
				path, dbID, sideFile, side.DatabaseID, sideFile)
		}
		// No gate may have gone back, nor vanished: a gate deleted while the
		// Store runs is dropped from the identity file at its next record.
		for _, gate := range sortedKeys(side.NextPosition) {
			n := next[gate] // 0 when its row is gone
			if recorded := side.NextPosition[gate]; n < recorded {
				state := fmt.Sprintf("is at next_position %d", n)
				if n == 0 {
					state = "is missing"
				}
				return identity{}, damaged("database %s has lost committed writes: gate %q %s, but %d positions were already handed out (recorded in %s). "+
					"Its WAL was truncated or lost, or the file was rolled back to an older copy; going on would hand positions out twice. "+
					"Restore the latest copy with its -wal file; to accept the loss knowingly, delete %s",
					path, gate, state, recorded-1, sideFile, sideFile)
			}
		}
	}
	if dbID == "" {
		var raw [16]byte
		_, _ = rand.Read(raw[:]) // never fails (crypto/rand)
		dbID = hex.EncodeToString(raw[:])
		if _, err := conn.ExecContext(ctx, `INSERT INTO meta (key, value) VALUES (?, ?)`, metaDatabaseID, []byte(dbID)); err != nil {
			return identity{}, fmt.Errorf("store database id: %w", err)
		}
	}
	return identity{DatabaseID: dbID, NextPosition: next}, nil
}

// highest returns the gate with the largest next_position.
func highest(m map[string]int64) (string, int64) {
	var gate string
	var n int64
	for _, g := range sortedKeys(m) {
		if m[g] > n {
			gate, n = g, m[g]
		}
	}
	return gate, n
}

func sortedKeys(m map[string]int64) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// quickCheck runs PRAGMA quick_check and returns a damaged error with its
// first findings unless it answers ok.
func quickCheck(ctx context.Context, conn *sql.Conn, path string) error {
	rows, err := conn.QueryContext(ctx, "PRAGMA quick_check(20)")
	if err != nil {
		return damaged("database %s failed PRAGMA quick_check: %v. Restore it from a backup", path, err)
	}
	defer rows.Close()
	var found []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			return damaged("database %s failed PRAGMA quick_check: %v. Restore it from a backup", path, err)
		}
		found = append(found, line)
	}
	if err := rows.Err(); err != nil {
		return damaged("database %s failed PRAGMA quick_check: %v. Restore it from a backup", path, err)
	}
	if len(found) == 1 && found[0] == "ok" {
		return nil
	}
	return damaged("database %s failed PRAGMA quick_check: %s. Restore it from a backup", path, strings.Join(found, "; "))
}

// syncFile fsyncs the file at path when it exists. It is used on the WAL
// (see onWALFile).
func syncFile(path string) error { return onWALFile(path, (*os.File).Sync) }

// onWALFile runs fn on the file at path, opened for reading, and closes it;
// a missing file is nothing to do. It is for the WAL, which no SQLite lock
// lives on: closing a descriptor of a file drops every POSIX lock the
// process holds on it, so neither the database file nor the -shm may be
// opened this way while SQLite has them open.
//
// Errors: the open's (other than a missing file), fn's, the close's.
func onWALFile(path string, fn func(*os.File) error) error {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	err = fn(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// testHookSyncCopied, set only by this package's tests before Open, fails
// syncCopied with its error.
var testHookSyncCopied func() error

// syncCopied fsyncs the database file after a background checkpoint copied
// pages into it, which SQLite leaves unsynced unless the checkpoint reached
// the end of the WAL (checkpoint.go). Errors: the fsync's.
func (s *Store) syncCopied() error {
	if testHookSyncCopied != nil {
		if err := testHookSyncCopied(); err != nil {
			return err
		}
	}
	if err := s.dbFile.Sync(); err != nil {
		return fmt.Errorf("sync database: %w", err)
	}
	return nil
}

// recordIdentity writes the sidecar with the next_positions committed now:
// it reads them, makes the WAL and the database durable (every commit read
// is then on disk), and only then records them. Unless force, it skips the
// write when no next_position grew since the last one.
func (s *Store) recordIdentity(ctx context.Context, force bool) error {
	rows, err := s.readDB.QueryContext(ctx, `SELECT name, next_position FROM gates`)
	if err != nil {
		return err
	}
	next := map[string]int64{}
	for rows.Next() {
		var name string
		var n int64
		if err := rows.Scan(&name, &n); err != nil {
			rows.Close()
			return err
		}
		next[name] = n
	}
	if err := rows.Err(); err != nil {
		rows.Close()
		return err
	}
	if err := rows.Close(); err != nil {
		return err
	}
	s.idMu.Lock()
	defer s.idMu.Unlock()
	changed := force || len(next) != len(s.id.NextPosition)
	for g, n := range next {
		if recorded, ok := s.id.NextPosition[g]; !ok || n > recorded {
			changed = true
		}
	}
	if !changed {
		return nil
	}
	if err := syncFile(s.path + "-wal"); err != nil {
		return fmt.Errorf("sync WAL: %w", err)
	}
	if err := s.dbFile.Sync(); err != nil {
		return fmt.Errorf("sync database: %w", err)
	}
	// The gates of the database now: one deleted meanwhile is forgotten.
	id := identity{DatabaseID: s.id.DatabaseID, NextPosition: make(map[string]int64, len(next))}
	for g, n := range next {
		id.NextPosition[g] = max(s.id.NextPosition[g], n)
	}
	if err := writeIdentity(s.path+".id", id); err != nil {
		return fmt.Errorf("write %s: %w", s.path+".id", err)
	}
	s.id = id
	return nil
}

// recordLoop records the identity every recordInterval while the Store is
// open. A failure is logged and makes Ready fail until a record succeeds.
func (s *Store) recordLoop() {
	defer close(s.recordDone)
	t := time.NewTicker(recordInterval)
	defer t.Stop()
	for {
		select {
		case <-s.recordStop:
			return
		case <-t.C:
		}
		s.recordOnce()
	}
}

func (s *Store) recordOnce() {
	if s.deferRecord() {
		s.stats.recordsDeferred.Add(1)
		return
	}
	if err := s.recordIdentity(context.Background(), false); err != nil {
		if s.recordErr.Swap(&err) == nil {
			s.log.Error("anteroom: recording the database's high-water mark failed", "path", s.path, "err", err)
		}
		return
	}
	s.lastRecord = time.Now()
	if s.recordErr.Swap(nil) != nil {
		s.log.Info("anteroom: recording the database's high-water mark works again", "path", s.path)
	}
}

// deferRecord reports whether this tick's record waits. While an Update
// runs (waiting for room in the WAL or not) it waits: its fsync of the WAL
// the update is writing takes tens of milliseconds, and a goroutine in a
// long system call keeps one of the process's CPUs until the runtime takes
// it back, away from the joins the update yields to (the checkpointer's
// syncs wait likewise). After the
// update it waits for the checkpointer's next pass, which copies and syncs
// what the update wrote: recording first would sync the same files beside
// that pass and the WAL's restart, while joins wait on them. Never past
// recordDeferLimit since the last record, nor after a failed record (it is
// tried again at once, so that Ready recovers) or a failed checkpoint
// (there may be no pass to wait for); a later record is as safe, the
// high-water mark only lags. Called by recordLoop's goroutine only.
func (s *Store) deferRecord() bool {
	if time.Since(s.lastRecord) >= recordDeferLimit || s.recordErr.Load() != nil || s.ck.lastErr.Load() != nil {
		s.recordWaits = false
		return false
	}
	if s.updates.Load() > 0 { // waiting for room in the WAL too
		// The pass to wait for is one after this reading.
		s.recordWaits, s.recordAfter = true, s.ck.reading.Load()
		return true
	}
	if s.recordWaits && s.ck.reading.Load() == s.recordAfter {
		return true
	}
	s.recordWaits = false
	return false
}

// How often the identity is recorded while positions are handed out, how
// often Ready may probe a Store whose last write failed, and how long after
// the last record a record may wait for an Update (deferRecord). Variables
// for the tests.
var (
	recordInterval   = time.Second
	probeInterval    = time.Second
	recordDeferLimit = 10 * time.Second
)

var errNotSameFile = errors.New("removed or replaced")

// sameFile reports whether path still names the open database file.
func (s *Store) sameFile() error {
	open, err := s.dbFile.Stat()
	if err != nil {
		return err
	}
	now, err := os.Stat(s.path)
	if err != nil || !os.SameFile(open, now) {
		return errNotSameFile
	}
	return nil
}
