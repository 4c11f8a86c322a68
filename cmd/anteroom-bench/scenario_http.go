package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/anteroomhq/anteroom/gate/token"
	"github.com/anteroomhq/anteroom/session"
)

// interleave runs the baseline and the measured load in alternating windows
// (baseline first).
func (b *bench) interleave(ctx context.Context, l *httpLoad, baseReq, valReq requestFunc, baseCheck, valCheck checkFunc) (*pairs, error) {
	p := &pairs{}
	for r := range b.cfg.rounds {
		rb, err := l.run(ctx, b.cfg.warmup, b.cfg.window, baseReq, baseCheck)
		if err != nil {
			return nil, fmt.Errorf("baseline: %w", err)
		}
		rv, err := l.run(ctx, b.cfg.warmup, b.cfg.window, valReq, valCheck)
		if err != nil {
			return nil, err
		}
		b.debugf("round %d: baseline %.0f/s, value %.0f/s", r+1, rb.rate, rv.rate)
		p.add(rb, rv)
	}
	return p, nil
}

// httpServer is an anteroom server in a child process (this binary with
// -serve), so that the bench reads the server's CPU time apart from its
// client's: the windows' per-CPU rates are the server's alone.
type httpServer struct {
	c      *child
	addr   string
	signer *token.Signer
}

// startHTTPServer starts the -serve child on an SQLite file in dir, with
// the given active limit and any further -serve flags.
func (b *bench) startHTTPServer(ctx context.Context, dir string, limit int64, extra ...string) (*httpServer, error) {
	secret := make([]byte, 32)
	_, _ = rand.Read(secret)
	signer, err := token.NewSigner(secret)
	if err != nil {
		return nil, err
	}
	args := []string{"-serve", "-serve-dir", dir, "-serve-secret", hex.EncodeToString(secret),
		"-serve-limit", strconv.FormatInt(limit, 10), "-interval", b.cfg.interval.String()}
	args = append(args, extra...)
	if b.cfg.cpuProfile != "" {
		args = append(args, "-cpuprofile", b.cfg.cpuProfile+".server")
	}
	c, addr, err := b.startChild(ctx, args)
	if err != nil {
		return nil, err
	}
	go func() { _, _ = io.Copy(io.Discard, c.out) }()
	b.debugf("server child pid %d on %s", c.cmd.Process.Pid, addr)
	return &httpServer{c: c, addr: addr, signer: signer}, nil
}

// seedChild joins n sessions named prefix<i> inside the server child.
func seedChild(addr, prefix string, n int) error {
	resp, err := http.Post("http://"+addr+"/bench/seed?prefix="+prefix+"&n="+strconv.Itoa(n), "text/plain", nil)
	if err != nil {
		return err
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		return fmt.Errorf("seeding the server: %s", resp.Status)
	}
	return nil
}

// cpu reads the server process's CPU time (user+system).
func (s *httpServer) cpu() (time.Duration, error) {
	var r cpuReport
	if err := getJSON(s.addr, "/bench/cpu", &r); err != nil {
		return 0, fmt.Errorf("server CPU: %w", err)
	}
	return time.Duration(r.Nanos), nil
}

func (s *httpServer) global() (session.GlobalView, error) {
	var v session.GlobalView
	err := getJSON(s.addr, basePath+"/api/global", &v)
	return v, err
}

func (s *httpServer) store() (storeReport, error) {
	var r storeReport
	err := getJSON(s.addr, "/bench/store", &r)
	return r, err
}

// httpLoadKind is one load of an HTTP scenario: its requests and how a
// response is judged.
type httpLoadKind struct {
	name  string
	req   requestFunc
	check checkFunc
}

// interleaveAll runs each load for a window in turn, rounds times, the
// first load of each round moving one place each round so that none always
// follows another. It returns the windows of each load.
func (b *bench) interleaveAll(ctx context.Context, l *httpLoad, loads []httpLoadKind) ([][]measure, error) {
	out := make([][]measure, len(loads))
	for r := range b.cfg.rounds {
		var msg []string
		for j := range loads {
			k := (r + j) % len(loads)
			m, err := l.run(ctx, b.cfg.warmup, b.cfg.window, loads[k].req, loads[k].check)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", loads[k].name, err)
			}
			out[k] = append(out[k], m)
			msg = append(msg, fmt.Sprintf("%s %.0f/s (%.0f per server CPU-s)", loads[k].name, m.rate, m.perCPU))
		}
		b.debugf("round %d: %s", r+1, strings.Join(msg, ", "))
	}
	return out, nil
}

// httpMeans are a load's mean rates over its windows: per second of wall
// clock and per second of the server's CPU time.
type httpMeans struct{ rate, perCPU float64 }

func meansOf(ms []measure) httpMeans {
	var m httpMeans
	for _, x := range ms {
		m.rate += x.rate
		m.perCPU += x.perCPU
	}
	n := float64(len(ms))
	return httpMeans{m.rate / n, m.perCPU / n}
}

// usPerReq is the server's CPU time per request, in microseconds.
func (m httpMeans) usPerReq() float64 {
	if m.perCPU == 0 {
		return math.NaN()
	}
	return 1e6 / m.perCPU
}

// roundRatios is the range of the per-round ratios of val to base, by wall
// clock and by server CPU.
func roundRatios(val, base []measure) string {
	lo, hi := math.Inf(1), math.Inf(-1)
	clo, chi := math.Inf(1), math.Inf(-1)
	for i := range base {
		if base[i].rate > 0 {
			r := val[i].rate / base[i].rate
			lo, hi = min(lo, r), max(hi, r)
		}
		if base[i].perCPU > 0 {
			r := val[i].perCPU / base[i].perCPU
			clo, chi = min(clo, r), max(chi, r)
		}
	}
	return fmt.Sprintf("per round %.2f-%.2f wall, %.2f-%.2f by server CPU", lo, hi, clo, chi)
}

const httpCPUNote = "server in a child process, CPU read from it (the client's is not counted)"

func (b *bench) joinHTTP(ctx context.Context) ([]Result, error) {
	dir, cleanup, err := tempDir("join-http")
	if err != nil {
		return nil, err
	}
	defer cleanup()
	const limit = 1000
	var extra []string
	line := b.cfg.joinLine
	if line > 0 {
		// A long line to join (issue 14: the cost of a join must not grow
		// with it): the limit's sessions active, line more waiting, seen
		// now, with a waiting timeout that no cron update of the run
		// reaches (a purge of the whole line is not what is measured).
		t0 := time.Now()
		if err := seedBulk(ctx, dir, bulkLayout{sessions: limit + line, active: limit}, t0, t0); err != nil {
			return nil, err
		}
		b.progress("join-http: %s waiters bulk-loaded in %s", sizeName(line), time.Since(t0).Round(time.Millisecond))
		extra = []string{"-serve-waiting-timeout", "1h"}
	}
	srv, err := b.startHTTPServer(ctx, dir, limit, extra...)
	if err != nil {
		return nil, err
	}
	defer srv.c.stop()
	l, err := newHTTPLoad(ctx, srv.addr, b.cfg.conns)
	if err != nil {
		return nil, err
	}
	defer l.Close()
	l.cpu = srv.cpu
	seeded := int64(0)
	if line > 0 {
		seeded = limit + int64(line)
	}

	body := `{"gate":"default"}`
	joinReq := fmt.Appendf(nil, "POST %s/api/join HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", basePath, srv.addr, len(body), body)
	healthReq := fmt.Appendf(nil, "GET /healthz HTTP/1.1\r\nHost: %s\r\n\r\n", srv.addr)
	emptyReq := fmt.Appendf(nil, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", emptyPath, srv.addr, len(body), body)
	var joined atomic.Int64
	joinCheck := func(status int, body []byte) error {
		if status != 200 || !bytes.Contains(body, []byte(`"token":`)) {
			return fmt.Errorf("join: status %d: %.200s", status, body)
		}
		joined.Add(1)
		return nil
	}
	st0, err := srv.store()
	if err != nil {
		return nil, err
	}
	ms, err := b.interleaveAll(ctx, l, []httpLoadKind{
		{"healthz", func(int, int) []byte { return healthReq }, wantStatus(200)},
		{"empty", func(int, int) []byte { return emptyReq }, wantStatus(200)},
		{"join", func(int, int) []byte { return joinReq }, joinCheck},
	})
	if err != nil {
		return nil, err
	}
	health, empty, join := meansOf(ms[0]), meansOf(ms[1]), meansOf(ms[2])
	st1, err := srv.store()
	if err != nil {
		return nil, err
	}
	// Every acknowledged join must be in the committed state the service
	// reads from memory: the 200s were durable.
	v, err := srv.global()
	if err != nil {
		return nil, err
	}
	if got := v.Active + v.Waiting - seeded; got != joined.Load() {
		return nil, fmt.Errorf("%d joins acknowledged, but the gate counts %d sessions beyond the %d seeded", joined.Load(), got, seeded)
	}
	txs := st1.Transactions - st0.Transactions
	lineNote := ""
	if line > 0 {
		lineNote = fmt.Sprintf("; joining a line of %s waiters (bulk-loaded, -join-line)", sizeName(line))
	}
	note := fmt.Sprintf("%d conns, body %s%s; baseline: GET /healthz, same server; %s; %d joins in %d tx (mean %.1f/tx, max %d); "+
		"empty echo handler (same body): %.0f/s, %.1f us CPU (join/empty %.2f wall, %.2f by CPU); %s",
		b.cfg.conns, body, lineNote, httpCPUNote, joined.Load(), txs, float64(st1.Ops-st0.Ops)/float64(max(txs, 1)), st1.MaxBatch,
		empty.rate, empty.usPerReq(), join.rate/empty.rate, join.perCPU/empty.perCPU, roundRatios(ms[2], ms[0]))
	metric := func(m string) string {
		if line > 0 {
			return m + ", line of " + sizeName(line)
		}
		return m
	}
	return []Result{
		Result{Metric: metric("joins/s over HTTP, acked after commit"), Unit: unitPerSec, Value: join.rate,
			Check: checkRatioMin, Want: 0.5, Target: ">= 0.5 x /healthz", Note: note}.withBaseline(health.rate),
		Result{Metric: metric("server CPU per join (us)"), Unit: unitCount, Value: join.usPerReq(),
			Check: checkRatioMax, Want: 2.0, Target: "<= 2.0 x /healthz",
			Note: fmt.Sprintf("baseline: server CPU per GET /healthz (us); %s", httpCPUNote)}.withBaseline(health.usPerReq()),
	}, nil
}

func (b *bench) checkHTTP(ctx context.Context) ([]Result, error) {
	dir, cleanup, err := tempDir("check-http")
	if err != nil {
		return nil, err
	}
	defer cleanup()
	k := b.cfg.sessions
	srv, err := b.startHTTPServer(ctx, dir, int64(k))
	if err != nil {
		return nil, err
	}
	defer srv.c.stop()
	if err := seedChild(srv.addr, "c", k); err != nil {
		return nil, err
	}
	if v, err := srv.global(); err != nil {
		return nil, err
	} else if v.Active != int64(k) {
		return nil, fmt.Errorf("seeded %d sessions, %d active", k, v.Active)
	}
	var checkReqs, healthReqs, emptyReqs, globalReqs [][]byte
	for i := range k {
		tok, err := srv.signer.Sign("c" + strconv.Itoa(i))
		if err != nil {
			return nil, err
		}
		checkReqs = append(checkReqs, fmt.Appendf(nil, "GET %s/check HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n\r\n", basePath, srv.addr, tok))
		healthReqs = append(healthReqs, fmt.Appendf(nil, "GET /healthz HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n\r\n", srv.addr, tok))
		emptyReqs = append(emptyReqs, fmt.Appendf(nil, "GET %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n\r\n", emptyPath, srv.addr, tok))
		globalReqs = append(globalReqs, fmt.Appendf(nil, "GET %s/api/global HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n\r\n", basePath, srv.addr, tok))
	}
	pick := func(reqs [][]byte) requestFunc {
		return func(w, i int) []byte { return reqs[(w*7919+i)%len(reqs)] }
	}
	l, err := newHTTPLoad(ctx, srv.addr, b.cfg.conns)
	if err != nil {
		return nil, err
	}
	defer l.Close()
	l.cpu = srv.cpu
	globalCheck := func(status int, body []byte) error {
		if status != 200 || !bytes.Contains(body, []byte(`"active":`)) {
			return fmt.Errorf("global: status %d: %.200s", status, body)
		}
		return nil
	}
	ms, err := b.interleaveAll(ctx, l, []httpLoadKind{
		{"healthz", pick(healthReqs), wantStatus(200)},
		{"empty", pick(emptyReqs), wantStatus(200)},
		{"check", pick(checkReqs), wantStatus(200)},
		{"global", pick(globalReqs), globalCheck},
	})
	if err != nil {
		if errors.Is(err, context.Canceled) {
			return nil, err
		}
		return nil, fmt.Errorf("check: %w", err)
	}
	health, empty, check, global := meansOf(ms[0]), meansOf(ms[1]), meansOf(ms[2]), meansOf(ms[3])
	row := func(name, path string, m httpMeans, windows []measure) []Result {
		note := fmt.Sprintf("%d conns, %d active sessions, Bearer token on every request; baseline: GET /healthz, same header, same server; %s; "+
			"%.1f us server CPU per request vs %.1f for /healthz, %.1f for an empty echo handler (%s/empty %.2f by CPU); %s",
			b.cfg.conns, k, httpCPUNote, m.usPerReq(), health.usPerReq(), empty.usPerReq(), name, m.perCPU/empty.perCPU, roundRatios(windows, ms[0]))
		return []Result{
			Result{Metric: name + "/s (" + path + "), per server CPU-second", Unit: unitPerSec, Value: m.perCPU,
				Check: checkRatioMin, Want: 0.95, Target: ">= 0.95 x /healthz", Note: note}.withBaseline(health.perCPU),
			Result{Metric: name + "/s (" + path + "), wall clock", Unit: unitPerSec, Value: m.rate,
				Check: checkNone, Note: "baseline: GET /healthz in the same rounds"}.withBaseline(health.rate),
		}
	}
	out := row("checks", "{base}/check", check, ms[2])
	return append(out, row("global views", "{base}/api/global", global, ms[3])...), nil
}
