package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"
)

// wsClient is a minimal receive-only websocket client: the handshake, then
// server frames (text, ping answered with a pong, close). It keeps a small
// footprint so that thousands of them fit in one process.
type wsClient struct {
	c   net.Conn
	br  *bufio.Reader
	buf []byte
}

func dialWS(ctx context.Context, addr, path string, local net.Addr) (*wsClient, error) {
	c, err := dialStamped(ctx, addr, local)
	if err != nil {
		return nil, err
	}
	ws := &wsClient{c: c, br: bufio.NewReaderSize(c, 1024)}
	req := "GET " + path + " HTTP/1.1\r\nHost: " + addr +
		"\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		_ = c.Close()
		return nil, err
	}
	line, err := ws.br.ReadSlice('\n')
	if err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("websocket handshake: %w", err)
	}
	if !bytes.HasPrefix(line, []byte("HTTP/1.1 101")) {
		_ = c.Close()
		return nil, fmt.Errorf("websocket handshake: %q", bytes.TrimSpace(line))
	}
	for {
		line, err = ws.br.ReadSlice('\n')
		if err != nil {
			_ = c.Close()
			return nil, fmt.Errorf("websocket handshake: %w", err)
		}
		if len(line) <= 2 {
			break
		}
	}
	_ = c.SetDeadline(time.Time{})
	return ws, nil
}

// dialStamped dials addr from local with the kernel's reception stamps on.
func dialStamped(ctx context.Context, addr string, local net.Addr) (net.Conn, error) {
	d := net.Dialer{LocalAddr: local, Timeout: 10 * time.Second}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	// Stamps from the start: the kernel stamps only what arrives after.
	if sc, ok := c.(syscall.Conn); ok && rawRecvSupported {
		if rc, err := sc.SyscallConn(); err == nil {
			_ = rc.Control(func(fd uintptr) { enableStamps(fd) })
		}
	}
	return c, nil
}

func (ws *wsClient) Close() error { return ws.c.Close() }

var errWSClosed = errors.New("websocket closed by the server")

// next returns the next data message, valid until the next call. It answers
// pings and returns errWSClosed on a close frame.
func (ws *wsClient) next() ([]byte, error) {
	for {
		var h [14]byte
		if _, err := io.ReadFull(ws.br, h[:2]); err != nil {
			return nil, err
		}
		op := h[0] & 0x0f
		masked := h[1]&0x80 != 0
		n := uint64(h[1] & 0x7f)
		switch n {
		case 126:
			if _, err := io.ReadFull(ws.br, h[2:4]); err != nil {
				return nil, err
			}
			n = uint64(binary.BigEndian.Uint16(h[2:4]))
		case 127:
			if _, err := io.ReadFull(ws.br, h[2:10]); err != nil {
				return nil, err
			}
			n = binary.BigEndian.Uint64(h[2:10])
		}
		if n > 1<<20 {
			return nil, fmt.Errorf("websocket frame of %d bytes", n)
		}
		var key [4]byte
		if masked {
			if _, err := io.ReadFull(ws.br, key[:]); err != nil {
				return nil, err
			}
		}
		if cap(ws.buf) < int(n) {
			ws.buf = make([]byte, n)
		}
		p := ws.buf[:n]
		if _, err := io.ReadFull(ws.br, p); err != nil {
			return nil, err
		}
		if masked {
			for i := range p {
				p[i] ^= key[i&3]
			}
		}
		switch op {
		case 0x0, 0x1, 0x2:
			return p, nil
		case 0x8:
			return nil, errWSClosed
		case 0x9: // ping: pong with the same payload, masked with a zero key
			if len(p) > 125 {
				return nil, errors.New("websocket ping too long")
			}
			frame := append([]byte{0x8a, 0x80 | byte(len(p)), 0, 0, 0, 0}, p...)
			if _, err := ws.c.Write(frame); err != nil {
				return nil, err
			}
		}
	}
}

var globalPrefix = []byte(`{"type":"global"`)

// readLoop reads data messages until the socket ends and returns why (as
// next does). fn gets each payload (valid during the call), when the
// kernel received its bytes (unix ns; the newest bytes of the read that
// completed it, so never earlier than the message's own arrival; 0 where
// the platform gives no stamp) and when this process read them. It is what
// times the fan-out: the kernel's stamp is when the server's write reached
// this socket, whatever this process's own scheduling delays (it shares
// the CPUs with the servers it measures), and the read time is beside it.
//
// Where it can, it reads the descriptor itself: one recvmsg per wake-up,
// not a second one that finds the socket empty, and no allocation. After
// a read that did not fill the buffer, every byte queued was taken, and
// the next arrival wakes the goroutine (the runtime's poller is
// edge-triggered and RawConn.Read keeps its readiness between calls).
func (ws *wsClient) readLoop(fn func(p []byte, kernelNs, readNs int64)) error {
	sc, ok := ws.c.(syscall.Conn)
	var rc syscall.RawConn
	if ok && rawRecvSupported {
		var err error
		if rc, err = sc.SyscallConn(); err != nil {
			rc = nil
		}
	}
	if rc == nil {
		for {
			p, err := ws.next()
			if err != nil {
				return err
			}
			now := time.Now().UnixNano()
			fn(p, 0, now)
		}
	}
	// What the handshake's reader took beyond the 101 comes first.
	buf := make([]byte, ws.br.Buffered(), max(1024, 2*ws.br.Buffered()))
	_, _ = io.ReadFull(ws.br, buf)
	var rerr error
	if len(buf) > 0 {
		var used int
		used, rerr = ws.frames(buf, 0, time.Now().UnixNano(), fn)
		buf = buf[:copy(buf, buf[used:])]
		if rerr != nil {
			return rerr
		}
	}
	var r stampedReceiver
	err := rc.Read(func(fd uintptr) bool {
		for {
			if len(buf) == cap(buf) { // a partial frame fills it
				if cap(buf) >= 2<<20 {
					rerr = fmt.Errorf("websocket frame over %d bytes", cap(buf))
					return true
				}
				buf = append(buf, make([]byte, cap(buf))...)[:len(buf)]
			}
			space := cap(buf) - len(buf)
			n, kernel, err := r.recv(fd, buf[len(buf):cap(buf)])
			switch {
			case err == syscall.EINTR:
				continue
			case err == syscall.EAGAIN:
				return false
			case err != nil:
				rerr = err
				return true
			case n == 0:
				rerr = io.EOF
				return true
			}
			buf = buf[:len(buf)+n]
			used, err := ws.frames(buf, kernel, time.Now().UnixNano(), fn)
			buf = buf[:copy(buf, buf[used:])]
			if err != nil {
				rerr = err
				return true
			}
			if n < space {
				return false // took every byte queued: wait for the next
			}
		}
	})
	if rerr != nil {
		return rerr
	}
	return err
}

// frames hands the whole data frames at the start of b to fn, answers
// pings, and returns how many bytes it used (a partial frame stays) and
// errWSClosed at a close frame.
func (ws *wsClient) frames(b []byte, kernel, read int64, fn func(p []byte, kernelNs, readNs int64)) (int, error) {
	used := 0
	for {
		h := b[used:]
		if len(h) < 2 {
			return used, nil
		}
		op := h[0] & 0x0f
		masked := h[1]&0x80 != 0
		n := uint64(h[1] & 0x7f)
		hl := 2
		switch n {
		case 126:
			if len(h) < 4 {
				return used, nil
			}
			n, hl = uint64(binary.BigEndian.Uint16(h[2:4])), 4
		case 127:
			if len(h) < 10 {
				return used, nil
			}
			n, hl = binary.BigEndian.Uint64(h[2:10]), 10
		}
		if n > 1<<20 {
			return used, fmt.Errorf("websocket frame of %d bytes", n)
		}
		var key []byte
		if masked {
			if len(h) < hl+4 {
				return used, nil
			}
			key, hl = h[hl:hl+4], hl+4
		}
		if uint64(len(h)-hl) < n {
			return used, nil
		}
		p := h[hl : hl+int(n)]
		if masked {
			for i := range p {
				p[i] ^= key[i&3]
			}
		}
		used += hl + int(n)
		switch op {
		case 0x0, 0x1, 0x2:
			fn(p, kernel, read)
		case 0x8:
			return used, errWSClosed
		case 0x9:
			if len(p) > 125 {
				return used, errors.New("websocket ping too long")
			}
			frame := append([]byte{0x8a, 0x80 | byte(len(p)), 0, 0, 0, 0}, p...)
			if _, err := ws.c.Write(frame); err != nil {
				return used, err
			}
		}
	}
}
