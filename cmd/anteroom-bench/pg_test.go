package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session/postgres/pgtest"
)

// TestMain lets the bench re-execute the test binary as its children
// (-serve, -ws-worker): they carry childEnv and run realMain, not the tests.
func TestMain(m *testing.M) {
	if os.Getenv("ANTEROOM_BENCH_CHILD") == "1" {
		os.Exit(realMain(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// The Postgres scenarios run at smoke size on a private server: three
// instances, pgbench beside them, sockets spread over client processes,
// a start on a filled database. It checks that they run and that every row
// is there, not how fast they are.
func TestPgScenariosSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Postgres server, three instances and their clients")
	}
	if _, err := pgtest.BinDir(); err != nil {
		if errors.Is(err, pgtest.ErrNoBinaries) && os.Getenv("CI") == "" {
			t.Skipf("skipping: %v", err)
		}
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "out.json")
	var stdout, stderr bytes.Buffer
	code := realMain([]string{"-smoke", "-json", path, "pg-join", "pg-fanout", "pg-startup"}, &stdout, &stderr)
	require.Zero(t, code, "stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	var rep report
	require.NoError(t, json.Unmarshal(data, &rep))
	got := map[string]int{}
	for _, r := range rep.Results {
		assert.NotEqual(t, resultError, r.Result, "%s %s: %s", r.Scenario, r.Metric, r.Note)
		assert.Positive(t, r.Value, "%s %s", r.Scenario, r.Metric)
		if r.Check == checkRatioMin {
			require.NotNil(t, r.Baseline, "%s %s has its baseline", r.Scenario, r.Metric)
			assert.Positive(t, *r.Baseline, "%s %s", r.Scenario, r.Metric)
		}
		got[r.Scenario]++
	}
	assert.Equal(t, map[string]int{"pg-join": 1, "pg-fanout": 3, "pg-startup": 1}, got)
	t.Logf("%s", stdout.String())
}
