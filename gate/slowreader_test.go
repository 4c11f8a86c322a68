package gate_test

import (
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/gate"
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
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 2<<10)
		}); err != nil {
			return err
		}
		return serr
	}}
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
