package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestIsPostgres(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want bool
	}{
		{"postgres://u@h/db", true},
		{"postgresql://u@h/db", true},
		{" POSTGRES://u@h/db", true},
		{"anteroom.db", false},
		{"/var/lib/anteroom/postgres://x", false},
		{"postgres.db", false},
		{"", false},
	} {
		assert.Equal(t, tc.want, isPostgres(tc.in), "%q", tc.in)
	}
}

func TestDatabaseForLogHidesPasswords(t *testing.T) {
	for _, in := range []string{
		"postgres://anteroom:hunter2secret@db.internal:5432/app",
		"postgres://anteroom@db.internal/app?password=hunter2secret&sslmode=require",
		"postgres://anteroom:hunter2secret@%zz/app",
	} {
		out := databaseForLog(in)
		assert.NotContains(t, out, "hunter2secret", "%q", in)
		assert.Contains(t, out, "postgres://")
	}
	assert.Equal(t, "anteroom.db", databaseForLog("anteroom.db"))
}
