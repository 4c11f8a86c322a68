package broadcast

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/coder/websocket"

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
//   - the error of websocket.Accept when the handshake failed (it answered:
//     403 for a cross-origin request that OriginPatterns does not allow, 426
//     for a request that is not a websocket handshake, ...);
//   - ErrTooManyConnections when MaxConnections was reached (closed with
//     StatusTryAgainLater);
//   - ErrClientMessage when the client sent a data message (closed with
//     StatusPolicyViolation);
//   - ErrSlowClient when a write or a ping outlasted WriteTimeout (the socket
//     was dropped without a close handshake).
func (h *Hub) Serve(w http.ResponseWriter, r *http.Request, sub Subscription) error {
	c, s, err := h.accept(w, r, sub, false)
	if c == nil {
		return err
	}
	return h.serve(c, s, sub)
}

// Handoff is Serve except that it returns as soon as the socket is set up
// (or refused) and leaves the socket to the hub's own goroutines, so the
// HTTP server's goroutine, its request and its 4 KB buffers are freed; the
// socket also gets small read and write buffers. Use it from a plain
// net/http or echo handler that has nothing to do after the socket ends.
//
// It returns nil once the socket is handed off, and otherwise what Serve
// returns before the socket is up: an error wrapping
// session.ErrInvalidArgument (400), ErrClosed (503), the error of
// websocket.Accept (it answered), or ErrTooManyConnections. How a handed-off
// socket ended is logged at Debug level, and counted in Stats.
func (h *Hub) Handoff(w http.ResponseWriter, r *http.Request, sub Subscription) error {
	c, s, err := h.accept(w, r, sub, true)
	if c == nil {
		return err
	}
	go func() { _ = h.serve(c, s, sub) }()
	return nil
}

// accept validates sub, does the handshake and registers the subscriber. On
// success it returns the socket and its subscriber, and serve must follow;
// otherwise a nil socket and why (the response has been written).
func (h *Hub) accept(w http.ResponseWriter, r *http.Request, sub Subscription, smallBufs bool) (*websocket.Conn, *subscriber, error) {
	if !session.ValidGateName(sub.Gate) {
		writeError(w, http.StatusBadRequest, session.CodeInvalidArgument, "invalid gate")
		return nil, nil, session.Errorf(session.CodeInvalidArgument, "broadcast: gate %q is not a valid gate name", sub.Gate)
	}
	if sub.SessionID != "" && !session.ValidID(sub.SessionID) {
		writeError(w, http.StatusBadRequest, session.CodeInvalidArgument, "invalid session id")
		return nil, nil, session.Errorf(session.CodeInvalidArgument, "broadcast: session id is malformed")
	}
	if !h.enter() {
		writeError(w, http.StatusServiceUnavailable, session.CodeUnavailable, "server shutting down")
		return nil, nil, ErrClosed
	}
	n := h.conns.Add(1)
	clientOK := h.enterClient(sub.Client)
	served := false
	defer func() {
		if !served {
			h.conns.Add(-1)
			h.leaveClient(sub.Client)
			h.wg.Done()
		}
	}()

	if smallBufs {
		w = smallBufHijacker{w}
	}
	c, err := websocket.Accept(w, r, &websocket.AcceptOptions{
		OriginPatterns:  h.opts.OriginPatterns,
		CompressionMode: websocket.CompressionDisabled, // messages are tiny; flate would cost memory per socket
	})
	if err != nil {
		return nil, nil, err
	}
	if max := h.opts.MaxConnections; max > 0 && n > int64(max) {
		h.rejected.Add(1)
		_ = c.Close(websocket.StatusTryAgainLater, reasonTooMany)
		return nil, nil, ErrTooManyConnections
	}
	if !clientOK {
		h.rejected.Add(1)
		_ = c.Close(websocket.StatusTryAgainLater, reasonTooManyClient)
		return nil, nil, ErrTooManyConnections
	}
	c.SetReadLimit(h.opts.ReadLimit)

	s := h.register(sub)
	if s == nil {
		_ = c.Close(websocket.StatusGoingAway, reasonShutdown)
		return nil, nil, nil
	}
	served = true
	return c, s, nil
}

// serve runs an accepted socket until it ends; see Serve for what it returns.
func (h *Hub) serve(c *websocket.Conn, s *subscriber, sub Subscription) (err error) {
	defer h.wg.Done()
	defer h.unregister(s)
	defer h.conns.Add(-1) // before unregister: Stats.Subscribers never undercounts open sockets
	defer h.leaveClient(sub.Client)

	rd := &reader{done: make(chan struct{})}
	go rd.run(c)

	end := h.pump(c, s, rd.done)
	switch end {
	case endClosed:
		_ = c.Close(websocket.StatusGoingAway, reasonShutdown)
	default:
		_ = c.CloseNow() // no-op when already closed
	}
	<-rd.done
	switch {
	case end == endSlow:
		h.slowClosed.Add(1)
		err = ErrSlowClient
	case rd.clientMessage:
		err = ErrClientMessage
	}
	if h.log.Enabled(context.Background(), slog.LevelDebug) {
		h.log.Debug("broadcast: socket ended", "gate", sub.Gate, "session", sub.SessionID, "reason", end.String(), "err", err)
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
	h.clients[client]++
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

// smallBufHijacker hands the websocket library small bufio buffers instead
// of the HTTP server's 4 KB ones, which become garbage once the handler
// returns. Reads are frame headers and control frames (at most 125 bytes);
// writes are one small message at a time.
type smallBufHijacker struct{ http.ResponseWriter }

func (w smallBufHijacker) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w smallBufHijacker) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	nc, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil || brw.Reader.Buffered() > 0 || brw.Writer.Buffered() > 0 {
		return nc, brw, err // keep bytes already buffered (a client that sent frames before the 101): rare
	}
	return nc, bufio.NewReadWriter(bufio.NewReaderSize(nc, 256), bufio.NewWriterSize(nc, 512)), nil
}

// reader is a socket's read side: it answers pings and close frames, and
// closes the socket with StatusPolicyViolation on the first data message
// (before reading its payload, so the size does not matter).
type reader struct {
	done          chan struct{}
	clientMessage bool // set before done is closed
}

func (rd *reader) run(c *websocket.Conn) {
	defer close(rd.done)
	// Background: a cancelled context would make the library drop the
	// connection at once, before a close frame could be sent.
	_, _, err := c.Reader(context.Background())
	if err == nil {
		rd.clientMessage = true
		_ = c.Close(websocket.StatusPolicyViolation, reasonClientMessage)
	}
}

// conn is what pump needs of a socket; *websocket.Conn implements it.
type conn interface {
	Write(ctx context.Context, typ websocket.MessageType, p []byte) error
	Ping(ctx context.Context) error
}

type pumpEnd uint8

const (
	endNone     pumpEnd = iota
	endRead             // the read side ended (client closed, vanished or sent data)
	endClosed           // the hub is closing
	endSlow             // a write or ping outlasted WriteTimeout
	endWriteErr         // a write or ping failed otherwise
)

func (e pumpEnd) String() string {
	switch e {
	case endRead:
		return "read side ended"
	case endClosed:
		return "hub closed"
	case endSlow:
		return "write timeout"
	case endWriteErr:
		return "write failed"
	}
	return "none"
}

// pump is a socket's writer: it writes s's mailbox (session message first,
// then the newest global) when woken, pings every PingInterval, and returns
// why it stopped.
func (h *Hub) pump(c conn, s *subscriber, readDone <-chan struct{}) pumpEnd {
	ping := time.NewTicker(h.opts.PingInterval)
	defer ping.Stop()
	for {
		select {
		case <-s.wake:
			if v := s.sess.Swap(nil); v != nil {
				if end := h.write(c, encodeSession(v)); end != endNone {
					return end
				}
			}
			if f := s.global.Swap(nil); f != nil {
				if end := h.write(c, f.data); end != endNone {
					return end
				}
			}
		case <-ping.C:
			ctx, cancel := context.WithTimeout(context.Background(), h.opts.WriteTimeout)
			err := c.Ping(ctx)
			cancel()
			if err != nil {
				return classify(err)
			}
		case <-readDone:
			return endRead
		case <-h.done:
			return endClosed
		}
	}
}

func (h *Hub) write(c conn, p []byte) pumpEnd {
	ctx, cancel := context.WithTimeout(context.Background(), h.opts.WriteTimeout)
	err := c.Write(ctx, websocket.MessageText, p)
	cancel()
	if err != nil {
		return classify(err)
	}
	h.sent.Add(1)
	return endNone
}

func classify(err error) pumpEnd {
	if errors.Is(err, context.DeadlineExceeded) {
		return endSlow
	}
	return endWriteErr
}

// writeError answers with the wire contract's error body.
func writeError(w http.ResponseWriter, status int, code session.Code, msg string) {
	var body struct {
		Error struct {
			Code    session.Code `json:"code"`
			Message string       `json:"message"`
		} `json:"error"`
	}
	body.Error.Code, body.Error.Message = code, msg
	b, _ := json.Marshal(body)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
