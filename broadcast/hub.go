package broadcast

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"math"
	"path"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/anteroomhq/anteroom/broadcast/wsframe"
	"github.com/anteroomhq/anteroom/gate/wire"
	"github.com/anteroomhq/anteroom/session"
)

// Defaults applied by New to zero (or negative) Options fields.
const (
	DefaultInterval     = 250 * time.Millisecond
	DefaultWriteTimeout = 10 * time.Second
	DefaultPingInterval = 30 * time.Second
	DefaultReadLimit    = 512
)

// Errors returned by Serve (and, up to the handshake, Handoff). A socket that
// ends because the client closed or vanished, or because the hub closed,
// ends without error.
var (
	// ErrClosed: the hub was closed before the socket could be served; Serve
	// answered 503 without upgrading.
	ErrClosed = errors.New("broadcast: hub closed")
	// ErrTooManyConnections: Options.MaxConnections sockets were already open;
	// the socket was accepted and closed at once with StatusTryAgainLater.
	ErrTooManyConnections = errors.New("broadcast: too many connections")
	// ErrClientMessage: the client sent a data message; the socket was closed
	// with StatusPolicyViolation.
	ErrClientMessage = errors.New("broadcast: client sent a data message")
	// ErrSlowClient: a write or a ping's pong took longer than
	// Options.WriteTimeout; the socket was closed.
	ErrSlowClient = errors.New("broadcast: client too slow")
)

// Options configure a Hub. Zero fields take the defaults above.
type Options struct {
	// Interval is the coalescing window: at most one global message per gate
	// per Interval. Default DefaultInterval.
	Interval time.Duration
	// WriteTimeout bounds each write and each ping's round trip; a socket that
	// exceeds it is closed. Default DefaultWriteTimeout.
	WriteTimeout time.Duration
	// PingInterval is how often each socket is pinged. Default
	// DefaultPingInterval.
	PingInterval time.Duration
	// ReadLimit is the read limit set on each socket (Conn.SetReadLimit).
	// Clients are not supposed to send anything: any data message, of any
	// size, closes the socket with StatusPolicyViolation before its payload
	// is read, so this only bounds what the library would ever buffer.
	// Default DefaultReadLimit.
	ReadLimit int64
	// OriginPatterns are passed to websocket.AcceptOptions: the hosts of
	// cross-origin pages allowed to open a socket. Empty allows the same host
	// only; other handshakes are refused with 403.
	OriginPatterns []string
	// MaxConnections caps the sockets served at once; a socket over the cap is
	// closed right after the handshake with StatusTryAgainLater. 0: no cap.
	MaxConnections int
	// MaxConnectionsPerClient caps the sockets one client (Subscription.Client,
	// its IP address) may hold at once; one over the cap is closed right after
	// the handshake with StatusTryAgainLater. 0: no cap.
	MaxConnectionsPerClient int
	// Logger receives per-socket events at Debug level and hub events at
	// Info. Default slog.Default().
	Logger *slog.Logger
}

// Close reasons sent to clients.
const (
	reasonShutdown      = "anteroom: server shutting down"
	reasonTooMany       = "anteroom: too many connections, retry later"
	reasonTooManyClient = "anteroom: too many connections from this address"
	reasonClientMessage = "anteroom: this socket is receive-only"
)

// Hub fans out the global and per-session messages of every gate to the
// sockets subscribed to it. It implements session.Publisher. All methods are
// safe for concurrent use.
type Hub struct {
	opts Options
	log  *slog.Logger

	mu     sync.Mutex
	gates  map[string]*gate
	closed bool
	done   chan struct{} // closed by Close
	wg     sync.WaitGroup
	conns  atomic.Int64 // sockets being served, for MaxConnections
	pool   pool         // write tasks for the writer goroutines

	clientsMu sync.Mutex
	clients   map[string]int // sockets per Subscription.Client, for MaxConnectionsPerClient

	subscribers    atomic.Int64
	globalsEncoded atomic.Uint64
	sent           atomic.Uint64
	dropped        atomic.Uint64
	slowClosed     atomic.Uint64
	rejected       atomic.Uint64
}

var _ session.Publisher = (*Hub)(nil)

// gate is one gate's subscribers and coalescing state.
type gate struct {
	name string
	wake chan struct{} // cap 1: PublishGlobal → run

	mu        sync.Mutex // guards the four fields below
	latest    session.GlobalView
	hasLatest bool
	sentView  session.GlobalView // the view of sentFrame
	sentFrame *frame             // the last global message encoded; nil before the first

	subsMu sync.Mutex // held during a fan-out
	subs   []*subscriber

	encoded atomic.Uint64 // global messages encoded for this gate (Broadcasts)

	sessMu   sync.Mutex // never held long: PublishSession takes it
	sessions map[string][]*subscriber
}

// frame is one encoded global message, shared by every mailbox it is put
// in: wire is the whole websocket frame, written as is to every socket;
// data is its payload, the JSON.
type frame struct{ data, wire []byte }

func newFrame(payload []byte) *frame {
	w := textFrame(payload)
	return &frame{data: w[len(w)-len(payload):], wire: w}
}

// subscriber is one socket (or, in tests, an in-memory mailbox): what it is
// subscribed to, its mailbox, and its write state. It keeps nothing of the
// request that opened it.
type subscriber struct {
	gate   *gate
	id     string // session id, "" when none
	client string // Subscription.Client, for MaxConnectionsPerClient
	closed func() // Subscription.Closed
	idx    int    // index in gate.subs, guarded by gate.subsMu

	global atomic.Pointer[frame]               // newest global not yet written
	sess   atomic.Pointer[session.SessionView] // newest session view not yet written
	busy   atomic.Bool                         // a goroutine is writing the mailbox (service)

	link link            // nil: an in-memory subscriber, whose mailbox nobody writes
	conn *websocket.Conn // nil for in-memory subscribers
	end  atomic.Uint32   // endReason: why the hub ended the socket; the first one wins

	wmu          sync.Mutex // guards the five fields below; held for each whole frame written
	pending      []byte     // bytes the socket has not taken yet, in order; the drain writes them
	pendingMsgs  uint64     // messages in pending, for Stats.Sent
	draining     bool       // a drain goroutine owns pending
	closeDrained bool       // the library closed the socket while draining: the drain closes it when done
	werr         error      // the write error that is ending the socket

	pingSent atomic.Int64 // unix ns of the unanswered ping; 0: none
	nextPing int64        // unix ns; guarded by gate.subsMu
}

// New returns a running Hub. It never fails; an OriginPatterns entry that is
// not a valid path.Match pattern is logged (the library then refuses every
// cross-origin handshake it would be matched against).
func New(opts Options) *Hub {
	if opts.Interval <= 0 {
		opts.Interval = DefaultInterval
	}
	if opts.WriteTimeout <= 0 {
		opts.WriteTimeout = DefaultWriteTimeout
	}
	if opts.PingInterval <= 0 {
		opts.PingInterval = DefaultPingInterval
	}
	if opts.ReadLimit <= 0 {
		opts.ReadLimit = DefaultReadLimit
	}
	if opts.MaxConnections < 0 {
		opts.MaxConnections = 0
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	opts.OriginPatterns = append([]string(nil), opts.OriginPatterns...)
	for _, p := range opts.OriginPatterns {
		if _, err := path.Match(p, ""); err != nil {
			opts.Logger.Error("broadcast: invalid origin pattern", "pattern", p, "err", err)
		}
	}
	h := &Hub{
		opts:  opts,
		log:   opts.Logger,
		gates: make(map[string]*gate),
		done:  make(chan struct{}),
	}
	h.pool.init()
	n := writers()
	h.wg.Add(n + 1)
	for range n {
		go h.writer()
	}
	go h.pinger()
	return h
}

// writers is how many writer goroutines a hub runs: writes do not wait on
// sockets, so a couple per processor keep every processor busy.
func writers() int { return 2 * runtime.GOMAXPROCS(0) }

// PublishGlobal records v as its gate's current view and wakes the gate's
// fan-out, which sends it at once if the gate was quiet for an Interval and
// otherwise at the end of the current window (unless a later view replaces
// it). It never blocks on sockets and does nothing after Close.
func (h *Hub) PublishGlobal(v session.GlobalView) {
	g := h.gate(v.Gate)
	if g == nil {
		return
	}
	sanitize(&v)
	g.mu.Lock()
	g.latest, g.hasLatest = v, true
	g.mu.Unlock()
	select {
	case g.wake <- struct{}{}:
	default:
	}
}

// PublishSession puts v in the session mailbox of every socket subscribed
// with v.Gate and v.Session, replacing an unwritten older session view. It
// is not coalesced, never blocks on sockets, and does nothing when no socket
// names the session or after Close.
func (h *Hub) PublishSession(v session.SessionView) {
	h.mu.Lock()
	g := h.gates[v.Gate]
	h.mu.Unlock()
	if g == nil || v.Session == "" {
		return
	}
	var task []*subscriber
	g.sessMu.Lock()
	subs := g.sessions[v.Session]
	if len(subs) > 0 {
		sanitize(&v.GlobalView)
		p := &v
		for _, s := range subs {
			if s.sess.Swap(p) != nil {
				h.dropped.Add(1)
			}
		}
		task = append(task, subs...)
	}
	g.sessMu.Unlock()
	if task != nil {
		h.pool.submitFirst(task)
	}
}

// Stats is a snapshot of the hub's counters.
type Stats struct {
	Subscribers    int64  // subscribers registered now
	Gates          int    // gates known to the hub
	GlobalsEncoded uint64 // global messages encoded (once each, whatever the subscriber count)
	Sent           uint64 // messages written to sockets, initial ones included
	Dropped        uint64 // unwritten messages replaced in a mailbox by a newer one
	SlowClosed     uint64 // sockets closed because a write or ping outlasted WriteTimeout
	Rejected       uint64 // sockets refused by MaxConnections
}

// Stats returns the hub's counters. It never fails.
func (h *Hub) Stats() Stats {
	h.mu.Lock()
	n := len(h.gates)
	h.mu.Unlock()
	return Stats{
		Subscribers:    h.subscribers.Load(),
		Gates:          n,
		GlobalsEncoded: h.globalsEncoded.Load(),
		Sent:           h.sent.Load(),
		Dropped:        h.dropped.Load(),
		SlowClosed:     h.slowClosed.Load(),
		Rejected:       h.rejected.Load(),
	}
}

// Broadcasts returns, for every gate the hub knows, how many global
// messages it encoded for that gate (Stats.GlobalsEncoded, split by gate):
// each is one broadcast to all of the gate's sockets. It never fails.
func (h *Hub) Broadcasts() map[string]uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[string]uint64, len(h.gates))
	for name, g := range h.gates {
		out[name] = g.encoded.Load()
	}
	return out
}

// Close closes every socket with StatusGoingAway, stops the hub's
// goroutines and their timers, and waits until every Serve has returned
// (each close handshake is bounded by the library's 5 s timeouts). Later
// publishes are ignored and later Serve calls answer 503. It is idempotent
// and always returns nil.
func (h *Hub) Close() error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		h.wg.Wait()
		return nil
	}
	h.closed = true
	close(h.done)
	// Every socket registered so far is in a gate's subs; one registered
	// later sees done closed and is refused (register).
	var socks []*subscriber
	for _, g := range h.gates {
		g.subsMu.Lock()
		for _, s := range g.subs {
			if s.conn != nil {
				socks = append(socks, s)
			}
		}
		g.subsMu.Unlock()
	}
	h.wg.Add(len(socks))
	h.mu.Unlock()
	h.pool.close()
	h.log.Info("broadcast: closing hub", "subscribers", h.subscribers.Load())
	for _, s := range socks {
		s.end.CompareAndSwap(0, uint32(endClosed))
		go func() {
			defer h.wg.Done()
			s.link.boundReads()
			_ = s.conn.Close(websocket.StatusGoingAway, reasonShutdown)
		}()
	}
	h.wg.Wait()
	return nil
}

// gate returns the named gate, creating it and starting its fan-out
// goroutine on first use; nil once the hub is closed.
func (h *Hub) gate(name string) *gate {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil
	}
	g := h.gates[name]
	if g == nil {
		name = strings.Clone(name) // the map keeps it: not a piece of some request
		g = &gate{
			name:     name,
			wake:     make(chan struct{}, 1),
			sessions: make(map[string][]*subscriber),
		}
		h.gates[name] = g
		h.wg.Add(1)
		go h.run(g)
	}
	return g
}

// enter registers a Serve call with Close; false once the hub is closed.
func (h *Hub) enter() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return false
	}
	h.wg.Add(1)
	return true
}

// run is a gate's fan-out loop: leading edge at once, then at most one
// message per Interval while changes keep coming.
func (h *Hub) run(g *gate) {
	defer h.wg.Done()
	t := time.NewTimer(h.opts.Interval)
	t.Stop()
	defer t.Stop()
	for {
		select {
		case <-g.wake:
		case <-h.done:
			return
		}
		for {
			select { // this pass looks at the latest view: drop its wake-up
			case <-g.wake:
			default:
			}
			f := h.encodeLatest(g)
			if f == nil {
				break // nothing changed: quiet, the next change is a leading edge
			}
			h.fanout(g, f)
			t.Reset(h.opts.Interval)
			select {
			case <-t.C:
			case <-h.done:
				return
			}
		}
	}
}

// sanitize replaces a NaN or infinite rate, which JSON cannot carry (and a
// NaN would never compare equal to the last view sent), with 0.
func sanitize(v *session.GlobalView) {
	if r := v.AdmittedPerMinute; math.IsNaN(r) || math.IsInf(r, 0) {
		v.AdmittedPerMinute = 0
	}
}

// encodeGlobal cannot fail: a global view holds only strings, integers
// and a sanitized float. sessionScratch.encode fails only on a session
// view encoding/json refuses, a NaN or infinite ClaimWindow or a
// ClaimDeadline past year 9999, which the Waitlist never makes (a
// duration's seconds, the clock's times); its message is then empty, as
// json.Marshal's was.
func encodeGlobal(v session.GlobalView) []byte {
	sanitize(&v)
	b, _ := json.Marshal(wire.GlobalMessage{Type: wire.MessageGlobal, GlobalView: v})
	return b
}

// sessionScratch encodes a socket's session message and frames it in
// buffers kept from one message to the next (sessionScratches). A session
// message goes to one socket: every socket is sent one when it opens, and
// its view's buckets make it the largest message, about 2.6 KB of JSON. In
// fresh buffers each was garbage the moment it was written, and the heap
// grows by its garbage before a collection: at 19,000 sockets opening,
// about 50 MB of it.
type sessionScratch struct {
	json  bytes.Buffer
	enc   *json.Encoder // writes into json
	frame []byte
}

// sessionScratches holds the scratch buffers of session messages. A
// message is out of its scratch once the write returns (written, or its
// unwritten rest copied into the socket's pending bytes: writeLocked), so
// a scratch goes back at once.
var sessionScratches = sync.Pool{New: func() any { return newSessionScratch() }}

func newSessionScratch() *sessionScratch {
	sc := new(sessionScratch)
	sc.enc = json.NewEncoder(&sc.json)
	return sc
}

// encode returns v's session message, {"type":"session", ...}, as
// json.Marshal writes it, in sc's buffer: valid until sc's next use. It
// does not change v.
func (sc *sessionScratch) encode(v *session.SessionView) []byte {
	c := *v
	sanitize(&c.GlobalView)
	sc.json.Reset()
	_ = sc.enc.Encode(wire.SessionMessage{Type: wire.MessageSession, SessionView: c}) // see encodeGlobal
	return bytes.TrimSuffix(sc.json.Bytes(), []byte("\n"))                            // Encode ends what it writes with a newline
}

// frameOf returns v's session message as one websocket text frame, in sc's
// buffer: valid until sc's next use.
func (sc *sessionScratch) frameOf(v *session.SessionView) []byte {
	sc.frame = wsframe.Append(sc.frame[:0], wsframe.OpText, sc.encode(v))
	return sc.frame
}

// maxScratch is the largest scratch put back in sessionScratches: a view is
// bounded (its buckets are), so this only keeps an unforeseen one from
// being held.
const maxScratch = 64 << 10

func putSessionScratch(sc *sessionScratch) {
	if sc.json.Cap() > maxScratch || cap(sc.frame) > maxScratch {
		return
	}
	sessionScratches.Put(sc)
}

// encodeLatest encodes the gate's latest view as its new sent frame, or
// returns nil when it equals the last one sent.
func (h *Hub) encodeLatest(g *gate) *frame {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.hasLatest || (g.sentFrame != nil && g.latest.Equal(g.sentView)) {
		return nil
	}
	f := newFrame(encodeGlobal(g.latest))
	g.sentView, g.sentFrame = g.latest, f
	h.globalsEncoded.Add(1)
	g.encoded.Add(1)
	return f
}

// fanout puts f in every subscriber's global mailbox and hands the
// subscribers, in batches, to the writer goroutines.
func (h *Hub) fanout(g *gate, f *frame) {
	var dropped uint64
	g.subsMu.Lock()
	all := make([]*subscriber, len(g.subs))
	copy(all, g.subs)
	for _, s := range all {
		if s.global.Swap(f) != nil {
			dropped++
		}
	}
	g.subsMu.Unlock()
	if dropped > 0 {
		h.dropped.Add(dropped)
	}
	tasks := make([][]*subscriber, 0, (len(all)+fanoutBatch-1)/fanoutBatch)
	for len(all) > 0 {
		n := min(len(all), fanoutBatch)
		tasks = append(tasks, all[:n:n])
		all = all[n:]
	}
	if len(tasks) > 0 {
		h.pool.submit(tasks...)
	}
}

// register adds a subscriber for sub, writing to l and closed through c
// (both nil for an in-memory subscriber; out, when not nil, is pointed at
// it before anyone else can see it), and fills its mailbox with the
// initial messages; the caller then calls service to write them. It
// returns nil once the hub is closed.
//
// The initial global is the gate's latest published view when there is one
// (the caller's sub.Global may predate a publish that happened before the
// subscriber was registered), else sub.Global. Mailbox slots are filled
// only if a fan-out has not already put something newer there.
//
// The subscriber keeps copies of the gate name and session id, and sub's
// Client, which accept copied: nothing of sub (CurrentSession may hold the
// upgrade's request) nor of the strings it was cut from.
func (h *Hub) register(sub Subscription, l link, c *websocket.Conn, out *sockOut) *subscriber {
	g := h.gate(sub.Gate)
	if g == nil {
		return nil
	}
	s := &subscriber{gate: g, id: strings.Clone(sub.SessionID), client: sub.Client, closed: sub.Closed, link: l, conn: c}
	s.nextPing = time.Now().Add(h.opts.PingInterval).UnixNano()
	if out != nil {
		out.s.Store(s)
	}
	g.subsMu.Lock()
	s.idx = len(g.subs)
	g.subs = append(g.subs, s)
	g.subsMu.Unlock()
	if s.id != "" {
		g.sessMu.Lock()
		g.sessions[s.id] = append(g.sessions[s.id], s)
		g.sessMu.Unlock()
	}
	h.subscribers.Add(1)
	select {
	case <-h.done: // Close may have listed the sockets before this one was added
		h.unregister(s)
		return nil
	default:
	}

	var f *frame
	g.mu.Lock()
	switch {
	case g.hasLatest && g.sentFrame != nil && g.latest.Equal(g.sentView):
		f = g.sentFrame
	case g.hasLatest:
		f = newFrame(encodeGlobal(g.latest))
	}
	g.mu.Unlock()
	if f == nil {
		f = newFrame(encodeGlobal(sub.Global))
	}
	s.global.CompareAndSwap(nil, f)

	sv := sub.Session
	if sub.CurrentSession != nil {
		if cur := sub.CurrentSession(); cur != nil {
			sv = cur
		}
	}
	if sv != nil {
		c := *sv
		s.sess.CompareAndSwap(nil, &c)
	}
	return s
}

// unregister removes s from its gate.
func (h *Hub) unregister(s *subscriber) {
	g := s.gate
	g.subsMu.Lock()
	last := len(g.subs) - 1
	moved := g.subs[last]
	g.subs[s.idx] = moved
	moved.idx = s.idx
	g.subs[last] = nil
	g.subs = g.subs[:last]
	if cap(g.subs) > 64 && len(g.subs) < cap(g.subs)/4 {
		g.subs = append([]*subscriber(nil), g.subs...)
	}
	g.subsMu.Unlock()
	if s.id != "" {
		g.sessMu.Lock()
		list := g.sessions[s.id]
		for i, x := range list {
			if x == s {
				list[i] = list[len(list)-1]
				list[len(list)-1] = nil
				list = list[:len(list)-1]
				break
			}
		}
		if len(list) == 0 {
			delete(g.sessions, s.id)
		} else {
			g.sessions[s.id] = list
		}
		g.sessMu.Unlock()
	}
	h.subscribers.Add(-1)
}
