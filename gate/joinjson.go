package gate

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/anteroomhq/anteroom/session"
)

// The join answer is written by hand (issue 14: encoding/json took about a
// quarter of the join handler's CPU, the view's buckets through
// reflection). appendJoinJSON writes exactly what echo's c.JSON writes for
// joinResponse (encoding/json, HTML escaped, a newline after), and gives up
// (ok false, the caller uses c.JSON) on anything it does not write the same
// way: a string needing an escape, a float outside the plain notation, a
// time encoding/json refuses or writes with an offset.

// joinJSONFields are the JSON names appendJoinJSON writes (or leaves to
// encoding/json), in order: a test checks them against joinResponse, so a
// field added to the views cannot be left out of the hand-written answer.
var joinJSONFields = []string{"gate", "firstWaitingPosition", "lastWaitingPosition", "waiting", "active", "limit",
	"admittedPerMinute", "buckets", "priority", "session", "status", "position", "place", "claimDeadline",
	"claimWindow", "admission", "notify", "lane", "draw", "token"}

// globalJSONFields are the JSON names appendGlobalJSON writes (or leaves
// to encoding/json), in order; a test checks them against GlobalView.
var globalJSONFields = joinJSONFields[:9]

// appendGlobalJSON appends the JSON of a GlobalView and a newline, as
// c.JSON writes it; ok is false (the caller uses c.JSON) on what only
// encoding/json writes (see appendJoinJSON).
func appendGlobalJSON(b []byte, v *session.GlobalView) ([]byte, bool) {
	b, ok := appendGlobalFields(b, v)
	return append(b, "}\n"...), ok
}

// appendGlobalFields appends the GlobalView's members after the opening
// brace, without the closing one.
func appendGlobalFields(b []byte, v *session.GlobalView) ([]byte, bool) {
	ok := true
	num := func(key string, n int64) {
		b = append(b, key...)
		b = strconv.AppendInt(b, n, 10)
	}
	b = append(b, `{"gate":`...)
	if !plainJSONString(v.Gate) {
		ok = false
	}
	b = append(b, '"')
	b = append(b, v.Gate...)
	b = append(b, '"')
	num(`,"firstWaitingPosition":`, v.FirstWaitingPosition)
	num(`,"lastWaitingPosition":`, v.LastWaitingPosition)
	num(`,"waiting":`, v.Waiting)
	num(`,"active":`, v.Active)
	num(`,"limit":`, v.Limit)
	b = append(b, `,"admittedPerMinute":`...)
	var plain bool
	if b, plain = appendPlainFloat(b, v.AdmittedPerMinute); !plain {
		ok = false
	}
	if len(v.Buckets) > 0 {
		b = appendBuckets(b, v.Buckets)
	}
	if v.Priority != nil {
		ok = false // the priority lane's view: left to encoding/json
	}
	return b, ok
}

// appendJoinJSON appends the JSON of joinResponse{v, tok} and a newline.
func appendJoinJSON(b []byte, v *session.SessionView, tok string) ([]byte, bool) {
	b, ok := appendGlobalFields(b, &v.GlobalView)
	str := func(key, s string) {
		b = append(b, key...)
		if !plainJSONString(s) {
			ok = false
			return
		}
		b = append(b, '"')
		b = append(b, s...)
		b = append(b, '"')
	}
	num := func(key string, n int64) {
		b = append(b, key...)
		b = strconv.AppendInt(b, n, 10)
	}
	str(`,"session":`, v.Session)
	str(`,"status":`, string(v.Status))
	num(`,"position":`, v.Position)
	if v.Place != 0 {
		num(`,"place":`, v.Place)
	}
	if t := v.ClaimDeadline; t != nil {
		_, off := t.Zone()
		if y := t.Year(); off != 0 || y < 0 || y > 9999 {
			ok = false
		} else {
			b = append(b, `,"claimDeadline":"`...)
			b = t.AppendFormat(b, time.RFC3339Nano)
			b = append(b, '"')
		}
	}
	if f := v.ClaimWindow; f != 0 {
		b = append(b, `,"claimWindow":`...)
		var plain bool
		if b, plain = appendPlainFloat(b, f); !plain {
			ok = false
		}
	}
	if v.Admission != "" {
		str(`,"admission":`, v.Admission)
	}
	if v.Notify {
		b = append(b, `,"notify":true`...)
	}
	if v.Lane != "" {
		str(`,"lane":`, v.Lane)
	}
	if v.Draw != "" {
		str(`,"draw":`, v.Draw)
	}
	str(`,"token":`, tok)
	b = append(b, "}\n"...)
	return b, ok
}

// encodedBuckets is a view's buckets and their JSON.
type encodedBuckets struct {
	buckets []int64
	json    []byte
}

// lastBuckets caches the JSON of the last buckets written. A gate's views
// share one buckets slice until the line changes (every join of a commit
// answers with the same one, up to MaxBuckets pairs: most of the answer),
// and a view's slice is never changed once published, so the slice's
// identity (its first element's address and its length) names its
// contents; the cache holds the slice, so that address is not reused
// while it is cached.
var lastBuckets atomic.Pointer[encodedBuckets]

// appendBuckets appends `,"buckets":[...]` for buckets (not empty).
func appendBuckets(b []byte, buckets []int64) []byte {
	if c := lastBuckets.Load(); c != nil && len(c.buckets) == len(buckets) && &c.buckets[0] == &buckets[0] {
		return append(b, c.json...)
	}
	enc := make([]byte, 0, 16+8*len(buckets))
	enc = append(enc, `,"buckets":[`...)
	for i, n := range buckets {
		if i > 0 {
			enc = append(enc, ',')
		}
		enc = strconv.AppendInt(enc, n, 10)
	}
	enc = append(enc, ']')
	lastBuckets.Store(&encodedBuckets{buckets: buckets, json: enc})
	return append(b, enc...)
}

// plainJSONString reports whether encoding/json writes s as it is between
// quotes: printable ASCII without '"', '\\' and the HTML-escaped '<', '>',
// '&'.
func plainJSONString(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20 || c > 0x7e, c == '"', c == '\\', c == '<', c == '>', c == '&':
			return false
		}
	}
	return true
}

// writeJoin answers a join: by hand (joinjson.go) unless ?pretty asks for
// echo's indented JSON or the view holds what only encoding/json writes.
func (s *Server) writeJoin(c echo.Context, view *session.SessionView, tok string) error {
	if r := c.Request(); r.URL.RawQuery == "" || !strings.Contains(r.URL.RawQuery, "pretty") {
		bp := joinBufs.Get().(*[]byte)
		b, ok := appendJoinJSON((*bp)[:0], view, tok)
		if ok && !c.Echo().Debug {
			err := blobJSON(c, b)
			*bp = b
			joinBufs.Put(bp)
			return err
		}
		joinBufs.Put(bp)
	}
	return writeJSON(c, http.StatusOK, joinResponse{SessionView: *view, Token: tok})
}

// writeGlobal answers {base}/api/global as writeJoin answers a join.
func writeGlobal(c echo.Context, view *session.GlobalView) error {
	if r := c.Request(); r.URL.RawQuery == "" || !strings.Contains(r.URL.RawQuery, "pretty") {
		bp := joinBufs.Get().(*[]byte)
		b, ok := appendGlobalJSON((*bp)[:0], view)
		if ok && !c.Echo().Debug {
			err := blobJSON(c, b)
			*bp = b
			joinBufs.Put(bp)
			return err
		}
		joinBufs.Put(bp)
	}
	return writeJSON(c, http.StatusOK, view)
}

var joinBufs = sync.Pool{New: func() any { b := make([]byte, 0, 2048); return &b }}

// sessionCookie is the Set-Cookie value http.Cookie.String gives the
// session cookie (Path=/, HttpOnly, SameSite=Lax, Max-Age maxAge when
// positive, Secure when asked), written without its validation and
// allocations; ok is false (the caller uses http.Cookie) for a token that
// is not plain cookie text.
func sessionCookie(tok string, maxAge int, secure bool) (string, bool) {
	if tok == "" {
		return "", false
	}
	for i := 0; i < len(tok); i++ {
		switch c := tok[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '-', c == '_', c == '.':
		default:
			return "", false
		}
	}
	var b strings.Builder // one allocation: the value itself
	b.Grow(len(CookieName) + len(tok) + 64)
	b.WriteString(CookieName)
	b.WriteByte('=')
	b.WriteString(tok)
	b.WriteString("; Path=/")
	if maxAge > 0 {
		var n [20]byte
		b.WriteString("; Max-Age=")
		b.Write(strconv.AppendInt(n[:0], int64(maxAge), 10))
	} else if maxAge < 0 {
		b.WriteString("; Max-Age=0")
	}
	b.WriteString("; HttpOnly")
	if secure {
		b.WriteString("; Secure")
	}
	b.WriteString("; SameSite=Lax")
	return b.String(), true
}

// appendPlainFloat appends f as encoding/json writes it when that is the
// shortest 'f' form (0, or a magnitude in [1e-6, 1e21)); plain is false,
// and b unchanged, for NaN, infinities and the exponent forms, which the
// caller leaves to encoding/json.
func appendPlainFloat(b []byte, f float64) (_ []byte, plain bool) {
	if math.IsNaN(f) || math.IsInf(f, 0) || f != 0 && (math.Abs(f) < 1e-6 || math.Abs(f) >= 1e21) {
		return b, false
	}
	return strconv.AppendFloat(b, f, 'f', -1, 64), true
}
