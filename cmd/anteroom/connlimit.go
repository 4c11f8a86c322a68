package main

import (
	"net"
	"net/http"
	"net/netip"
	"sync"
)

// connLimiter caps the TCP connections one client address holds open, so
// that one client cannot take every file descriptor of the process (and
// with them /healthz and everyone else's requests).
//
// A new connection over the cap does not simply lose: the client's oldest
// connection that is doing nothing (accepted but no request read yet, or
// idle between keep-alive requests) is closed to make room for it. Only when
// all of the client's connections are busy (a request in progress, a
// websocket) is the new one closed at once. So a client that parks idle
// connections only pushes out its own, a health check from the same address
// still gets through, and the process never holds more than the cap per
// address.
//
// Addresses are IPv4 addresses and IPv6 /64 networks (one subscriber's
// allocation). Peers among exempt (the trusted proxies, which carry many
// clients' connections) are not capped.
type connLimiter struct {
	max    int
	exempt []*net.IPNet

	mu     sync.Mutex
	byAddr map[netip.Addr][]*limitedConn // oldest first
}

func newConnLimiter(max int, exempt []*net.IPNet) *connLimiter {
	return &connLimiter{max: max, exempt: exempt, byAddr: map[netip.Addr][]*limitedConn{}}
}

// Listener wraps ln so that Accept applies the cap.
func (l *connLimiter) Listener(ln net.Listener) net.Listener {
	return &limitListener{Listener: ln, l: l}
}

// ConnState is the http.Server hook through which the limiter learns which
// connections are idle.
func (l *connLimiter) ConnState(c net.Conn, s http.ConnState) {
	lc, ok := c.(*limitedConn)
	if !ok {
		return
	}
	l.mu.Lock()
	lc.state = s
	l.mu.Unlock()
}

// open reports how many connections addr holds (for tests).
func (l *connLimiter) open(addr netip.Addr) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.byAddr[clientKey(addr)])
}

// idle reports how many of addr's connections are waiting for a request
// (accepted, or between keep-alive requests): the ones a newcomer may evict
// (for tests).
func (l *connLimiter) idle(addr netip.Addr) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, c := range l.byAddr[clientKey(addr)] {
		if c.state == http.StateNew || c.state == http.StateIdle {
			n++
		}
	}
	return n
}

type limitListener struct {
	net.Listener
	l *connLimiter
}

// Accept returns the next connection the cap lets in; one it refuses is
// closed here and never reaches the server.
func (ll *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := ll.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if lc := ll.l.admit(c); lc != nil {
			return lc, nil
		}
		_ = c.Close()
	}
}

// admit tracks c, making room by closing the client's oldest idle
// connection when it is at the cap. It returns nil when c is refused.
func (l *connLimiter) admit(c net.Conn) net.Conn {
	ap, err := netip.ParseAddrPort(c.RemoteAddr().String())
	if err != nil || l.isExempt(ap.Addr()) {
		return c
	}
	key := clientKey(ap.Addr())
	lc := &limitedConn{Conn: c, l: l, key: key, state: http.StateNew}
	var evict *limitedConn
	l.mu.Lock()
	conns := l.byAddr[key]
	if len(conns) >= l.max {
		for i, o := range conns {
			if o.state == http.StateNew || o.state == http.StateIdle {
				evict = o
				conns = append(conns[:i:i], conns[i+1:]...)
				break
			}
		}
		if evict == nil {
			l.mu.Unlock()
			return nil
		}
		evict.untracked = true
	}
	l.byAddr[key] = append(conns, lc)
	l.mu.Unlock()
	if evict != nil {
		_ = evict.Conn.Close() // the server's goroutine on it ends with a read error
	}
	return lc
}

func (l *connLimiter) isExempt(a netip.Addr) bool {
	ip := net.IP(a.Unmap().AsSlice())
	for _, n := range l.exempt {
		if n.Contains(ip) {
			return true
		}
	}
	return false
}

// clientKey is the address a cap applies to: an IPv4 address, or the /64
// of an IPv6 one.
func clientKey(a netip.Addr) netip.Addr {
	a = a.Unmap().WithZone("")
	if a.Is6() {
		p, _ := a.Prefix(64)
		return p.Addr()
	}
	return a
}

// limitedConn is a tracked connection; closing it (by the server, a
// hijacker such as the websocket hub, or the limiter) frees its place.
type limitedConn struct {
	net.Conn
	l     *connLimiter
	key   netip.Addr
	once  sync.Once
	state http.ConnState // guarded by l.mu
	// untracked: already removed from byAddr (evicted); guarded by l.mu
	untracked bool
}

func (c *limitedConn) Close() error {
	c.once.Do(c.release)
	return c.Conn.Close()
}

func (c *limitedConn) release() {
	l := c.l
	l.mu.Lock()
	defer l.mu.Unlock()
	if c.untracked {
		return
	}
	conns := l.byAddr[c.key]
	for i, o := range conns {
		if o == c {
			conns = append(conns[:i:i], conns[i+1:]...)
			break
		}
	}
	if len(conns) == 0 {
		delete(l.byAddr, c.key)
	} else {
		l.byAddr[c.key] = conns
	}
}
