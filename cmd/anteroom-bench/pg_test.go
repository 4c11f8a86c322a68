package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
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

// A pgbench run that commits nothing (its clients spent the smoke run's one
// second connecting, on a loaded machine: it then prints no tps) is run
// again, twice as long; one that never commits, or fails otherwise, is an
// error. A stand-in pgbench script answers as the real one does.
func TestPgbenchRunsAgainWhenItCommittedNothing(t *testing.T) {
	nothing := "number of transactions actually processed: 0\nnumber of failed transactions: 0 (NaN%)\n"
	tps := "number of transactions actually processed: 1234\ntps = 1234.5 (without initial connection time)\n"
	for _, tc := range []struct {
		name    string
		answers []string // one per run, the last repeated
		want    float64
		runs    int
		err     string
	}{
		{"first run", []string{tps}, 1234.5, 1, ""},
		{"after two empty runs", []string{nothing, nothing, tps}, 1234.5, 3, ""},
		{"never", []string{nothing}, 0, pgbenchTries, "no tps"},
		{"another answer", []string{"something else\n"}, 0, 1, "no tps"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for i, a := range tc.answers {
				require.NoError(t, os.WriteFile(filepath.Join(dir, strconv.Itoa(i+1)), []byte(a), 0o600))
			}
			bin := filepath.Join(dir, "pgbench")
			script := "#!/bin/sh\nn=$(( $(cat " + dir + "/runs 2>/dev/null || echo 0) + 1 ))\necho $n > " + dir + "/runs\necho \"$@\" >> " + dir + "/args\n" +
				"f=" + dir + "/$n; [ -f $f ] || f=" + dir + "/" + strconv.Itoa(len(tc.answers)) + "\ncat $f\n"
			require.NoError(t, os.WriteFile(bin, []byte(script), 0o700))
			got, err := runPgbench(context.Background(), bin, "db", "script.sql", 4, 1)
			if tc.err != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.err)
			} else {
				require.NoError(t, err)
				assert.InDelta(t, tc.want, got, 1e-9)
			}
			runs, err := os.ReadFile(filepath.Join(dir, "runs"))
			require.NoError(t, err)
			assert.Equal(t, strconv.Itoa(tc.runs), strings.TrimSpace(string(runs)))
			args, err := os.ReadFile(filepath.Join(dir, "args"))
			require.NoError(t, err)
			for i, line := range strings.Split(strings.TrimSpace(string(args)), "\n") {
				assert.Contains(t, line, "-T "+strconv.Itoa(1<<i), "run %d doubles the duration", i+1)
			}
		})
	}
}
