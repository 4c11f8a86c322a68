package gate_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/gate"
	"github.com/anteroomhq/anteroom/gate/gatetest"
	"github.com/anteroomhq/anteroom/session"
)

// A client that asks for an answer and never reads it leaves the server's
// writes blocked once the kernel's buffers between them are full. On
// loopback the kernel grows the server's send buffer to megabytes, which
// would take any answer of the sidecar's whole; across a real network a
// reader that keeps its window shut leaves the sender a few kilobytes. The
// slow-reader tests serve the sidecar on a listener whose connections get
// such a small send buffer, and read through sockets with a small receive
// buffer, so that what the server holds for a reader that stopped is in
// the server's memory, where the tests can see it.

// wanServer serves h on loopback as across a network: each accepted
// connection gets a small send buffer. closed counts the connections the
// server has closed.
type wanServer struct {
	addr   string
	closed atomic.Int64
}

func serveWAN(t *testing.T, h http.Handler) *wanServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	w := &wanServer{addr: ln.Addr().String()}
	srv := &http.Server{Handler: h, ConnState: func(_ net.Conn, s http.ConnState) {
		if s == http.StateClosed || s == http.StateHijacked {
			w.closed.Add(1)
		}
	}}
	go func() { _ = srv.Serve(smallSendBuffers{ln}) }()
	t.Cleanup(func() { _ = srv.Close() })
	return w
}

type smallSendBuffers struct{ net.Listener }

func (l smallSendBuffers) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(4 << 10)
	}
	return c, err
}

// slowReader sends request on a new connection with a small receive
// buffer and reads the first bytes of the answer (so the server is
// writing it), then nothing more.
func (w *wanServer) slowReader(t *testing.T, request string) net.Conn {
	t.Helper()
	if smallReceiveBuffer == nil {
		t.Skip("a receive buffer set before connecting is set here on unix systems only")
	}
	d := net.Dialer{Control: smallReceiveBuffer}
	c, err := d.Dial("tcp", w.addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	_, err = io.WriteString(c, request)
	require.NoError(t, err)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
	head := make([]byte, len("HTTP/1.1 200"))
	_, err = io.ReadFull(c, head)
	require.NoError(t, err)
	require.Equal(t, "HTTP/1.1 200", string(head))
	return c
}

// The full answer of GET /api/events carries a started event's whole
// pre-queue. A client that asks for it and stops reading must not make
// the server hold a copy of it: the heap per such reader is compared with
// that of a reader of the snippet's small answer, in the same run.
func TestASlowReaderOfTheFullEventsAnswerHoldsNoCopyOfIt(t *testing.T) {
	const readers = 16
	sc := startedLottery(t, 50_000, gate.RateLimitOptions{})
	srv := serveWAN(t, sc.Handler)
	var size int
	for _, q := range []string{"", "?pretty"} { // each answer once before the count
		code, body := httpDo(t, http.MethodGet, sc.URL+base+"/api/events"+q, "", "")
		require.Equal(t, http.StatusOK, code)
		size = max(size, len(body))
	}
	heldPerReader := func(query string) float64 {
		t.Helper()
		before := liveHeap()
		conns := make([]net.Conn, readers)
		for i := range conns {
			conns[i] = srv.slowReader(t, "GET "+base+"/api/events"+query+" HTTP/1.1\r\nHost: x\r\n\r\n")
		}
		after := liveHeap()
		closed := srv.closed.Load()
		for _, c := range conns {
			_ = c.Close()
		}
		require.Eventually(t, func() bool { return srv.closed.Load() >= closed+readers }, 10*time.Second, 5*time.Millisecond)
		return (float64(after) - float64(before)) / readers
	}
	baseline := heldPerReader("?positions=0")
	for _, q := range []string{"", "?pretty"} {
		held := heldPerReader(q)
		t.Logf("heap per stalled reader of /api/events%s (answer %d B): %.0f B; of the snippet's answer: %.0f B", q, size, held, baseline)
		assert.Less(t, held-baseline, float64(size)/8, "a reader of /api/events%s that stopped holds a copy of the pre-queue", q)
	}
}

// A client that asks for an answer and stops reading it is cut off once
// WriteTimeout passes (the server closes the connection), whichever
// answer it is: the sidecar's own, small or large, or the app's through
// the proxy. Before, the write waited for as long as the connection lived.
func TestAReaderThatStopsIsCutOff(t *testing.T) {
	const timeout = 300 * time.Millisecond
	withTimeout := func(o *gate.Options) { o.WriteTimeout = timeout }
	big := strings.Repeat("x", 1<<20)
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, big) }))
	t.Cleanup(app.Close)
	upstream, err := url.Parse(app.URL)
	require.NoError(t, err)
	for _, tc := range []struct {
		name  string
		start func(t *testing.T) (*gatetest.Sidecar, string)
	}{
		{"the snippet", func(t *testing.T) (*gatetest.Sidecar, string) {
			return gatetest.StartSidecar(t, gatetest.Options{Gates: []session.GateConfig{gatetest.Gate("default", 1)}, Gate: withTimeout}),
				"GET " + base + "/anteroom.js HTTP/1.1\r\nHost: x\r\n\r\n"
		}},
		{"the full events answer", func(t *testing.T) (*gatetest.Sidecar, string) {
			return startedLotteryWith(t, 20_000, withTimeout), "GET " + base + "/api/events HTTP/1.1\r\nHost: x\r\n\r\n"
		}},
		{"the app's answer through the proxy", func(t *testing.T) (*gatetest.Sidecar, string) {
			sc := gatetest.StartSidecar(t, gatetest.Options{Gates: []session.GateConfig{gatetest.Gate("default", 1)}, Gate: func(o *gate.Options) {
				withTimeout(o)
				o.Proxy = gate.ProxyOptions{Upstream: upstream}
			}})
			_, err := sc.Waitlist.Join(t.Context(), "default", "admitted")
			require.NoError(t, err)
			return sc, "GET /big HTTP/1.1\r\nHost: x\r\nCookie: " + gate.CookieName + "=" + sc.Token(t, "admitted") + "\r\n\r\n"
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc, request := tc.start(t)
			srv := serveWAN(t, sc.Handler)
			srv.slowReader(t, request)
			require.Eventually(t, func() bool { return srv.closed.Load() == 1 }, 10*time.Second, 5*time.Millisecond,
				"a client that stopped reading is still served")
		})
	}
}

// What is bounded is the time to take each piece, not the whole answer: a
// client that reads slowly but steadily gets all of a large answer of the
// sidecar's own, and all of the app's answer when the app pauses longer
// than WriteTimeout, before its headers and in the middle of its body.
func TestASlowButSteadyReaderIsServed(t *testing.T) {
	const timeout = time.Second
	withTimeout := func(o *gate.Options) { o.WriteTimeout = timeout }

	t.Run("the full events answer", func(t *testing.T) {
		sc := startedLotteryWith(t, 50_000, withTimeout)
		code, want := httpDo(t, http.MethodGet, sc.URL+base+"/api/events", "", "")
		require.Equal(t, http.StatusOK, code)
		srv := serveWAN(t, sc.Handler)
		c := srv.slowReader(t, "GET "+base+"/api/events HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
		got, took := readSlowly(t, c, 25*time.Millisecond) // about 160 KB/s: a piece in a tenth of the timeout
		_, body, ok := strings.Cut(string(got), "\r\n\r\n")
		require.True(t, ok)
		require.Greater(t, took, 2*timeout, "the test reads too fast to show anything")
		assert.Equal(t, string(want), body, "read over %v", took)
	})

	t.Run("a page of the admin history", func(t *testing.T) {
		sc := gatetest.StartSidecar(t, gatetest.Options{Gates: []session.GateConfig{gatetest.Gate("default", 1)}, Gate: func(o *gate.Options) {
			withTimeout(o)
			o.AdminToken = adminToken
		}})
		for i := range session.MaxHistoryLimit {
			// Long ids make a page of about 150 KB in JSON and in CSV.
			_, err := sc.Waitlist.Join(t.Context(), "default", fmt.Sprintf("waiter-%04d-%s", i, strings.Repeat("x", 100)))
			require.NoError(t, err)
		}
		for _, q := range []string{"", "&format=csv"} {
			path := base + "/admin/api/gates/default/history?limit=" + strconv.Itoa(session.MaxHistoryLimit) + q
			req, err := http.NewRequest(http.MethodGet, sc.URL+path, nil)
			require.NoError(t, err)
			req.Header.Set("Authorization", "Bearer "+adminToken)
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			want, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			_ = resp.Body.Close()
			require.Equal(t, http.StatusOK, resp.StatusCode, "%s", want)
			srv := serveWAN(t, sc.Handler)
			c := srv.slowReader(t, "GET "+path+" HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "+adminToken+"\r\nConnection: close\r\n\r\n")
			got, took := readSlowly(t, c, 25*time.Millisecond) // about 80 KB/s through the small receive buffer: a piece in a fifth of the timeout
			_, body, ok := strings.Cut(string(got), "\r\n\r\n")
			require.True(t, ok)
			require.Equal(t, len(want), len(body), "the answer was cut off after %v", took)
			assert.Equal(t, string(want), body, "read over %v", took)
			require.Greater(t, took, timeout+timeout/2, "the test reads too fast to show anything (%d bytes)", len(want))
		}
	})

	t.Run("the app's answer with pauses", func(t *testing.T) {
		app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			time.Sleep(2 * timeout)
			_, _ = io.WriteString(w, "first\n")
			w.(http.Flusher).Flush()
			time.Sleep(2 * timeout)
			_, _ = io.WriteString(w, "second\n")
		}))
		t.Cleanup(app.Close)
		upstream, err := url.Parse(app.URL)
		require.NoError(t, err)
		sc := gatetest.StartSidecar(t, gatetest.Options{Gates: []session.GateConfig{gatetest.Gate("default", 1)}, Gate: func(o *gate.Options) {
			withTimeout(o)
			o.Proxy = gate.ProxyOptions{Upstream: upstream}
		}})
		_, err = sc.Waitlist.Join(t.Context(), "default", "admitted")
		require.NoError(t, err)
		code, body := httpDo(t, http.MethodGet, sc.URL+"/stream", sc.Token(t, "admitted"), "")
		assert.Equal(t, http.StatusOK, code)
		assert.Equal(t, "first\nsecond\n", string(body))
	})
}

// readSlowly reads c to its end, 4 KB at a time with a pause after each,
// and returns what it read and how long that took.
func readSlowly(t *testing.T, c net.Conn, pause time.Duration) ([]byte, time.Duration) {
	t.Helper()
	var got []byte
	buf := make([]byte, 4<<10)
	began := time.Now()
	for {
		require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
		n, err := c.Read(buf)
		got = append(got, buf[:n]...)
		if err != nil {
			require.ErrorIs(t, err, io.EOF)
			return got, time.Since(began)
		}
		time.Sleep(pause)
	}
}

// Sockets are not answers: one opened on a sidecar with a short
// WriteTimeout still gets the gate's changes long after it (net/http
// clears the deadline set for the upgrade's answer when the hub takes the
// connection).
func TestSocketsOutliveTheWriteTimeout(t *testing.T) {
	const timeout = 200 * time.Millisecond
	h := newHarnessWith(t, 1, func(o *gate.Options) { o.WriteTimeout = timeout })
	conn := dialWith(t, h, "?gate=default", nil)
	require.Equal(t, "global", read(t, conn).Type)
	time.Sleep(3 * timeout) // network deadlines run on the real clock
	h.join(t, newClient(t))
	m := read(t, conn)
	assert.Equal(t, "global", m.Type)
	assert.EqualValues(t, 1, m.Active, "the socket still gets the gate's changes")
}
