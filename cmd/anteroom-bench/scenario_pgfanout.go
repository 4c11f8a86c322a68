package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/anteroomhq/anteroom/session"
)

// pgFanout: the anteroom instances on one database, each holding its share
// of the sockets (from a client process of its own per instance, since a
// process may hold 20,000 files here). It times (1) a join through the
// first instance until the last socket of every instance has the new global
// view, and (2) many joins through the first instance until a websocket on
// the last one shows each of them (the cross-instance broadcast latency).
func (b *bench) pgFanout(ctx context.Context) ([]Result, error) {
	db, drop, err := b.freshDB(ctx)
	if err != nil {
		return nil, err
	}
	defer drop()
	n := b.cfg.pg.instances
	per := max(b.cfg.pg.sockets/n, 1)
	var notes []string
	if lim := fileLimit() - 200; per > lim {
		notes = append(notes, fmt.Sprintf("sockets per instance capped from %d by RLIMIT_NOFILE", per))
		per = max(lim, 1)
	}
	total := per * n
	secret := newSecretHex()
	kids, addrs, err := b.startServers(ctx, n, db, secret, 0, time.Hour)
	if err != nil {
		return nil, err
	}
	defer stopAll(kids)

	// per waiting sessions joined through each instance (the limit is 0).
	t0 := time.Now()
	errs := make(chan error, n)
	for k, a := range addrs {
		go func() {
			resp, err := http.Post("http://"+a+"/bench/seed?prefix=i"+strconv.Itoa(k)+"-&n="+strconv.Itoa(per), "text/plain", nil)
			if err == nil {
				_ = resp.Body.Close()
				if resp.StatusCode != http.StatusNoContent {
					err = fmt.Errorf("seeding %s: %s", a, resp.Status)
				}
			}
			errs <- err
		}()
	}
	for range addrs {
		if err := <-errs; err != nil {
			return nil, err
		}
	}
	b.progress("pg-fanout: %d waiting sessions joined through %d instances in %s", total, n, time.Since(t0).Round(time.Millisecond))
	if err := waitSameWaiting(ctx, addrs, int64(total)); err != nil {
		return nil, err
	}

	// The cross-instance path alone: joins through the first instance
	// timed to a socket on the last, before the other sockets open.
	lat0, err := b.crossLatency(ctx, addrs[0], addrs[n-1])
	if err != nil {
		return nil, err
	}
	slices.Sort(lat0)
	b.progress("pg-fanout: cross-instance latency without other sockets: p50 %.1f ms, p99 %.1f ms", lat0[len(lat0)/2], pct99(lat0))

	// One client process per instance, each socket naming its session.
	t0 = time.Now()
	workers := make([]*child, n)
	werrs := make(chan error, n)
	for k, a := range addrs {
		go func() {
			c, _, err := b.startChild(ctx, []string{"-ws-worker", "-cpuprofile", workerProfile(b.cfg.cpuProfile, k), "-ws-addr", a, "-ws-n", strconv.Itoa(per),
				"-ws-prefix", "i" + strconv.Itoa(k) + "-", "-serve-secret", secret, "-fanout-ips", strconv.Itoa(b.cfg.fanoutIPs)})
			workers[k] = c
			werrs <- err
		}()
	}
	var werr error
	for range addrs {
		if err := <-werrs; err != nil && werr == nil {
			werr = err
		}
	}
	defer func() {
		for _, w := range workers {
			if w != nil {
				w.stop()
			}
		}
	}()
	if werr != nil {
		return nil, werr
	}
	b.progress("pg-fanout: %d sockets open (%d per instance) in %s; load average %s", total, per, time.Since(t0).Round(time.Millisecond), load1())

	// (1) A change through the first instance -> the last socket anywhere.
	joiner, err := dialRaw(ctx, addrs[0], nil)
	if err != nil {
		return nil, err
	}
	defer joiner.Close()
	joinReq := fmt.Appendf(nil, "POST %s/api/join HTTP/1.1\r\nHost: %s\r\nContent-Length: 0\r\n\r\n", basePath, addrs[0])
	var lasts, medians, readLasts, joinMs []float64
	var cpuNotes []string
	arrivalNote := "arrival: the kernel's reception stamp of each client socket (SO_TIMESTAMPNS)"
	loads := []string{load1()}
	for rep := range b.cfg.fanoutRepeat {
		sleepCtx(ctx, 2*b.cfg.interval)
		var g session.GlobalView
		if err := getJSON(addrs[0], basePath+"/api/global?gate="+gateName, &g); err != nil {
			return nil, err
		}
		if err := waitSameWaiting(ctx, addrs, g.Waiting); err != nil {
			return nil, err
		}
		pattern := fmt.Sprintf(`"waiting":%d,`, g.Waiting+1)
		for _, w := range workers {
			if _, err := io.WriteString(w.stdin, "arm "+pattern+"\n"); err != nil {
				return nil, err
			}
		}
		for _, w := range workers {
			if l, err := w.line(30 * time.Second); err != nil || l != "armed" {
				return nil, fmt.Errorf("worker: %q %v", l, err)
			}
		}
		srvCPU0 := procCPUs(kids)
		start := time.Now()
		status, body, err := joiner.do(joinReq)
		if err != nil {
			return nil, err
		}
		joinDone := time.Since(start)
		if status != 200 {
			return nil, fmt.Errorf("join: status %d: %.200s", status, body)
		}
		ms := func(ns int64) float64 { return float64(ns-start.UnixNano()) / 1e6 }
		var last, median, klast, kmedian float64
		var clientCPU time.Duration
		stamped := true
		var per []string
		for k, w := range workers {
			l, err := w.line(90 * time.Second)
			if err != nil {
				return nil, err
			}
			f := strings.Fields(l)
			if len(f) < 4 || f[0] != "got" || f[1] == "-1" {
				return nil, fmt.Errorf("instance %d's sockets: %q", k+1, l)
			}
			if f[3] != "0" {
				return nil, fmt.Errorf("instance %d: %s sockets closed", k+1, f[3])
			}
			v := make([]int64, 8)
			for i := 1; i < len(f) && i < len(v); i++ {
				v[i], _ = strconv.ParseInt(f[i], 10, 64)
			}
			last = max(last, ms(v[1]))
			median = max(median, ms(v[2]))
			if v[4] == 0 {
				stamped = false
			}
			klast = max(klast, ms(v[4]))
			kmedian = max(kmedian, ms(v[5]))
			clientCPU += time.Duration(v[7]) * time.Microsecond
			per = append(per, fmt.Sprintf("#%d first/median/last %.0f/%.0f/%.0f ms (read %.0f/%.0f)", k+1, ms(v[6]), ms(v[5]), ms(v[4]), ms(v[2]), ms(v[1])))
		}
		srvCPU := procCPUs(kids) - srvCPU0
		if !stamped {
			klast, kmedian = last, median
			arrivalNote = "no kernel stamps here: the times are the clients' reads"
		}
		lasts = append(lasts, klast)
		medians = append(medians, kmedian)
		readLasts = append(readLasts, last)
		joinMs = append(joinMs, float64(joinDone.Microseconds())/1000)
		cpuNotes = append(cpuNotes, fmt.Sprintf("%.0f/%.0f", srvCPU.Seconds()*1000, clientCPU.Seconds()*1000))
		loads = append(loads, load1())
		b.debugf("pg-fanout %d: join answered in %s; arrival (kernel stamp) worst median %.1f ms, last %.1f ms; read by the clients: worst median %.1f ms, last %.1f ms; CPU ms servers %.0f, clients %.0f; %s",
			rep+1, joinDone, kmedian, klast, median, last, srvCPU.Seconds()*1000, clientCPU.Seconds()*1000, strings.Join(per, ", "))
	}

	// (2) Joins through the first instance, timed to a socket on the last.
	lat, err := b.crossLatency(ctx, addrs[0], addrs[n-1])
	if err != nil {
		return nil, err
	}
	loads = append(loads, load1())
	// Whether the delay settles or keeps growing while the joins keep
	// coming: the p99 of the first and of the second half of the joins.
	half := len(lat) / 2
	h1, h2 := slices.Clone(lat[:half]), slices.Clone(lat[half:])
	slices.Sort(h1)
	slices.Sort(h2)
	slices.Sort(lat)
	p50, p99 := lat[len(lat)/2], pct99(lat)
	want := float64(b.cfg.interval.Milliseconds() + 100)

	var st []storeReport
	for _, a := range addrs {
		var r storeReport
		if err := getJSON(a, "/bench/store", &r); err != nil {
			return nil, err
		}
		st = append(st, r)
	}
	notes = append(notes, fmt.Sprintf("%d instances x %d sockets, one client process each, over %d source IPs; %d changes: last socket ms %s, worst instance's median ms %s (%s), last read by the client processes ms %s, join answered ms %s, CPU ms per change servers/clients %s; load average %s",
		n, per, b.cfg.fanoutIPs, len(lasts), fmtList(lasts), fmtList(medians), arrivalNote, fmtList(readLasts), fmtList(joinMs), strings.Join(cpuNotes, " "), joinList(loads)))
	return []Result{
		{Metric: fmt.Sprintf("change through one instance -> last of %s sockets on %d instances", groupDigits(int64(total)), n), Unit: unitMs, Value: slices.Max(lasts),
			Check: checkValueMax, Want: 300, Target: "<= 300 ms", Note: joinNotes(notes)},
		{Metric: "join through the first instance -> a websocket on the last, p99, no other sockets", Unit: unitMs, Value: pct99(lat0),
			Check: checkValueMax, Want: want, Target: fmt.Sprintf("<= %d ms (broadcast_interval + 100 ms)", int(want)),
			Note: fmt.Sprintf("%d joins at %d/s, one socket open (on the last instance); p50 %.1f ms, max %.1f ms: NOTIFY, the outbox read, the hub's coalescing",
				len(lat0), b.cfg.pg.sampleRate, lat0[len(lat0)/2], lat0[len(lat0)-1])},
		{Metric: "join through the first instance -> a websocket on the last, p99, all sockets open", Unit: unitMs, Value: p99,
			Check: checkValueMax, Want: want, Target: fmt.Sprintf("<= %d ms (broadcast_interval + 100 ms)", int(want)),
			Note: fmt.Sprintf("%d joins at %d/s while the %d sockets are open; p50 %.1f ms, max %.1f ms; p99 of the first and second half of the joins %.1f and %.1f ms; remote commits applied per instance %v",
				len(lat), b.cfg.pg.sampleRate, total, p50, lat[len(lat)-1], pct99(h1), pct99(h2), remoteCounts(st))},
	}, nil
}

// pct99 is the 99th percentile of sorted v (0 when v is empty).
func pct99(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	return v[min(len(v)-1, len(v)*99/100)]
}

func remoteCounts(st []storeReport) []int64 {
	var out []int64
	for _, r := range st {
		out = append(out, r.Remote)
	}
	return out
}

// waitSameWaiting waits until every instance's global view counts want
// waiting sessions (each follows the others' commits).
func waitSameWaiting(ctx context.Context, addrs []string, want int64) error {
	var last []int64
	err := waitFor(ctx, 60*time.Second, func() bool {
		last = last[:0]
		ok := true
		for _, a := range addrs {
			var g session.GlobalView
			if err := getJSON(a, basePath+"/api/global?gate="+gateName, &g); err != nil {
				return false
			}
			last = append(last, g.Waiting)
			ok = ok && g.Waiting == want
		}
		return ok
	})
	if err != nil {
		return fmt.Errorf("the instances count %v waiting, want %d each: %w", last, want, err)
	}
	return nil
}

// crossLatency sends b.cfg.pg.samples joins through from at
// b.cfg.pg.sampleRate per second and returns, for each, the milliseconds
// from its request until a websocket on to received a global view whose
// lastWaitingPosition reached the join's position.
func (b *bench) crossLatency(ctx context.Context, from, to string) ([]float64, error) {
	ws, err := dialWS(ctx, to, basePath+"/ws?gate="+gateName, nil)
	if err != nil {
		return nil, err
	}
	defer ws.Close()
	type seen struct {
		at   int64
		last int64
	}
	var mu sync.Mutex
	var obs []seen
	key := []byte(`"lastWaitingPosition":`)
	go func() {
		_ = ws.readLoop(func(p []byte, kernel, read int64) {
			at := cmp.Or(kernel, read) // the kernel's reception where it says
			if !bytes.HasPrefix(p, globalPrefix) {
				return
			}
			i := bytes.Index(p, key)
			if i < 0 {
				return
			}
			rest := p[i+len(key):]
			j := bytes.IndexAny(rest, ",}")
			if j < 0 {
				return
			}
			v, err := strconv.ParseInt(string(rest[:j]), 10, 64)
			if err != nil {
				return
			}
			mu.Lock()
			obs = append(obs, seen{at, v})
			mu.Unlock()
		})
	}()
	// Open loop: each join is sent at its time on a free connection of a
	// pool, whatever the previous ones take.
	const poolSize = 16
	pool := make(chan *rawConn, poolSize)
	for range poolSize {
		c, err := dialRaw(ctx, from, nil)
		if err != nil {
			return nil, err
		}
		defer c.Close()
		pool <- c
	}
	req := fmt.Appendf(nil, "POST %s/api/join HTTP/1.1\r\nHost: %s\r\nContent-Length: 0\r\n\r\n", basePath, from)
	type sent struct{ at, pos int64 }
	joins := make([]sent, b.cfg.pg.samples)
	var firstErr error
	var errMu sync.Mutex
	var wg sync.WaitGroup
	period := time.Second / time.Duration(max(b.cfg.pg.sampleRate, 1))
	start := time.Now()
	for i := range joins {
		if d := time.Until(start.Add(time.Duration(i) * period)); d > 0 {
			sleepCtx(ctx, d)
		}
		if ctx.Err() != nil {
			break
		}
		wg.Go(func() {
			c := <-pool
			defer func() { pool <- c }()
			at := time.Now().UnixNano()
			status, body, err := c.do(req)
			var v struct {
				Position int64 `json:"position"`
			}
			if err == nil && (status != 200 || json.Unmarshal(body, &v) != nil || v.Position <= 0) {
				err = fmt.Errorf("join: status %d: %.200s", status, body)
			}
			if err != nil {
				errMu.Lock()
				firstErr = cmp.Or(firstErr, err)
				errMu.Unlock()
				return
			}
			joins[i] = sent{at, v.Position}
		})
	}
	wg.Wait()
	if err := cmp.Or(ctx.Err(), firstErr); err != nil {
		return nil, err
	}
	slices.SortFunc(joins, func(a, b sent) int { return cmp.Compare(a.pos, b.pos) })
	lastPos := joins[len(joins)-1].pos
	if err := waitFor(ctx, 30*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(obs) > 0 && obs[len(obs)-1].last >= lastPos
	}); err != nil {
		return nil, fmt.Errorf("the socket on %s never showed position %d: %w", to, lastPos, err)
	}
	mu.Lock()
	defer mu.Unlock()
	lat := make([]float64, 0, len(joins))
	for _, j := range joins {
		k := slices.IndexFunc(obs, func(s seen) bool { return s.last >= j.pos })
		if k < 0 {
			return nil, fmt.Errorf("position %d never shown", j.pos)
		}
		lat = append(lat, float64(obs[k].at-j.at)/1e6)
	}
	return lat, nil
}

// workerProfile is where the k-th client process writes its CPU profile
// ("" for none).
func workerProfile(base string, k int) string {
	if base == "" {
		return ""
	}
	return fmt.Sprintf("%s.worker%d", base, k)
}

// procCPUs is the CPU time the children have used so far (user and
// system, from /proc; 0 where there is none).
func procCPUs(kids []*child) time.Duration {
	var sum time.Duration
	for _, c := range kids {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(c.cmd.Process.Pid) + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')') // the command may hold spaces
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 13 {
			continue
		}
		// utime and stime, fields 14 and 15, in clock ticks (USER_HZ, 100 on Linux).
		u, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		sum += time.Duration(u+st) * 10 * time.Millisecond
	}
	return sum
}
