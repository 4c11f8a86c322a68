package main

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session/postgres/pgtest"
)

// TestMain stops the private Postgres server the tests may have started.
func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

// Three real sidecars on one Postgres database keep one line: concurrent
// joins spread over them at limit 50 give exactly 50 active and contiguous
// positions; a release on B promotes the first waiter, whose websocket on C
// is told; one sidecar killed with SIGKILL under load loses no
// acknowledged join, and the survivors keep serving.
func TestInstancesOnOnePostgres(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs three of them")
	}
	url := pgtest.DB(t)
	goBin, err := exec.LookPath("go")
	require.NoError(t, err, "the test builds the binary and needs go on PATH")
	bin := filepath.Join(t.TempDir(), "anteroom")
	if out, err := exec.Command(goBin, "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	var procs [3]*crashProc
	for i := range procs {
		procs[i] = multiStart(t, bin, url)
	}
	a, b, c := procs[0], procs[1], procs[2]
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

	// SIGKILL of A under load: every acknowledged join is kept, counters
	// equal rows, B and C keep serving.
	var acked sync.Map
	stop := make(chan struct{})
	var load sync.WaitGroup
	var seq atomic.Int64
	for w := range 24 {
		load.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				p := procs[w%3]
				r, err := crashDo(client, http.MethodPost, p.base+"/anteroom/api/join", `{"gate":"default"}`)
				if err == nil && r.status == http.StatusOK {
					acked.Store(r.view.Session, r.view.Position)
				}
				if seq.Add(1) > 20000 {
					return
				}
			}
		})
	}
	time.Sleep(300 * time.Millisecond)
	require.NoError(t, a.cmd.Process.Signal(syscall.SIGKILL))
	<-a.exited
	time.Sleep(300 * time.Millisecond)
	close(stop)
	load.Wait()
	for _, p := range []*crashProc{b, c} {
		r, err := crashDo(client, http.MethodPost, p.base+"/anteroom/api/join", `{"gate":"default"}`)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, r.status, "survivors keep serving: %s", r.raw)
		acked.Store(r.view.Session, r.view.Position)
		r, err = crashDo(client, http.MethodGet, p.base+"/readyz", "")
		require.NoError(t, err)
		assert.Equal(t, http.StatusOK, r.status)
	}
	db, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer db.Close(ctx)
	stored := map[string]int64{}
	rows, err := db.Query(ctx, "SELECT id, position FROM anteroom_sessions WHERE gate = 'default'")
	require.NoError(t, err)
	for rows.Next() {
		var id string
		var pos int64
		require.NoError(t, rows.Scan(&id, &pos))
		stored[id] = pos
	}
	require.NoError(t, rows.Err())
	lost := 0
	acked.Range(func(k, v any) bool {
		if stored[k.(string)] != v.(int64) {
			lost++
		}
		return true
	})
	assert.Zero(t, lost, "acknowledged joins lost")
	var next, act, wait, cntA, cntW int64
	require.NoError(t, db.QueryRow(ctx, "SELECT next_position, active, waiting FROM anteroom_gates WHERE name = 'default'").Scan(&next, &act, &wait))
	require.NoError(t, db.QueryRow(ctx, "SELECT count(*) FILTER (WHERE status = 1), count(*) FILTER (WHERE status = 0) FROM anteroom_sessions WHERE gate = 'default'").Scan(&cntA, &cntW))
	assert.Equal(t, cntA, act, "active counter equals rows")
	assert.Equal(t, cntW, wait, "waiting counter equals rows")
	assert.Equal(t, int64(50), act)
	assert.Equal(t, int64(len(stored))+2, next, "positions 1..next-1 are all in line but the one released")
	t.Logf("%d sessions in line after the kill", len(stored))
}

// multiStart runs one sidecar on the Postgres database url, gate default at
// limit 50.
func multiStart(t *testing.T, bin, url string) *crashProc {
	t.Helper()
	p := &crashProc{log: &crashLog{}, exited: make(chan struct{})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	_ = ln.Close()
	p.base = "http://" + addr
	p.cmd = exec.Command(bin)
	p.cmd.Env = append(crashEnv(url, addr), "ANTEROOM_GATES_DEFAULT_ACTIVE_LIMIT=50")
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
