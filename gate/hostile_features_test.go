package gate_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/gate"
	"github.com/anteroomhq/anteroom/gate/gatetest"
	"github.com/anteroomhq/anteroom/gate/wire"
	"github.com/anteroomhq/anteroom/session"
)

// TestHostileNewEndpoints attacks the endpoints of issue 13 (redeem,
// notify, claim links, codes, events, the JWKS, and the admin API's
// events, codes, history and feed) with wrong methods, path tricks, huge
// and malformed bodies, unicode and repeated parameters. Every refusal is
// the contract's JSON error body with a 4xx status; nothing answers 5xx.
func TestHostileNewEndpoints(t *testing.T) {
	sale := gatetest.Gate("sale", 1)
	sale.ClaimTimeout = time.Minute
	sc := gatetest.StartSidecar(t, gatetest.Options{
		Gates:        []session.GateConfig{sale, gatetest.Gate("default", 1)},
		AdmissionTTL: map[string]time.Duration{"sale": 5 * time.Minute},
		Gate: func(o *gate.Options) {
			o.APIKeys = []string{admissionKey}
			o.AdminToken = adminToken
			o.AdminRateLimit = gate.RateLimitOptions{PerSecond: 10000, Burst: 10000}
			o.RateLimit = gate.RateLimitOptions{PerSecond: 10000, Burst: 10000}
			o.CodeRateLimit = gate.RateLimitOptions{PerSecond: 10000, Burst: 10000}
		},
	})
	b := sc.URL + gatetest.BasePath
	key := []string{gate.APIKeyHeader, admissionKey}
	admin := []string{"Authorization", "Bearer " + adminToken}
	huge := `{"sessionId":"` + strings.Repeat("a", 2<<20) + `","notify":true}`
	deep := strings.Repeat("[", 100000)
	uni := "\u202e\u0000é😀"
	cases := []struct {
		method, url, body string
		headers           []string
	}{
		// redeem
		{"GET", b + "/api/redeem", "", key},
		{"PUT", b + "/api/redeem", `{}`, key},
		{"DELETE", b + "/api/redeem", "", key},
		{"HEAD", b + "/api/redeem", "", key},
		{"POST", b + "/api/redeem", "", nil},
		{"POST", b + "/api/redeem", `{"jti":"x"}`, nil},
		{"POST", b + "/api/redeem", "", key},
		{"POST", b + "/api/redeem", `{`, key},
		{"POST", b + "/api/redeem", `[]`, key},
		{"POST", b + "/api/redeem", `{"jti":null}`, key},
		{"POST", b + "/api/redeem", `{"jti":12}`, key},
		{"POST", b + "/api/redeem", `{"jti":"` + uni + `"}`, key},
		{"POST", b + "/api/redeem", `{"jti":"` + strings.Repeat("z", 5000) + `"}`, key},
		{"POST", b + "/api/redeem", `{"jti":"a"}{"jti":"b"}`, key},
		{"POST", b + "/api/redeem", `{"jti":"a","jti":"b"}`, key},
		{"POST", b + "/api/redeem", `{"jti":"a","extra":1}`, key},
		{"POST", b + "/api/redeem", huge, key},
		{"POST", b + "/api/redeem", deep, key},
		{"POST", b + "/api/redeem?jti=a&jti=b", "", key},
		{"POST", b + "/api/redeem/", `{"jti":"a"}`, key},
		{"POST", b + "/api//redeem", `{"jti":"a"}`, key},
		{"POST", b + "/api/%72edeem", `{"jti":"a"}`, key},
		// notify
		{"GET", b + "/api/notify", "", key},
		{"HEAD", b + "/api/notify", "", key},
		{"POST", b + "/api/notify", `{"sessionId":"u1","notify":true}`, nil},
		{"POST", b + "/api/notify", `{"sessionId":"u1","notify":true}`, []string{gate.APIKeyHeader, "wrong-key-0123456789"}},
		{"POST", b + "/api/notify", `{"sessionId":"u1","notify":true}`, key},
		{"POST", b + "/api/notify", `{"sessionId":"u1","notify":"yes"}`, key},
		{"POST", b + "/api/notify", `{"sessionId":"u1"}`, key},
		{"POST", b + "/api/notify", `{"sessionId":"` + uni + `","notify":true}`, key},
		{"POST", b + "/api/notify", `{"sessionId":"u1","notify":true,"gate":"nope"}`, key},
		{"POST", b + "/api/notify", `{"sessionId":"u1","notify":true,"gate":"` + uni + `"}`, key},
		{"POST", b + "/api/notify", `{"sessionId":"u1","notify":true,"gate":"../default"}`, key},
		{"POST", b + "/api/notify?gate=sale&gate=default", `{"sessionId":"u1","notify":true}`, key},
		{"POST", b + "/api/notify", huge, key},
		{"POST", b + "/api/notify", deep, key},
		// claim links
		{"HEAD", b + "/claim?gate=sale&ticket=x", "", nil},
		{"POST", b + "/claim?gate=sale&ticket=x", "", nil},
		{"GET", b + "/claim", "", nil},
		{"GET", b + "/claim?gate=sale", "", nil},
		{"GET", b + "/claim?gate=sale&ticket=", "", nil},
		{"GET", b + "/claim?gate=sale&ticket=a.b.c", "", nil},
		{"GET", b + "/claim?gate=nope&ticket=a.b", "", nil},
		{"GET", b + "/claim?gate=" + strings.Repeat("g", 5000) + "&ticket=a", "", nil},
		{"GET", b + "/claim?gate=sale&ticket=" + strings.Repeat("t", 7000), "", nil},
		{"GET", b + "/claim?gate=sale&gate=default&ticket=a&ticket=b", "", nil},
		{"GET", b + "/claim?gate=%00&ticket=%ff%fe", "", nil},
		{"GET", b + "/claim/..%2f..%2fadmin", "", nil},
		// codes (backend)
		{"GET", b + "/api/codes", "", key},
		{"POST", b + "/api/codes", `{"gate":"sale"}`, nil},
		{"POST", b + "/api/codes", `{"gate":"sale","uses":-1}`, key},
		{"POST", b + "/api/codes", `{"gate":"sale","uses":9223372036854775807}`, key},
		{"POST", b + "/api/codes", `{"gate":"sale","uses":1e400}`, key},
		{"POST", b + "/api/codes", `{"gate":"sale","ttl":"-5m"}`, key},
		{"POST", b + "/api/codes", `{"gate":"sale","ttl":"9999999h"}`, key},
		{"POST", b + "/api/codes", `{"gate":"sale","ttl":"1h","expiresAt":"2030-01-01T00:00:00Z"}`, key},
		{"POST", b + "/api/codes", `{"gate":"sale","expiresAt":"2000-01-01T00:00:00Z"}`, key},
		{"POST", b + "/api/codes", `{"gate":"sale","expiresAt":"garbage"}`, key},
		{"POST", b + "/api/codes", `{"gate":"sale","code":"chosen-code-1"}`, key},
		{"POST", b + "/api/codes", `{"gate":"sale","label":"` + strings.Repeat("l", 100000) + `"}`, key},
		{"POST", b + "/api/codes", `{"gate":"sale","label":"` + uni + `"}`, key},
		{"POST", b + "/api/codes", `{"gate":"nope"}`, key},
		{"POST", b + "/api/codes", huge, key},
		// join with codes
		{"POST", b + "/api/join", `{"gate":"sale","code":"` + uni + `"}`, nil},
		{"POST", b + "/api/join", `{"gate":"sale","code":"` + strings.Repeat("c", 100) + `"}`, nil},
		{"POST", b + "/api/join", `{"gate":"sale","code":12}`, nil},
		// public events
		{"POST", b + "/api/events?gate=sale", "", nil},
		{"GET", b + "/api/events", "", nil},
		{"GET", b + "/api/events?gate=nope", "", nil},
		{"GET", b + "/api/events?gate=" + url.QueryEscape(uni), "", nil},
		{"GET", b + "/api/events?gate=sale&gate=default", "", nil},
		{"GET", b + "/api/events?gate=" + strings.Repeat("g", 10000), "", nil},
		// JWKS
		{"POST", b + "/.well-known/jwks.json", "", nil},
		{"DELETE", b + "/.well-known/jwks.json", "", nil},
		{"GET", b + "/.well-known/jwks.json/", "", nil},
		{"GET", b + "/.well-known/../.well-known/jwks.json", "", nil},
		{"GET", b + "/.well-known/jwks.json?kid=x&kid=y", "", nil},
		// admin: events
		{"GET", b + "/admin/api/gates/sale/events", "", nil},
		{"POST", b + "/admin/api/gates/sale/events", `{}`, admin},
		{"POST", b + "/admin/api/gates/sale/events", `{"id":"` + uni + `","prequeueAt":"2030-01-01T00:00:00Z","startsAt":"2030-01-01T01:00:00Z"}`, admin},
		{"POST", b + "/admin/api/gates/sale/events", `{"id":"e1","prequeueAt":"2030-01-01T02:00:00Z","startsAt":"2030-01-01T01:00:00Z"}`, admin},
		{"POST", b + "/admin/api/gates/sale/events", `{"id":"e1","prequeueAt":"9999-01-01T00:00:00Z","startsAt":"9999-01-01T01:00:00Z"}`, admin},
		{"POST", b + "/admin/api/gates/sale/events", `{"id":"e1","prequeueAt":"2030-01-01T00:00:00Z","startsAt":"2030-01-01T01:00:00Z","activeLimit":-1}`, admin},
		{"POST", b + "/admin/api/gates/sale/events", `{"id":"e1","prequeueAt":"2030-01-01T00:00:00Z","startsAt":"2030-01-01T01:00:00Z","newUsersPerMinute":1e30}`, admin},
		{"POST", b + "/admin/api/gates/nope/events", `{"id":"e1","prequeueAt":"2030-01-01T00:00:00Z","startsAt":"2030-01-01T01:00:00Z"}`, admin},
		{"POST", b + "/admin/api/gates/sale/events", huge, admin},
		{"POST", b + "/admin/api/gates/sale/events", deep, admin},
		{"PUT", b + "/admin/api/gates/sale/events/nope", `{"prequeueAt":"2030-01-01T00:00:00Z","startsAt":"2030-01-01T01:00:00Z"}`, admin},
		{"PUT", b + "/admin/api/gates/sale/events/%2e%2e", `{}`, admin},
		{"DELETE", b + "/admin/api/gates/sale/events/nope", "", admin},
		{"DELETE", b + "/admin/api/gates/sale/events/" + strings.Repeat("e", 5000), "", admin},
		{"PATCH", b + "/admin/api/gates/sale/events/x", `{}`, admin},
		// admin: codes
		{"GET", b + "/admin/api/gates/nope/codes", "", admin},
		{"POST", b + "/admin/api/gates/sale/codes", `{"gate":"default"}`, admin},
		{"POST", b + "/admin/api/gates/sale/codes", `{"code":"a"}`, admin},
		{"POST", b + "/admin/api/gates/sale/codes", `{"code":"` + uni + `xxxxxx"}`, admin},
		{"DELETE", b + "/admin/api/gates/sale/codes/x", "", admin},
		{"DELETE", b + "/admin/api/gates/sale/codes/" + strings.Repeat("0", 64), "", admin},
		{"DELETE", b + "/admin/api/gates/sale/codes/" + strings.Repeat("Z", 64), "", admin},
		{"DELETE", b + "/admin/api/gates/nope/codes/" + strings.Repeat("0", 64), "", admin},
		// admin: history
		{"GET", b + "/admin/api/gates/sale/history?limit=-1", "", admin},
		{"GET", b + "/admin/api/gates/sale/history?limit=99999999999999999999", "", admin},
		{"GET", b + "/admin/api/gates/sale/history?from=garbage", "", admin},
		{"GET", b + "/admin/api/gates/sale/history?from=2030-01-01T00:00:00Z&to=2000-01-01T00:00:00Z", "", admin},
		{"GET", b + "/admin/api/gates/sale/history?format=xml", "", admin},
		{"GET", b + "/admin/api/gates/sale/history?format=csv&format=json", "", admin},
		{"GET", b + "/admin/api/gates/sale/history?session=" + url.QueryEscape(uni), "", admin},
		{"GET", b + "/admin/api/gates/sale/history?session=" + strings.Repeat("s", 5000), "", admin},
		{"GET", b + "/admin/api/gates/sale/history?after=-5", "", admin},
		{"GET", b + "/admin/api/gates/nope/history", "", admin},
		{"POST", b + "/admin/api/gates/sale/history", "", admin},
		{"HEAD", b + "/admin/api/gates/sale/history", "", admin},
		// admin: feed
		{"GET", b + "/admin/api/feed", "", nil},
		{"GET", b + "/admin/api/feed?ticket=x", "", nil},
		{"GET", b + "/admin/api/feed?ticket=" + strings.Repeat("x", 9000), "", nil},
		{"GET", b + "/admin/api/feed", "", admin},
		{"POST", b + "/admin/api/feed", "", admin},
		{"GET", b + "/admin/api/feed/ticket", "", admin},
		{"POST", b + "/admin/api/feed/ticket", "", nil},
		{"POST", b + "/admin/api/feed/ticket", huge, admin},
	}
	for _, tc := range cases {
		name := tc.method + " " + strings.TrimPrefix(tc.url, sc.URL)
		if len(name) > 120 {
			name = name[:120]
		}
		a := call(t, tc.method, tc.url, tc.body, tc.headers...)
		assert.Less(t, a.status, 500, "%s: %d %.300s", name, a.status, a.body)
		if a.status < 400 || tc.method == http.MethodHead {
			continue
		}
		var e gate.ErrorBody
		if assert.NoError(t, json.Unmarshal(a.body, &e), "%s: %d the error body: %.300s", name, a.status, a.body) {
			assert.NotEmpty(t, e.Error.Code, "%s: %.300s", name, a.body)
			assert.Equal(t, a.status, wire.Status(e.Error.Code), "%s: the status of %s", name, e.Error.Code)
		}
		assert.Contains(t, a.header.Get("Content-Type"), "application/json", name)
	}
	// The server still serves.
	code, body := httpDo(t, http.MethodGet, b+"/api/global?gate=sale", "", "")
	require.Equal(t, http.StatusOK, code, string(body))
}
