package wire_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/gate/wire"
	"github.com/anteroomhq/anteroom/session"
)

// The contract's statuses, written out here once more on purpose: the test
// is the independent statement the mapping is checked against.
func TestStatus(t *testing.T) {
	for code, want := range map[session.Code]int{
		session.CodeInvalidArgument: 400,
		wire.CodeInvalidJSON:        400,
		wire.CodeNoSession:          401,
		wire.CodeAPIKeyRequired:     401,
		session.CodeNotActive:       403,
		session.CodeUnknownGate:     404,
		session.CodeNotFound:        404,
		wire.CodeRouteNotFound:      404,
		wire.CodeMethodNotAllowed:   405,
		wire.CodeBodyTooLarge:       413,
		wire.CodeRateLimited:        429,
		session.CodeInternal:        500,
		"some_future_code":          500,
		"":                          500,
		wire.CodeBadGateway:         502,
		session.CodeUnavailable:     503,
		session.CodeGateClosed:      503,
		session.CodeGateExists:      409,
		session.CodeGateInUse:       409,
		session.CodePrequeueOpen:    409,
		wire.CodeAdminTokenRequired: 401,
		wire.CodeUpstreamTimeout:    504,
		wire.CodeRequestTimeout:     408,
		wire.CodeInvalidPath:        400,
	} {
		assert.Equal(t, want, wire.Status(code), "code %q", code)
	}
}

func TestWriteError(t *testing.T) {
	for _, method := range []string{http.MethodGet, http.MethodPost, http.MethodHead} {
		t.Run(method, func(t *testing.T) {
			w := httptest.NewRecorder()
			w.Header().Set("Retry-After", "5")
			wire.WriteError(w, httptest.NewRequest(method, "/", nil), session.CodeNotActive, `waiting <"in"> line`)
			assert.Equal(t, http.StatusForbidden, w.Code)
			assert.Equal(t, "application/json", w.Header().Get("Content-Type"))
			assert.Equal(t, "nosniff", w.Header().Get("X-Content-Type-Options"))
			assert.Equal(t, "5", w.Header().Get("Retry-After"), "headers set before are kept")
			full := `{"error":{"code":"session_not_active","message":"waiting \u003c\"in\"\u003e line"}}` + "\n"
			assert.Equal(t, strconv.Itoa(len(full)), w.Header().Get("Content-Length"))
			if method == http.MethodHead {
				assert.Empty(t, w.Body.String())
				return
			}
			assert.Equal(t, full, w.Body.String())
			var body wire.ErrorBody
			require.NoError(t, json.Unmarshal(w.Body.Bytes(), &body))
			assert.Equal(t, wire.NewErrorBody(session.CodeNotActive, `waiting <"in"> line`), body)
		})
	}
}

func TestMessagesCarryTheirTypeAndTheViewFlat(t *testing.T) {
	g := session.GlobalView{Gate: "default", FirstWaitingPosition: 3, Limit: 2}
	b, err := json.Marshal(wire.GlobalMessage{Type: wire.MessageGlobal, GlobalView: g})
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(string(b), `{"type":"global","gate":"default","firstWaitingPosition":3,`), "%s", b)
	b, err = json.Marshal(wire.SessionMessage{Type: wire.MessageSession, SessionView: session.SessionView{GlobalView: g, Session: "s1"}})
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(string(b), `{"type":"session","gate":"default",`), "%s", b)
	assert.Contains(t, string(b), `"session":"s1"`)
}

func TestBearerToken(t *testing.T) {
	for header, want := range map[string]string{
		"":                     "",
		"Bearer abc.def":       "abc.def",
		"bearer abc.def":       "abc.def",
		"BEARER   abc.def  ":   "abc.def",
		"Bearer ":              "",
		"Bearer":               "",
		"Basic dXNlcjpwYXNz":   "",
		"Bearerabc.def":        "",
		"Token abc.def":        "",
		"Bearer\tabc":          "",
		"Bearer a b":           "a b", // not a token: Verify refuses it
		"xBearer abc.def":      "",
		"Bearer \x00abc.def\n": "\x00abc.def",
	} {
		h := http.Header{}
		if header != "" {
			h.Set("Authorization", header)
		}
		assert.Equal(t, want, wire.BearerToken(h), "Authorization: %q", header)
	}
}

// The first value Cookies yields is what net/http's own parser finds for
// well-formed headers.
func TestCookiesFirstAgreesWithNetHTTP(t *testing.T) {
	for _, header := range [][]string{
		nil,
		{""},
		{"anteroom_session=abc.def"},
		{"a=1; anteroom_session=abc.def; b=2"},
		{"a=1;anteroom_session=abc.def"},
		{"anteroom_session_x=nope; anteroom_session=yes"},
		{"xanteroom_session=nope"},
		{"anteroom_session"},
		{"anteroom_session="},
		{`anteroom_session="quoted.value"`},
		{"a=1", "anteroom_session=second-line"},
		{"anteroom_session=first; anteroom_session=second"},
		{" anteroom_session = spaced"},
	} {
		r := &http.Request{Header: http.Header{"Cookie": header}}
		want := ""
		if c, err := r.Cookie(wire.CookieName); err == nil {
			want = c.Value
		}
		got := ""
		for v := range wire.Cookies(r.Header, wire.CookieName) {
			got = v
			break
		}
		assert.Equal(t, want, got, "Cookie: %q", header)
	}
}

func TestCookiesYieldsEveryValueInOrderUpToTheCap(t *testing.T) {
	for _, c := range []struct {
		header []string
		want   []string
	}{
		{nil, nil},
		{[]string{"anteroom_session=host; anteroom_session=parent"}, []string{"host", "parent"}},
		{[]string{"a=1; anteroom_session=one", "anteroom_session=two; b=2"}, []string{"one", "two"}},
		{[]string{`anteroom_session=""; anteroom_session="q"`}, []string{"", "q"}},
		{[]string{strings.Repeat("anteroom_session=x;", 1000)}, slices.Repeat([]string{"x"}, wire.MaxCookies)},
		{slices.Repeat([]string{"anteroom_session=y"}, 100), slices.Repeat([]string{"y"}, wire.MaxCookies)},
	} {
		got := slices.Collect(wire.Cookies(http.Header{"Cookie": c.header}, wire.CookieName))
		assert.Equal(t, c.want, got, "Cookie: %.80q", c.header)
	}
}

// Past the cap, the first and the last MaxCookies/2 values are yielded, in
// the order sent: a browser sends the visitor's own cookie (Path=/) among
// the last, after every deeper path's, so no number sent ahead of it
// pushes it out.
func TestCookiesYieldsTheFirstAndTheLastPastTheCap(t *testing.T) {
	const half = wire.MaxCookies / 2
	values := func(from, to int) []string {
		var out []string
		for i := from; i < to; i++ {
			out = append(out, fmt.Sprintf("v%d", i))
		}
		return out
	}
	for _, n := range []int{1, half - 1, half, half + 1, wire.MaxCookies, wire.MaxCookies + 1, 100, 1000} {
		var b strings.Builder
		for i, v := range values(0, n) {
			if i%7 == 3 {
				b.WriteString("other=z; ") // other names in between
			}
			b.WriteString("anteroom_session=" + v + "; ")
		}
		want := values(0, n)
		if n > wire.MaxCookies {
			want = append(values(0, half), values(n-half, n)...)
		}
		for _, header := range [][]string{{b.String()}, strings.SplitAfter(b.String(), "; ")} {
			got := slices.Collect(wire.Cookies(http.Header{"Cookie": header}, wire.CookieName))
			assert.Equal(t, want, got, "%d cookies in %d header lines", n, len(header))
		}
		// A caller that stops early gets what it asked for.
		var first []string
		for v := range wire.Cookies(http.Header{"Cookie": {b.String()}}, wire.CookieName) {
			if first = append(first, v); len(first) == half+1 {
				break
			}
		}
		assert.Equal(t, want[:min(len(want), half+1)], first, "%d cookies, stopped after %d", n, half+1)
	}
}

// The check runs on every request of the app: finding the cookie must not
// allocate.
func TestCookiesDoesNotAllocate(t *testing.T) {
	h := http.Header{"Cookie": {"a=1; anteroom_session=bad.token; b=2", "anteroom_session=good.token"}}
	var found string
	allocs := testing.AllocsPerRun(100, func() {
		for v := range wire.Cookies(h, wire.CookieName) {
			if strings.HasPrefix(v, "good") {
				found = v
				break
			}
		}
	})
	assert.Equal(t, "good.token", found)
	assert.Zero(t, allocs)

	// Nor past the cap, where the last ones are read in more passes.
	h = http.Header{"Cookie": {strings.Repeat("anteroom_session=bad.token; ", 100) + "anteroom_session=good.token"}}
	found = ""
	allocs = testing.AllocsPerRun(100, func() {
		for v := range wire.Cookies(h, wire.CookieName) {
			if strings.HasPrefix(v, "good") {
				found = v
				break
			}
		}
	})
	assert.Equal(t, "good.token", found)
	assert.Zero(t, allocs)
}

func TestLocalPath(t *testing.T) {
	for p, want := range map[string]bool{
		"/":                       true,
		"/app/x?y=1#z":            true,
		"/%2F%2Fevil.example":     true, // stays a path: browsers do not decode it
		"":                        false,
		"app":                     false,
		"https://evil.example/":   false,
		"//evil.example":          false,
		"/\\evil.example":         false,
		"/\t/evil.example":        false, // browsers drop the tab: "//evil.example"
		"/\n/evil.example":        false,
		"/\r/evil.example":        false,
		"/x\x00y":                 false,
		"/x\x7fy":                 false,
		"javascript:alert(1)":     false,
		" /leading-space":         false,
		"\\/evil.example":         false,
		"/ok\u2028still-one-path": true,
	} {
		assert.Equal(t, want, wire.LocalPath(p), "%q", p)
	}
}
