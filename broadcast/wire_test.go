package broadcast

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha1"
	"crypto/tls"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/broadcast/wsframe"
	"github.com/anteroomhq/anteroom/session"
)

// Tests of the write path's framing: the hub's pre-framed writes, its own
// pings and pongs, and the websocket library's frames (close frames) share
// one write path per socket and never interleave, over plain sockets (raw
// writes) and TLS (the fallback).

// byteLink records every byte written to it, as a socket would carry them.
type byteLink struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	closed atomic.Bool
}

func (l *byteLink) tryWrite(p []byte) (int, error) {
	if l.closed.Load() {
		return 0, net.ErrClosed
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *byteLink) writeBy(p []byte, _ time.Time) error { _, err := l.tryWrite(p); return err }
func (l *byteLink) clearDeadline()                      {}
func (l *byteLink) close()                              { l.closed.Store(true) }
func (l *byteLink) boundReads()                         {} // no connection to bound

type wireFrame struct {
	op      wsframe.Opcode
	payload string
}

// frames cuts a server's byte stream into frames, failing on anything a
// server must not send.
func frames(t *testing.T, stream []byte) []wireFrame {
	t.Helper()
	var out []wireFrame
	s := wsframe.Splitter{MaxPayload: 1 << 20}
	require.NoError(t, s.Write(stream, func(f []byte) error {
		h, n, err := wsframe.ParseHeader(f)
		require.NoError(t, err)
		require.True(t, h.Fin)
		require.False(t, h.Masked)
		require.Zero(t, h.RSV)
		out = append(out, wireFrame{h.Opcode, string(f[n:])})
		return nil
	}))
	require.Zero(t, s.Buffered(), "the stream ends with a whole frame")
	return out
}

// However the library cuts its writes (here: a close frame in two pieces,
// one through its bufio.Writer's target and one through the net.Conn it
// was given), a hub frame written in between lands before or after the
// library's frame, never inside it.
func TestLibraryWritesAreCutIntoWholeFrames(t *testing.T) {
	h := newHub(t, Options{})
	l := &byteLink{}
	s := &subscriber{link: l}
	out := &sockOut{h: h}
	out.s.Store(s)
	lib := &libConn{out: out}

	closeFrame := wsframe.Append(nil, wsframe.OpClose, []byte("\x03\xe8bye"))
	msg := textFrame([]byte(`{"type":"global"}`))
	_, err := out.Write(closeFrame[:3])
	require.NoError(t, err)
	require.Equal(t, wrote, h.write(s, msg, true))
	_, err = lib.Write(closeFrame[3:])
	require.NoError(t, err)
	require.Equal(t, wrote, h.write(s, pingFrame, false))

	assert.Equal(t, []wireFrame{
		{wsframe.OpText, `{"type":"global"}`},
		{wsframe.OpClose, "\x03\xe8bye"},
		{wsframe.OpPing, ""},
	}, frames(t, l.buf.Bytes()))
	assert.NoError(t, lib.SetWriteDeadline(time.Now()), "the library's write deadlines are the hub's business")
}

// A library write that is not whole frames of at most a control frame's
// size ends the socket rather than desynchronising its stream.
func TestLibraryWriteThatLosesFramingEndsTheSocket(t *testing.T) {
	for name, p := range map[string][]byte{
		"data frame over 125 bytes": textFrame(make([]byte, 126)),
		"non-minimal length":        {0x88, 126, 0, 2, 3, 0xe8},
	} {
		t.Run(name, func(t *testing.T) {
			h := newHub(t, Options{})
			l := &byteLink{}
			s := &subscriber{link: l}
			out := &sockOut{h: h}
			out.s.Store(s)
			_, err := out.Write(p)
			require.Error(t, err)
			assert.True(t, l.closed.Load(), "the socket is closed")
			assert.Equal(t, endWriteErr, endReason(s.end.Load()))
			assert.Zero(t, l.buf.Len(), "nothing of it was written")
		})
	}
}

// rawClient is a websocket client written against RFC 6455 directly, so a
// test sees every frame the server sends (pongs included) exactly as sent.
type rawClient struct {
	nc  net.Conn
	br  *bufio.Reader
	wmu sync.Mutex
}

// dialRaw opens a socket on ts for query; readBuf > 0 shrinks the client's
// receive buffer.
func dialRaw(t testing.TB, ts *testServer, query string, readBuf int) *rawClient {
	t.Helper()
	return dialRawSending(t, ts, query, readBuf, nil)
}

// dialRawSending is dialRaw with early written in the same write as the
// handshake, so that the server reads them before it answers.
func dialRawSending(t testing.TB, ts *testServer, query string, readBuf int, early []byte) *rawClient {
	t.Helper()
	u, err := url.Parse(ts.URL)
	require.NoError(t, err)
	nc, err := net.DialTimeout("tcp", u.Host, 10*time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { _ = nc.Close() })
	if readBuf > 0 {
		require.NoError(t, nc.(*net.TCPConn).SetReadBuffer(readBuf))
	}
	if u.Scheme == "https" {
		cfg := ts.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
		cfg.ServerName = u.Hostname()
		tc := tls.Client(nc, cfg)
		require.NoError(t, tc.Handshake())
		nc = tc
	}
	var k [16]byte
	_, _ = rand.Read(k[:])
	key := base64.StdEncoding.EncodeToString(k[:])
	hs := fmt.Appendf(nil, "GET /ws?%s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n", query, u.Host, key)
	_, err = nc.Write(append(hs, early...))
	require.NoError(t, err)
	br := bufio.NewReader(nc)
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusSwitchingProtocols, resp.StatusCode)
	sum := sha1.Sum([]byte(key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
	require.Equal(t, base64.StdEncoding.EncodeToString(sum[:]), resp.Header.Get("Sec-WebSocket-Accept"))
	return &rawClient{nc: nc, br: br}
}

// maskedFrame is one frame as a client must send it, masked.
func maskedFrame(op wsframe.Opcode, payload []byte) []byte {
	f := wsframe.Append(nil, op, payload)
	hl := wsframe.HeaderLen(len(payload))
	var key [4]byte
	_, _ = rand.Read(key[:])
	masked := make([]byte, 0, len(f)+4)
	masked = append(masked, f[:hl]...)
	masked[1] |= 0x80
	masked = append(masked, key[:]...)
	for i, b := range payload {
		masked = append(masked, b^key[i%4])
	}
	return masked
}

// send writes one masked frame, as a client must.
func (c *rawClient) send(op wsframe.Opcode, payload []byte) error {
	masked := maskedFrame(op, payload)
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_, err := c.nc.Write(masked)
	return err
}

// read reads one frame and refuses anything a server must not send.
func (c *rawClient) read() (wsframe.Opcode, []byte, error) {
	hdr := make([]byte, 2, wsframe.MaxHeaderLen)
	if _, err := io.ReadFull(c.br, hdr); err != nil {
		return 0, nil, err
	}
	ext := map[byte]int{126: 2, 127: 8}[hdr[1]&0x7f]
	if hdr[1]&0x80 != 0 {
		ext += 4
	}
	hdr = hdr[:2+ext]
	if _, err := io.ReadFull(c.br, hdr[2:]); err != nil {
		return 0, nil, err
	}
	h, n, err := wsframe.ParseHeader(hdr)
	switch {
	case err != nil:
		return 0, nil, err
	case n != len(hdr) || !h.Fin || h.Masked || h.RSV != 0 || h.Length > 1<<16:
		return 0, nil, fmt.Errorf("not a frame a server sends: %+v", h)
	}
	payload := make([]byte, h.Length)
	if _, err := io.ReadFull(c.br, payload); err != nil {
		return 0, nil, err
	}
	return h.Opcode, payload, nil
}

func decodeGlobal(b []byte) (msg, error) {
	var m msg
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("%w: %q", err, b)
	}
	if m.Type != "global" {
		return m, fmt.Errorf("not a global message: %q", b)
	}
	return m, nil
}

// The hub answers each ping once (the library, told not to, writes no
// pong of its own), with the ping's payload, in order; the library's
// close reply reaches the client whole, after them. Pins what the hub
// relies on of coder/websocket: OnPingReceived returning false suppresses
// its pong, and its close frames arrive through the writer it was given.
// The pings' payloads go across the library's read buffer (libReadBuf) up
// to the longest a control frame may carry, and the close frame is as long
// as one may be. Sent with the handshake, before the 101, the same frames
// are answered the same (the hijacker hands them to the library).
func TestEachPingGetsOnePongAndTheCloseArrivesWhole(t *testing.T) {
	lengths := []int{0, 1, 9, 10, 11, 16, 17, 64, 121, 122, 123, 124, 125}
	var want []string
	var frames []byte
	for i := range 50 {
		p := "p" + strconv.Itoa(i)
		if n := lengths[i%len(lengths)]; n >= len(p) {
			p += strings.Repeat("x", n-len(p))
		} else {
			p = p[:n]
		}
		want = append(want, p)
		frames = append(frames, maskedFrame(wsframe.OpPing, []byte(p))...)
	}
	frames = append(frames, maskedFrame(wsframe.OpClose, append([]byte("\x03\xe8"), strings.Repeat("r", 123)...))...)
	for _, tc := range []struct {
		name           string
		useTLS, before bool
	}{{"tcp", false, false}, {"tls", true, false}, {"tcp/before-101", false, true}, {"tls/before-101", true, true}} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHub(t, Options{Interval: time.Millisecond})
			ts := startTestServer(t, h, nil, tc.useTLS)
			var c *rawClient
			if tc.before {
				c = dialRawSending(t, ts, "gate=g", 0, frames)
			} else {
				c = dialRaw(t, ts, "gate=g", 0)
			}
			op, p, err := c.read()
			require.NoError(t, err)
			require.Equal(t, wsframe.OpText, op)
			_, err = decodeGlobal(p)
			require.NoError(t, err)
			if !tc.before {
				c.wmu.Lock()
				_, err = c.nc.Write(frames)
				c.wmu.Unlock()
				require.NoError(t, err)
			}
			var pongs []string
			for {
				op, p, err := c.read()
				require.NoError(t, err)
				if op == wsframe.OpClose {
					require.GreaterOrEqual(t, len(p), 2)
					assert.EqualValues(t, websocket.StatusNormalClosure, binary.BigEndian.Uint16(p))
					break
				}
				require.Equal(t, wsframe.OpPong, op, "only pongs before the close reply")
				pongs = append(pongs, string(p))
			}
			assert.Equal(t, want, pongs)
			_, _, err = c.read()
			assert.Error(t, err, "the server ends the connection after the close handshake")
			assert.NoError(t, ts.nextErr(t))
		})
	}
}

// Clients ping while 10,000 messages are fanned out to them, over plain
// sockets (raw writes) and TLS (the fallback): every frame parses, every
// message arrives in order, every ping gets its pong.
func TestClientsPingDuringFanout(t *testing.T) {
	for _, useTLS := range []bool{false, true} {
		t.Run(map[bool]string{false: "tcp", true: "tls"}[useTLS], func(t *testing.T) {
			testPingDuringFanout(t, useTLS)
		})
	}
}

func testPingDuringFanout(t *testing.T, useTLS bool) {
	messages := int64(10_000)
	if testing.Short() {
		messages = 1_000
	}
	const coderClients = 4
	const pingEvery = 8              // a client pings (if its last ping is answered) every 8 messages
	const clients = coderClients + 1 // and one raw client
	h := newHub(t, Options{Interval: time.Nanosecond, WriteTimeout: time.Minute})
	ts := startTestServer(t, h, nil, useTLS)
	var opts *websocket.DialOptions
	if useTLS {
		opts = ts.tlsDial()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	// Clients report each view they read on got, the first pong of their
	// pinger on pinged, and any failure on errs; the test goroutine
	// asserts.
	got := make(chan int64, clients)
	pinged := make(chan struct{}, clients)
	errs := make(chan error, 2*clients)
	var pongs atomic.Int64
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	defer cancel()

	for i := range coderClients {
		c := ts.dial(t, "gate=g", opts)
		pctx, stopPing := context.WithCancel(ctx)
		pingNow := make(chan struct{}, 1)
		pingNow <- struct{}{}
		wg.Add(2)
		go func() {
			defer wg.Done()
			defer stopPing()
			for {
				typ, b, err := c.Read(ctx)
				if err == nil && typ != websocket.MessageText {
					err = fmt.Errorf("message type %v", typ)
				}
				var m msg
				if err == nil {
					m, err = decodeGlobal(b)
				}
				if err != nil {
					errs <- fmt.Errorf("client %d: %w", i, err)
					return
				}
				got <- m.Waiting
				if m.Waiting == messages {
					return
				}
				if m.Waiting%pingEvery == 0 {
					select {
					case pingNow <- struct{}{}:
					default:
					}
				}
			}
		}()
		go func() {
			defer wg.Done()
			for first := true; ; first = false {
				select {
				case <-pingNow:
				case <-pctx.Done():
					return
				}
				err := c.Ping(pctx)
				if pctx.Err() != nil {
					return
				}
				if err != nil {
					errs <- fmt.Errorf("client %d ping: %w", i, err)
					return
				}
				pongs.Add(1)
				if first {
					pinged <- struct{}{}
				}
			}
		}()
	}

	// The raw client sees every frame as sent; it pings again as soon as
	// its last ping is answered.
	rc := dialRaw(t, ts, "gate=g", 0)
	rawPong := make(chan struct{}, 1)
	rawPingNow := make(chan struct{}, 1)
	rawDone := make(chan struct{})
	wg.Add(2)
	go func() {
		defer wg.Done()
		defer close(rawDone)
		next := 0 // the payload the next pong must carry
		for {
			op, p, err := rc.read()
			if err == nil {
				switch op {
				case wsframe.OpText:
					var m msg
					if m, err = decodeGlobal(p); err == nil {
						got <- m.Waiting
						if m.Waiting == messages {
							return
						}
						if m.Waiting%pingEvery == 0 {
							select {
							case rawPingNow <- struct{}{}:
							default:
							}
						}
					}
				case wsframe.OpPing: // the hub's keepalive
					err = rc.send(wsframe.OpPong, p)
				case wsframe.OpPong:
					if string(p) != strconv.Itoa(next) {
						err = fmt.Errorf("pong %q, want %d", p, next)
					}
					next++
					pongs.Add(1)
					rawPong <- struct{}{}
				default:
					err = fmt.Errorf("unexpected opcode %#x", byte(op))
				}
			}
			if err != nil {
				errs <- fmt.Errorf("raw client: %w", err)
				return
			}
		}
	}()
	go func() {
		defer wg.Done()
		for seq := 0; ; seq++ {
			if err := rc.send(wsframe.OpPing, []byte(strconv.Itoa(seq))); err != nil {
				errs <- fmt.Errorf("raw client ping: %w", err)
				return
			}
			select {
			case <-rawPong:
				if seq == 0 {
					pinged <- struct{}{}
				}
			case <-rawDone:
				return
			}
			if seq > 0 {
				select {
				case <-rawPingNow:
				case <-rawDone:
					return
				}
			}
		}
	}()

	receive := func(want int64) {
		t.Helper()
		for range clients {
			select {
			case w := <-got:
				require.Equal(t, want, w, "every client gets every view, in order")
			case err := <-errs:
				require.NoError(t, err)
			case <-ctx.Done():
				t.Fatalf("waiting for view %d: %v", want, ctx.Err())
			}
		}
	}
	receive(1) // the initial view
	for range clients {
		select {
		case <-pinged:
		case err := <-errs:
			require.NoError(t, err)
		case <-ctx.Done():
			t.Fatal("no pong")
		}
	}
	before := pongs.Load()
	for i := int64(2); i <= messages; i++ {
		h.PublishGlobal(view("g", i))
		receive(i)
	}
	during := pongs.Load() - before
	wg.Wait()
	select {
	case err := <-errs:
		require.NoError(t, err)
	default:
	}
	assert.Positive(t, during, "pongs arrived during the fan-out")
	t.Logf("%d pongs during %d messages to %d clients", during, messages, clients)
}

// Over TLS the hijacked connection is a *tls.Conn, which offers no raw
// descriptor: every write takes the fallback (a drain writing through
// net.Conn.Write with a deadline). Everything a client gets over plain
// sockets it gets over TLS: the initial session and global messages,
// later globals, its promotion, the close on shutdown.
func TestTLSFallbackServesEverything(t *testing.T) {
	for _, handoff := range []bool{false, true} {
		t.Run(map[bool]string{false: "serve", true: "handoff"}[handoff], func(t *testing.T) {
			h := New(Options{Interval: time.Millisecond, Logger: quietLogger()})
			ts := newTLSTestServer(t, h, nil)
			ts.handoff.Store(handoff)
			c := ts.dial(t, "gate=g&session=s1", ts.tlsDial())
			// One reader, so that a Ping can wait for its pong meanwhile.
			type result struct {
				b   []byte
				err error
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			results := make(chan result, 16)
			go func() {
				for {
					_, b, err := c.Read(ctx)
					results <- result{b, err}
					if err != nil {
						return
					}
				}
			}()
			next := func() (msg, error) {
				select {
				case r := <-results:
					if r.err != nil {
						return msg{}, r.err
					}
					return decode(t, r.b), nil
				case <-ctx.Done():
					return msg{}, ctx.Err()
				}
			}
			mustNext := func() msg {
				m, err := next()
				require.NoError(t, err)
				return m
			}

			first, second := mustNext(), mustNext()
			assert.Equal(t, "session", first.Type, "the session message comes first")
			assert.Equal(t, session.StatusWaiting, first.Status)
			assert.Equal(t, "global", second.Type)

			h.mu.Lock()
			g := h.gates["g"]
			h.mu.Unlock()
			g.subsMu.Lock()
			require.Len(t, g.subs, 1)
			nl, ok := g.subs[0].link.(*netLink)
			g.subsMu.Unlock()
			require.True(t, ok)
			assert.Nil(t, nl.rc, "no raw writes under TLS")

			h.PublishGlobal(view("g", 7))
			assert.EqualValues(t, 7, mustNext().Waiting)
			sv := session.SessionView{GlobalView: view("g", 6), Session: "s1", Status: session.StatusActive, Position: 100}
			h.PublishSession(sv)
			m := mustNext()
			assert.Equal(t, "session", m.Type)
			assert.Equal(t, session.StatusActive, m.Status)
			require.NoError(t, c.Ping(ctx), "the hub answers the client's ping")

			require.NoError(t, h.Close())
			_, err := next()
			assert.Equal(t, websocket.StatusGoingAway, websocket.CloseStatus(err), "%v", err)
			if !handoff {
				assert.NoError(t, ts.nextErr(t))
			}
		})
	}
}

// A client that pings a socket it never reads makes the hub owe it pongs
// it cannot deliver; past maxPending bytes the socket is closed as slow,
// long before WriteTimeout, instead of buffering pongs without end.
func TestPingFloodOnUnreadSocketIsClosed(t *testing.T) {
	h := newHub(t, Options{Interval: time.Hour, WriteTimeout: time.Hour})
	ts := newTestServer(t, h, func(l net.Listener) net.Listener { return smallBuffers{l} })
	c := dialRaw(t, ts, "gate=g", 0)
	payload := bytes.Repeat([]byte{'p'}, wsframe.MaxControlPayload)
	require.NoError(t, c.nc.SetWriteDeadline(time.Now().Add(time.Minute)))
	var err error
	for i := 0; i < 200_000 && err == nil; i++ { // 25 MB of pings at most
		err = c.send(wsframe.OpPing, payload)
	}
	require.Error(t, err, "the server stops taking pings once it owes too many pongs")
	assert.False(t, errors.Is(err, io.ErrShortWrite))
	assert.ErrorIs(t, ts.nextErr(t), ErrSlowClient)
	assert.EqualValues(t, 1, h.Stats().SlowClosed)
}

// The library's close of a socket that is being drained waits for the
// bytes owed (TestEachPingGetsOnePongAndTheCloseArrivesWhole/tls), but
// not until WriteTimeout when the socket takes nothing: at most
// closeGrace.
func TestLibraryCloseOfAStuckSocketIsBounded(t *testing.T) {
	h := newHub(t, Options{WriteTimeout: time.Hour})
	l := newMemLink(true) // takes nothing
	s := &subscriber{link: l}
	out := &sockOut{h: h}
	out.s.Store(s)
	lib := &libConn{out: out}
	require.Equal(t, queued, h.write(s, textFrame([]byte("{}")), true))
	<-l.entered // the drain waits on the socket

	require.NoError(t, lib.Close())
	assert.False(t, l.closed.Load(), "not at once: the close frame may be among the bytes owed")
	require.Eventually(t, l.closed.Load, 20*closeGrace, closeGrace/10, "closed after closeGrace, not WriteTimeout")
	l.unpause() // let the drain end
}
