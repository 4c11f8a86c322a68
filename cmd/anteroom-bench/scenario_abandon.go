package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/anteroomhq/anteroom/session"
)

// The abandon scenario (issue #10): a real server on loopback, a limit of
// active visitors who stay a while and leave, and a line of waiters of whom
// some abandon (with a leave beacon or silently), some hide their tab for a
// few minutes and come back, and a few poll without a socket. It runs twice
// on the same population: with the presence rules (claim window, release on
// disconnect, waiting_timeout 5m) and with today's rules (both off,
// waiting_timeout 1m, clients that send a leave beacon on every hide and
// join again on return), and compares them.
//
// Time is simulated: the server's session.Clock runs abandonScale times
// faster than the wall clock, and every interval of the server (sweep,
// flush, update tick, broadcast) is divided by the same factor, so the
// figures are in simulated seconds, comparable with the timeouts.

type abandonMode struct {
	name                string
	presence            bool // clients keep their socket while hidden (the new snippet)
	claimTimeout        time.Duration
	releaseOnDisconnect time.Duration
	waitingTimeout      time.Duration
}

var (
	modePresence = abandonMode{name: "presence rules", presence: true,
		claimTimeout: time.Minute, releaseOnDisconnect: 5 * time.Second, waitingTimeout: 5 * time.Minute}
	modeToday = abandonMode{name: "today's rules", waitingTimeout: time.Minute}
)

const (
	abandonActiveTimeout = 5 * time.Minute
	abandonUpdateEvery   = time.Minute // cron update_interval default
	abandonTouchEvery    = 5 * time.Second
	abandonSweepEvery    = 250 * time.Millisecond
	abandonSampleEvery   = time.Second
)

type abandonKind uint8

const (
	kindVisitor abandonKind = iota // active from the start
	kindStay                       // waits until admitted
	kindBeacon                     // abandons with a leave beacon
	kindSilent                     // abandons silently: the socket dies, nothing else
	kindHide                       // hides the tab for a while, comes back
	kindPoll                       // polls /api/status, no socket
)

// abandonPlan is one client's script, in simulated time.
type abandonPlan struct {
	kind    abandonKind
	joinAt  time.Duration // after the visitors joined
	leaveAt time.Duration // kindBeacon, kindSilent: abandon this long after joining; kindHide: hide then
	hideFor time.Duration
	stay    time.Duration // once admitted
	release bool          // at the end of the stay: release, or just close the socket
}

// abandonParams size the scenario.
type abandonParams struct {
	scale    float64
	waiters  int
	limit    int
	arrival  time.Duration // waiters arrive uniformly over this
	duration time.Duration // simulated length of each mode's run, from the first arrival
	seed     uint64
	interval time.Duration // broadcast interval before scaling
}

func (b *bench) abandonParams() abandonParams {
	return abandonParams{
		scale: b.cfg.abandonScale, waiters: b.cfg.abandonWaiters, limit: b.cfg.abandonLimit,
		arrival: time.Minute, duration: b.cfg.abandonDuration, seed: b.cfg.abandonSeed, interval: b.cfg.interval,
	}
}

// abandonPlans draws the population: limit visitors, then the waiters.
func abandonPlans(p abandonParams) []abandonPlan {
	rng := rand.New(rand.NewPCG(p.seed, 0xab4d0))
	between := func(lo, hi time.Duration) time.Duration {
		return lo + time.Duration(rng.Int64N(int64(hi-lo)+1))
	}
	plans := make([]abandonPlan, 0, p.limit+p.waiters)
	for i := range p.limit {
		plans = append(plans, abandonPlan{kind: kindVisitor, stay: between(10*time.Second, time.Minute), release: i%2 == 0})
	}
	for i := range p.waiters {
		pl := abandonPlan{
			kind:    kindStay,
			joinAt:  between(0, p.arrival),
			stay:    between(10*time.Second, time.Minute),
			release: i%2 == 0,
		}
		switch x := rng.Float64(); {
		case x < 0.15:
			pl.kind, pl.leaveAt = kindBeacon, between(5*time.Second, 3*time.Minute)
		case x < 0.30:
			pl.kind, pl.leaveAt = kindSilent, between(5*time.Second, 3*time.Minute)
		case x < 0.50:
			pl.kind, pl.leaveAt, pl.hideFor = kindHide, between(5*time.Second, time.Minute), between(time.Minute, 4*time.Minute)
		case x < 0.51:
			pl.kind, pl.release = kindPoll, true
		}
		plans = append(plans, pl)
	}
	return plans
}

func (b *bench) abandon(ctx context.Context) ([]Result, error) {
	p := b.abandonParams()
	if p.scale <= 0 || p.waiters <= 0 || p.limit <= 0 || p.duration <= 0 {
		return nil, errors.New("-abandon-scale, -abandon-waiters, -abandon-limit and -abandon-duration must be positive")
	}
	// Each waiter holds a socket at both ends in this process, plus the
	// visitors' and the HTTP connections.
	if need := 2*(p.waiters+p.limit) + 600; need > fileLimit() {
		return nil, fmt.Errorf("%d waiters need about %d open files, RLIMIT_NOFILE is %d", p.waiters, need, fileLimit())
	}
	plans := abandonPlans(p)
	load0 := loadAvg()
	newRun, err := b.abandonRun(ctx, p, plans, modePresence)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", modePresence.name, err)
	}
	oldRun, err := b.abandonRun(ctx, p, plans, modeToday)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", modeToday.name, err)
	}
	return abandonResults(p, newRun, oldRun, load0+" -> "+loadAvg()), nil
}

// abandonRun is one mode's run.
type abandonRun struct {
	b      *bench
	p      abandonParams
	mode   abandonMode
	clock  *simClock
	rec    *recorder
	addr   string
	client *http.Client

	errs     atomic.Int64
	drops    atomic.Int64 // sockets the server closed (the client opened a new one)
	firstErr atomic.Pointer[error]

	decodeMu sync.Mutex
	decoded  map[string]*heldView
	latest   atomic.Int64 // seq of the newest global message any client got

	mu      sync.Mutex
	clients []*abandonClient
	sockets map[*wsClient]struct{}
}

// abandonClient is one simulated browser.
type abandonClient struct {
	plan     abandonPlan
	id       string
	token    string
	position atomic.Int64
	sampling atomic.Bool // its socket is open and it waits: its place is sampled
	view     atomic.Pointer[heldView]
}

func (b *bench) abandonRun(ctx context.Context, p abandonParams, plans []abandonPlan, mode abandonMode) (abandonOutcome, error) {
	dir, cleanup, err := tempDir("abandon")
	if err != nil {
		return abandonOutcome{}, err
	}
	defer cleanup()
	clock := newSimClock(p.scale)
	r := &abandonRun{b: b, p: p, mode: mode, clock: clock, rec: newRecorder(clock.since),
		decoded: map[string]*heldView{}, sockets: map[*wsClient]struct{}{}}
	scaled := func(d, floor time.Duration) time.Duration { return max(clock.real(d), floor) }
	// The broadcast interval is scaled too, down to 100 ms: one global
	// message to every socket more often than that costs this process (both
	// ends of every socket) more CPU than a shared 2-core machine has.
	interval := scaled(p.interval, 100*time.Millisecond)
	log := slog.New(slog.NewTextHandler(io.Discard, nil)) // requests cut at the end of the run
	if b.cfg.verbose {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	in, err := startInstance(ctx, instanceConfig{
		dir: dir, limit: int64(p.limit), activeTimeout: abandonActiveTimeout, waitingTimeout: mode.waitingTimeout,
		interval: interval, clock: clock, touchInterval: scaled(abandonTouchEvery, time.Millisecond),
		claimTimeout: mode.claimTimeout, releaseOnDisconnect: mode.releaseOnDisconnect,
		sweepInterval: scaled(abandonSweepEvery, time.Millisecond), commitHook: r.rec.observe, log: log,
	})
	if err != nil {
		return abandonOutcome{}, err
	}
	defer in.Close()
	r.addr = in.addr
	tr := &http.Transport{MaxConnsPerHost: 256, MaxIdleConnsPerHost: 256, DisableCompression: true}
	defer tr.CloseIdleConnections()
	r.client = &http.Client{Transport: tr, Timeout: 30 * time.Second}
	b.progress("abandon (%s): %d waiters, limit %d, scale %g (claim_timeout %s, release_on_disconnect %s, waiting_timeout %s; broadcast every %s, sweep every %s, update every %s of wall time)",
		mode.name, p.waiters, p.limit, p.scale, mode.claimTimeout, mode.releaseOnDisconnect, mode.waitingTimeout,
		interval, scaled(abandonSweepEvery, time.Millisecond), clock.real(abandonUpdateEvery))

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	defer func() {
		stop()
		r.closeSockets()
		wg.Wait()
	}()

	// The cron update, every minute of simulated time.
	wg.Go(func() {
		t := time.NewTicker(clock.real(abandonUpdateEvery))
		defer t.Stop()
		for {
			select {
			case <-runCtx.Done():
				return
			case <-t.C:
				if _, err := in.wl.Update(runCtx); err != nil && runCtx.Err() == nil {
					r.fail(fmt.Errorf("update: %w", err))
				}
			}
		}
	})

	// The visitors take every slot first.
	r.clients = make([]*abandonClient, len(plans))
	for i, pl := range plans {
		r.clients[i] = &abandonClient{plan: pl}
	}
	var vg sync.WaitGroup
	for _, c := range r.clients[:p.limit] {
		vg.Go(func() {
			v, err := r.join(runCtx, c)
			if err != nil {
				r.fail(err)
				return
			}
			if v.Status != session.StatusActive {
				r.fail(fmt.Errorf("visitor %s: joined as %s", c.id, v.Status))
				return
			}
			l, err := r.connect(runCtx, c)
			if err != nil {
				r.fail(err)
				return
			}
			wg.Go(func() { r.visit(runCtx, c, l) })
		})
	}
	vg.Wait()
	if p := r.firstErr.Load(); p != nil {
		return abandonOutcome{}, *p
	}
	base := clock.since()
	for _, c := range r.clients[p.limit:] {
		c.plan.joinAt += base
		wg.Go(func() { r.waiter(runCtx, c) })
	}
	var lateMax time.Duration
	wg.Go(func() { lateMax = r.sampler(runCtx) })

	end := base + p.duration
	progressEvery := p.duration / 4
	for next := base + progressEvery; next < end; next += progressEvery {
		if !sleepSim(runCtx, clock, next) {
			break
		}
		b.progress("abandon (%s): %s simulated, %d errors", mode.name, (next - base).Round(time.Second), r.errs.Load())
	}
	sleepSim(runCtx, clock, end)
	if err := ctx.Err(); err != nil {
		return abandonOutcome{}, err
	}
	o := r.rec.finish()
	o.drops = r.drops.Load()
	stop()
	r.closeSockets()
	wg.Wait()
	// The clients are done: their ids can be read (the figures were taken
	// above, before the teardown's disconnects).
	o.lostBy = r.lostByKind(o.lostIDs)
	if b.cfg.verbose {
		r.debugGhosts()
	}
	o.lateSamplesMax = lateMax
	o.errors = r.errs.Load()
	if p := r.firstErr.Load(); p != nil {
		o.firstError = (*p).Error()
	}
	// Client errors (requests that timed out on an overloaded machine) are
	// reported in the table, not as a failure to run.
	return o, nil
}

var kindNames = [...]string{kindVisitor: "visitor", kindStay: "stays", kindBeacon: "beacon", kindSilent: "silent", kindHide: "hides", kindPoll: "polls"}

// lostByKind names, per kind of client, how many lost their place.
func (r *abandonRun) lostByKind(lost map[string]bool) string {
	var n [len(kindNames)]int
	for _, c := range r.clients {
		if c.id != "" && lost[c.id] {
			n[c.plan.kind]++
		}
	}
	var parts []string
	for k, v := range n {
		if v > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", kindNames[k], v))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// debugGhosts prints, with -v, the ghosts that held a slot longer than the
// claim window plus the disconnect grace, and the present clients that lost
// their place.
func (r *abandonRun) debugGhosts() {
	r.rec.mu.Lock()
	defer r.rec.mu.Unlock()
	limit := r.mode.claimTimeout + r.mode.releaseOnDisconnect
	for _, c := range r.clients {
		st := r.rec.sess[c.id]
		if st == nil {
			continue
		}
		if limit > 0 && st.ghostHeld > limit || r.rec.lost[c.id] {
			r.b.progress("abandon (%s): %s %s lost=%v held %s: joined %s gone %s active since %s promoted %v claimed %v active %v",
				r.mode.name, kindNames[c.plan.kind], c.id, r.rec.lost[c.id], st.ghostHeld, c.plan.joinAt, st.goneAt, st.activeSince, st.promoted, st.claimed, st.active)
		}
	}
}

// sleepSim sleeps until the simulated offset at; false when ctx ended.
func sleepSim(ctx context.Context, c *simClock, at time.Duration) bool {
	d := c.untilSim(at)
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func (r *abandonRun) fail(err error) {
	if errors.Is(err, context.Canceled) {
		return
	}
	r.errs.Add(1)
	r.firstErr.CompareAndSwap(nil, &err)
	r.b.debugf("abandon: %v", err)
}

// joinAnswer is the join's answer: a SessionView and the token.
type joinAnswer struct {
	session.SessionView
	Token string `json:"token"`
}

// join joins (or joins again) as the client's session.
func (r *abandonRun) join(ctx context.Context, c *abandonClient) (session.SessionView, error) {
	var v joinAnswer
	status, err := r.call(ctx, http.MethodPost, "/api/join", c.token, &v, nil)
	if err != nil {
		return v.SessionView, err
	}
	if status != http.StatusOK {
		return v.SessionView, fmt.Errorf("join: status %d", status)
	}
	if c.token == "" {
		c.token = v.Token
		c.id = v.Session
	}
	c.position.Store(v.Position)
	c.view.Store(&heldView{view: &v.GlobalView, seq: r.latest.Load()})
	return v.SessionView, nil
}

// call makes one request naming the client's session; v, when not nil,
// receives a 200's JSON body.
func (r *abandonRun) call(ctx context.Context, method, path, tok string, v any, hdr *http.Header) (int, error) {
	req, err := http.NewRequestWithContext(ctx, method, "http://"+r.addr+basePath+path, nil)
	if err != nil {
		return 0, err
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := r.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if hdr != nil {
		*hdr = resp.Header
	}
	if resp.StatusCode == http.StatusOK && v != nil {
		return resp.StatusCode, json.NewDecoder(resp.Body).Decode(v)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

// link is one open socket of a client.
type link struct {
	ws       *wsClient
	admitted chan struct{} // a session message said the session is active
	dropped  chan struct{} // closed when the server closed the socket
}

// connect opens the client's socket.
func (r *abandonRun) connect(ctx context.Context, c *abandonClient) (*link, error) {
	ws, err := dialWS(ctx, r.addr, basePath+"/ws?gate="+gateName+"&session="+url.QueryEscape(c.token), nil)
	if err != nil {
		return nil, fmt.Errorf("socket of %s: %w", c.id, err)
	}
	r.mu.Lock()
	r.sockets[ws] = struct{}{}
	r.mu.Unlock()
	l := &link{ws: ws, admitted: make(chan struct{}, 1), dropped: make(chan struct{})}
	go r.read(c, l)
	return l, nil
}

// reconnect opens a new socket after the server dropped one, as the snippet
// does, trying every simulated second. It returns nil when ctx ends.
func (r *abandonRun) reconnect(ctx context.Context, c *abandonClient) *link {
	r.drops.Add(1)
	for {
		l, err := r.connect(ctx, c)
		if err == nil {
			return l
		}
		if !sleepSim(ctx, r.clock, r.clock.since()+time.Second) {
			return nil
		}
	}
}

// closeSocket closes a socket of ours (not a drop).
func (r *abandonRun) closeSocket(l *link) {
	if l == nil {
		return
	}
	r.mu.Lock()
	delete(r.sockets, l.ws)
	r.mu.Unlock()
	_ = l.ws.Close()
}

func (r *abandonRun) closeSockets() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for ws := range r.sockets {
		_ = ws.Close()
		delete(r.sockets, ws)
	}
}

var sessionPrefix = []byte(`{"type":"session"`)

// read keeps the client's last global view, as the snippet does, and tells
// of its promotion.
func (r *abandonRun) read(c *abandonClient, l *link) {
	for {
		p, err := l.ws.next()
		if err != nil {
			r.mu.Lock()
			_, ours := r.sockets[l.ws] // still registered: the server closed it
			delete(r.sockets, l.ws)
			r.mu.Unlock()
			_ = l.ws.Close()
			if ours {
				close(l.dropped)
			}
			return
		}
		switch {
		case bytes.HasPrefix(p, globalPrefix):
			if v := r.decodeGlobal(p); v != nil {
				c.view.Store(v)
			}
		case bytes.HasPrefix(p, sessionPrefix):
			var v session.SessionView
			if json.Unmarshal(p, &v) == nil && v.Status == session.StatusActive {
				select {
				case l.admitted <- struct{}{}:
				default:
				}
			}
		}
	}
}

// decodeGlobal decodes a global message once for all the sockets that get
// the same bytes.
func (r *abandonRun) decodeGlobal(p []byte) *heldView {
	r.decodeMu.Lock()
	defer r.decodeMu.Unlock()
	if v, ok := r.decoded[string(p)]; ok {
		return v
	}
	var v session.GlobalView
	if err := json.Unmarshal(p, &v); err != nil {
		return nil
	}
	if len(r.decoded) >= 64 {
		clear(r.decoded)
	}
	h := &heldView{view: &v, seq: r.latest.Add(1)}
	r.decoded[string(p)] = h
	return h
}

// heldView is the global view a client holds, and the rank of its message
// among those any client received (the newest has the highest).
type heldView struct {
	view *session.GlobalView
	seq  int64
}

// visit is an admitted client's stay: then it releases, or closes its socket
// (a departure).
func (r *abandonRun) visit(ctx context.Context, c *abandonClient, l *link) {
	t := time.NewTimer(r.clock.real(c.plan.stay))
	defer t.Stop()
	for stayed := false; !stayed; {
		var dropped <-chan struct{}
		if l != nil {
			dropped = l.dropped
		}
		select {
		case <-ctx.Done():
			return
		case <-dropped:
			if l = r.reconnect(ctx, c); l == nil {
				return
			}
		case <-t.C:
			stayed = true
		}
	}
	if c.plan.release {
		r.rec.released(c.id)
		if _, err := r.call(ctx, http.MethodPost, "/api/release", c.token, nil, nil); err != nil {
			r.fail(fmt.Errorf("release: %w", err))
		}
	} else {
		r.rec.gone(c.id)
	}
	r.closeSocket(l)
}

// waiter is one waiting client's life.
func (r *abandonRun) waiter(ctx context.Context, c *abandonClient) {
	if !sleepSim(ctx, r.clock, c.plan.joinAt) {
		return
	}
	v, err := r.join(ctx, c)
	if err != nil {
		r.fail(err)
		return
	}
	if c.plan.kind == kindPoll {
		r.poller(ctx, c, v)
		return
	}
	l, err := r.connect(ctx, c)
	if err != nil {
		r.fail(err)
		return
	}
	active := v.Status == session.StatusActive
	var leave <-chan time.Time
	if !active && c.plan.kind != kindStay {
		t := time.NewTimer(r.clock.untilSim(c.plan.joinAt + c.plan.leaveAt))
		defer t.Stop()
		leave = t.C
	}
	c.sampling.Store(true)
	for !active {
		select {
		case <-ctx.Done():
			return
		case <-l.admitted:
			active = true
		case <-l.dropped:
			c.sampling.Store(false)
			if l = r.reconnect(ctx, c); l == nil {
				return
			}
			c.sampling.Store(true)
		case <-leave:
			leave = nil
			switch c.plan.kind {
			case kindBeacon, kindSilent:
				c.sampling.Store(false)
				r.rec.gone(c.id)
				if c.plan.kind == kindBeacon {
					if _, err := r.call(ctx, http.MethodPost, "/api/leave", c.token, nil, nil); err != nil {
						r.fail(fmt.Errorf("leave: %w", err))
					}
				}
				r.closeSocket(l)
				return
			case kindHide:
				if r.mode.presence {
					// The new snippet: hidden is not a departure, the
					// socket stays open.
					continue
				}
				// The old snippet: a leave beacon on hide; and today's
				// server does not count the open socket as presence, which
				// closing it reproduces (as a browser that kills a hidden
				// tab's socket does).
				c.sampling.Store(false)
				if _, err := r.call(ctx, http.MethodPost, "/api/leave", c.token, nil, nil); err != nil {
					r.fail(fmt.Errorf("leave: %w", err))
				}
				r.closeSocket(l)
				if !sleepSim(ctx, r.clock, r.clock.since()+c.plan.hideFor) {
					return
				}
				v, err := r.join(ctx, c) // back: join again
				if err != nil {
					r.fail(err)
					return
				}
				if l, err = r.connect(ctx, c); err != nil {
					r.fail(err)
					return
				}
				active = v.Status == session.StatusActive
				c.sampling.Store(!active)
			}
		}
	}
	c.sampling.Store(false)
	if r.rec.claimed(c.id) {
		r.visit(ctx, c, l)
	} else {
		r.closeSocket(l)
	}
}

// poller waits without a socket: /api/status every Retry-After.
func (r *abandonRun) poller(ctx context.Context, c *abandonClient, v session.SessionView) {
	wait := 5 * time.Second
	for v.Status != session.StatusActive {
		if !sleepSim(ctx, r.clock, r.clock.since()+wait) {
			return
		}
		var hdr http.Header
		status, err := r.call(ctx, http.MethodGet, "/api/status?gate="+gateName, c.token, &v, &hdr)
		if err != nil {
			r.fail(fmt.Errorf("status: %w", err))
			return
		}
		if status != http.StatusOK { // purged: the recorder counts it lost
			return
		}
		if s, err := strconv.Atoi(hdr.Get("Retry-After")); err == nil && s > 0 {
			wait = time.Duration(s) * time.Second
		}
	}
	if r.rec.claimed(c.id) {
		r.visit(ctx, c, nil)
	}
}

// sampler compares, every simulated second, each waiting client's displayed
// place with its exact rank. It returns the worst lateness of a tick.
func (r *abandonRun) sampler(ctx context.Context) time.Duration {
	var late time.Duration
	next := r.clock.since()
	buf := make([]placeSample, 0, len(r.clients))
	for {
		next += abandonSampleEvery
		if !sleepSim(ctx, r.clock, next) {
			return late
		}
		late = max(late, r.clock.since()-next)
		buf = buf[:0]
		latest := r.latest.Load()
		for _, c := range r.clients {
			if c.sampling.Load() {
				h := c.view.Load()
				buf = append(buf, placeSample{id: c.id, position: c.position.Load(), view: h.view, fresh: h.seq >= latest})
			}
		}
		r.rec.sample(buf)
	}
}

// loadAvg is /proc/loadavg's first three fields.
func loadAvg() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func abandonResults(p abandonParams, n, o abandonOutcome, load string) []Result {
	mean := func(x abandonOutcome) float64 {
		if x.ghosts == 0 {
			return 0
		}
		return x.ghostHeldTotal / float64(x.ghosts)
	}
	pct := func(x abandonOutcome) float64 {
		if x.placeSamples == 0 {
			return math.NaN()
		}
		return 100 * float64(x.placeWithin) / float64(x.placeSamples)
	}
	fresh := func(x abandonOutcome) float64 {
		if x.freshSamples == 0 {
			return math.NaN()
		}
		return 100 * float64(x.freshWithin) / float64(x.freshSamples)
	}
	claimSec := modePresence.claimTimeout.Seconds()
	common := fmt.Sprintf("%d waiters over %s + limit %d visitors, %s simulated per mode at scale %g; load %s",
		p.waiters, p.arrival, p.limit, p.duration, p.scale, load)
	rows := []Result{
		Result{Metric: "ghost slot-seconds per ghost", Unit: unitSec, Value: mean(n),
			Check: checkValueMax, Want: claimSec, Target: fmt.Sprintf("<= claim_timeout (%gs)", claimSec),
			Note: fmt.Sprintf("mean slot time a session held after its client was gone (socket closed, beacon, died) until the slot was freed or the run ended; value: presence rules, baseline: today's rules; ghosts %d vs %d (still holding at the end %d vs %d), p50 %.1fs vs %.1fs, p99 %.1fs vs %.1fs, max %.1fs vs %.1fs",
				n.ghosts, o.ghosts, n.stillHeld, o.stillHeld, percentile(n.ghostHeld, 0.5), percentile(o.ghostHeld, 0.5),
				percentile(n.ghostHeld, 0.99), percentile(o.ghostHeld, 0.99), percentile(n.ghostHeld, 1), percentile(o.ghostHeld, 1))}.withBaseline(mean(o)),
		Result{Metric: "ghost slot-seconds per ghost vs today's rules", Unit: unitSec, Value: mean(n),
			Check: checkRatioMax, Want: 0.1, Target: "<= 0.1x today's rules", Note: common}.withBaseline(mean(o)),
		Result{Metric: "ghost slot-seconds, total", Unit: unitSec, Value: n.ghostHeldTotal,
			Note: "baseline: today's rules, where ghosts clog the slots and fewer waiters are admitted (fewer ghosts)"}.withBaseline(o.ghostHeldTotal),
		Result{Metric: "waiters who lost their place while present", Value: float64(n.lost),
			Check: checkValueEq, Want: 0, Target: "0",
			Note: fmt.Sprintf("present clients (hidden tabs and pollers included) whose waiting session was purged or whose slot was taken back; baseline: today's rules; by kind: %s / %s", n.lostBy, o.lostBy)}.withBaseline(float64(o.lost)),
		Result{Metric: "displayed place within ±10 of the exact rank", Unit: unitPercent, Value: pct(n),
			Check: checkValueMin, Want: 99, Target: ">= 99% of samples",
			Note: fmt.Sprintf("presence rules: %d samples (every waiter with a socket, every simulated second), exact %.1f%%, p99 |error| %d, max %d; baseline: Convex's position-first+1 from the same messages; today's rules run: %.2f%%",
				n.placeSamples, 100*float64(n.placeExact)/float64(max(n.placeSamples, 1)), n.placeP99, n.maxPlaceErr, pct(o))}.withBaseline(100 * float64(n.convexWithin) / float64(max(n.placeSamples, 1))),
		{Metric: "  same, samples holding the newest message", Unit: unitPercent, Value: fresh(n),
			Note: fmt.Sprintf("samples where the client held the newest global message any client had received (%d of %d; today's rules run %.2f%% of %d): the arithmetic without the delivery lag of the other sockets",
				n.freshSamples, n.placeSamples, fresh(o), o.freshSamples)},
		Result{Metric: "slot freed -> next waiter claims it, p50", Unit: unitSec, Value: percentile(n.claimLat, 0.5),
			Note: fmt.Sprintf("from the commit that freed it (through any ghost promoted into it) to the present waiter learning it is admitted; baseline: today's rules; claims %d vs %d, plus slots still unclaimed at the end %d vs %d, counted with the time so far", n.admitted, o.admitted, n.unclaimed, o.unclaimed)}.withBaseline(percentile(o.claimLat, 0.5)),
		Result{Metric: "slot freed -> next waiter claims it, p99", Unit: unitSec, Value: percentile(n.claimLat, 0.99),
			Note: "baseline: today's rules"}.withBaseline(percentile(o.claimLat, 0.99)),
		Result{Metric: "ETA error at admission, median", Unit: unitSec, Value: percentile(absAll(n.etaErr), 0.5),
			Note: fmt.Sprintf("|first ETA shown (place/admittedPerMinute) - the wait that followed|, %d vs %d admitted waiters with an ETA; relative median %.0f%% vs %.0f%%; signed median %.0fs vs %.0fs; baseline: today's rules",
				len(n.etaErr), len(o.etaErr), 100*percentile(n.etaRelErr, 0.5), 100*percentile(o.etaRelErr, 0.5), percentile(n.etaErr, 0.5), percentile(o.etaErr, 0.5))}.withBaseline(percentile(absAll(o.etaErr), 0.5)),
		Result{Metric: "ETA error at admission, p90", Unit: unitSec, Value: percentile(absAll(n.etaErr), 0.9),
			Note: fmt.Sprintf("relative p90 %.0f%% vs %.0f%%; baseline: today's rules", 100*percentile(n.etaRelErr, 0.9), 100*percentile(o.etaRelErr, 0.9))}.withBaseline(percentile(absAll(o.etaErr), 0.9)),
		{Metric: "run health: client errors", Value: float64(n.errors + o.errors), Check: checkValueEq, Want: 0, Target: "0",
			Note: fmt.Sprintf("presence rules / today's rules: sockets the server dropped (the client reconnected) %d / %d; client errors %d / %d (first: %q / %q); worst sampling tick lateness %s / %s simulated; waiting at the end %d / %d",
				n.drops, o.drops, n.errors, o.errors, n.firstError, o.firstError, n.lateSamplesMax.Round(time.Millisecond), o.lateSamplesMax.Round(time.Millisecond), n.waitersAtEnd, o.waitersAtEnd)},
	}
	return rows
}
