package broadcast

import (
	"context"
	"encoding/json"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
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

func TestFanout10000InMemorySubscribers(t *testing.T) {
	h := newHub(t, Options{Interval: time.Hour})
	const n = 10_000
	v0 := view("g", 1)
	subs := make([]*subscriber, n)
	for i := range subs {
		subs[i] = h.register(Subscription{Gate: "g", Global: v0})
		require.NotNil(t, subs[i])
	}
	require.EqualValues(t, n, h.Stats().Subscribers)
	for _, s := range subs { // initial message
		f := s.global.Swap(nil)
		require.NotNil(t, f)
		require.Equal(t, v0, decode(t, f.data).GlobalView)
		<-s.wake
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
		require.Len(t, s.wake, 1, "subscriber %d woken", i)
	}
	st := h.Stats()
	assert.EqualValues(t, 1, st.GlobalsEncoded)
	assert.Zero(t, st.Dropped)

	for _, s := range subs {
		h.unregister(s)
	}
	assert.Zero(t, h.Stats().Subscribers)
}

// consume plays the writer for an in-memory subscriber: it records every
// message it takes from the mailbox, session before global.
func consume(ctx context.Context, s *subscriber, got chan<- msg, t testing.TB) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.wake:
		}
		if v := s.sess.Swap(nil); v != nil {
			got <- decode(t, encodeSession(v))
		}
		if f := s.global.Swap(nil); f != nil {
			got <- decode(t, f.data)
		}
	}
}

func TestBurstIsCoalescedInMemory(t *testing.T) {
	const interval = 100 * time.Millisecond
	h := newHub(t, Options{Interval: interval})
	s := h.register(Subscription{Gate: "g", Global: view("g", 1)})
	got := make(chan msg, 10_000)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go consume(ctx, s, got, t)
	require.Equal(t, int64(1), (<-got).Waiting) // initial

	for i := int64(1); i <= 1000; i++ {
		h.PublishGlobal(view("g", 1+i))
	}
	var n int
	for m := range got {
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
	require.Never(t, func() bool { return h.Stats().GlobalsEncoded != enc || len(got) > 0 }, 3*interval, 10*time.Millisecond)
}

func TestSessionMessageNotLostBehindGlobals(t *testing.T) {
	h := newHub(t, Options{Interval: time.Millisecond})
	s := h.register(Subscription{Gate: "g", SessionID: "a", Global: view("g", 5)})
	other := h.register(Subscription{Gate: "g", SessionID: "b", Global: view("g", 5)})
	s.global.Store(nil)
	other.global.Store(nil)

	h.PublishSession(session.SessionView{GlobalView: view("g", 4), Session: "a", Status: session.StatusActive, Position: 100})
	for i := int64(1); i <= 50; i++ {
		h.PublishGlobal(view("g", 4+i))
	}
	require.Eventually(t, func() bool {
		f := s.global.Load()
		return f != nil && decode(t, f.data).Waiting == 54
	}, 5*time.Second, time.Millisecond)

	got := make(chan msg, 10)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go consume(ctx, s, got, t)
	m := <-got
	assert.Equal(t, "session", m.Type)
	assert.Equal(t, "a", m.Session)
	assert.Equal(t, session.StatusActive, m.Status)
	m = <-got
	assert.Equal(t, "global", m.Type)
	assert.EqualValues(t, 54, m.Waiting)

	assert.Nil(t, other.sess.Load(), "b is not told of a's promotion")
}

func TestInitialGlobalIsHubsLatest(t *testing.T) {
	h := newHub(t, Options{Interval: time.Millisecond})
	s0 := h.register(Subscription{Gate: "g", Global: view("g", 1)})
	h.PublishGlobal(view("g", 7))
	require.Eventually(t, func() bool { return h.Stats().GlobalsEncoded == 1 }, 5*time.Second, time.Millisecond)
	// A caller that read its view before that publish still gets the latest.
	s := h.register(Subscription{Gate: "g", Global: view("g", 1)})
	f := s.global.Load()
	require.NotNil(t, f)
	assert.EqualValues(t, 7, decode(t, f.data).Waiting)
	assert.Same(t, s0.global.Load(), f, "the encoded message is reused")

	// CurrentSession replaces Session.
	stale := session.SessionView{GlobalView: view("g", 7), Session: "x", Status: session.StatusWaiting, Position: 103}
	fresh := stale
	fresh.Status = session.StatusActive
	s = h.register(Subscription{Gate: "g", SessionID: "x", Session: &stale,
		CurrentSession: func() *session.SessionView { return &fresh }})
	require.NotNil(t, s.sess.Load())
	assert.Equal(t, session.StatusActive, s.sess.Load().Status)
}

// stuckConn never completes a write before its context expires.
type stuckConn struct {
	entered chan struct{}
	once    sync.Once
}

func (c *stuckConn) Write(ctx context.Context, _ websocket.MessageType, _ []byte) error {
	c.once.Do(func() { close(c.entered) })
	<-ctx.Done()
	return ctx.Err()
}

func (c *stuckConn) Ping(ctx context.Context) error {
	<-ctx.Done()
	return ctx.Err()
}

// recConn records what is written to it.
type recConn struct{ got chan []byte }

func (c *recConn) Write(_ context.Context, _ websocket.MessageType, p []byte) error {
	c.got <- append([]byte(nil), p...)
	return nil
}

func (c *recConn) Ping(context.Context) error { return nil }

func TestStuckWriterDoesNotDelayOthersAndIsClosed(t *testing.T) {
	h := newHub(t, Options{Interval: time.Millisecond, WriteTimeout: time.Second})
	stuck := &stuckConn{entered: make(chan struct{})}
	fast := &recConn{got: make(chan []byte, 100)}
	ss := h.register(Subscription{Gate: "g", Global: view("g", 1)})
	fs := h.register(Subscription{Gate: "g", Global: view("g", 1)})

	stuckEnd := make(chan pumpEnd, 1)
	go func() { stuckEnd <- h.pump(stuck, ss, nil) }()
	fastEnd := make(chan pumpEnd, 1)
	readDone := make(chan struct{})
	go func() { fastEnd <- h.pump(fast, fs, readDone) }()

	<-stuck.entered // the stuck socket is blocked in its first write
	assert.EqualValues(t, 1, decode(t, <-fast.got).Waiting)
	for i := int64(2); i <= 20; i++ {
		h.PublishGlobal(view("g", i))
		m := decode(t, <-fast.got) // each arrives while the other is stuck
		require.EqualValues(t, i, m.Waiting)
		require.Empty(t, stuckEnd)
	}
	select {
	case end := <-stuckEnd:
		assert.Equal(t, endSlow, end)
	case <-time.After(10 * time.Second):
		t.Fatal("stuck writer not given up")
	}
	close(readDone)
	assert.Equal(t, endRead, <-fastEnd)
	assert.Positive(t, h.Stats().Dropped, "the stuck mailbox kept only the newest")
	assert.NotNil(t, ss.global.Load())
}

func TestCloseIsIdempotentAndStopsPublishing(t *testing.T) {
	h := New(Options{Logger: quietLogger()})
	s := h.register(Subscription{Gate: "g", Global: view("g", 1)})
	require.NotNil(t, s)
	require.NoError(t, h.Close())
	require.NoError(t, h.Close())
	h.PublishGlobal(view("g", 2))
	h.PublishSession(session.SessionView{GlobalView: view("g", 2), Session: "a"})
	assert.Nil(t, h.register(Subscription{Gate: "g"}))
}

// BenchmarkBroadcast10k measures one global broadcast to 10,000 in-memory
// subscribers: encode once and fill every mailbox ("fanout"), and the same
// until all 10,000 consumer goroutines have taken it ("delivered").
func BenchmarkBroadcast10k(b *testing.B) {
	const n = 10_000
	setup := func(b *testing.B) (*Hub, *gate, []*subscriber) {
		h := newHub(b, Options{Interval: time.Hour})
		subs := make([]*subscriber, n)
		for i := range subs {
			subs[i] = h.register(Subscription{Gate: "g", Global: view("g", 1)})
		}
		return h, h.gate("g"), subs
	}
	publish := func(h *Hub, g *gate, i int) {
		g.mu.Lock()
		g.latest, g.hasLatest = view("g", int64(i+2)), true
		g.mu.Unlock()
		h.fanout(g, h.encodeLatest(g))
	}

	b.Run("fanout", func(b *testing.B) {
		h, g, _ := setup(b)
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			publish(h, g, i)
		}
	})

	b.Run("delivered", func(b *testing.B) {
		h, g, subs := setup(b)
		var taken atomic.Int64
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for _, s := range subs {
			s.global.Store(nil)
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-ctx.Done():
						return
					case <-s.wake:
					}
					if s.global.Swap(nil) != nil {
						taken.Add(1)
					}
				}
			}()
		}
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			want := taken.Load() + n
			publish(h, g, i)
			for taken.Load() < want {
				time.Sleep(10 * time.Microsecond)
			}
		}
		b.StopTimer()
		cancel()
		wg.Wait()
	})
}

func TestNaNRateIsSentAsZeroOnce(t *testing.T) {
	h := newHub(t, Options{Interval: 5 * time.Millisecond})
	s := h.register(Subscription{Gate: "g", Global: view("g", 1)})
	v := view("g", 2)
	v.AdmittedPerMinute = math.NaN()
	h.PublishGlobal(v)
	require.Eventually(t, func() bool { return h.Stats().GlobalsEncoded == 1 }, 5*time.Second, time.Millisecond)
	m := decode(t, s.global.Load().data)
	assert.EqualValues(t, 2, m.Waiting)
	assert.Zero(t, m.AdmittedPerMinute)
	require.Never(t, func() bool { return h.Stats().GlobalsEncoded != 1 }, 50*time.Millisecond, 5*time.Millisecond)
}
