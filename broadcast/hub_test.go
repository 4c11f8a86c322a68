package broadcast

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
)

// Tests in this file drive the fan-out core with in-memory subscribers (no
// sockets); serve_test.go covers the same properties over real sockets.

func quietLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

func newHub(t testing.TB, opts Options) *Hub {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = quietLogger()
	}
	h := New(opts)
	t.Cleanup(func() { _ = h.Close() })
	return h
}

func view(gate string, waiting int64) session.GlobalView {
	return session.GlobalView{Gate: gate, FirstWaitingPosition: 100, LastWaitingPosition: 100 + waiting - 1,
		Waiting: waiting, Active: 10, Limit: 10}
}

// msg is any server message, decoded flat.
type msg struct {
	Type string `json:"type"`
	session.SessionView
}

func decode(t testing.TB, b []byte) msg {
	t.Helper()
	var m msg
	require.NoError(t, json.Unmarshal(b, &m), "%s", b)
	return m
}

// memLink is an in-memory socket for the hub's writes: it records the
// payloads of the text frames written to it. Paused, it takes nothing: its
// writes wait in the drain until it is resumed or their deadline passes.
type memLink struct {
	got     chan []byte   // text frame payloads, in order
	resume  chan struct{} // closed by unpause
	entered chan struct{} // closed when a write first waits
	once    sync.Once
	paused  atomic.Bool
	closed  atomic.Bool
	writes  atomic.Int64 // tryWrite calls that wrote
	last    atomic.Pointer[byte]
}

func newMemLink(paused bool) *memLink {
	l := &memLink{got: make(chan []byte, 100), resume: make(chan struct{}), entered: make(chan struct{})}
	l.paused.Store(paused)
	return l
}

func (l *memLink) unpause() { l.paused.Store(false); close(l.resume) }

func (l *memLink) tryWrite(p []byte) (int, error) {
	if l.closed.Load() {
		return 0, net.ErrClosed
	}
	if l.paused.Load() {
		return 0, errWouldBlock
	}
	l.writes.Add(1)
	l.last.Store(&p[0])
	l.record(p)
	return len(p), nil
}

func (l *memLink) writeBy(p []byte, deadline time.Time) error {
	l.once.Do(func() { close(l.entered) })
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-l.resume:
	case <-t.C:
		return fmt.Errorf("write: %w", os.ErrDeadlineExceeded)
	}
	if l.closed.Load() {
		return net.ErrClosed
	}
	l.record(p)
	return nil
}

func (l *memLink) clearDeadline() {}
func (l *memLink) close()         { l.closed.Store(true) }
func (l *memLink) boundReads()    {} // no connection to bound

// record parses p's frames (unmasked, one-byte opcode header, as the hub
// writes them) and keeps the text payloads.
func (l *memLink) record(p []byte) {
	for len(p) > 0 {
		op, n, h := p[0]&0x0f, int(p[1]), 2
		switch n {
		case 126:
			n, h = int(binary.BigEndian.Uint16(p[2:])), 4
		case 127:
			n, h = int(binary.BigEndian.Uint64(p[2:])), 10
		}
		if op == 1 {
			l.got <- append([]byte(nil), p[h:h+n]...)
		}
		p = p[h+n:]
	}
}

func (l *memLink) next(t testing.TB) msg {
	t.Helper()
	select {
	case b := <-l.got:
		return decode(t, b)
	case <-time.After(20 * time.Second):
		t.Fatal("no message")
		return msg{}
	}
}

func TestFanout10000InMemorySubscribers(t *testing.T) {
	h := newHub(t, Options{Interval: time.Hour})
	const n = 10_000
	v0 := view("g", 1)
	subs := make([]*subscriber, n)
	for i := range subs {
		subs[i] = h.register(Subscription{Gate: "g", Global: v0}, nil, nil, nil)
		require.NotNil(t, subs[i])
	}
	require.EqualValues(t, n, h.Stats().Subscribers)
	for _, s := range subs { // initial message
		f := s.global.Swap(nil)
		require.NotNil(t, f)
		require.Equal(t, v0, decode(t, f.data).GlobalView)
	}

	v1 := view("g", 2)
	h.PublishGlobal(v1)
	require.Eventually(t, func() bool { return h.Stats().GlobalsEncoded == 1 && subs[n-1].global.Load() != nil },
		5*time.Second, time.Millisecond)
	first := subs[0].global.Load()
	require.NotNil(t, first)
	m := decode(t, first.data)
	assert.Equal(t, "global", m.Type)
	assert.Equal(t, v1, m.GlobalView)
	for i, s := range subs {
		require.Same(t, first, s.global.Load(), "subscriber %d: the one encoded message", i)
	}
	st := h.Stats()
	assert.EqualValues(t, 1, st.GlobalsEncoded)
	assert.Zero(t, st.Dropped)

	for _, s := range subs {
		h.unregister(s)
	}
	assert.Zero(t, h.Stats().Subscribers)
}

// The writer goroutines write every socket of a fan-out the same bytes,
// each socket once.
func TestFanout10000InMemorySockets(t *testing.T) {
	h := newHub(t, Options{Interval: time.Hour})
	const n = 10_000
	links := make([]countOnly, n)
	for i := range links {
		links[i] = newCountLink()
		s := h.register(Subscription{Gate: "g", Global: view("g", 1)}, links[i], nil, nil)
		require.NotNil(t, s)
		h.service(s)
		require.EqualValues(t, 1, links[i].writes.Load(), "initial message written at once")
	}
	h.PublishGlobal(view("g", 2))
	require.Eventually(t, func() bool { return h.Stats().Sent == 2*n }, 10*time.Second, time.Millisecond)
	f := h.gate("g").sentFrame
	for i, l := range links {
		require.EqualValues(t, 2, l.writes.Load(), "socket %d", i)
		require.Same(t, &f.wire[0], l.last.Load(), "socket %d: the one pre-framed message", i)
	}
	assert.EqualValues(t, 1, h.Stats().GlobalsEncoded)
}

// countOnly is a memLink that only counts writes and keeps the last one's
// first byte.
type countOnly struct{ *memLink }

func newCountLink() countOnly { return countOnly{&memLink{}} }

func (l countOnly) tryWrite(p []byte) (int, error) {
	l.writes.Add(1)
	l.last.Store(&p[0])
	return len(p), nil
}

func TestBurstIsCoalescedInMemory(t *testing.T) {
	const interval = 100 * time.Millisecond
	h := newHub(t, Options{Interval: interval})
	l := newMemLink(false)
	s := h.register(Subscription{Gate: "g", Global: view("g", 1)}, l, nil, nil)
	h.service(s)
	require.Equal(t, int64(1), l.next(t).Waiting) // initial

	for i := int64(1); i <= 1000; i++ {
		h.PublishGlobal(view("g", 1+i))
	}
	var n int
	for {
		m := l.next(t)
		n++
		if m.Waiting == 1001 {
			break
		}
	}
	assert.LessOrEqual(t, n, 4, "1000 publishes gave %d messages", n)
	assert.LessOrEqual(t, h.Stats().GlobalsEncoded, uint64(4))

	// Only when something changed: the same view again sends nothing.
	enc := h.Stats().GlobalsEncoded
	h.PublishGlobal(view("g", 1001))
	require.Never(t, func() bool { return h.Stats().GlobalsEncoded != enc || len(l.got) > 0 }, 3*interval, 10*time.Millisecond)
}

func TestSessionMessageNotLostBehindGlobals(t *testing.T) {
	h := newHub(t, Options{Interval: time.Millisecond})
	l := newMemLink(true) // backed up: its writes wait in the drain
	s := h.register(Subscription{Gate: "g", SessionID: "a", Global: view("g", 5)}, l, nil, nil)
	other := h.register(Subscription{Gate: "g", SessionID: "b", Global: view("g", 5)}, nil, nil, nil)
	other.global.Store(nil)
	h.service(s) // the initial global waits for the socket
	<-l.entered

	h.PublishSession(session.SessionView{GlobalView: view("g", 4), Session: "a", Status: session.StatusActive, Position: 100})
	for i := int64(1); i <= 50; i++ {
		h.PublishGlobal(view("g", 4+i))
	}
	require.Eventually(t, func() bool {
		f := s.global.Load()
		return f != nil && decode(t, f.data).Waiting == 54
	}, 5*time.Second, time.Millisecond)
	require.NotNil(t, s.sess.Load(), "kept while the socket is backed up")

	l.unpause()
	m := l.next(t)
	assert.Equal(t, "global", m.Type)
	assert.EqualValues(t, 5, m.Waiting, "the initial message first")
	m = l.next(t)
	assert.Equal(t, "session", m.Type)
	assert.Equal(t, "a", m.Session)
	assert.Equal(t, session.StatusActive, m.Status)
	m = l.next(t)
	assert.Equal(t, "global", m.Type)
	assert.EqualValues(t, 54, m.Waiting)

	assert.Nil(t, other.sess.Load(), "b is not told of a's promotion")
}

func TestInitialGlobalIsHubsLatest(t *testing.T) {
	h := newHub(t, Options{Interval: time.Millisecond})
	s0 := h.register(Subscription{Gate: "g", Global: view("g", 1)}, nil, nil, nil)
	h.PublishGlobal(view("g", 7))
	require.Eventually(t, func() bool { return h.Stats().GlobalsEncoded == 1 }, 5*time.Second, time.Millisecond)
	// A caller that read its view before that publish still gets the latest.
	s := h.register(Subscription{Gate: "g", Global: view("g", 1)}, nil, nil, nil)
	f := s.global.Load()
	require.NotNil(t, f)
	assert.EqualValues(t, 7, decode(t, f.data).Waiting)
	assert.Same(t, s0.global.Load(), f, "the encoded message is reused")

	// CurrentSession replaces Session.
	stale := session.SessionView{GlobalView: view("g", 7), Session: "x", Status: session.StatusWaiting, Position: 103}
	fresh := stale
	fresh.Status = session.StatusActive
	s = h.register(Subscription{Gate: "g", SessionID: "x", Session: &stale,
		CurrentSession: func() *session.SessionView { return &fresh }}, nil, nil, nil)
	require.NotNil(t, s.sess.Load())
	assert.Equal(t, session.StatusActive, s.sess.Load().Status)
}

func TestStuckWriterDoesNotDelayOthersAndIsClosed(t *testing.T) {
	h := newHub(t, Options{Interval: time.Millisecond, WriteTimeout: time.Second})
	stuck := newMemLink(true) // never takes a byte
	fast := newMemLink(false)
	ss := h.register(Subscription{Gate: "g", Global: view("g", 1)}, stuck, nil, nil)
	fs := h.register(Subscription{Gate: "g", Global: view("g", 1)}, fast, nil, nil)
	h.service(ss)
	h.service(fs)

	<-stuck.entered // the stuck socket is blocked in its first write
	assert.EqualValues(t, 1, fast.next(t).Waiting)
	for i := int64(2); i <= 20; i++ {
		h.PublishGlobal(view("g", i))
		m := fast.next(t) // each arrives while the other is stuck
		require.EqualValues(t, i, m.Waiting)
		require.Zero(t, ss.end.Load())
	}
	require.Eventually(t, func() bool { return ss.end.Load() != 0 }, 10*time.Second, time.Millisecond,
		"stuck writer not given up")
	assert.Equal(t, endSlow, endReason(ss.end.Load()))
	assert.True(t, stuck.closed.Load(), "the stuck socket is closed")
	assert.Zero(t, fs.end.Load())
	assert.False(t, fast.closed.Load())
	assert.Positive(t, h.Stats().Dropped, "the stuck mailbox kept only the newest")
	assert.NotNil(t, ss.global.Load())
	assert.Empty(t, stuck.got, "nothing queued behind the stuck write")
}

func TestCloseIsIdempotentAndStopsPublishing(t *testing.T) {
	h := New(Options{Logger: quietLogger()})
	s := h.register(Subscription{Gate: "g", Global: view("g", 1)}, nil, nil, nil)
	require.NotNil(t, s)
	require.NoError(t, h.Close())
	require.NoError(t, h.Close())
	h.PublishGlobal(view("g", 2))
	h.PublishSession(session.SessionView{GlobalView: view("g", 2), Session: "a"})
	assert.Nil(t, h.register(Subscription{Gate: "g"}, nil, nil, nil))
}

// BenchmarkBroadcast10k measures one global broadcast to 10,000 in-memory
// subscribers: encode once and fill every mailbox ("fanout"), and the same
// until the writer goroutines have written it to all 10,000 in-memory
// sockets ("delivered").
func BenchmarkBroadcast10k(b *testing.B) {
	const n = 10_000
	setup := func(b *testing.B, links bool) (*Hub, *gate) {
		h := newHub(b, Options{Interval: time.Hour})
		for range n {
			var l link
			if links {
				l = newCountLink()
			}
			h.service(h.register(Subscription{Gate: "g", Global: view("g", 1)}, l, nil, nil))
		}
		return h, h.gate("g")
	}
	publish := func(h *Hub, g *gate, i int) {
		g.mu.Lock()
		g.latest, g.hasLatest = view("g", int64(i+2)), true
		g.mu.Unlock()
		h.fanout(g, h.encodeLatest(g))
	}

	b.Run("fanout", func(b *testing.B) {
		h, g := setup(b, false)
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			publish(h, g, i)
		}
	})

	b.Run("delivered", func(b *testing.B) {
		h, g := setup(b, true)
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			want := h.Stats().Sent + n
			publish(h, g, i)
			for h.Stats().Sent < want {
				time.Sleep(10 * time.Microsecond)
			}
		}
	})
}

func TestNaNRateIsSentAsZeroOnce(t *testing.T) {
	h := newHub(t, Options{Interval: 5 * time.Millisecond})
	s := h.register(Subscription{Gate: "g", Global: view("g", 1)}, nil, nil, nil)
	v := view("g", 2)
	v.AdmittedPerMinute = math.NaN()
	h.PublishGlobal(v)
	require.Eventually(t, func() bool { return h.Stats().GlobalsEncoded == 1 }, 5*time.Second, time.Millisecond)
	m := decode(t, s.global.Load().data)
	assert.EqualValues(t, 2, m.Waiting)
	assert.Zero(t, m.AdmittedPerMinute)
	require.Never(t, func() bool { return h.Stats().GlobalsEncoded != 1 }, 50*time.Millisecond, 5*time.Millisecond)
}

// Broadcasts splits the encoded global messages by gate: one per change
// that went out, none for a repeat.
func TestBroadcastsPerGate(t *testing.T) {
	h := newHub(t, Options{Interval: time.Millisecond})
	assert.Empty(t, h.Broadcasts())
	h.PublishGlobal(view("a", 1))
	require.Eventually(t, func() bool { return h.Broadcasts()["a"] == 1 }, 5*time.Second, time.Millisecond)
	h.PublishGlobal(view("a", 1)) // no change: no broadcast
	h.PublishGlobal(view("b", 1))
	require.Eventually(t, func() bool { return h.Broadcasts()["b"] == 1 }, 5*time.Second, time.Millisecond)
	h.PublishGlobal(view("a", 2))
	require.Eventually(t, func() bool { return h.Broadcasts()["a"] == 2 }, 5*time.Second, time.Millisecond)
	got := h.Broadcasts()
	assert.Equal(t, map[string]uint64{"a": 2, "b": 1}, got)
	assert.EqualValues(t, got["a"]+got["b"], h.Stats().GlobalsEncoded)
}
