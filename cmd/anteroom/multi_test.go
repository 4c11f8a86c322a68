package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session/postgres/pgtest"
)

// TestMain stops the private Postgres server the tests may have started.
// It also removes the binary the multi-instance tests built.
func TestMain(m *testing.M) {
	code := pgtest.Run(m)
	if multiBuild.dir != "" {
		_ = os.RemoveAll(multiBuild.dir)
	}
	os.Exit(code)
}

// Three real sidecars on one Postgres database keep one line: concurrent
// joins spread over them at limit 50 give exactly 50 active and contiguous
// positions; a release on B promotes the first waiter, whose websocket on C
// is told. (multikill_test.go kills them; pgrestart_test.go restarts the
// database under them.)
func TestInstancesOnOnePostgres(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs three of them")
	}
	url := pgtest.DB(t)
	bin := multiBinary(t)
	var procs [3]*crashProc
	for i := range procs {
		procs[i] = multiStart(t, bin, url)
	}
	b, c := procs[1], procs[2]
	tr := &http.Transport{MaxIdleConnsPerHost: 100, MaxConnsPerHost: 100}
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	t.Cleanup(tr.CloseIdleConnections)

	const n = 3000
	views := make([]crashView, n)
	var wg sync.WaitGroup
	var failed atomic.Int32
	sem := make(chan struct{}, 150)
	for i := range n {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			r, err := crashDo(client, http.MethodPost, procs[i%3].base+"/anteroom/api/join", `{"gate":"default"}`)
			if err != nil || r.status != http.StatusOK {
				if failed.Add(1) <= 5 {
					t.Errorf("join %d: %v %d %s", i, err, r.status, r.raw)
				}
				return
			}
			views[i] = r.view
		})
	}
	wg.Wait()
	require.Zero(t, failed.Load())
	byPos := map[int64]crashView{}
	var active []crashView
	for _, v := range views {
		_, dup := byPos[v.Position]
		require.False(t, dup, "position %d given twice", v.Position)
		byPos[v.Position] = v
		if v.Status == "active" {
			active = append(active, v)
		}
	}
	require.Len(t, active, 50, "exactly the limit is active")
	for p := int64(1); p <= n; p++ {
		require.Contains(t, byPos, p, "positions are contiguous")
	}

	// The first waiter watches on C; an active session is released on B.
	first := byPos[51]
	require.Equal(t, "waiting", first.Status)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, strings.Replace(c.base, "http", "ws", 1)+"/anteroom/ws?gate=default&session="+first.Token, nil)
	require.NoError(t, err)
	defer ws.CloseNow()
	readSession := func() (string, error) {
		for {
			_, msg, err := ws.Read(ctx)
			if err != nil {
				return "", err
			}
			var m struct{ Type, Status, Session string }
			if json.Unmarshal(msg, &m) == nil && m.Type == "session" && m.Session == first.Session {
				if m.Status == "active" {
					return m.Status, nil
				}
			}
		}
	}
	r, err := crashDo(client, http.MethodPost, b.base+"/anteroom/api/release", "", "Authorization", "Bearer "+active[0].Token)
	require.NoError(t, err)
	require.Equal(t, http.StatusNoContent, r.status, "%s", r.raw)
	st, err := readSession()
	require.NoError(t, err, "C's websocket of the first waiter is told of its promotion")
	assert.Equal(t, "active", st)
	for _, p := range procs {
		require.Eventually(t, func() bool {
			r, err := crashDo(client, http.MethodGet, p.base+"/anteroom/check", "", "Authorization", "Bearer "+first.Token)
			return err == nil && r.status == http.StatusOK
		}, 10*time.Second, 10*time.Millisecond, "every instance lets the promoted session in")
		// /check may have answered from the table (promoted between its two
		// reads) before this instance applied the commit: wait for it.
		require.Eventually(t, func() bool {
			r, err := crashDo(client, http.MethodGet, p.base+"/anteroom/check", "", "Authorization", "Bearer "+active[0].Token)
			return err == nil && r.status == http.StatusUnauthorized
		}, 10*time.Second, 10*time.Millisecond, "the released session is gone everywhere")
	}

}

// multiBuild is the sidecar binary, built once for the tests of this file
// and its siblings.
var multiBuild struct {
	once sync.Once
	dir  string
	bin  string
	err  error
	out  []byte
}

// multiBinary builds the sidecar once per test binary and returns its
// path; the directory is removed by TestMain.
func multiBinary(t *testing.T) string {
	t.Helper()
	multiBuild.once.Do(func() {
		goBin, err := exec.LookPath("go")
		if err != nil {
			multiBuild.err = fmt.Errorf("the test builds the binary and needs go on PATH: %w", err)
			return
		}
		if multiBuild.dir, err = os.MkdirTemp("", "anteroom-multi-"); err != nil {
			multiBuild.err = err
			return
		}
		multiBuild.bin = filepath.Join(multiBuild.dir, "anteroom")
		multiBuild.out, multiBuild.err = exec.Command(goBin, "build", "-o", multiBuild.bin, ".").CombinedOutput()
	})
	if multiBuild.err != nil {
		t.Fatalf("go build: %v\n%s", multiBuild.err, multiBuild.out)
	}
	return multiBuild.bin
}

// multiStart runs one sidecar on the Postgres database url, gate default at
// limit 50, nothing purged (see crashEnv) and no claim window.
func multiStart(t *testing.T, bin, url string) *crashProc {
	t.Helper()
	p := &crashProc{log: &crashLog{}, exited: make(chan struct{})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	_ = ln.Close()
	p.base = "http://" + addr
	p.cmd = exec.Command(bin)
	// No claim window: a promotion nobody claims would otherwise be purged
	// a minute later, changing the tables under a test that compares the
	// instances' memory with what it read from them.
	p.cmd.Env = append(crashEnv(url, addr), "ANTEROOM_GATES_DEFAULT_ACTIVE_LIMIT=50", "ANTEROOM_GATES_DEFAULT_CLAIM_TIMEOUT=0s")
	p.cmd.Stderr = p.log
	require.NoError(t, p.cmd.Start())
	go func() { p.err = p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.exited
		if t.Failed() {
			t.Logf("log of %s:\n%s", p.base, crashTail(p.log.String()))
		}
	})
	if !crashWaitReady(p, 60*time.Second) {
		t.Fatalf("the sidecar did not become ready: %v\n%s", p.err, crashTail(p.log.String()))
	}
	return p
}
