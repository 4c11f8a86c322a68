package main

import (
	"bufio"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// limitedServer serves h on loopback behind a connLimiter of max per address.
func limitedServer(t *testing.T, max int, exempt []*net.IPNet, h http.Handler) (string, *connLimiter) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	l := newConnLimiter(max, exempt)
	srv := newHTTPServer(h, slog.New(slog.DiscardHandler), defaultTimeouts)
	srv.ConnState = l.ConnState
	go func() { _ = srv.Serve(l.Listener(ln)) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String(), l
}

var loopback = netip.MustParseAddr("127.0.0.1")

// closedByServer reports whether the server closed c: a read ends with EOF
// (or a reset) rather than waiting.
func closedByServer(t *testing.T, c net.Conn) bool {
	t.Helper()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	return !(errors.As(err, &ne) && ne.Timeout())
}

// stillOpen reports whether c stays open (no EOF) for a moment.
func stillOpen(t *testing.T, c net.Conn) bool {
	t.Helper()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(100*time.Millisecond)))
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for range 500 {
		if cond() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("gave up waiting for %s", what)
}

func dial(t *testing.T, addr string) net.Conn {
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func get(t *testing.T, c net.Conn, path string) string {
	t.Helper()
	_, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: x\r\n\r\n")
	require.NoError(t, err)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}

// Idle connections make room for a new one, oldest first: the client that
// parks them pushes out only its own, and the new connection is served.
func TestConnLimiterClosesTheOldestIdleConnectionForANewOne(t *testing.T) {
	addr, l := limitedServer(t, 3, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") }))
	var idle []net.Conn
	for range 3 {
		idle = append(idle, dial(t, addr))
	}
	assert.Equal(t, "ok", get(t, idle[2], "/"), "the newest of them has served a request and is idle now")
	// The client reads the answer before the server's goroutine marks the
	// connection idle again; under load that can lag, so wait for it.
	waitFor(t, "three idle tracked connections", func() bool { return l.open(loopback) == 3 && l.idle(loopback) == 3 })

	for i := range 3 { // each newcomer evicts the oldest idle one
		c := dial(t, addr)
		assert.Equal(t, "ok", get(t, c, "/healthz"), "newcomer %d is served", i)
		assert.True(t, closedByServer(t, idle[i]), "the oldest idle connection (%d) was closed", i)
		assert.LessOrEqual(t, l.open(loopback), 3)
		waitFor(t, "the newcomer to be idle again", func() bool { return l.idle(loopback) == l.open(loopback) })
	}
}

// When every connection of the client is busy, the new one is closed at
// once; when they finish, the client is served again.
func TestConnLimiterRefusesWhenAllConnectionsAreBusy(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{}, 3)
	addr, l := limitedServer(t, 3, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/busy" {
			started <- struct{}{}
			<-release
		}
		_, _ = io.WriteString(w, "ok")
	}))
	busy := make([]net.Conn, 3)
	for i := range busy {
		busy[i] = dial(t, addr)
		_, err := io.WriteString(busy[i], "GET /busy HTTP/1.1\r\nHost: x\r\n\r\n")
		require.NoError(t, err)
		<-started
	}
	c := dial(t, addr)
	assert.True(t, closedByServer(t, c), "a fourth connection is refused")
	for _, b := range busy {
		assert.True(t, stillOpen(t, b), "busy connections are never evicted")
	}
	assert.Equal(t, 3, l.open(loopback))

	close(release)
	for _, b := range busy {
		require.NoError(t, b.SetReadDeadline(time.Now().Add(10*time.Second)))
		resp, err := http.ReadResponse(bufio.NewReader(b), nil)
		require.NoError(t, err)
		_ = resp.Body.Close()
	}
	assert.Equal(t, "ok", get(t, dial(t, addr), "/"), "served again once they are idle")
}

// Trusted proxies carry many clients' connections: they are not capped.
func TestConnLimiterExemptsTrustedProxies(t *testing.T) {
	_, lo, err := net.ParseCIDR("127.0.0.0/8")
	require.NoError(t, err)
	addr, l := limitedServer(t, 2, []*net.IPNet{lo}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") }))
	var conns []net.Conn
	for range 6 {
		conns = append(conns, dial(t, addr))
	}
	for _, c := range conns {
		assert.Equal(t, "ok", get(t, c, "/"))
	}
	assert.Zero(t, l.open(loopback), "not tracked")
}

func TestConnLimiterKeysIPv6ByPrefix(t *testing.T) {
	for in, want := range map[string]string{
		"2001:db8:1:2:aaaa::1":      "2001:db8:1:2::",
		"2001:db8:1:2:ffff::9%eth0": "2001:db8:1:2::",
		"::ffff:192.0.2.7":          "192.0.2.7",
		"192.0.2.7":                 "192.0.2.7",
	} {
		assert.Equal(t, want, clientKey(netip.MustParseAddr(in)).String(), in)
	}
}
