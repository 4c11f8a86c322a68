package broadcast

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
)

// testServer serves h at /ws?gate=&session= over real loopback sockets; the
// initial global is view(gate, 1), and a session socket first gets its
// SessionView (waiting, position 100).
type testServer struct {
	*httptest.Server
	h    *Hub
	errs chan error // what each Serve returned
	// handoff makes the handler call Handoff instead of Serve.
	handoff atomic.Bool
}

func newTestServer(t testing.TB, h *Hub, wrap func(net.Listener) net.Listener) *testServer {
	t.Helper()
	return startTestServer(t, h, wrap, false)
}

// newTLSTestServer is newTestServer over TLS (httptest's certificate):
// the hijacked connection is a *tls.Conn, so the hub cannot use its raw
// socket writes and takes its fallback path. Dial it with tlsDial.
func newTLSTestServer(t testing.TB, h *Hub, wrap func(net.Listener) net.Listener) *testServer {
	t.Helper()
	return startTestServer(t, h, wrap, true)
}

// tlsDial is the DialOptions that trust ts's certificate.
func (ts *testServer) tlsDial() *websocket.DialOptions {
	return &websocket.DialOptions{HTTPClient: ts.Client()}
}

func startTestServer(t testing.TB, h *Hub, wrap func(net.Listener) net.Listener, useTLS bool) *testServer {
	t.Helper()
	ts := &testServer{h: h, errs: make(chan error, 10_000)}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		sub := Subscription{Gate: q.Get("gate"), SessionID: q.Get("session"), Client: q.Get("client"), Global: view(q.Get("gate"), 1)}
		if sub.SessionID != "" {
			sub.Session = &session.SessionView{GlobalView: sub.Global, Session: sub.SessionID,
				Status: session.StatusWaiting, Position: 100}
		}
		serve := h.Serve
		if ts.handoff.Load() {
			serve = h.Handoff
		}
		err := serve(w, r, sub)
		select {
		case ts.errs <- err:
		default:
		}
	}))
	if wrap != nil {
		srv.Listener = wrap(srv.Listener)
	}
	if useTLS {
		srv.StartTLS()
	} else {
		srv.Start()
	}
	t.Cleanup(srv.Close)
	ts.Server = srv
	return ts
}

func (ts *testServer) wsURL(query string) string {
	return "ws" + strings.TrimPrefix(ts.URL, "http") + "/ws?" + query
}

func (ts *testServer) dial(t testing.TB, query string, opts *websocket.DialOptions) *websocket.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, ts.wsURL(query), opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.CloseNow() })
	return c
}

// nextErr returns the next value a Serve returned.
func (ts *testServer) nextErr(t testing.TB) error {
	t.Helper()
	select {
	case err := <-ts.errs:
		return err
	case <-time.After(20 * time.Second):
		t.Fatal("Serve did not return")
		return nil
	}
}

func read(t testing.TB, c *websocket.Conn) msg {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	typ, b, err := c.Read(ctx)
	require.NoError(t, err)
	require.Equal(t, websocket.MessageText, typ)
	return decode(t, b)
}

// readClose reads until the socket ends and returns its close status and
// reason.
func readClose(t testing.TB, c *websocket.Conn) (websocket.StatusCode, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for {
		_, _, err := c.Read(ctx)
		if err != nil {
			var ce websocket.CloseError
			if errors.As(err, &ce) {
				return ce.Code, ce.Reason
			}
			return websocket.CloseStatus(err), err.Error()
		}
	}
}

// 10,000 real sockets would need 20,000 fds in this process (client and
// server ends), over the hard limit here, so 10,000 subscribers are covered
// in memory (TestFanout10000InMemorySubscribers) and 2,000 over sockets here.
func TestServe2000Sockets(t *testing.T) {
	const n = 2000
	h := newHub(t, Options{Interval: time.Hour})
	ts := newTestServer(t, h, nil)
	conns := make([]*websocket.Conn, n)
	var wg sync.WaitGroup
	var next atomic.Int64
	for w := 0; w < 32; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				c, _, err := websocket.Dial(ctx, ts.wsURL("gate=g"), nil)
				cancel()
				if !assert.NoError(t, err) {
					return
				}
				conns[i] = c
			}
		}()
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, c := range conns {
			if c != nil {
				_ = c.CloseNow()
			}
		}
	})
	require.False(t, t.Failed())
	require.Eventually(t, func() bool { return h.Stats().Subscribers == n }, 20*time.Second, 5*time.Millisecond)

	h.PublishGlobal(view("g", 2))
	var sent uint64 // messages the sockets read: one or two each
	for i, c := range conns {
		// The initial message is the subscription's view, or the newer
		// published one when the publish overtook the socket's first write
		// (the hub never sends an older view first).
		m := read(t, c)
		require.Equal(t, "global", m.Type)
		require.Contains(t, []int64{1, 2}, m.Waiting, "socket %d initial", i)
		sent++
		if m.Waiting == 1 {
			m = read(t, c)
			require.Equal(t, "global", m.Type)
			sent++
		}
		require.EqualValues(t, 2, m.Waiting, "socket %d", i)
	}
	st := h.Stats()
	assert.EqualValues(t, 1, st.GlobalsEncoded, "encoded once for %d sockets", n)
	// A write is counted once it returned, which may be just after the
	// client read it.
	// A socket whose first write the publish overtook was sent the newer
	// view alone: one message, not two.
	assert.Eventually(t, func() bool { return h.Stats().Sent >= sent }, 5*time.Second, 10*time.Millisecond,
		"every socket was sent the messages it read (%d)", sent)
}

func TestWireShape(t *testing.T) {
	h := newHub(t, Options{})
	ts := newTestServer(t, h, nil)
	c := ts.dial(t, "gate=g&session=abc", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	keys := func() map[string]any {
		_, b, err := c.Read(ctx)
		require.NoError(t, err)
		var m map[string]any
		require.NoError(t, json.Unmarshal(b, &m))
		return m
	}
	m := keys()
	assert.Equal(t, "session", m["type"])
	for _, k := range []string{"gate", "firstWaitingPosition", "lastWaitingPosition", "waiting", "active", "limit",
		"admittedPerMinute", "session", "status", "position"} {
		assert.Contains(t, m, k)
	}
	m = keys()
	assert.Equal(t, "global", m["type"])
	assert.Equal(t, "g", m["gate"])
	assert.Len(t, m, 8, "type + the GlobalView's 7 fields, flat: %v", m)
}

func TestBurstOf1000PublishesGivesAFewMessages(t *testing.T) {
	const interval = 200 * time.Millisecond
	h := newHub(t, Options{Interval: interval})
	ts := newTestServer(t, h, nil)
	c := ts.dial(t, "gate=g", nil)
	require.EqualValues(t, 1, read(t, c).Waiting)
	require.Eventually(t, func() bool { return h.Stats().Subscribers == 1 }, 5*time.Second, time.Millisecond)
	// The initial message may be counted after the client read it.
	require.Eventually(t, func() bool { return h.Stats().Sent >= 1 }, 5*time.Second, time.Millisecond)
	sent0 := h.Stats().Sent

	for i := int64(2); i <= 1001; i++ {
		h.PublishGlobal(view("g", i))
	}
	n := 0
	for {
		m := read(t, c)
		n++
		if m.Waiting == 1001 {
			break
		}
	}
	// Sent counts a write once it returned, which may be after the client
	// read it: wait for the count to catch up before taking it.
	require.Eventually(t, func() bool { return h.Stats().Sent-sent0 >= uint64(n) }, 5*time.Second, time.Millisecond)
	st := h.Stats()
	assert.LessOrEqual(t, n, 4, "1000 publishes gave %d messages", n)
	assert.LessOrEqual(t, st.GlobalsEncoded, uint64(4))
	assert.EqualValues(t, n, st.Sent-sent0)
	require.Never(t, func() bool { return h.Stats().Sent != st.Sent }, 2*interval, 10*time.Millisecond,
		"nothing more once the latest view went out")
}

func TestLeadingEdgeGoesOutAtOnce(t *testing.T) {
	const interval = 10 * time.Second
	h := New(Options{Interval: interval, Logger: quietLogger()})
	defer h.Close()
	ts := newTestServer(t, h, nil)
	c := ts.dial(t, "gate=g", nil)
	require.EqualValues(t, 1, read(t, c).Waiting)

	start := time.Now()
	h.PublishGlobal(view("g", 2))
	require.EqualValues(t, 2, read(t, c).Waiting)
	assert.Less(t, time.Since(start), interval, "a lone change does not wait for the window")

	// Within the window: held back for the trailing edge.
	h.PublishGlobal(view("g", 3))
	require.Never(t, func() bool { return h.Stats().GlobalsEncoded != 1 }, 300*time.Millisecond, 10*time.Millisecond)

	// Close does not wait for the pending window.
	closed := make(chan struct{})
	go func() { _ = h.Close(); close(closed) }()
	code, reason := readClose(t, c)
	assert.Equal(t, websocket.StatusGoingAway, code)
	assert.Equal(t, reasonShutdown, reason)
	select {
	case <-closed:
	case <-time.After(interval):
		t.Fatal("Close waited for the window")
	}
	assert.NoError(t, ts.nextErr(t))
}

// smallBuffers shrinks the server side's socket send buffer so that a client
// that never reads blocks the server's writes quickly.
type smallBuffers struct{ net.Listener }

func (l smallBuffers) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(4096)
	}
	return c, err
}

func TestClientThatNeverReadsIsClosedAndDoesNotDelayOthers(t *testing.T) {
	h := newHub(t, Options{Interval: time.Millisecond, WriteTimeout: 500 * time.Millisecond})
	ts := newTestServer(t, h, func(l net.Listener) net.Listener { return smallBuffers{l} })
	smallRead := &websocket.DialOptions{HTTPClient: &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetReadBuffer(4096)
			}
			return c, err
		}}}}
	slow := ts.dial(t, "gate=g", smallRead) // never read from
	_ = slow
	fast := ts.dial(t, "gate=g", nil)
	require.Eventually(t, func() bool { return h.Stats().Subscribers == 2 }, 5*time.Second, time.Millisecond)

	var fastGot, fastLast atomic.Int64
	go func() {
		for {
			_, b, err := fast.Read(context.Background())
			if err != nil {
				return
			}
			var m msg
			if json.Unmarshal(b, &m) == nil {
				fastLast.Store(m.Waiting)
				fastGot.Add(1)
			}
		}
	}()

	stop := make(chan struct{})
	var last atomic.Int64
	go func() {
		for i := int64(2); ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			v := view("g", i)
			v.AdmittedPerMinute = float64(i) * 1.1111111111
			h.PublishGlobal(v)
			last.Store(i)
			time.Sleep(200 * time.Microsecond)
		}
	}()
	require.Eventually(t, func() bool { return h.Stats().SlowClosed == 1 }, 30*time.Second, 5*time.Millisecond,
		"the never-reading client is closed after WriteTimeout")
	close(stop)
	assert.ErrorIs(t, ts.nextErr(t), ErrSlowClient)
	require.Eventually(t, func() bool { return fastLast.Load() == last.Load() }, 10*time.Second, time.Millisecond,
		"the reading client got the latest view")
	assert.Greater(t, fastGot.Load(), int64(10))
	assert.EqualValues(t, 1, h.Stats().Subscribers)
}

func TestPromotionReachesOnlyItsSession(t *testing.T) {
	h := newHub(t, Options{Interval: time.Millisecond})
	ts := newTestServer(t, h, nil)
	a1 := ts.dial(t, "gate=g&session=a", nil)
	a2 := ts.dial(t, "gate=g&session=a", nil) // a second tab
	b := ts.dial(t, "gate=g&session=b", nil)
	other := ts.dial(t, "gate=other&session=a", nil) // same id, other gate
	anon := ts.dial(t, "gate=g", nil)
	for _, c := range []*websocket.Conn{a1, a2, b, other} {
		m := read(t, c)
		require.Equal(t, "session", m.Type)
		require.Equal(t, session.StatusWaiting, m.Status)
		require.Equal(t, "global", read(t, c).Type)
	}
	require.Equal(t, "global", read(t, anon).Type)
	require.Eventually(t, func() bool { return h.Stats().Subscribers == 5 }, 5*time.Second, time.Millisecond)

	h.PublishSession(session.SessionView{GlobalView: view("g", 7), Session: "a", Status: session.StatusActive, Position: 100})
	h.PublishGlobal(view("g", 7))
	h.PublishGlobal(view("other", 7))
	for _, c := range []*websocket.Conn{a1, a2} {
		m := read(t, c)
		assert.Equal(t, "session", m.Type)
		assert.Equal(t, "a", m.Session)
		assert.Equal(t, session.StatusActive, m.Status)
		assert.Equal(t, "global", read(t, c).Type)
	}
	for _, c := range []*websocket.Conn{b, other, anon} {
		m := read(t, c)
		assert.Equal(t, "global", m.Type, "no session message for %+v", m)
		assert.EqualValues(t, 7, m.Waiting)
	}
}

func TestClientDataMessageClosesSocket(t *testing.T) {
	h := newHub(t, Options{})
	ts := newTestServer(t, h, nil)
	for _, tc := range []struct {
		name string
		typ  websocket.MessageType
		size int
	}{
		{"small text", websocket.MessageText, 2},
		{"over ReadLimit", websocket.MessageBinary, DefaultReadLimit + 1000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := ts.dial(t, "gate=g", nil)
			read(t, c)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			require.NoError(t, c.Write(ctx, tc.typ, make([]byte, tc.size)))
			code, reason := readClose(t, c)
			assert.Equal(t, websocket.StatusPolicyViolation, code)
			assert.Equal(t, reasonClientMessage, reason)
			assert.ErrorIs(t, ts.nextErr(t), ErrClientMessage)
		})
	}
}

func TestCrossOriginHandshake(t *testing.T) {
	dialOrigin := func(ts *testServer, origin string) (*http.Response, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, resp, err := websocket.Dial(ctx, ts.wsURL("gate=g"), &websocket.DialOptions{
			HTTPHeader: http.Header{"Origin": {origin}}})
		if c != nil {
			_ = c.CloseNow()
		}
		return resp, err
	}

	ts := newTestServer(t, newHub(t, Options{}), nil)
	resp, err := dialOrigin(ts, "http://evil.example")
	require.Error(t, err)
	require.NotNil(t, resp)
	assert.Equal(t, http.StatusForbidden, resp.StatusCode)
	_, err = dialOrigin(ts, ts.URL) // same host
	assert.NoError(t, err)

	ts = newTestServer(t, newHub(t, Options{OriginPatterns: []string{"evil.example"}}), nil)
	_, err = dialOrigin(ts, "http://evil.example")
	assert.NoError(t, err)
	resp, err = dialOrigin(ts, "http://other.example")
	require.Error(t, err)
	assert.Equal(t, http.StatusForbidden, resp.StatusCode)
}

func TestMaxConnections(t *testing.T) {
	h := newHub(t, Options{MaxConnections: 2})
	ts := newTestServer(t, h, nil)
	read(t, ts.dial(t, "gate=g", nil))
	read(t, ts.dial(t, "gate=g", nil))
	c := ts.dial(t, "gate=g", nil)
	code, reason := readClose(t, c)
	assert.Equal(t, websocket.StatusTryAgainLater, code)
	assert.Equal(t, reasonTooMany, reason)
	assert.ErrorIs(t, ts.nextErr(t), ErrTooManyConnections)
	assert.EqualValues(t, 1, h.Stats().Rejected)
	assert.EqualValues(t, 2, h.Stats().Subscribers)
}

func TestCloseGoingAwayThen503(t *testing.T) {
	h := New(Options{Logger: quietLogger()})
	ts := newTestServer(t, h, nil)
	var conns []*websocket.Conn
	for i := 0; i < 3; i++ {
		c := ts.dial(t, "gate=g&session=s", nil)
		read(t, c)
		conns = append(conns, c)
	}
	done := make(chan struct{})
	go func() { _ = h.Close(); close(done) }()
	for _, c := range conns {
		code, reason := readClose(t, c)
		assert.Equal(t, websocket.StatusGoingAway, code)
		assert.Equal(t, reasonShutdown, reason)
	}
	<-done
	require.NoError(t, h.Close())
	for range conns {
		assert.NoError(t, ts.nextErr(t))
	}
	assert.Zero(t, h.Stats().Subscribers)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, resp, err := websocket.Dial(ctx, ts.wsURL("gate=g"), nil)
	require.Error(t, err)
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	assert.ErrorIs(t, ts.nextErr(t), ErrClosed)
}

func TestInvalidSubscription(t *testing.T) {
	ts := newTestServer(t, newHub(t, Options{}), nil)
	for _, q := range []string{"gate=", "gate=bad%20gate", "gate=g&session=a.b"} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, resp, err := websocket.Dial(ctx, ts.wsURL(q), nil)
		cancel()
		require.Error(t, err, q)
		assert.Equal(t, http.StatusBadRequest, resp.StatusCode, q)
		assert.ErrorIs(t, ts.nextErr(t), session.ErrInvalidArgument, q)
	}
}

func TestPingsKeepReadingClientsAndDropSilentOnes(t *testing.T) {
	h := newHub(t, Options{PingInterval: 20 * time.Millisecond, WriteTimeout: 300 * time.Millisecond})
	ts := newTestServer(t, h, nil)
	alive := ts.dial(t, "gate=g", nil)
	silent := ts.dial(t, "gate=g", nil) // never reads, so never answers a ping
	_ = silent
	go func() {
		for {
			if _, _, err := alive.Read(context.Background()); err != nil {
				return
			}
		}
	}()
	assert.ErrorIs(t, ts.nextErr(t), ErrSlowClient)
	require.Never(t, func() bool { return h.Stats().Subscribers != 1 }, 200*time.Millisecond, 10*time.Millisecond,
		"the reading client answers pings and stays")
}

func TestHandoff(t *testing.T) {
	const n = 200
	h := New(Options{Interval: time.Millisecond, MaxConnections: n + 2, Logger: quietLogger()})
	ts := newTestServer(t, h, nil)
	ts.handoff.Store(true)
	conns := make([]*websocket.Conn, n)
	for i := range conns {
		conns[i] = ts.dial(t, "gate=g", nil)
		require.EqualValues(t, 1, read(t, conns[i]).Waiting)
		require.NoError(t, ts.nextErr(t), "Handoff returns once the socket is up")
	}
	a := ts.dial(t, "gate=g&session=a", nil)
	require.Equal(t, "session", read(t, a).Type)
	require.Equal(t, "global", read(t, a).Type)
	require.NoError(t, ts.nextErr(t))

	h.PublishSession(session.SessionView{GlobalView: view("g", 2), Session: "a", Status: session.StatusActive, Position: 100})
	h.PublishGlobal(view("g", 2))
	m := read(t, a)
	assert.Equal(t, "session", m.Type)
	assert.Equal(t, session.StatusActive, m.Status)
	for _, c := range append(conns, a) {
		require.EqualValues(t, 2, read(t, c).Waiting)
	}

	// A client that sends data is still closed with its reason.
	bad := ts.dial(t, "gate=g", nil)
	read(t, bad)
	require.NoError(t, ts.nextErr(t))
	require.NoError(t, bad.Write(context.Background(), websocket.MessageText, []byte("hi")))
	code, _ := readClose(t, bad)
	assert.Equal(t, websocket.StatusPolicyViolation, code)
	require.Eventually(t, func() bool { return h.Stats().Subscribers == n+1 }, 10*time.Second, time.Millisecond)

	// Refusals are still returned.
	c := ts.dial(t, "gate=g", nil)
	read(t, c)
	require.NoError(t, ts.nextErr(t))
	c2 := ts.dial(t, "gate=g", nil)
	code, _ = readClose(t, c2)
	assert.Equal(t, websocket.StatusTryAgainLater, code)
	assert.ErrorIs(t, ts.nextErr(t), ErrTooManyConnections)

	closed := make(chan struct{})
	go func() { _ = h.Close(); close(closed) }() // waits for the handed-off sockets' close handshakes
	for _, c := range append(conns, a, c) {
		code, _ := readClose(t, c)
		assert.Equal(t, websocket.StatusGoingAway, code)
	}
	<-closed
	assert.Zero(t, h.Stats().Subscribers)
}

// A handed-off socket keeps nothing of the upgrade's request, not even
// through Subscription.CurrentSession, whose closure holds it.
func TestHandoffKeepsNothingOfTheRequest(t *testing.T) {
	h := newHub(t, Options{})
	collected := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sub := Subscription{Gate: "g", SessionID: r.URL.Query().Get("session"), Client: r.RemoteAddr, Global: view("g", 1)}
		sub.CurrentSession = func() *session.SessionView {
			return &session.SessionView{GlobalView: sub.Global, Session: r.URL.Query().Get("session"), Status: session.StatusWaiting}
		}
		runtime.AddCleanup(r, func(ch chan struct{}) { close(ch) }, collected)
		require.NoError(t, h.Handoff(w, r, sub))
	}))
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http")+"/ws?session=abc", nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.CloseNow() })
	require.Equal(t, "session", read(t, c).Type)
	require.Equal(t, "global", read(t, c).Type)

	deadline := time.Now().Add(10 * time.Second)
	for {
		runtime.GC()
		select {
		case <-collected:
			h.PublishGlobal(view("g", 2))
			assert.EqualValues(t, 2, read(t, c).Waiting, "the socket is still served")
			return
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("the request is still reachable while the socket is open")
		}
	}
}
