package gate

import (
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// slowJoinBody is what the join did before the fast path: readBody, then an
// empty body or decodeOne.
func slowJoinBody(s *Server, body string) (joinRequest, error) {
	var req joinRequest
	r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body))
	b, err := s.readBody(r)
	if err != nil {
		return req, err
	}
	if len(strings.TrimSpace(string(b))) == 0 {
		return req, nil
	}
	return req, decodeOne(b, &req, "want")
}

func fastJoinBody(s *Server, body string) (joinRequest, error) {
	var req joinRequest
	r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body))
	return req, s.readJoinRequest(r, &req, "want")
}

// assertSameJoinBody checks that the join's reading of body answers exactly
// as the slow path: the same request, or the same error.
func assertSameJoinBody(t *testing.T, s *Server, body string) {
	t.Helper()
	want, wantErr := slowJoinBody(s, body)
	got, gotErr := fastJoinBody(s, body)
	if wantErr != nil {
		require.Error(t, gotErr, "%q: the slow path refuses it", body)
		assert.Equal(t, errorDetail(wantErr), errorDetail(gotErr), "%q", body)
		return
	}
	require.NoError(t, gotErr, "%q", body)
	assert.Equal(t, want, got, "%q", body)
}

func newBodyTestServer(t *testing.T, maxBody int64) *Server {
	t.Helper()
	return &Server{opts: Options{MaxBodyBytes: maxBody}, origins: originPolicy{}}
}

func TestJoinBodyFastPathAnswersAsTheSlowPath(t *testing.T) {
	s := newBodyTestServer(t, 4<<10)
	cases := []string{
		``, ` `, "\n\t\r ", "\v", "\u00a0", `{}`, ` { } `, `{"gate":"default"}`, ` {"gate" : "vip" } `,
		"{\n\"gate\":\t\"a\"\r}\n", `{"gate":""}`, `{"gate":"default","code":"ABC-123"}`,
		`{"code":"x","gate":"y","sessionId":"user:42"}`, `{"sessionId":"s"}`,
		// duplicate keys: encoding/json keeps the last
		`{"gate":"a","gate":"b"}`, `{"gate":"a","GATE":"b"}`, `{"Gate":"a"}`, `{"gAtE":"a"}`,
		// escapes and non-ASCII
		`{"gate":"a\"b"}`, `{"gate":"\u0041"}`, `{"gate":"\ud800"}`, `{"gate":"é"}`, "{\"gate\":\"\xff\"}",
		`{"g\u0061te":"x"}`, `{"gate":"a\\b"}`, "{\"gate\":\"a\tb\"}", "{\"gate\":\"a\x00b\"}",
		`{"gate":"<script>&"}`,
		// wrong types, unknown fields
		`{"gate":null}`, `{"gate":1}`, `{"gate":true}`, `{"gate":["a"]}`, `{"gate":{}}`, `{"other":"x"}`,
		`{"gate":"a","other":1}`,
		// trailing junk and broken objects
		`{"gate":"a"}x`, `{"gate":"a"}{}`, `{"gate":"a"} {"gate":"b"}`, `{"gate":"a"}` + "\v", `{"gate":"a"},`,
		`{"gate":"a",}`, `{"gate":"a"`, `{"gate":"a}`, `{"gate" "a"}`, `{"gate":}`, `{,}`, `{`, `}`, `[]`, `"gate"`,
		`null`, `1`, `{"gate":"a"}]`, "\ufeff{\"gate\":\"a\"}", `{"gate":"a"}` + "\u00a0",
		// a huge body, over the limit, and one at it
		`{"gate":"` + strings.Repeat("a", 5000) + `"}`,
		`{"gate":"` + strings.Repeat("a", 4<<10-11) + `"}`,
		`{"gate":"` + strings.Repeat("a", 4<<10-10) + `"}`,
	}
	for _, body := range cases {
		assertSameJoinBody(t, s, body)
	}
}

// Random bodies built from JSON's pieces, valid and broken: the fast path
// never accepts what the slow path refuses, nor reads it differently.
func TestJoinBodyFastPathOnRandomBodies(t *testing.T) {
	s := newBodyTestServer(t, 4<<10)
	rng := rand.New(rand.NewPCG(14, 14))
	pieces := []string{`{`, `}`, `"gate"`, `"sessionId"`, `"code"`, `"Gate"`, `"x"`, `"default"`, `""`, `:`, `,`, ` `, "\n", "\t",
		`"a\"b"`, `"\u0041"`, `"é"`, `null`, `1`, `[`, `]`, "\v", `"<&>"`, `"unknown"`, "\xff", `\`}
	accepted := 0
	for range 20000 {
		var b strings.Builder
		if rng.IntN(2) == 0 { // mostly well-formed objects
			b.WriteString(`{`)
			for k := range rng.IntN(4) {
				if k > 0 {
					b.WriteString(pieces[10])
				}
				b.WriteString(pieces[2+rng.IntN(4)])
				b.WriteString(pieces[9+rng.IntN(2)*2])
				b.WriteString(pieces[6+rng.IntN(3)])
			}
			b.WriteString(`}`)
			if rng.IntN(4) == 0 {
				b.WriteString(pieces[rng.IntN(len(pieces))])
			}
		} else {
			for range rng.IntN(12) {
				b.WriteString(pieces[rng.IntN(len(pieces))])
			}
		}
		body := b.String()
		var req joinRequest
		if parseJoinBody([]byte(body), &req) {
			accepted++
		}
		assertSameJoinBody(t, s, body)
	}
	assert.Greater(t, accepted, 1000, "the fast path takes the usual bodies")
}

// The fast path takes the usual body (and so is what the test above
// compares).
func TestParseJoinBodyTakesTheUsualBody(t *testing.T) {
	var req joinRequest
	require.True(t, parseJoinBody([]byte(`{"gate":"default"}`), &req))
	assert.Equal(t, joinRequest{Gate: "default"}, req)
	req = joinRequest{}
	require.True(t, parseJoinBody([]byte(` {"code":"C","sessionId":"u:1","gate":"g"} `), &req))
	assert.Equal(t, joinRequest{Gate: "g", SessionID: "u:1", Code: "C"}, req)
	for _, body := range []string{`{"gate":"a","gate":"b"}`, `{"gate":"\u0041"}`, `{"gate":"a"}x`, `{"Gate":"a"}`} {
		assert.False(t, parseJoinBody([]byte(body), &joinRequest{}), body)
	}
}

// A body the fast path gives up on halfway is decoded from scratch: no
// field it set survives into the slow path's answer.
func TestJoinBodyFastPathLeavesNothingBehind(t *testing.T) {
	s := newBodyTestServer(t, 4<<10)
	got, err := fastJoinBody(s, `{"gate":"a","code":"x","GATE":"b"}`)
	require.NoError(t, err)
	assert.Equal(t, joinRequest{Gate: "b", Code: "x"}, got)
	got, err = fastJoinBody(s, `{"gate":"a","code":"x","gate":"b"}`)
	require.NoError(t, err)
	assert.Equal(t, joinRequest{Gate: "b", Code: "x"}, got)
}

type failingBody struct{ n int }

func (f *failingBody) Read(p []byte) (int, error) {
	if f.n == 0 {
		return 0, errors.New("connection reset")
	}
	n := min(f.n, len(p))
	for i := range n {
		p[i] = ' '
	}
	f.n -= n
	return n, nil
}

// A body that fails halfway, one announced larger than the limit, and a
// chunked one over it: the same answers as readBody.
func TestReadBodyIntoAnswersAsReadBody(t *testing.T) {
	s := newBodyTestServer(t, 100)
	for _, tc := range []struct {
		name string
		req  func() *http.Request
	}{
		{"fails", func() *http.Request {
			return httptest.NewRequest(http.MethodPost, "/", io.NopCloser(&failingBody{n: 10}))
		}},
		{"announced too large", func() *http.Request {
			r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader("{}"))
			r.ContentLength = 101
			return r
		}},
		{"chunked over the limit", func() *http.Request {
			r := httptest.NewRequest(http.MethodPost, "/", io.NopCloser(strings.NewReader(strings.Repeat(" ", 101))))
			r.ContentLength = -1
			return r
		}},
		{"at the limit", func() *http.Request {
			return httptest.NewRequest(http.MethodPost, "/", io.NopCloser(strings.NewReader(`{"gate":"`+strings.Repeat("a", 89)+`"}`)))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want, wantErr := s.readBody(tc.req())
			got, gotErr := s.readBodyInto(tc.req(), make([]byte, 0, 3))
			if wantErr != nil {
				assert.Equal(t, errorDetail(wantErr), errorDetail(gotErr))
				return
			}
			require.NoError(t, gotErr)
			assert.Equal(t, want, got)
		})
	}
}

// FuzzJoinBodyFastPath: whatever the body, the join reads it as the slow path does.
func FuzzJoinBodyFastPath(f *testing.F) {
	for _, seed := range []string{``, `{}`, `{"gate":"default"}`, `{"gate":"a","gate":"b"}`, `{"gate":"\u0041"}`, `{"gate":"a"}x`} {
		f.Add(seed)
	}
	s := &Server{opts: Options{MaxBodyBytes: 4 << 10}}
	f.Fuzz(func(t *testing.T, body string) {
		assertSameJoinBody(t, s, body)
	})
}
