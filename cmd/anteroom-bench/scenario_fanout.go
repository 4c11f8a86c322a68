package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/anteroomhq/anteroom/gate/token"
	"github.com/anteroomhq/anteroom/session"
)

// fanMark is one timed state change: the bytes that identify its global
// message and when each socket got it.
type fanMark struct {
	data []byte
	recv []atomic.Int64 // unix ns, 0 until received
	kern []atomic.Int64 // when nil, not kept: the kernel's reception stamps of recv (0: none)
	got  atomic.Int64
	n    int64
	done chan struct{}
}

func (b *bench) fanout(ctx context.Context) ([]Result, error) {
	n := b.cfg.fanoutN
	var notes []string
	// Each process holds one end of every socket, plus a few files.
	if lim := fileLimit() - 200; n > lim {
		notes = append(notes, fmt.Sprintf("N capped from %d by RLIMIT_NOFILE", n))
		n = max(lim, 1)
	}
	dir, cleanup, err := tempDir("fanout")
	if err != nil {
		return nil, err
	}
	defer cleanup()

	// The server runs in a child process (this binary with -serve), so that
	// each process holds about N descriptors.
	secret := make([]byte, 32)
	_, _ = rand.Read(secret)
	signer, err := token.NewSigner(secret)
	if err != nil {
		return nil, err
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	args := []string{"-serve", "-serve-dir", dir, "-serve-secret", hex.EncodeToString(secret), "-interval", b.cfg.interval.String()}
	if b.cfg.cpuProfile != "" {
		args = append(args, "-cpuprofile", b.cfg.cpuProfile+".server")
	}
	cmd := exec.Command(exe, args...)
	cmd.Stderr = b.log
	dieWithParent(cmd)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	defer func() {
		_ = stdin.Close() // the child stops when its stdin closes
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	}()
	addr, err := readReady(stdout)
	if err != nil {
		return nil, err
	}
	b.debugf("server child pid %d on %s", cmd.Process.Pid, addr)

	// N waiting sessions (the gate's limit is 0), joined inside the child.
	t0 := time.Now()
	resp, err := http.Post("http://"+addr+"/bench/seed?prefix=f&n="+strconv.Itoa(n), "text/plain", nil)
	if err != nil {
		return nil, err
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		return nil, fmt.Errorf("seeding the child: %s", resp.Status)
	}
	b.progress("fanout: %d waiting sessions seeded in %s", n, time.Since(t0).Round(time.Millisecond))
	mem0, err := sampleMem(ctx, addr)
	if err != nil {
		return nil, err
	}

	// Connect N sockets, each naming its session, from 127.0.0.2...
	t0 = time.Now()
	var f fanSockets
	defer f.close()
	if err := f.open(ctx, addr, signer, "f", n, b.cfg.fanoutIPs, 64); err != nil {
		return nil, err
	}
	if err := f.waitInitial(ctx, 60*time.Second); err != nil {
		return nil, err
	}
	b.progress("fanout: %d sockets open in %s", n, time.Since(t0).Round(time.Millisecond))
	sleepCtx(ctx, 500*time.Millisecond)
	mem1, err := sampleMem(ctx, addr)
	if err != nil {
		return nil, err
	}
	if b.cfg.cpuProfile != "" { // with the sockets open: where the memory per socket goes
		if err := saveURL("http://"+addr+"/debug/pprof/heap", b.cfg.cpuProfile+".server.heap"); err != nil {
			return nil, err
		}
	}

	// Time state changes: a join of a new session changes the global view
	// (waiting+1); the hub sends it at once when the gate was quiet.
	joiner, err := dialRaw(ctx, addr, nil)
	if err != nil {
		return nil, err
	}
	defer joiner.Close()
	joinReq := fmt.Appendf(nil, "POST %s/api/join HTTP/1.1\r\nHost: %s\r\nContent-Length: 0\r\n\r\n", basePath, addr)
	var lasts, medians, joinMs, serverMs []float64
	for rep := range b.cfg.fanoutRepeat {
		sleepCtx(ctx, 2*b.cfg.interval)
		var g session.GlobalView
		if err := getJSON(addr, basePath+"/api/global?gate="+gateName, &g); err != nil {
			return nil, err
		}
		var sent0 sentReport
		if err := getJSON(addr, "/bench/sent", &sent0); err != nil {
			return nil, err
		}
		serverDone := make(chan sentReport, 1)
		go func() {
			var r sentReport
			_ = getJSON(addr, "/bench/sent?until="+strconv.FormatUint(sent0.Sent+uint64(n), 10), &r)
			serverDone <- r
		}()
		m := &fanMark{data: fmt.Appendf(nil, `"waiting":%d,`, g.Waiting+1), recv: make([]atomic.Int64, n), n: int64(n), done: make(chan struct{})}
		f.current.Store(m)
		start := time.Now()
		status, body, err := joiner.do(joinReq)
		if err != nil {
			return nil, err
		}
		joinDone := time.Since(start)
		if status != 200 {
			return nil, fmt.Errorf("join: status %d: %.200s", status, body)
		}
		select {
		case <-m.done:
		case <-time.After(60 * time.Second):
			return nil, fmt.Errorf("after 60 s only %d of %d sockets got the change (%d closed)", m.got.Load(), n, f.closed.Load())
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		sr := <-serverDone
		if sr.Sent < sent0.Sent+uint64(n) {
			return nil, fmt.Errorf("the server sent %d messages, want %d", sr.Sent-sent0.Sent, n)
		}
		serverMs = append(serverMs, float64(sr.At-start.UnixNano())/1e6)
		lat := make([]float64, n)
		for i := range m.recv {
			lat[i] = float64(m.recv[i].Load()-start.UnixNano()) / 1e6
		}
		slices.Sort(lat)
		lasts = append(lasts, lat[n-1])
		medians = append(medians, lat[n/2])
		joinMs = append(joinMs, float64(joinDone.Microseconds())/1000)
		b.debugf("fanout %d: join answered in %s, median socket %.1f ms, last %.1f ms", rep+1, joinDone, lat[n/2], lat[n-1])
	}
	f.current.Store(nil)
	if c := f.closed.Load(); c > 0 {
		return nil, fmt.Errorf("%d sockets closed during the run", c)
	}

	perSocket := func(a, b uint64) float64 { return (float64(b) - float64(a)) / float64(n) / 1024 }
	heap := perSocket(mem0.HeapInuse+mem0.StackInuse, mem1.HeapInuse+mem1.StackInuse)
	rss := perSocket(mem0.RSS, mem1.RSS)
	notes = append(notes, fmt.Sprintf("N=%d over %d source IPs; %d changes: last socket ms %s, median socket ms %s, server wrote the last ms %s, join answered ms %s",
		n, b.cfg.fanoutIPs, len(lasts), fmtList(lasts), fmtList(medians), fmtList(serverMs), fmtList(joinMs)))
	goroutines := float64(mem1.Goroutines-mem0.Goroutines) / float64(n)
	return []Result{
		{Metric: "state change -> last of N sockets", Unit: unitMs, Value: slices.Max(lasts),
			Check: checkValueMax, Want: 250, Target: "<= 250 ms", Note: joinNotes(notes)},
		{Metric: "server memory/socket (HeapInuse+StackInuse)", Unit: unitKB, Value: heap,
			Check: checkValueMax, Want: 16, Target: "<= 16 KB", Note: fmt.Sprintf("child process, no forced GC, runtime/metrics, mean of %d samples each side: heap %.1f KB + stacks %.1f KB per socket, %.2f goroutines/socket",
				memSamplesN, perSocket(mem0.HeapInuse, mem1.HeapInuse), perSocket(mem0.StackInuse, mem1.StackInuse), goroutines)},
		{Metric: "server memory/socket (VmRSS)", Unit: unitKB, Value: rss,
			Check: checkValueMax, Want: 16, Target: "<= 16 KB", Note: fmt.Sprintf("child process's /proc VmRSS, no forced GC, mean of %d samples each side (without sockets %.1f-%.1f MB, with %.1f-%.1f MB)",
				memSamplesN, mb(mem0.minRSS), mb(mem0.maxRSS), mb(mem1.minRSS), mb(mem1.maxRSS))},
	}, nil
}

// memSamplesN samples, memSampleEvery apart, make one memory reading.
const (
	memSamplesN    = 10
	memSampleEvery = 100 * time.Millisecond
)

// memReading is the mean of a few samples of the child's memory.
type memReading struct {
	memStats
	minRSS, maxRSS uint64
}

func mb(b uint64) float64 { return float64(b) / (1 << 20) }

// sampleMem reads the child's memory memSamplesN times, memSampleEvery
// apart, with no forced GC, and returns the means and the spread of RSS.
func sampleMem(ctx context.Context, addr string) (memReading, error) {
	var r memReading
	var heap, stack, rss, gor uint64
	for i := range memSamplesN {
		if i > 0 {
			sleepCtx(ctx, memSampleEvery)
		}
		var m memStats
		if err := getJSON(addr, "/bench/mem", &m); err != nil {
			return r, err
		}
		heap += m.HeapInuse
		stack += m.StackInuse
		rss += m.RSS
		gor += uint64(m.Goroutines)
		if i == 0 || m.RSS < r.minRSS {
			r.minRSS = m.RSS
		}
		r.maxRSS = max(r.maxRSS, m.RSS)
	}
	r.HeapInuse, r.StackInuse, r.RSS, r.Goroutines = heap/memSamplesN, stack/memSamplesN, rss/memSamplesN, int(gor/memSamplesN)
	return r, ctx.Err()
}

func saveURL(url, path string) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

func waitFor(ctx context.Context, timeout time.Duration, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return errors.New("timed out")
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}

func fmtList(v []float64) string {
	var b []byte
	for i, f := range v {
		if i > 0 {
			b = append(b, '/')
		}
		b = strconv.AppendFloat(b, f, 'f', 1, 64)
	}
	return string(b)
}

func joinNotes(notes []string) string {
	var b bytes.Buffer
	for i, n := range notes {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(n)
	}
	return b.String()
}
