package broadcast

import (
	"errors"
	"net"
	"syscall"
	"time"

	"github.com/anteroomhq/anteroom/broadcast/wsframe"
)

// link is the byte stream under a socket. Every byte the hub or the
// websocket library writes to a socket goes through its subscriber's write,
// whole frames at a time, so frames never interleave.
type link interface {
	// tryWrite writes as much of p as the socket takes now, without
	// waiting. When the socket cannot take it all it returns errWouldBlock
	// and how much it wrote.
	tryWrite(p []byte) (int, error)
	// writeBy writes all of p, waiting at most until deadline (an error
	// wrapping os.ErrDeadlineExceeded after it).
	writeBy(p []byte, deadline time.Time) error
	// clearDeadline removes the deadline writeBy set.
	clearDeadline()
	// close closes the stream at once; the socket's reader then ends.
	close()
	// boundReads bounds the reads of the close handshake that follows
	// (closeHandshakeTimeout).
	boundReads()
}

var errWouldBlock = errors.New("broadcast: socket would block")

// netLink is a link over a hijacked net.Conn. When the connection is a
// plain socket (syscall.Conn), tryWrite is one non-blocking write(2) on its
// descriptor, with no timer, context or goroutine; otherwise (TLS, say)
// tryWrite never writes and every write waits in writeBy.
type netLink struct {
	nc net.Conn
	rc syscall.RawConn // nil: not a plain socket

	// tryWrite's arguments and results, for writeFD; guarded by the
	// subscriber's wmu, like every call on a link.
	p   []byte
	n   int
	err error
	fn  func(fd uintptr) bool // l.writeFD, bound once
}

func newNetLink(nc net.Conn) *netLink {
	l := &netLink{nc: nc}
	if sc, ok := nc.(syscall.Conn); ok && rawWriteSupported {
		if rc, err := sc.SyscallConn(); err == nil {
			l.rc = rc
			l.fn = l.writeFD
		}
	}
	return l
}

func (l *netLink) tryWrite(p []byte) (int, error) {
	if l.rc == nil {
		return 0, errWouldBlock
	}
	l.p, l.n, l.err = p, 0, nil
	err := l.rc.Write(l.fn)
	n := l.n
	if err == nil {
		err = l.err
	}
	l.p, l.err = nil, nil
	return n, err
}

// writeFD runs inside RawConn.Write: it never asks to wait.
func (l *netLink) writeFD(fd uintptr) bool {
	for l.n < len(l.p) {
		m, err := rawWrite(fd, l.p[l.n:])
		if m > 0 {
			l.n += m
		}
		switch {
		case err == nil && m > 0:
		case errors.Is(err, syscall.EINTR):
		case errors.Is(err, syscall.EAGAIN):
			l.err = errWouldBlock
			return true
		case err != nil:
			l.err = err
			return true
		default:
			l.err = errWouldBlock // wrote nothing and no error: let the drain wait
			return true
		}
	}
	return true
}

func (l *netLink) writeBy(p []byte, deadline time.Time) error {
	if err := l.nc.SetWriteDeadline(deadline); err != nil {
		return err
	}
	_, err := l.nc.Write(p)
	return err
}

func (l *netLink) clearDeadline() { _ = l.nc.SetWriteDeadline(time.Time{}) }

func (l *netLink) close() { _ = l.nc.Close() }

// textFrame is payload as one unmasked, final websocket text frame: what a
// server sends, the same bytes for every socket.
func textFrame(payload []byte) []byte { return wsframe.Text(payload) }

// pingFrame is an empty ping; the client's pong is seen by OnPongReceived.
var pingFrame = wsframe.Append(nil, wsframe.OpPing, nil)

// closeHandshakeTimeout bounds the reads of the library's close handshake.
// The library bounds its reads of frame headers (5 s) but not its discard of
// the rest of a data message's announced payload, which would otherwise wait
// for ever on a client that announced a long message and went quiet.
var closeHandshakeTimeout = 5 * time.Second // a variable for the tests

func (l *netLink) boundReads() { _ = l.nc.SetReadDeadline(time.Now().Add(closeHandshakeTimeout)) }
