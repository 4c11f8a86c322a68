package main

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/broadcast/wsframe"
)

// wsPeer accepts one websocket handshake on 127.0.0.1:0 and hands the
// server's side of the connection to serve.
func wsPeer(t *testing.T, serve func(c net.Conn, br *bufio.Reader)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		br := bufio.NewReader(c)
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		_ = req.Body.Close()
		if _, err := io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"); err != nil {
			return
		}
		serve(c, br)
	}()
	return ln.Addr().String()
}

type got struct {
	p            string
	kernel, read int64
}

func collect(t *testing.T, ws *wsClient) (func() []got, <-chan error) {
	t.Helper()
	var mu sync.Mutex
	var all []got
	done := make(chan error, 1)
	go func() {
		done <- ws.readLoop(func(p []byte, kernel, read int64) {
			mu.Lock()
			all = append(all, got{string(p), kernel, read})
			mu.Unlock()
		})
	}()
	return func() []got {
		mu.Lock()
		defer mu.Unlock()
		return append([]got(nil), all...)
	}, done
}

// readLoop hands over every message whole and in order, however the
// server's bytes are cut (a frame over several writes, several frames in
// one, a frame larger than its first buffer, the 16- and 64-bit lengths),
// answers a ping with a pong of the same payload, and ends at the close
// frame with errWSClosed.
func TestReadLoopReassemblesFramesAndAnswersPings(t *testing.T) {
	big := strings.Repeat("x", 70000) // 64-bit length, over the 1 KB buffer
	mid := strings.Repeat("y", 300)   // 16-bit length
	var stream []byte
	for _, m := range []string{"a", mid, "b", big, "c"} {
		stream = wsframe.Append(stream, wsframe.OpText, []byte(m))
	}
	ping := wsframe.Append(nil, wsframe.OpPing, []byte("hi"))
	pong := make(chan []byte, 1)
	addr := wsPeer(t, func(c net.Conn, br *bufio.Reader) {
		// Cut the stream at awkward places: inside a header, inside a
		// length, inside a payload; pause so each piece is its own read.
		for _, cut := range [][2]int{{0, 1}, {1, 5}, {5, 300}, {300, 305}, {305, 40000}, {40000, len(stream)}} {
			if _, err := c.Write(stream[cut[0]:cut[1]]); err != nil {
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
		_, _ = c.Write(ping)
		p := make([]byte, 8) // the client's pong: header, zero mask, "hi"
		if _, err := io.ReadFull(br, p); err == nil {
			pong <- p
		}
		_, _ = c.Write(wsframe.Append(nil, wsframe.OpClose, []byte{0x03, 0xe8}))
		time.Sleep(100 * time.Millisecond)
	})
	ws, err := dialWS(context.Background(), addr, "/", nil)
	require.NoError(t, err)
	defer ws.Close()
	msgs, done := collect(t, ws)
	select {
	case err := <-done:
		assert.ErrorIs(t, err, errWSClosed)
	case <-time.After(10 * time.Second):
		t.Fatal("readLoop did not end at the close frame")
	}
	var payloads []string
	for _, m := range msgs() {
		payloads = append(payloads, m.p)
	}
	assert.Equal(t, []string{"a", mid, "b", big, "c"}, payloads)
	select {
	case p := <-pong:
		assert.Equal(t, []byte{0x8a, 0x82, 0, 0, 0, 0, 'h', 'i'}, p)
	default:
		t.Fatal("no pong")
	}
}

// The messages the handshake's reader took along with the 101 are handed
// over first, and a message that arrives later still wakes the reader (the
// loop waits for the next arrival after a read that left nothing queued).
func TestReadLoopBytesAfterTheHandshakeAndLaterArrivals(t *testing.T) {
	next := make(chan string)
	addr := wsPeer(t, func(c net.Conn, br *bufio.Reader) {
		for m := range next {
			if _, err := c.Write(wsframe.Append(nil, wsframe.OpText, []byte(m))); err != nil {
				return
			}
		}
	})
	// A handshake answer with the first message in the same write.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		br := bufio.NewReader(c)
		if req, err := http.ReadRequest(br); err == nil {
			_ = req.Body.Close()
			resp := []byte("HTTP/1.1 101 Switching Protocols\r\n\r\n")
			resp = wsframe.Append(resp, wsframe.OpText, []byte("early"))
			resp = append(resp, wsframe.Append(nil, wsframe.OpText, []byte("partial"))[:3]...)
			_, _ = c.Write(resp)
			time.Sleep(20 * time.Millisecond)
			_, _ = c.Write(wsframe.Append(nil, wsframe.OpText, []byte("partial"))[3:])
			time.Sleep(time.Second)
		}
	}()
	early, err := dialWS(context.Background(), ln.Addr().String(), "/", nil)
	require.NoError(t, err)
	defer early.Close()
	emsgs, _ := collect(t, early)
	require.Eventually(t, func() bool { return len(emsgs()) == 2 }, 5*time.Second, 5*time.Millisecond)
	assert.Equal(t, "early", emsgs()[0].p)
	assert.Equal(t, "partial", emsgs()[1].p)

	ws, err := dialWS(context.Background(), addr, "/", nil)
	require.NoError(t, err)
	defer ws.Close()
	msgs, _ := collect(t, ws)
	for i, m := range []string{"one", "two", "three"} {
		before := time.Now().UnixNano()
		next <- m
		require.Eventually(t, func() bool { return len(msgs()) == i+1 }, 5*time.Second, time.Millisecond, "message %q never read", m)
		g := msgs()[i]
		assert.Equal(t, m, g.p)
		assert.GreaterOrEqual(t, g.read, before)
		if runtime.GOOS == "linux" && rawRecvSupported {
			// The kernel's stamp: after the write began, not after the read.
			assert.GreaterOrEqual(t, g.kernel, before, "kernel stamp")
			assert.LessOrEqual(t, g.kernel, g.read, "kernel stamp")
		}
	}
	close(next)
}

// A frame header announcing more than the bound ends the loop with an
// error instead of buffering it.
func TestReadLoopRefusesAHugeFrame(t *testing.T) {
	addr := wsPeer(t, func(c net.Conn, br *bufio.Reader) {
		h := []byte{0x81, 127, 0, 0, 0, 1, 0, 0, 0, 0} // 4 GiB
		_, _ = c.Write(h)
		time.Sleep(time.Second)
	})
	ws, err := dialWS(context.Background(), addr, "/", nil)
	require.NoError(t, err)
	defer ws.Close()
	msgs, done := collect(t, ws)
	select {
	case err := <-done:
		require.Error(t, err)
		assert.Contains(t, err.Error(), "websocket frame of")
	case <-time.After(5 * time.Second):
		t.Fatal("readLoop kept waiting")
	}
	assert.Empty(t, msgs())
}

// A message that arrived before the reader started still has its kernel
// stamp (stamping is turned on at the dial), earlier than the read.
func TestReadLoopStampsWhatArrivedBeforeItStarted(t *testing.T) {
	if !rawRecvSupported {
		t.Skip("no reception stamps on this platform")
	}
	var sentAt atomic.Int64
	addr := wsPeer(t, func(c net.Conn, br *bufio.Reader) {
		time.Sleep(50 * time.Millisecond) // after the client's handshake reader is done
		sentAt.Store(time.Now().UnixNano())
		_, _ = c.Write(wsframe.Append(nil, wsframe.OpText, []byte("queued")))
		time.Sleep(2 * time.Second)
	})
	ws, err := dialWS(context.Background(), addr, "/", nil)
	require.NoError(t, err)
	defer ws.Close()
	time.Sleep(200 * time.Millisecond)
	started := time.Now().UnixNano()
	msgs, _ := collect(t, ws)
	require.Eventually(t, func() bool { return len(msgs()) == 1 }, 5*time.Second, time.Millisecond)
	m := msgs()[0]
	assert.Equal(t, "queued", m.p)
	assert.GreaterOrEqual(t, m.kernel, sentAt.Load())
	assert.Less(t, m.kernel, started, "stamped on arrival, not at the read")
	assert.GreaterOrEqual(t, m.read, started)
}
