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
	d := net.Dialer{LocalAddr: local, Timeout: 10 * time.Second}
	c, err := d.DialContext(ctx, "tcp", addr)
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
