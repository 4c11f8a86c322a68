// Package wsframe is the server side of RFC 6455 framing that anteroom's hub
// writes itself: it encodes the frames a server sends (final, unmasked, no
// extension bits) and parses frame headers, so that the hub can write one
// pre-framed global message, the same bytes, to every socket, and cut the
// byte stream the websocket library writes into whole frames.
//
// The handshake, reads and close handshake stay with github.com/coder/websocket;
// this package only covers what the hub puts on the wire beside it.
// Standard library only.
package wsframe

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Opcode is a frame's opcode (RFC 6455 §5.2).
type Opcode byte

// The opcodes of RFC 6455 §5.2.
const (
	OpContinuation Opcode = 0x0
	OpText         Opcode = 0x1
	OpBinary       Opcode = 0x2
	OpClose        Opcode = 0x8
	OpPing         Opcode = 0x9
	OpPong         Opcode = 0xA
)

// IsControl reports whether op is a control opcode (close, ping, pong or a
// reserved one, 0x8 to 0xF).
func (op Opcode) IsControl() bool { return op&0x8 != 0 }

const (
	// MaxControlPayload is the largest payload a control frame may carry
	// (RFC 6455 §5.5).
	MaxControlPayload = 125
	// MaxHeaderLen is the longest frame header: 2 bytes, 8 of extended
	// length, 4 of masking key.
	MaxHeaderLen = 14
)

// Errors returned by ParseHeader and Splitter.Write.
var (
	// ErrShort: the bytes given end before the header does; give more.
	ErrShort = errors.New("wsframe: header incomplete")
	// ErrMalformed: the header breaks RFC 6455 (a length not in its minimal
	// form, a 64-bit length with its top bit set, a control frame that is
	// fragmented or longer than MaxControlPayload).
	ErrMalformed = errors.New("wsframe: malformed frame header")
	// ErrTooLarge: a frame's payload is longer than the Splitter's MaxPayload.
	ErrTooLarge = errors.New("wsframe: frame too large")
)

// HeaderLen is the length of the header of an unmasked frame with a
// payload of n bytes: 2, 4 (n > 125) or 10 (n > 65535).
func HeaderLen(n int) int {
	switch {
	case n <= 125:
		return 2
	case n <= 0xffff:
		return 4
	default:
		return 10
	}
}

// Append appends to dst one final, unmasked frame with opcode op and
// payload: what a server sends (RFC 6455 §5.1: a server never masks). The
// payload length takes the minimal of the 7-, 16- and 64-bit forms. It
// never fails; a control opcode with a payload over MaxControlPayload is
// the caller's mistake and is encoded as given.
func Append(dst []byte, op Opcode, payload []byte) []byte {
	n := len(payload)
	var h [10]byte
	h[0] = 0x80 | byte(op&0x0f) // FIN
	hl := HeaderLen(n)
	switch hl {
	case 2:
		h[1] = byte(n)
	case 4:
		h[1] = 126
		binary.BigEndian.PutUint16(h[2:], uint16(n))
	default:
		h[1] = 127
		binary.BigEndian.PutUint64(h[2:], uint64(n))
	}
	dst = append(dst, h[:hl]...)
	return append(dst, payload...)
}

// Text returns payload as one final, unmasked text frame, in a slice of
// exactly its length. It never fails.
func Text(payload []byte) []byte {
	return Append(make([]byte, 0, HeaderLen(len(payload))+len(payload)), OpText, payload)
}

// Header is a parsed frame header.
type Header struct {
	Fin     bool
	RSV     byte // the three reserved bits, as 0b0RRR (RSV1 = 4)
	Opcode  Opcode
	Masked  bool
	MaskKey [4]byte
	Length  int64 // payload length
}

// ParseHeader parses the frame header at the start of p and returns it and
// its length in bytes. It returns ErrShort when p ends before the header
// does, and an error wrapping ErrMalformed when the header breaks RFC 6455
// (see ErrMalformed). The payload is not looked at.
func ParseHeader(p []byte) (Header, int, error) {
	var h Header
	if len(p) < 2 {
		return h, 0, ErrShort
	}
	h.Fin = p[0]&0x80 != 0
	h.RSV = (p[0] >> 4) & 0x7
	h.Opcode = Opcode(p[0] & 0x0f)
	h.Masked = p[1]&0x80 != 0
	n := 2
	switch l := p[1] & 0x7f; l {
	case 126:
		if len(p) < n+2 {
			return h, 0, ErrShort
		}
		h.Length = int64(binary.BigEndian.Uint16(p[n:]))
		n += 2
		if h.Length <= 125 {
			return h, 0, fmt.Errorf("%w: 16-bit length %d fits in 7 bits", ErrMalformed, h.Length)
		}
	case 127:
		if len(p) < n+8 {
			return h, 0, ErrShort
		}
		u := binary.BigEndian.Uint64(p[n:])
		n += 8
		if u>>63 != 0 {
			return h, 0, fmt.Errorf("%w: 64-bit length has its top bit set", ErrMalformed)
		}
		h.Length = int64(u)
		if h.Length <= 0xffff {
			return h, 0, fmt.Errorf("%w: 64-bit length %d fits in 16 bits", ErrMalformed, h.Length)
		}
	default:
		h.Length = int64(l)
	}
	if h.Opcode.IsControl() && (!h.Fin || h.Length > MaxControlPayload) {
		return h, 0, fmt.Errorf("%w: control frame %#x fragmented or %d bytes long", ErrMalformed, byte(h.Opcode), h.Length)
	}
	if h.Masked {
		if len(p) < n+4 {
			return h, 0, ErrShort
		}
		copy(h.MaskKey[:], p[n:n+4])
		n += 4
	}
	return h, n, nil
}

// Splitter cuts a byte stream of frames, given in pieces of any size, into
// whole frames. The zero value takes frames with payloads of up to
// MaxControlPayload bytes (any control frame); set MaxPayload for more. Not
// safe for concurrent use.
type Splitter struct {
	// MaxPayload is the longest payload of a frame the Splitter holds; 0
	// means MaxControlPayload.
	MaxPayload int

	buf []byte // the start of a frame not complete yet
	err error  // sticky
}

// Write takes the next piece of the stream and calls emit with each frame
// it completes, in order; the slice given to emit is valid only during the
// call. Bytes of an incomplete frame are kept for the next Write. It
// returns the first error of emit, an error wrapping ErrMalformed for a
// header that breaks RFC 6455, or one wrapping ErrTooLarge for a payload
// longer than MaxPayload;
// after an error every later Write returns it too, since the stream has
// lost its framing.
func (s *Splitter) Write(p []byte, emit func(frame []byte) error) error {
	if s.err != nil {
		return s.err
	}
	if len(s.buf) > 0 {
		// Complete the kept frame first, taking only the bytes it needs
		// (a byte at a time while its header is incomplete).
		for {
			need, err := s.frameLen(s.buf)
			if err != nil && !errors.Is(err, ErrShort) {
				return s.fail(err)
			}
			if err == nil && need <= len(s.buf) {
				break
			}
			if len(p) == 0 {
				return nil // still incomplete: wait for more
			}
			take := 1
			if err == nil {
				take = min(need-len(s.buf), len(p))
			}
			s.buf = append(s.buf, p[:take]...)
			p = p[take:]
		}
		if err := emit(s.buf); err != nil {
			return s.fail(err)
		}
		s.buf = s.buf[:0]
	}
	for len(p) > 0 {
		need, err := s.frameLen(p)
		if err != nil && !errors.Is(err, ErrShort) {
			return s.fail(err)
		}
		if err != nil || need > len(p) {
			s.buf = append(s.buf[:0], p...)
			return nil
		}
		if err := emit(p[:need]); err != nil {
			return s.fail(err)
		}
		p = p[need:]
	}
	return nil
}

// Buffered is how many bytes of an incomplete frame the Splitter holds.
func (s *Splitter) Buffered() int { return len(s.buf) }

// frameLen is the whole length of the frame starting at p.
func (s *Splitter) frameLen(p []byte) (int, error) {
	h, n, err := ParseHeader(p)
	if err != nil {
		return 0, err
	}
	max := s.MaxPayload
	if max <= 0 {
		max = MaxControlPayload
	}
	if h.Length > int64(max) {
		return 0, fmt.Errorf("%w: %d bytes of payload, at most %d taken", ErrTooLarge, h.Length, max)
	}
	return n + int(h.Length), nil
}

func (s *Splitter) fail(err error) error {
	s.err = err
	s.buf = nil
	return err
}
