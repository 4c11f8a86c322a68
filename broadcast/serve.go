package broadcast

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/anteroomhq/anteroom/broadcast/wsframe"
	"github.com/anteroomhq/anteroom/gate/wire"
	"github.com/anteroomhq/anteroom/session"
)

// Subscription says which messages a socket receives and what it is sent
// first.
type Subscription struct {
	// Gate is the gate whose global messages the socket receives. The caller
	// must have checked that it is a configured gate: the hub keeps a little
	// state (and one goroutine) for every gate name it is given.
	Gate string
	// SessionID, when not empty, also subscribes the socket to the session
	// messages (promotions) published for this session of Gate.
	SessionID string
	// Global is the gate's current view, sent at once. When the hub has
	// already been published a view for the gate, that one is sent instead:
	// it is never older than the caller's, which may predate a publish that
	// happened just before the socket was registered.
	Global session.GlobalView
	// Session, when not nil, is sent at once (before Global).
	Session *session.SessionView
	// Client identifies who opened the socket (its IP address), for
	// Options.MaxConnectionsPerClient; empty: not counted.
	Client string
	// CurrentSession, when not nil, is called once, after the socket is
	// registered and before anything is sent; a non-nil result replaces
	// Session. It closes the window in which a promotion committed between
	// the caller's read of Session and the registration would be missed.
	// It must not block for long nor call back into the hub.
	CurrentSession func() *session.SessionView
	// Closed, when not nil, is called exactly once per Serve or Handoff:
	// when the socket has ended, or when it could not be served at all. The
	// gate uses it to end the session's presence.
	Closed func()
}

// Serve upgrades the request to a websocket for sub, sends the initial
// messages at once, then the gate's global messages and sub's session
// messages as they are published, pings every PingInterval, and returns when
// the socket has ended. Usable from any net/http handler (and from echo, whose
// Response unwraps to an http.Hijacker). Handoff is the same but returns once
// the socket is set up, which saves memory per socket.
//
// The response has been written whatever Serve returns, so the caller must
// not write to w afterwards. It returns:
//   - nil when the socket ended normally: the client closed or vanished, or
//     the hub was closed (the client got StatusGoingAway);
//   - an error wrapping session.ErrInvalidArgument, after answering 400, when
//     sub.Gate or sub.SessionID is malformed;
//   - ErrClosed, after answering 503, when the hub is closed;
//   - an error wrapping session.ErrInvalidArgument, after the wire's JSON
//     error, for a request that is not a WebSocket handshake (400; 405 for
//     a method other than GET) or one from an origin OriginPatterns does
//     not allow (403 cross_origin);
//   - the error of websocket.Accept when the handshake failed past those
//     checks (it answered);
//   - ErrTooManyConnections when MaxConnections was reached (closed with
//     StatusTryAgainLater);
//   - ErrClientMessage when the client sent a data message (closed with
//     StatusPolicyViolation);
//   - ErrSlowClient when a write or a ping outlasted WriteTimeout (the socket
//     was dropped without a close handshake).
func (h *Hub) Serve(w http.ResponseWriter, r *http.Request, sub Subscription) error {
	s, err := h.accept(w, r, sub)
	if s == nil {
		return err
	}
	return h.serve(s)
}

// Handoff is Serve except that it returns as soon as the socket is set up
// (or refused) and leaves the socket to the hub, so the HTTP server's
// goroutine, its request and its 4 KB buffers are freed. Use it from a
// plain net/http or echo handler that has nothing to do after the socket
// ends.
//
// It returns nil once the socket is handed off, and otherwise what Serve
// returns before the socket is up: an error wrapping
// session.ErrInvalidArgument (400), ErrClosed (503), the error of
// websocket.Accept (it answered), or ErrTooManyConnections. How a handed-off
// socket ended is logged at Debug level, and counted in Stats.
func (h *Hub) Handoff(w http.ResponseWriter, r *http.Request, sub Subscription) error {
	s, err := h.accept(w, r, sub)
	if s == nil {
		return err
	}
	go func() { _ = h.serve(s) }()
	return nil
}

// accept validates sub, does the handshake, registers the subscriber and
// writes the initial messages. On success it returns the subscriber, and
// serve must follow; otherwise nil and why (the response has been written).
// Nothing of r or sub outlives it but copies of the gate name, the session
// id and the client.
func (h *Hub) accept(w http.ResponseWriter, r *http.Request, sub Subscription) (s *subscriber, err error) {
	if sub.Closed != nil {
		defer func() {
			if s == nil {
				sub.Closed() // not served: serve will not call it
			}
		}()
	}
	if !session.ValidGateName(sub.Gate) {
		wire.WriteError(w, r, session.CodeInvalidArgument, "invalid gate")
		return nil, session.Errorf(session.CodeInvalidArgument, "broadcast: gate %q is not a valid gate name", sub.Gate)
	}
	if sub.SessionID != "" && !session.ValidID(sub.SessionID) {
		wire.WriteError(w, r, session.CodeInvalidArgument, "invalid session id")
		return nil, session.Errorf(session.CodeInvalidArgument, "broadcast: session id is malformed")
	}
	if h.RefuseHandshake(w, r) {
		return nil, session.Errorf(session.CodeInvalidArgument, "broadcast: not a WebSocket handshake from an allowed origin")
	}
	if !h.enter() {
		wire.WriteError(w, r, session.CodeUnavailable, "server shutting down")
		return nil, ErrClosed
	}
	n := h.conns.Add(1)
	// The count of the client's sockets and the subscriber keep the client
	// while the socket is open: one copy, not the caller's string (a
	// piece of its request, maybe). enterClient writes the count's entry
	// with the string it is given, even an entry that exists.
	sub.Client = strings.Clone(sub.Client)
	clientOK := h.enterClient(sub.Client)
	served := false
	defer func() {
		if !served {
			h.conns.Add(-1)
			h.leaveClient(sub.Client)
			h.wg.Done()
		}
	}()

	// The socket's subscriber exists only once the handshake succeeded:
	// out points to it from then on, for the library's writes and pongs.
	out := &sockOut{h: h}
	c, err := websocket.Accept(&hijacker{ResponseWriter: w, out: out}, r, &websocket.AcceptOptions{
		OriginPatterns:  h.opts.OriginPatterns,
		CompressionMode: websocket.CompressionDisabled, // messages are tiny; flate would cost memory per socket
		OnPongReceived: func(context.Context, []byte) {
			if s := out.s.Load(); s != nil {
				s.pingSent.Store(0)
			}
		},
		// The hub answers pings itself, through the socket's one write
		// path; false tells the library not to write a pong of its own.
		OnPingReceived: out.pong,
	})
	if err != nil {
		return nil, err
	}
	if max := h.opts.MaxConnections; max > 0 && n > int64(max) {
		h.rejected.Add(1)
		out.link.boundReads()
		_ = c.Close(websocket.StatusTryAgainLater, reasonTooMany)
		return nil, ErrTooManyConnections
	}
	if !clientOK {
		h.rejected.Add(1)
		out.link.boundReads()
		_ = c.Close(websocket.StatusTryAgainLater, reasonTooManyClient)
		return nil, ErrTooManyConnections
	}
	c.SetReadLimit(h.opts.ReadLimit)

	s = h.register(sub, out.link, c, out)
	if s == nil {
		out.link.boundReads()
		_ = c.Close(websocket.StatusGoingAway, reasonShutdown)
		return nil, nil
	}
	served = true
	h.service(s) // the initial messages, at once, from this goroutine
	return s, nil
}

// serve reads the socket until it ends (the read side handles pings, pongs
// and close frames; any data message closes the socket), then releases it;
// see Serve for what it returns. This is the socket's only goroutine.
func (h *Hub) serve(s *subscriber) (err error) {
	defer h.wg.Done()
	if s.closed != nil {
		defer s.closed()
	}
	defer h.unregister(s)
	defer h.conns.Add(-1) // before unregister: Stats.Subscribers never undercounts open sockets
	defer h.leaveClient(s.client)

	c := s.conn
	// Background: a cancelled context would make the library drop the
	// connection at once, before a close frame could be sent.
	_, _, rerr := c.Reader(context.Background())
	if rerr == nil {
		s.end.CompareAndSwap(0, uint32(endClientMessage))
		s.link.boundReads()
		_ = c.Close(websocket.StatusPolicyViolation, reasonClientMessage)
	}
	_ = c.CloseNow() // no-op when already closed; waits for a Close in progress
	end := endReason(s.end.Load())
	switch end {
	case endSlow:
		h.slowClosed.Add(1)
		err = ErrSlowClient
	case endClientMessage:
		err = ErrClientMessage
	}
	if h.log.Enabled(context.Background(), slog.LevelDebug) {
		h.log.Debug("broadcast: socket ended", "gate", s.gate.name, "session", s.id, "reason", end.String(), "err", err)
	}
	return err
}

// enterClient counts a socket of client and reports whether the client is
// within MaxConnectionsPerClient. Every call is matched by leaveClient.
func (h *Hub) enterClient(client string) bool {
	max := h.opts.MaxConnectionsPerClient
	if client == "" || max <= 0 {
		return true
	}
	h.clientsMu.Lock()
	defer h.clientsMu.Unlock()
	if h.clients == nil {
		h.clients = make(map[string]int)
	}
	h.clients[client]++ // the key becomes client's: the caller's own copy (accept)
	return h.clients[client] <= max
}

func (h *Hub) leaveClient(client string) {
	if client == "" || h.opts.MaxConnectionsPerClient <= 0 {
		return
	}
	h.clientsMu.Lock()
	defer h.clientsMu.Unlock()
	if h.clients[client]--; h.clients[client] <= 0 {
		delete(h.clients, client)
	}
}

// hijacker hands the websocket library small bufio buffers (libReadBuf,
// libWriteBuf) instead of the HTTP server's 4 KB ones, which become garbage
// once the handler returns, and puts the socket's one write path under
// everything the library writes: both the bufio.Writer and the net.Conn it
// is given write into the socket's sockOut, which cuts the bytes into whole
// frames before they go to the socket. Bytes a client sent before the 101
// are copied out of the HTTP server's reader, which is not kept.
type hijacker struct {
	http.ResponseWriter
	out *sockOut
}

// The library's buffers live as long as the socket: at 19,000 sockets every
// byte of them is 19 KB.
//
// libReadBuf holds the frames a client may send whole: a pong to the hub's
// empty ping (6 bytes) or a ping, most of the longest control frame (131
// bytes). A longer frame is read in more calls (bufio reads a payload
// longer than its buffer straight into the library's). Not bufio's least,
// 16 bytes: after a data message the library reads what the client still
// sends, a byte at a time, until the close handshake's timeout, and 16-byte
// reads made a flooding client pin a core with a fifth of the bandwidth.
//
// libWriteBuf is bufio's least: what the library writes is a close frame,
// which sockOut's Splitter puts back together whatever the pieces.
const (
	libReadBuf  = 128
	libWriteBuf = 16
)

func (w *hijacker) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *hijacker) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	nc, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		return nc, brw, err
	}
	if brw.Writer.Buffered() > 0 { // not with net/http: it flushed the 101 before hijacking
		if err := brw.Writer.Flush(); err != nil {
			return nc, brw, err
		}
	}
	lc := &libConn{Conn: nc, out: w.out}
	if n := brw.Reader.Buffered(); n > 0 { // bytes a client sent before the 101
		b, _ := brw.Reader.Peek(n)
		lc.early = bytes.Clone(b)
	}
	w.out.link = newNetLink(nc)
	return lc, bufio.NewReadWriter(bufio.NewReaderSize(lc, libReadBuf), bufio.NewWriterSize(w.out, libWriteBuf)), nil
}

// libConn is the net.Conn the websocket library gets: reads (after the
// bytes the client sent before the 101) and read deadlines go to the
// socket; writes go through the socket's sockOut like the library's
// buffered writes; its close waits for the bytes the hub still owes the
// socket; write deadlines are the hub's alone (the drain sets them), so the
// library's, if it ever set any, are dropped.
type libConn struct {
	net.Conn
	out   *sockOut
	early []byte // what the client sent before the 101, read first
}

// Read returns what the client sent before the 101, then reads the socket.
func (c *libConn) Read(p []byte) (int, error) {
	if len(c.early) > 0 {
		n := copy(p, c.early)
		if c.early = c.early[n:]; len(c.early) == 0 {
			c.early = nil
		}
		return n, nil
	}
	return c.Conn.Read(p)
}

// Close closes the socket once what the hub owes it is written, or after
// at most a second (see closeAfterDrain); at once when nothing is
// pending. It returns the error of closing the socket when it closes it
// now, nil otherwise.
func (c *libConn) Close() error {
	if s := c.out.s.Load(); s != nil && s.closeAfterDrain(min(closeGrace, c.out.h.opts.WriteTimeout)) {
		return nil
	}
	return c.Conn.Close()
}

func (c *libConn) Write(p []byte) (int, error)        { return c.out.Write(p) }
func (c *libConn) SetDeadline(t time.Time) error      { return c.Conn.SetReadDeadline(t) }
func (c *libConn) SetWriteDeadline(t time.Time) error { return nil }
func (c *libConn) SetReadDeadline(t time.Time) error  { return c.Conn.SetReadDeadline(t) }

// sockOut is where everything the websocket library writes to a socket
// goes. It cuts the library's byte stream into whole frames (the library
// writes a frame in as many pieces as it likes; here it writes only
// control frames, close frames in practice, since the hub writes the
// messages and the pings and answers pings itself) and writes each whole
// frame, so a library frame and a hub frame never interleave, whatever
// the library's buffering. Before the socket is registered (a refusal's
// close frame) a frame goes to the link directly, blocking, bounded by
// WriteTimeout; after, through the subscriber's write, under its lock.
type sockOut struct {
	h    *Hub
	s    atomic.Pointer[subscriber] // set by register before the subscriber is visible to others
	link *netLink

	mu    sync.Mutex // the library serializes its writes; this makes sure
	split wsframe.Splitter
}

// Write takes a piece of the library's byte stream. It returns the error
// that ends the socket: a write error, or (wrapping wsframe.ErrTooLarge or
// ErrMalformed) a frame longer than a control frame can be or not framed
// as RFC 6455 says, after which the stream has lost its framing and the
// socket is closed.
func (o *sockOut) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if err := o.split.Write(p, o.writeFrame); err != nil {
		if s := o.s.Load(); s != nil {
			o.h.fail(s, endWriteErr)
		} else {
			o.link.close()
		}
		return 0, fmt.Errorf("broadcast: library write: %w", err)
	}
	return len(p), nil
}

// writeFrame writes one whole frame of the library's.
func (o *sockOut) writeFrame(f []byte) error {
	s := o.s.Load()
	if s == nil {
		if err := o.link.writeBy(f, time.Now().Add(o.h.opts.WriteTimeout)); err != nil {
			return err
		}
		o.link.clearDeadline()
		return nil
	}
	if o.h.write(s, f, false) == failed {
		s.wmu.Lock()
		err := s.werr
		s.wmu.Unlock()
		if err == nil {
			err = net.ErrClosed
		}
		return err
	}
	return nil
}

// pong is the socket's OnPingReceived: it writes the pong itself, through
// the subscriber's write like every frame, and returns false so the
// library writes none. Before the socket is registered (the library is
// then reading only to finish a refusal's close handshake) it lets the
// library answer, through Write.
func (o *sockOut) pong(_ context.Context, payload []byte) bool {
	s := o.s.Load()
	if s == nil {
		return true
	}
	o.h.write(s, wsframe.Append(make([]byte, 0, 2+len(payload)), wsframe.OpPong, payload), false)
	return false
}

type endReason uint32

const (
	endNone          endReason = iota
	endClosed                  // the hub is closing
	endSlow                    // a write or ping outlasted WriteTimeout
	endWriteErr                // a write failed otherwise
	endClientMessage           // the client sent a data message
)

func (e endReason) String() string {
	switch e {
	case endClosed:
		return "hub closed"
	case endSlow:
		return "write timeout"
	case endWriteErr:
		return "write failed"
	case endClientMessage:
		return "client sent data"
	}
	return "read side ended"
}
