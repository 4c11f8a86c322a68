package gate_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/anteroomhq/anteroom/gate"
	"github.com/anteroomhq/anteroom/gate/gatetest"
	"github.com/anteroomhq/anteroom/session"
)

// BenchmarkHostileRequests measures what a client without a session can
// make a request cost, beside /healthz in the same run: a query of 9,000
// parameters on /check and /healthz (no rate limit), 60 KB of
// X-Forwarded-For behind trusted proxies on a rate-limited route, 64
// cookies that do not verify on /check (wire.MaxCookies, the documented
// bound), and in proxy mode a bypassed path whose query the reverse proxy
// would re-encode, and 1,000 ?session= values.
func BenchmarkHostileRequests(b *testing.B) {
	_, proxies, err := net.ParseCIDR("192.0.2.0/24") // httptest.NewRequest's peer
	if err != nil {
		b.Fatal(err)
	}
	sc := gatetest.StartSidecar(b, gatetest.Options{Gates: []session.GateConfig{gatetest.Gate("default", 1)}, Gate: func(o *gate.Options) {
		o.TrustedProxies = []*net.IPNet{proxies}
		o.RateLimit = gate.RateLimitOptions{PerSecond: 1e9, Burst: 1 << 30}
	}})
	if _, err := sc.Waitlist.Join(context.Background(), "default", "active-one"); err != nil {
		b.Fatal(err)
	}
	active := gate.CookieName + "=" + sc.Token(b, "active-one")
	upstream, _ := url.Parse("http://app.invalid")
	px := gatetest.StartSidecar(b, gatetest.Options{Gates: []session.GateConfig{gatetest.Gate("default", 1)}, Gate: func(o *gate.Options) {
		o.Proxy = gate.ProxyOptions{Upstream: upstream, Bypass: []string{"/assets/"}, Transport: &recordingUpstream{}}
	}})

	params := longQuery(9000)
	var cookies, sessions []string
	for i := 0; i < 1000; i++ {
		var mac [32]byte
		_, _ = rand.Read(mac[:])
		tok := "x" + strconv.Itoa(i) + ".9999999999." + base64.RawURLEncoding.EncodeToString(mac[:])
		if i < 64 {
			cookies = append(cookies, gate.CookieName+"="+tok)
		}
		sessions = append(sessions, "session="+tok)
	}
	for _, tc := range []struct {
		name    string
		h       http.Handler
		path    string
		headers []string
	}{
		{"healthz", sc.Handler, "/healthz", nil},
		{"healthz-9000-params", sc.Handler, "/healthz?x=1" + params, nil},
		{"check-active", sc.Handler, base + "/check", []string{"Cookie", active}},
		{"check-active-9000-params", sc.Handler, base + "/check?gate=default" + params, []string{"Cookie", active}},
		{"check-64-cookies", sc.Handler, base + "/check", []string{"Cookie", strings.Join(cookies, "; ")}},
		{"global", sc.Handler, base + "/api/global", nil},
		{"global-60KB-forwarded-for", sc.Handler, base + "/api/global", []string{"X-Forwarded-For", strings.Repeat(",", 60<<10)}},
		{"proxy-bypass-9000-params", px.Handler, "/assets/x?x=1" + params, nil},
		{"proxy-bypass-9000-params-semicolon", px.Handler, "/assets/x?x;1" + params, nil},
		{"proxy-bypass-1000-sessions", px.Handler, "/assets/x?" + strings.Join(sessions, "&"), nil},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				req := httptest.NewRequest(http.MethodGet, tc.path, nil)
				for i := 0; i+1 < len(tc.headers); i += 2 {
					req.Header.Set(tc.headers[i], tc.headers[i+1])
				}
				for pb.Next() {
					w := &discardWriter{header: http.Header{}}
					tc.h.ServeHTTP(w, req.Clone(req.Context())) // proxy mode rewrites the request's URL
					if w.code >= 300 && w.code != http.StatusNoContent && w.code != http.StatusUnauthorized {
						b.Fatalf("%s: %d", tc.name, w.code)
					}
				}
			})
		})
	}
}

// Flush lets the reverse proxy stream into a discardWriter.
func (w *discardWriter) Flush() {}
