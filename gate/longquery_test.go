package gate_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/gate"
	"github.com/anteroomhq/anteroom/gate/gatetest"
	"github.com/anteroomhq/anteroom/session"
)

// longQuery is a query of n distinct parameters, as a client may send
// (net/url parses up to 10,000): about 54 KB for 9,000.
func longQuery(n int) string {
	var b strings.Builder
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "&k%x=", i)
	}
	return b.String()
}

// A request reads the few query parameters it needs without parsing the
// rest: parsing the whole query (url.ParseQuery, which echo's QueryParam
// and c.JSON's ?pretty and guard's ?session= each ran) cost about 2 ms and
// 9,000 allocations per request for a query of 9,000 parameters, 1,500
// times /healthz, on /check, /healthz and the snippet's events answer,
// which no rate limit bounds (/check parsed it twice). Counted in
// allocations: a request with 9,000 more parameters allocates no more
// than without them, on every route a client reaches without a key.
func TestALongQueryIsNotParsed(t *testing.T) {
	sc := gatetest.StartSidecar(t, gatetest.Options{Gates: []session.GateConfig{gatetest.Gate("default", 1)}, Gate: func(o *gate.Options) { o.Demo = true }})
	ctx := context.Background()
	_, err := sc.Waitlist.Join(ctx, "default", "active-one")
	require.NoError(t, err)
	_, err = sc.Waitlist.Join(ctx, "default", "waiting-one")
	require.NoError(t, err)
	active := gate.CookieName + "=" + sc.Token(t, "active-one")
	waiting := gate.CookieName + "=" + sc.Token(t, "waiting-one")
	long := longQuery(9000)
	for _, tc := range []struct{ name, path, cookie string }{
		{"healthz", "/healthz?x=1", ""},
		{"readyz", "/readyz?x=1", ""},
		{"check, active", base + "/check?gate=default", active},
		{"check, waiting", base + "/check?gate=default", waiting},
		{"check, no session", base + "/check?gate=default", ""},
		{"check, session in the query", base + "/check?gate=default&session=" + sc.Token(t, "active-one"), ""},
		{"events, the snippet's", base + "/api/events?gate=default&positions=0", ""},
		{"events, full", base + "/api/events?gate=default", ""},
		{"global", base + "/api/global?gate=default", ""},
		{"status, waiting", base + "/api/status?gate=default", waiting},
		{"status, active", base + "/api/status?gate=default", active},
		{"snippet", base + "/anteroom.js?v=1", ""},
		{"waiting page", base + "/?next=/x", ""},
		{"claim page", base + "/claim?gate=default&ticket=x", ""},
		{"websocket refused", base + "/ws?gate=default", ""},
		{"demo page", "/?x=1", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			allocs := func(path string) (float64, int) {
				req := httptest.NewRequest(http.MethodGet, path, nil)
				if tc.cookie != "" {
					req.Header.Set("Cookie", tc.cookie)
				}
				code := 0
				n := testing.AllocsPerRun(20, func() {
					w := httptest.NewRecorder()
					sc.Handler.ServeHTTP(w, req)
					code = w.Code
				})
				return n, code
			}
			plain, plainCode := allocs(tc.path)
			padded, paddedCode := allocs(tc.path + long)
			assert.Equal(t, plainCode, paddedCode, "the same answer")
			assert.LessOrEqual(t, padded, plain+16, "allocations per request with 9,000 more query parameters (%v without)", plain)
		})
	}
}
