package wsframe_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha1"
	"encoding/base64"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/broadcast/wsframe"
)

// Interop with github.com/coder/websocket, the library anteroom's clients
// in tests (and its handshake, reads and close) use: what this package
// writes, coder/websocket's reader reads; what coder/websocket's writer
// writes, this package's Splitter cuts into the same frames.

// rawServer answers one websocket handshake by hand (RFC 6455 §4.2.2) and
// then writes, as is, each frame sent on its channel.
type rawServer struct {
	frames chan []byte
	errs   chan error
}

func startRawServer(t testing.TB) (*rawServer, string) {
	t.Helper()
	rs := &rawServer{frames: make(chan []byte), errs: make(chan error, 1)}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sum := sha1.Sum([]byte(r.Header.Get("Sec-WebSocket-Key") + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
		nc, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			rs.errs <- err
			return
		}
		defer nc.Close()
		_, err = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
			"Sec-WebSocket-Accept: " + base64.StdEncoding.EncodeToString(sum[:]) + "\r\n\r\n")
		if err == nil {
			err = brw.Flush()
		}
		for f := range rs.frames {
			if err != nil {
				break
			}
			_, err = nc.Write(f)
		}
		rs.errs <- err
	}))
	t.Cleanup(srv.Close)
	return rs, "ws" + strings.TrimPrefix(srv.URL, "http")
}

// Any payload, as a text or binary frame from Append, reads back the same
// through coder/websocket's client, across the three length forms.
func FuzzAppendReadByCoderWebsocket(f *testing.F) {
	for _, n := range []int{0, 1, 125, 126, 127, 0xffff, 0x10000, 70_000} {
		f.Add(bytes.Repeat([]byte{'{'}, n), true)
	}
	f.Add([]byte(`{"type":"global","gate":"default"}`), false)
	f.Add([]byte{0xff, 0xfe, 0x00}, true) // not UTF-8: the hub never sends it, the framing does not care

	rs, url := startRawServer(f)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	c, _, err := websocket.Dial(ctx, url, nil)
	cancel()
	require.NoError(f, err)
	c.SetReadLimit(1 << 20)
	f.Cleanup(func() {
		close(rs.frames)
		_ = c.CloseNow()
	})

	f.Fuzz(func(t *testing.T, payload []byte, text bool) {
		if len(payload) > 1<<20 {
			t.Skip("over the client's read limit")
		}
		op, typ := wsframe.OpBinary, websocket.MessageBinary
		if text {
			op, typ = wsframe.OpText, websocket.MessageText
		}
		frame := wsframe.Append(nil, op, payload)
		h, n, err := wsframe.ParseHeader(frame)
		require.NoError(t, err)
		require.Equal(t, wsframe.Header{Fin: true, Opcode: op, Length: int64(len(payload))}, h)
		require.Equal(t, wsframe.HeaderLen(len(payload)), n)

		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		done := make(chan struct{})
		var gotTyp websocket.MessageType
		var got []byte
		var rerr error
		go func() {
			defer close(done)
			gotTyp, got, rerr = c.Read(ctx)
		}()
		select {
		case rs.frames <- frame:
		case err := <-rs.errs:
			t.Fatalf("server ended: %v", err)
		}
		<-done
		require.NoError(t, rerr)
		assert.Equal(t, typ, gotTyp)
		assert.Equal(t, len(payload), len(got))
		assert.True(t, bytes.Equal(payload, got), "payload differs")
	})
}

// recorder keeps every byte coder/websocket's server writes after the
// handshake.
type recorder struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (r *recorder) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.buf.Write(p)
}

func (r *recorder) bytes() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return bytes.Clone(r.buf.Bytes())
}

type teeHijacker struct {
	http.ResponseWriter
	rec *recorder
}

func (w teeHijacker) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	nc, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		return nc, brw, err
	}
	return nc, bufio.NewReadWriter(brw.Reader, bufio.NewWriter(io.MultiWriter(nc, w.rec))), nil
}

// What coder/websocket's own server writer puts on the wire (messages of
// each length form, a ping, a close) the Splitter cuts into the same
// frames, whole and in order, fed a byte at a time.
func TestSplitterCutsCoderWebsocketWrites(t *testing.T) {
	rec := &recorder{}
	payloads := [][]byte{nil, bytes.Repeat([]byte{'a'}, 125), bytes.Repeat([]byte{'b'}, 126), bytes.Repeat([]byte{'c'}, 70_000)}
	served := make(chan error, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served <- func() error {
			c, err := websocket.Accept(teeHijacker{w, rec}, r, &websocket.AcceptOptions{CompressionMode: websocket.CompressionDisabled})
			if err != nil {
				return err
			}
			defer c.CloseNow()
			ctx, cancel := context.WithTimeout(r.Context(), 20*time.Second)
			defer cancel()
			for _, p := range payloads {
				if err := c.Write(ctx, websocket.MessageText, p); err != nil {
					return err
				}
			}
			ctx = c.CloseRead(ctx) // reads the pong (and, later, the close reply)
			if err := c.Ping(ctx); err != nil {
				return err
			}
			return c.Close(websocket.StatusNormalClosure, "bye")
		}()
	}))
	defer srv.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http"), nil)
	require.NoError(t, err)
	defer c.CloseNow()
	c.SetReadLimit(1 << 20)
	for _, p := range payloads {
		_, got, err := c.Read(ctx)
		require.NoError(t, err)
		require.Equal(t, len(p), len(got))
	}
	_, _, err = c.Read(ctx) // answers the ping, then sees the close
	require.Equal(t, websocket.StatusNormalClosure, websocket.CloseStatus(err), "%v", err)
	require.NoError(t, <-served)

	type frame struct {
		op      wsframe.Opcode
		payload string
	}
	var want []frame
	for _, p := range payloads {
		want = append(want, frame{wsframe.OpText, string(p)})
	}
	want = append(want, frame{wsframe.OpPing, "1"}, frame{wsframe.OpClose, "\x03\xe8bye"})

	var got []frame
	s := wsframe.Splitter{MaxPayload: 1 << 20}
	for _, b := range rec.bytes() {
		require.NoError(t, s.Write([]byte{b}, func(f []byte) error {
			h, n, err := wsframe.ParseHeader(f)
			require.NoError(t, err)
			assert.True(t, h.Fin)
			assert.False(t, h.Masked, "a server does not mask")
			got = append(got, frame{h.Opcode, string(f[n:])})
			return nil
		}))
	}
	assert.Zero(t, s.Buffered())
	assert.Equal(t, want, got)
}
