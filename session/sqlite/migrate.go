package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// SchemaVersion is the schema version this package writes: the number of the
// last file in migrations/. It is kept in the database header (PRAGMA
// user_version).
const SchemaVersion = 14

// The schema versions of the purge marks: from exactMarksFrom (0011) they
// compare rows by (last_active, position); from secondMarksFrom (0013), by
// the second of last_active, then position.
const (
	exactMarksFrom  = 11
	secondMarksFrom = 13
)

type migration struct {
	version int
	name    string
	sql     string
}

// migrations returns the embedded migrations in version order. A file is
// named NNNN_description.sql; versions start at 1 and have no gaps.
func migrations() ([]migration, error) {
	entries, err := fs.ReadDir(migrationFS, "migrations")
	if err != nil {
		return nil, err
	}
	var ms []migration
	for _, e := range entries {
		name := e.Name()
		num, _, ok := strings.Cut(name, "_")
		if !ok || !strings.HasSuffix(name, ".sql") {
			return nil, fmt.Errorf("migration %s: want NNNN_description.sql", name)
		}
		v, err := strconv.Atoi(num)
		if err != nil {
			return nil, fmt.Errorf("migration %s: %w", name, err)
		}
		b, err := migrationFS.ReadFile(path.Join("migrations", name))
		if err != nil {
			return nil, err
		}
		ms = append(ms, migration{version: v, name: name, sql: string(b)})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].version < ms[j].version })
	for i, m := range ms {
		if m.version != i+1 {
			return nil, fmt.Errorf("migration %s: want version %d", m.name, i+1)
		}
	}
	if len(ms) != SchemaVersion {
		return nil, fmt.Errorf("%d migrations embedded, SchemaVersion is %d", len(ms), SchemaVersion)
	}
	return ms, nil
}

// migrate brings the schema to SchemaVersion in one transaction: the pending
// migrations and the new user_version commit together or not at all. It
// refuses a database written by a newer version. It returns the migrations
// applied.
func migrate(ctx context.Context, conn *sql.Conn) ([]string, error) {
	return migrateTo(ctx, conn, SchemaVersion)
}

// migrateTo brings the schema to version target (at most SchemaVersion), as
// migrate does.
func migrateTo(ctx context.Context, conn *sql.Conn, target int) ([]string, error) {
	ms, err := migrations()
	if err != nil {
		return nil, err
	}
	if target < 0 || target > len(ms) {
		return nil, fmt.Errorf("no schema version %d (this build knows %d)", target, len(ms))
	}
	ms = ms[:target]
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return nil, err
	}
	applied, err := migrateTx(ctx, conn, ms)
	if err != nil {
		_, _ = conn.ExecContext(ctx, "ROLLBACK")
		return nil, err
	}
	if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
		_, _ = conn.ExecContext(ctx, "ROLLBACK")
		return nil, err
	}
	return applied, nil
}

func migrateTx(ctx context.Context, conn *sql.Conn, ms []migration) ([]string, error) {
	var current int
	if err := conn.QueryRowContext(ctx, "PRAGMA user_version").Scan(&current); err != nil {
		return nil, err
	}
	if current > len(ms) {
		return nil, fmt.Errorf("schema version %d is newer than this build knows (%d); upgrade anteroom", current, len(ms))
	}
	var applied []string
	for _, m := range ms[current:] {
		if _, err := conn.ExecContext(ctx, m.sql); err != nil {
			return nil, fmt.Errorf("migration %s: %w", m.name, err)
		}
		applied = append(applied, m.name)
	}
	if len(applied) > 0 {
		// PRAGMA takes no bind parameters; the value is an integer we control.
		if _, err := conn.ExecContext(ctx, "PRAGMA user_version = "+strconv.Itoa(len(ms))); err != nil {
			return nil, err
		}
	}
	return applied, nil
}
