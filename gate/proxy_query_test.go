package gate_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/gate"
	"github.com/anteroomhq/anteroom/gate/gatetest"
	"github.com/anteroomhq/anteroom/session"
)

// recordingUpstream answers 204 in process and keeps the query of the last
// request it was sent.
type recordingUpstream struct {
	mu    sync.Mutex
	query string
}

func (u *recordingUpstream) RoundTrip(r *http.Request) (*http.Response, error) {
	u.mu.Lock()
	u.query = r.URL.RawQuery
	u.mu.Unlock()
	if r.Body != nil {
		_ = r.Body.Close()
	}
	return &http.Response{StatusCode: http.StatusNoContent, Header: http.Header{}, Body: http.NoBody, Request: r, ProtoMajor: 1, ProtoMinor: 1}, nil
}

func (u *recordingUpstream) last() string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.query
}

// A query the reverse proxy would not pass on as it is (a ';', a '%' that
// is no escape) loses the parameters url.ParseQuery drops and keeps the
// others as sent, in their order, by one scan: httputil.ReverseProxy
// re-encoded it whole (url.ParseQuery, then Values.Encode, which sorts the
// keys), about 6 ms and 30,000 allocations for 9,000 parameters, 5,000
// times /healthz, on any bypassed path, without a session. What the app
// parses is what it parsed before; a query without those passes byte for
// byte, as before.
func TestAProxiedQueryIsCleanedInOneScan(t *testing.T) {
	up := &recordingUpstream{}
	u, err := url.Parse("http://app.invalid")
	require.NoError(t, err)
	sc := gatetest.StartSidecar(t, gatetest.Options{Gates: []session.GateConfig{gatetest.Gate("default", 1)}, Gate: func(o *gate.Options) {
		o.Proxy = gate.ProxyOptions{Upstream: u, Bypass: []string{"/assets/"}, Transport: up}
	}})
	forward := func(query string) string {
		w := httptest.NewRecorder()
		sc.Handler.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/assets/x?"+query, nil))
		require.Equal(t, http.StatusNoContent, w.Code)
		return up.last()
	}
	for query, want := range map[string]string{
		"b=2&a=1":                          "b=2&a=1",
		"b=2&a=1%20x&c=+":                  "b=2&a=1%20x&c=+",
		"b=2&x;y=1&a=1":                    "b=2&a=1",
		"b=2&bad=%zz&%g=1&a=1&&=v&c":       "b=2&a=1&=v&c",
		"z=1;2&y=%2&x=%41%42&w=ok&v=a%3Bb": "x=%41%42&w=ok&v=a%3Bb",
		";":                                "",
	} {
		got := forward(query)
		assert.Equal(t, want, got, "forwarded for %q", query)
		was, _ := url.ParseQuery(query)
		now, err := url.ParseQuery(got)
		assert.NoError(t, err)
		assert.Equal(t, was, now, "the app parses what it parsed before, for %q", query)
	}

	var long strings.Builder
	for i := 0; i < 9000; i++ {
		fmt.Fprintf(&long, "&k%x=v", 9000-i)
	}
	allocs := func(query string) float64 {
		req := httptest.NewRequest(http.MethodGet, "/assets/x?"+query, nil)
		return testing.AllocsPerRun(5, func() {
			sc.Handler.ServeHTTP(httptest.NewRecorder(), req.Clone(req.Context()))
		})
	}
	plain := allocs("a=1" + long.String())
	semicolon := allocs("a;b" + long.String())
	assert.LessOrEqual(t, semicolon, plain+8, "allocations per request with a ';' among 9,000 parameters (%v without)", plain)
	assert.True(t, forward("a;b"+long.String()) == long.String()[1:], "the others kept in their order")
}
