package gate

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
)

// echoJSON is what c.JSON writes for the join answer: the bytes the hand
// encoder must reproduce.
func echoJSON(t *testing.T, v session.SessionView, tok string) []byte {
	t.Helper()
	e := echo.New()
	rec := httptest.NewRecorder()
	c := e.NewContext(httptest.NewRequest(http.MethodPost, "/", nil), rec)
	require.NoError(t, c.JSON(http.StatusOK, joinResponse{SessionView: v, Token: tok}))
	return rec.Body.Bytes()
}

func TestAppendJoinJSONMatchesEncodingJSON(t *testing.T) {
	deadline := time.Date(2026, 11, 24, 3, 4, 5, 123456789, time.UTC)
	round := time.Date(2026, 11, 24, 3, 4, 5, 0, time.UTC)
	base := session.SessionView{
		GlobalView: session.GlobalView{Gate: "default", FirstWaitingPosition: 11, LastWaitingPosition: 40, Waiting: 28,
			Active: 10, Limit: 10, AdmittedPerMinute: 12.5, Buckets: []int64{0, 8, 9, 8, 20, 12}},
		Session: "AbC-_x09", Status: session.StatusWaiting, Position: 15, Place: 4,
	}
	with := func(f func(v *session.SessionView)) session.SessionView {
		v := base
		v.Buckets = append([]int64(nil), base.Buckets...)
		f(&v)
		return v
	}
	cases := map[string]struct {
		v      session.SessionView
		tok    string
		wantOK bool
	}{
		"waiting":           {base, "id.123.mac", true},
		"active, no place":  {with(func(v *session.SessionView) { v.Status, v.Place, v.Buckets = session.StatusActive, 0, nil }), "t", true},
		"claim deadline":    {with(func(v *session.SessionView) { v.ClaimDeadline = &deadline }), "t", true},
		"whole second":      {with(func(v *session.SessionView) { v.ClaimDeadline = &round }), "t", true},
		"zero rate":         {with(func(v *session.SessionView) { v.AdmittedPerMinute = 0 }), "t", true},
		"negative zero":     {with(func(v *session.SessionView) { v.AdmittedPerMinute = math.Copysign(0, -1) }), "t", true},
		"tiny rate":         {with(func(v *session.SessionView) { v.AdmittedPerMinute = 1e-7 }), "t", false},
		"huge rate":         {with(func(v *session.SessionView) { v.AdmittedPerMinute = 1e22 }), "t", false},
		"third":             {with(func(v *session.SessionView) { v.AdmittedPerMinute = 1.0 / 3 }), "t", true},
		"claim window":      {with(func(v *session.SessionView) { v.ClaimWindow = 60 }), "t", true},
		"short window":      {with(func(v *session.SessionView) { v.ClaimWindow = 0.001 }), "t", true},
		"tiny window":       {with(func(v *session.SessionView) { v.ClaimWindow = 1e-9 }), "t", false},
		"NaN window":        {with(func(v *session.SessionView) { v.ClaimWindow = math.NaN() }), "t", false},
		"extreme ints":      {with(func(v *session.SessionView) { v.Position, v.Waiting = math.MaxInt64, math.MinInt64 }), "t", true},
		"html in the gate":  {with(func(v *session.SessionView) { v.Gate = "<a&b>" }), "t", false},
		"quote in the id":   {with(func(v *session.SessionView) { v.Session = `a"b` }), "t", false},
		"unicode in the id": {with(func(v *session.SessionView) { v.Session = "caf\u00e9\u2028" }), "t", false},
		"control in token":  {with(func(v *session.SessionView) {}), "a\nb", false},
		"zone offset": {with(func(v *session.SessionView) {
			d := deadline.In(time.FixedZone("x", 3600))
			v.ClaimDeadline = &d
		}), "t", false},
		"year 10000": {with(func(v *session.SessionView) {
			d := deadline.AddDate(8000, 0, 0)
			v.ClaimDeadline = &d
		}), "t", false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, ok := appendJoinJSON(nil, &tc.v, tc.tok)
			assert.Equal(t, tc.wantOK, ok)
			if ok {
				assert.Equal(t, string(echoJSON(t, tc.v, tc.tok)), string(got))
			}
		})
	}
}

// Thousands of random views: whenever the hand encoder says it wrote the
// answer, it wrote encoding/json's bytes.
func TestAppendJoinJSONRandomViews(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	chars := []byte("abcXYZ019-_.<>&\"\\ \x01\x7f\xc3\xa9")
	randStr := func() string {
		n := r.IntN(12)
		b := make([]byte, n)
		for i := range b {
			if r.IntN(8) == 0 {
				b[i] = chars[r.IntN(len(chars))]
			} else {
				b[i] = chars[r.IntN(9)]
			}
		}
		return string(b)
	}
	floats := []float64{0, 1, 0.1, 2.5e-6, 9.99e-7, 123456789.125, 1e20, 1e21, -3.75, math.NaN(), math.Inf(1)}
	var fast, fastGlobal int
	for range 4000 {
		v := session.SessionView{
			GlobalView: session.GlobalView{Gate: randStr(), FirstWaitingPosition: r.Int64(), LastWaitingPosition: -r.Int64(),
				Waiting: r.Int64N(1000), Active: r.Int64N(1000), Limit: r.Int64N(1000)},
			Session: randStr(), Status: session.Status(randStr()), Position: r.Int64N(1 << 40), Place: r.Int64N(3),
		}
		if r.IntN(2) == 0 {
			v.AdmittedPerMinute = floats[r.IntN(len(floats))]
		} else {
			v.AdmittedPerMinute = r.Float64() * math.Pow(10, float64(r.IntN(30)-10))
		}
		for range r.IntN(6) {
			v.Buckets = append(v.Buckets, r.Int64N(1e6))
		}
		if r.IntN(3) == 0 {
			d := time.Unix(r.Int64N(1<<33), r.Int64N(1e9)).UTC()
			v.ClaimDeadline = &d
		}
		if r.IntN(3) == 0 {
			if r.IntN(2) == 0 {
				v.ClaimWindow = floats[r.IntN(len(floats))]
			} else {
				v.ClaimWindow = r.Float64() * math.Pow(10, float64(r.IntN(30)-10))
			}
		}
		if r.IntN(3) == 0 {
			v.Admission = randStr()
		}
		v.Notify = r.IntN(2) == 0
		if r.IntN(3) == 0 {
			v.Lane = randStr()
		}
		switch r.IntN(8) {
		case 0:
			v.Draw = session.DrawPending
		case 1:
			v.Draw = session.DrawDrawn
		case 2:
			v.Draw = randStr()
		}
		if r.IntN(8) == 0 {
			v.Priority = &session.LaneView{FirstWaitingPosition: r.Int64N(100), Waiting: r.Int64N(100)}
		}
		if g, ok := appendGlobalJSON(nil, &v.GlobalView); ok {
			fastGlobal++
			want, err := json.Marshal(v.GlobalView)
			require.NoError(t, err)
			require.Equal(t, string(append(want, '\n')), string(g), "global view %+v", v.GlobalView)
		}
		tok := randStr()
		got, ok := appendJoinJSON(nil, &v, tok)
		if !ok {
			continue
		}
		fast++
		want, err := json.Marshal(joinResponse{SessionView: v, Token: tok})
		require.NoError(t, err)
		require.Equal(t, string(append(want, '\n')), string(got), "view %+v", v)
		// encoding/json escapes HTML in json.Marshal as echo's encoder does.
		require.False(t, bytes.Contains(got, []byte("<")))
	}
	assert.Greater(t, fast, 500, "the fast path is taken for ordinary views")
	assert.Greater(t, fastGlobal, 500, "the fast path is taken for ordinary global views")
}

// Every JSON field of the join answer is one the hand encoder knows: a field
// added to SessionView or GlobalView fails here until appendJoinJSON writes
// it (and the random views above cover it).
func TestJoinJSONKnowsEveryField(t *testing.T) {
	var names []string
	var walk func(rt reflect.Type)
	walk = func(rt reflect.Type) {
		for i := range rt.NumField() {
			f := rt.Field(i)
			if f.Anonymous {
				walk(f.Type)
				continue
			}
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name != "-" && f.IsExported() {
				names = append(names, name)
			}
		}
	}
	walk(reflect.TypeOf(joinResponse{}))
	assert.Equal(t, names, joinJSONFields)
	names = nil
	walk(reflect.TypeOf(session.GlobalView{}))
	assert.Equal(t, names, globalJSONFields)
}

// {base}/api/global answers what c.JSON wrote for the view, ?pretty too.
func TestGlobalAnswerIsEncodingJSONs(t *testing.T) {
	views := []session.GlobalView{
		{Gate: "default", FirstWaitingPosition: 3, LastWaitingPosition: 90, Waiting: 60, Active: 10, Limit: 10,
			AdmittedPerMinute: 2.25, Buckets: []int64{0, 30, 45, 30}},
		{Gate: "a<b", Waiting: 0},
		{Gate: "p", Priority: &session.LaneView{Waiting: 2}},
		{Gate: "f", AdmittedPerMinute: 1e-9},
	}
	for _, v := range views {
		for _, target := range []string{"/api/global", "/api/global?pretty"} {
			e := echo.New()
			want := httptest.NewRecorder()
			require.NoError(t, e.NewContext(httptest.NewRequest(http.MethodGet, target, nil), want).JSON(http.StatusOK, v))
			got := httptest.NewRecorder()
			require.NoError(t, writeGlobal(e.NewContext(httptest.NewRequest(http.MethodGet, target, nil), got), &v))
			assert.Equal(t, want.Body.String(), got.Body.String(), target)
			// The hand-written answer declares its length (blobJSON), which
			// net/http adds to a short c.JSON answer on the wire itself.
			gotHeader := got.Header().Clone()
			if n := gotHeader.Get(echo.HeaderContentLength); n != "" {
				assert.Equal(t, strconv.Itoa(got.Body.Len()), n, target)
				gotHeader.Del(echo.HeaderContentLength)
			}
			assert.Equal(t, want.Header(), gotHeader, target)
		}
	}
}

// The hand-written session cookie is http.Cookie's, byte for byte; a token
// that is not plain cookie text goes through http.Cookie.
func TestSessionCookieMatchesHTTPCookie(t *testing.T) {
	cases := []struct {
		tok    string
		maxAge int
		secure bool
		ok     bool
	}{
		{"abcDEF-_09.1767225600.mAcMaC_-", 86400, false, true},
		{"abc.1.x", 86400, true, true},
		{"abc.1.x", 0, false, true},
		{"abc.1.x", -5, true, true},
		{"", 60, false, false},
		{"a b", 60, false, false},
		{"a,b", 60, false, false},
		{`a"b`, 60, false, false},
		{"a;Path=/x", 60, false, false},
		{"caf\u00e9", 60, false, false},
	}
	for _, tc := range cases {
		t.Run(tc.tok, func(t *testing.T) {
			got, ok := sessionCookie(tc.tok, tc.maxAge, tc.secure)
			require.Equal(t, tc.ok, ok)
			if !ok {
				return
			}
			want := (&http.Cookie{Name: CookieName, Value: tc.tok, Path: "/", MaxAge: tc.maxAge, HttpOnly: true,
				SameSite: http.SameSiteLaxMode, Secure: tc.secure}).String()
			assert.Equal(t, want, got)
		})
	}
}

// The buckets' JSON is cached by the slice's identity: views that share a
// slice get its JSON, and another slice of the same length, or a part of
// the cached one, gets its own.
func TestAppendJoinJSONBucketsCache(t *testing.T) {
	one := []int64{0, 10, 10, 10, 25, 3}
	other := []int64{0, 11, 12, 10, 25, 4}
	views := [][]int64{one, one, other, one, other, other, one[:4], one[2:], slices.Clone(one), one}
	for i, buckets := range views {
		v := session.SessionView{GlobalView: session.GlobalView{Gate: "default", Waiting: 23, Buckets: buckets},
			Session: "s", Status: session.StatusWaiting, Position: 4, Place: 1}
		got, ok := appendJoinJSON(nil, &v, "tok")
		require.True(t, ok)
		want, err := json.Marshal(joinResponse{SessionView: v, Token: "tok"})
		require.NoError(t, err)
		require.Equal(t, string(append(want, '\n')), string(got), "view %d", i)
	}
}
