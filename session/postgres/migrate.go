package postgres

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// SchemaVersion is the version of the newest embedded migration.
var SchemaVersion = func() int {
	ms, err := migrations()
	if err != nil || len(ms) == 0 {
		return 0
	}
	return ms[len(ms)-1].version
}()

// migrationLock is the advisory lock key held while migrating, so that
// instances starting together migrate one after the other.
const migrationLock = 0x616e7465726f6f6d // "anteroom"

type migration struct {
	version int
	name    string
	sql     string
}

func migrations() ([]migration, error) {
	entries, err := fs.ReadDir(migrationFiles, "migrations")
	if err != nil {
		return nil, err
	}
	var out []migration
	for _, e := range entries {
		num, _, ok := strings.Cut(e.Name(), "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil {
			return nil, fmt.Errorf("migration %q: want NNNN_name.sql", e.Name())
		}
		b, err := migrationFiles.ReadFile("migrations/" + e.Name())
		if err != nil {
			return nil, err
		}
		out = append(out, migration{version: v, name: e.Name(), sql: string(b)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].version < out[j].version })
	return out, nil
}

// migrate applies the pending migrations, each in its own transaction,
// under a session advisory lock. It returns the versions applied.
func migrate(ctx context.Context, c *pgx.Conn) (applied []int, err error) {
	ms, err := migrations()
	if err != nil {
		return nil, err
	}
	if _, err := c.Exec(ctx, "SELECT pg_advisory_lock($1)", int64(migrationLock)); err != nil {
		return nil, fmt.Errorf("lock: %w", err)
	}
	defer func() {
		if _, uerr := c.Exec(context.Background(), "SELECT pg_advisory_unlock($1)", int64(migrationLock)); uerr != nil && err == nil {
			err = fmt.Errorf("unlock: %w", uerr)
		}
	}()
	if _, err := c.Exec(ctx, `CREATE TABLE IF NOT EXISTS anteroom_schema_migrations (
		version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return nil, err
	}
	var current int
	if err := c.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM anteroom_schema_migrations").Scan(&current); err != nil {
		return nil, err
	}
	if latest := ms[len(ms)-1].version; current > latest {
		return nil, fmt.Errorf("the database's schema is version %d, newer than this anteroom's %d", current, latest)
	}
	for _, m := range ms {
		if m.version <= current {
			continue
		}
		err := pgx.BeginFunc(ctx, c, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, m.sql); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "INSERT INTO anteroom_schema_migrations (version, name) VALUES ($1, $2)", m.version, m.name)
			return err
		})
		if err != nil {
			return applied, fmt.Errorf("migration %s: %w", m.name, err)
		}
		applied = append(applied, m.version)
	}
	return applied, nil
}
