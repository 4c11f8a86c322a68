package wsframe_test

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/broadcast/wsframe"
)

func hexBytes(b ...byte) []byte { return b }

// The unmasked examples of RFC 6455 §5.7, which a server may send, encoded
// by Append byte for byte.
func TestAppendRFC6455Examples(t *testing.T) {
	p256 := bytes.Repeat([]byte{'x'}, 256)
	p64k := bytes.Repeat([]byte{'y'}, 65536)
	tests := []struct {
		name    string
		op      wsframe.Opcode
		payload []byte
		header  []byte
	}{
		{"single-frame unmasked text Hello", wsframe.OpText, []byte("Hello"), hexBytes(0x81, 0x05)},
		{"unmasked ping Hello", wsframe.OpPing, []byte("Hello"), hexBytes(0x89, 0x05)},
		{"256 bytes binary, 16-bit length", wsframe.OpBinary, p256, hexBytes(0x82, 0x7E, 0x01, 0x00)},
		{"64 KiB binary, 64-bit length", wsframe.OpBinary, p64k, hexBytes(0x82, 0x7F, 0, 0, 0, 0, 0, 0x01, 0x00, 0x00)},
		{"empty pong", wsframe.OpPong, nil, hexBytes(0x8A, 0x00)},
		{"close 1000", wsframe.OpClose, hexBytes(0x03, 0xE8), hexBytes(0x88, 0x02)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := append(append([]byte(nil), tt.header...), tt.payload...)
			got := wsframe.Append(nil, tt.op, tt.payload)
			require.Equal(t, want, got)
			assert.Equal(t, []byte("prefix"), wsframe.Append([]byte("prefix"), tt.op, tt.payload)[:6], "Append appends")
			if tt.op == wsframe.OpText {
				text := wsframe.Text(tt.payload)
				assert.Equal(t, want, text)
				assert.Equal(t, len(text), cap(text), "Text allocates exactly")
			}
		})
	}
}

// Every example of RFC 6455 §5.7, masked ones included, parses to the
// header it describes.
func TestParseHeaderRFC6455Examples(t *testing.T) {
	tests := []struct {
		name  string
		frame []byte
		want  wsframe.Header
		n     int
	}{
		{"unmasked text Hello", hexBytes(0x81, 0x05, 0x48, 0x65, 0x6c, 0x6c, 0x6f),
			wsframe.Header{Fin: true, Opcode: wsframe.OpText, Length: 5}, 2},
		{"masked text Hello", hexBytes(0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f, 0x4d, 0x51, 0x58),
			wsframe.Header{Fin: true, Opcode: wsframe.OpText, Masked: true, MaskKey: [4]byte{0x37, 0xfa, 0x21, 0x3d}, Length: 5}, 6},
		{"fragment Hel", hexBytes(0x01, 0x03, 0x48, 0x65, 0x6c),
			wsframe.Header{Opcode: wsframe.OpText, Length: 3}, 2},
		{"fragment lo", hexBytes(0x80, 0x02, 0x6c, 0x6f),
			wsframe.Header{Fin: true, Opcode: wsframe.OpContinuation, Length: 2}, 2},
		{"unmasked ping Hello", hexBytes(0x89, 0x05, 0x48, 0x65, 0x6c, 0x6c, 0x6f),
			wsframe.Header{Fin: true, Opcode: wsframe.OpPing, Length: 5}, 2},
		{"masked pong Hello", hexBytes(0x8a, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f, 0x4d, 0x51, 0x58),
			wsframe.Header{Fin: true, Opcode: wsframe.OpPong, Masked: true, MaskKey: [4]byte{0x37, 0xfa, 0x21, 0x3d}, Length: 5}, 6},
		{"256 bytes binary", hexBytes(0x82, 0x7E, 0x01, 0x00),
			wsframe.Header{Fin: true, Opcode: wsframe.OpBinary, Length: 256}, 4},
		{"64 KiB binary", hexBytes(0x82, 0x7F, 0, 0, 0, 0, 0, 0x01, 0x00, 0x00),
			wsframe.Header{Fin: true, Opcode: wsframe.OpBinary, Length: 65536}, 10},
		{"rsv1 (compressed) text", hexBytes(0xC1, 0x00),
			wsframe.Header{Fin: true, RSV: 4, Opcode: wsframe.OpText}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, n, err := wsframe.ParseHeader(tt.frame)
			require.NoError(t, err)
			assert.Equal(t, tt.want, h)
			assert.Equal(t, tt.n, n)
			for i := range n { // every prefix of the header asks for more
				_, _, err := wsframe.ParseHeader(tt.frame[:i])
				assert.ErrorIs(t, err, wsframe.ErrShort, "prefix %d", i)
			}
		})
	}
}

// Hostile or broken headers are refused rather than misread.
func TestParseHeaderRefusesMalformed(t *testing.T) {
	tests := []struct {
		name  string
		frame []byte
	}{
		{"16-bit length that fits in 7 bits", hexBytes(0x81, 126, 0, 125)},
		{"64-bit length that fits in 16 bits", hexBytes(0x81, 127, 0, 0, 0, 0, 0, 0, 0xff, 0xff)},
		{"64-bit length with its top bit set", hexBytes(0x81, 127, 0x80, 0, 0, 0, 0, 0, 0, 0)},
		{"fragmented ping", hexBytes(0x09, 0x00)},
		{"close longer than 125 bytes", hexBytes(0x88, 126, 0, 126)},
		{"reserved control opcode, fragmented", hexBytes(0x0B, 0x00)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := wsframe.ParseHeader(tt.frame)
			assert.ErrorIs(t, err, wsframe.ErrMalformed)
		})
	}
}

// At each boundary of the three length forms, Append picks the minimal one
// and ParseHeader reads back what Append wrote.
func TestLengthFormBoundaries(t *testing.T) {
	for _, n := range []int{0, 1, 125, 126, 127, 0xfffe, 0xffff, 0x10000, 0x10001} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			payload := bytes.Repeat([]byte{'a'}, n)
			f := wsframe.Append(nil, wsframe.OpText, payload)
			h, hl, err := wsframe.ParseHeader(f)
			require.NoError(t, err)
			assert.Equal(t, wsframe.HeaderLen(n), hl)
			assert.Equal(t, wsframe.Header{Fin: true, Opcode: wsframe.OpText, Length: int64(n)}, h)
			assert.Equal(t, payload, f[hl:])
			assert.Len(t, f, hl+n)
		})
	}
}

// A stream of frames given to a Splitter in pieces of any size comes out
// as the same frames, whole and in order.
func TestSplitterAnyChunking(t *testing.T) {
	frames := [][]byte{
		wsframe.Append(nil, wsframe.OpPong, []byte("1")),
		wsframe.Append(nil, wsframe.OpClose, append([]byte{0x03, 0xe8}, bytes.Repeat([]byte{'r'}, 123)...)),
		wsframe.Append(nil, wsframe.OpPing, nil),
		hexBytes(0x8a, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f, 0x4d, 0x51, 0x58), // masked
		wsframe.Append(nil, wsframe.OpText, bytes.Repeat([]byte{'t'}, 300)),
	}
	stream := bytes.Join(frames, nil)
	for _, chunk := range []int{1, 2, 3, 5, 7, 13, 64, 127, 1000, len(stream)} {
		t.Run(fmt.Sprint(chunk), func(t *testing.T) {
			s := wsframe.Splitter{MaxPayload: 300}
			var got [][]byte
			for p := stream; len(p) > 0; {
				k := min(chunk, len(p))
				require.NoError(t, s.Write(p[:k], func(f []byte) error {
					got = append(got, bytes.Clone(f))
					return nil
				}))
				p = p[k:]
			}
			assert.Equal(t, frames, got)
			assert.Zero(t, s.Buffered())
		})
	}
}

// A payload over MaxPayload, a malformed header or an emit error stops the Splitter
// for good: the stream has lost its framing.
func TestSplitterErrorsAreSticky(t *testing.T) {
	emitOK := func([]byte) error { return nil }
	tests := []struct {
		name  string
		max   int
		input []byte
		emit  func([]byte) error
		want  error
	}{
		{"text frame over the default max", 0, wsframe.Append(nil, wsframe.OpText, make([]byte, 126)), emitOK, wsframe.ErrTooLarge},
		{"declared 2^62 bytes", 0, hexBytes(0x82, 127, 0x40, 0, 0, 0, 0, 0, 0, 0), emitOK, wsframe.ErrTooLarge},
		{"malformed", 0, hexBytes(0x81, 126, 0, 1), emitOK, wsframe.ErrMalformed},
		{"emit fails", 0, wsframe.Append(nil, wsframe.OpPing, nil), func([]byte) error { return errBoom }, errBoom},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := wsframe.Splitter{MaxPayload: tt.max}
			assert.ErrorIs(t, s.Write(tt.input, tt.emit), tt.want)
			assert.ErrorIs(t, s.Write(wsframe.Append(nil, wsframe.OpPing, nil), emitOK), tt.want, "sticky")
			assert.Zero(t, s.Buffered())
		})
	}
	// The same errors when the header arrives a byte at a time.
	s := wsframe.Splitter{}
	var err error
	for _, b := range hexBytes(0x81, 126, 0, 1) {
		if err = s.Write([]byte{b}, emitOK); err != nil {
			break
		}
	}
	assert.ErrorIs(t, err, wsframe.ErrMalformed)
}

var errBoom = errors.New("boom")
