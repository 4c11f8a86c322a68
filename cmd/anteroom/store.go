package main

import (
	"context"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/anteroomhq/anteroom/session"
	"github.com/anteroomhq/anteroom/session/postgres"
	"github.com/anteroomhq/anteroom/session/sqlite"
)

// appStore is what the sidecar needs of its Store.
type appStore interface {
	session.Store
	// Secret returns the token secret kept in the database, storing
	// generate's result on first use.
	Secret(ctx context.Context, generate func() ([]byte, error)) ([]byte, error)
}

// isPostgres reports whether the database setting names a Postgres
// database (postgres:// or postgresql://) rather than an SQLite file.
func isPostgres(database string) bool {
	d := strings.ToLower(strings.TrimSpace(database))
	return strings.HasPrefix(d, "postgres://") || strings.HasPrefix(d, "postgresql://")
}

// openStore opens the shared Postgres store for a postgres:// URL, else the
// SQLite file. ready reports whether the store follows the other instances,
// for /readyz and validate; it is nil for SQLite, which has no others.
func openStore(ctx context.Context, database string, log *slog.Logger, onCommit func(ops int, d time.Duration), noHistory bool) (store appStore, ready func() error, err error) {
	if isPostgres(database) {
		pg, err := postgres.Open(ctx, strings.TrimSpace(database), postgres.Options{Logger: log, DisableHistory: noHistory})
		if err != nil {
			return nil, nil, err
		}
		return pg, pg.Ready, nil
	}
	lite, err := sqlite.Open(database, sqlite.Options{Logger: log, OnCommit: onCommit, DisableHistory: noHistory})
	if err != nil {
		return nil, nil, err
	}
	return lite, nil, nil
}

// databaseForLog returns the database setting without a password.
func databaseForLog(database string) string {
	if !isPostgres(database) {
		return database
	}
	u, err := url.Parse(strings.TrimSpace(database))
	if err != nil {
		return "postgres://(unparsable URL)"
	}
	if _, has := u.User.Password(); has {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	q := u.Query()
	if q.Has("password") {
		q.Set("password", "xxxxx")
		u.RawQuery = q.Encode()
	}
	return u.String()
}
