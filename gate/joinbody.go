package gate

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"strconv"
	"sync"

	"github.com/anteroomhq/anteroom/session"
)

// The join's body is read into a pooled buffer and, when it is the usual
// tiny object of plain strings ({"gate":"default"}), parsed by hand
// (issue 14: reading and decoding it took about a fifth of the join
// handler's CPU). Anything else goes to encoding/json (decodeOne) as
// before: the fast path accepts only bodies the slow path decodes to the
// same joinRequest, and refuses nothing itself, so every error is the slow
// path's.

// readJoinRequest is readStateChange for the join: the origin check, the
// body up to the limit (a larger one is a 413), then an empty body, a
// body of one plain object (parseJoinBody) or decodeOne's answer.
func (s *Server) readJoinRequest(r *http.Request, req *joinRequest, want string) error {
	if err := s.checkOrigin(r); err != nil {
		return err
	}
	bp := bodyBufs.Get().(*[]byte)
	body, err := s.readBodyInto(r, (*bp)[:0])
	defer func() {
		if cap(body) <= maxPooledBody {
			*bp = body[:0]
			bodyBufs.Put(bp)
		}
	}()
	if err != nil {
		return err
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return nil
	}
	if parseJoinBody(body, req) {
		return nil
	}
	*req = joinRequest{} // the fast path may have set fields before it gave up
	return decodeOne(body, req, want)
}

// maxPooledBody is the largest body buffer put back in the pool.
const maxPooledBody = 16 << 10

var bodyBufs = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// readBodyInto is readBody appending to buf: the same limit, errors and
// answers, without io.ReadAll's allocations.
func (s *Server) readBodyInto(r *http.Request, buf []byte) ([]byte, error) {
	if r.ContentLength > s.opts.MaxBodyBytes {
		return buf, apiError(codeBodyTooLarge, "request body larger than "+strconv.FormatInt(s.opts.MaxBodyBytes, 10)+" bytes")
	}
	lr := io.LimitedReader{R: r.Body, N: s.opts.MaxBodyBytes + 1}
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := lr.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return buf, apiError(session.CodeInvalidArgument, "reading the request body failed")
		}
	}
	if int64(len(buf)) > s.opts.MaxBodyBytes {
		return buf, apiError(codeBodyTooLarge, "request body larger than "+strconv.FormatInt(s.opts.MaxBodyBytes, 10)+" bytes")
	}
	return buf, nil
}

// parseJoinBody parses body into req when it is one JSON object whose
// members are distinct keys among exactly "gate", "sessionId" and "code",
// each with a string value of printable ASCII other than '"' and '\\' (no
// escapes), with JSON whitespace around the tokens and nothing after the
// object. Those are the bodies encoding/json decodes to exactly these
// strings; on anything else it returns false, having perhaps set some
// fields, and the caller decodes the body the slow way.
func parseJoinBody(body []byte, req *joinRequest) bool {
	i := skipJSONSpace(body, 0)
	if i >= len(body) || body[i] != '{' {
		return false
	}
	i = skipJSONSpace(body, i+1)
	if i < len(body) && body[i] == '}' {
		return skipJSONSpace(body, i+1) == len(body)
	}
	var seen uint8
	for {
		key, j, ok := plainJSONToken(body, i)
		if !ok {
			return false
		}
		var field *string
		var bit uint8
		switch string(key) {
		case "gate":
			field, bit = &req.Gate, 1
		case "sessionId":
			field, bit = &req.SessionID, 2
		case "code":
			field, bit = &req.Code, 4
		default:
			return false
		}
		if seen&bit != 0 {
			return false // a repeated key: encoding/json keeps the last; leave that to it
		}
		seen |= bit
		i = skipJSONSpace(body, j)
		if i >= len(body) || body[i] != ':' {
			return false
		}
		val, j, ok := plainJSONToken(body, skipJSONSpace(body, i+1))
		if !ok {
			return false
		}
		*field = string(val)
		i = skipJSONSpace(body, j)
		if i >= len(body) {
			return false
		}
		switch body[i] {
		case ',':
			i = skipJSONSpace(body, i+1)
		case '}':
			return skipJSONSpace(body, i+1) == len(body)
		default:
			return false
		}
	}
}

// plainJSONToken reads the string at body[i:] when it is quoted printable
// ASCII without '"' or '\\', and returns its contents and the index after
// the closing quote.
func plainJSONToken(body []byte, i int) ([]byte, int, bool) {
	if i >= len(body) || body[i] != '"' {
		return nil, 0, false
	}
	for j := i + 1; j < len(body); j++ {
		switch c := body[j]; {
		case c == '"':
			return body[i+1 : j], j + 1, true
		case c < 0x20 || c > 0x7e || c == '\\':
			return nil, 0, false
		}
	}
	return nil, 0, false
}

// skipJSONSpace returns the index of the first byte at or after i that is
// not JSON whitespace (space, tab, newline, carriage return).
func skipJSONSpace(body []byte, i int) int {
	for i < len(body) {
		switch body[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}
