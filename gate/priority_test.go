package gate_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/gate"
	"github.com/anteroomhq/anteroom/session"
)

const codeAPIKey = "backend-key-0123456789"

// newCodeHarness is a sidecar with an admin token and an API key, gate
// "default" of limit 1.
func newCodeHarness(t *testing.T, configure ...func(*gate.Options)) (*adminHarness, *harness) {
	t.Helper()
	ah := newAdminHarness(t, adminToken, func(o *gate.Options) {
		o.APIKeys = []string{codeAPIKey}
		for _, f := range configure {
			f(o)
		}
	})
	return ah, &harness{url: ah.sc.URL, waitlist: ah.sc.Waitlist, clock: ah.sc.Clock, signer: ah.sc.Signer, hub: ah.sc.Hub}
}

// createCode creates a code through the admin API and returns the answer.
func (h *adminHarness) createCode(gateName, body string) map[string]any {
	h.t.Helper()
	status, raw, _ := h.do(http.MethodPost, "gates/"+gateName+"/codes", adminToken, body)
	require.Equal(h.t, http.StatusCreated, status, raw)
	var out map[string]any
	require.NoError(h.t, json.Unmarshal([]byte(raw), &out))
	return out
}

func joinWith(t *testing.T, h *harness, c *http.Client, code string) reply {
	t.Helper()
	b, err := json.Marshal(map[string]string{"gate": "default", "code": code})
	require.NoError(t, err)
	return do(t, c, http.MethodPost, h.url+base+"/api/join", "application/json", string(b))
}

func TestPriorityCodesEndToEnd(t *testing.T) {
	ah, h := newCodeHarness(t)
	created := ah.createCode("default", `{"code":"launch-vip","uses":1,"ttl":"1h","label":"press"}`)
	assert.Equal(t, "launch-vip", created["code"], "the code is shown once, at creation")
	assert.Equal(t, session.CodeID("launch-vip"), created["id"])
	assert.Equal(t, float64(1), created["maxUses"])

	a, b, c, d, e := newClient(t), newClient(t), newClient(t), newClient(t), newClient(t)
	require.Equal(t, "active", h.join(t, a).body["status"])
	rb := h.join(t, b)
	require.Equal(t, "waiting", rb.body["status"])

	// A valid code: the priority lane, first in it.
	rc := joinWith(t, h, c, "launch-vip")
	require.Equal(t, http.StatusOK, rc.status, rc.raw)
	assert.Equal(t, "waiting", rc.body["status"])
	assert.Equal(t, "priority", rc.body["lane"])
	assert.Equal(t, float64(1), rc.body["place"])
	prio, ok := rc.body["priority"].(map[string]any)
	require.True(t, ok, "the view carries the priority lane: %s", rc.raw)
	assert.Equal(t, float64(1), prio["waiting"])
	assert.Equal(t, float64(1), rc.body["waiting"], "waiting counts the normal lane")

	// The normal waiter's place did not rise.
	st := do(t, b, http.MethodGet, h.url+base+"/api/status", "", "")
	require.Equal(t, http.StatusOK, st.status, st.raw)
	assert.Equal(t, float64(1), st.body["place"])
	assert.Nil(t, st.body["lane"])

	// Used up: 409 code_used, and the join happened all the same.
	rd := joinWith(t, h, d, "launch-vip")
	requireError(t, rd, http.StatusConflict, "code_used")
	assert.Equal(t, "waiting", rd.body["status"])
	assert.NotEmpty(t, rd.body["token"])
	assert.NotEmpty(t, rd.body["session"])
	assert.Nil(t, rd.body["lane"])
	assert.Equal(t, float64(2), rd.body["place"])
	assert.NotEmpty(t, rd.header.Get("Set-Cookie"), "the session exists: its cookie is set")
	assert.NotEmpty(t, rd.header.Get("Retry-After"))
	st = do(t, d, http.MethodGet, h.url+base+"/api/status", "", "")
	require.Equal(t, http.StatusOK, st.status, "the 409's session is the client's: %s", st.raw)

	// Unknown: 404 code_unknown, joined as well.
	re := joinWith(t, h, e, "not-a-code")
	requireError(t, re, http.StatusNotFound, "code_unknown")
	assert.Equal(t, "waiting", re.body["status"])
	assert.Equal(t, float64(3), re.body["place"])

	// The admin API counts the waiters of both lanes.
	assert.Equal(t, int64(4), ah.gate("default").Waiting)

	// A released slot goes to the priority lane first.
	r := do(t, a, http.MethodPost, h.url+base+"/api/release", "", "")
	require.Equal(t, http.StatusNoContent, r.status, r.raw)
	st = do(t, c, http.MethodGet, h.url+base+"/api/status", "", "")
	assert.Equal(t, "active", st.body["status"])
	st = do(t, b, http.MethodGet, h.url+base+"/api/status", "", "")
	assert.Equal(t, "waiting", st.body["status"])
	assert.Equal(t, float64(1), st.body["place"])

	// The list shows the use and never the code.
	status, raw, _ := ah.do(http.MethodGet, "gates/default/codes", adminToken, "")
	require.Equal(t, http.StatusOK, status, raw)
	assert.NotContains(t, raw, "launch-vip")
	var list struct{ Codes []session.PriorityCode }
	require.NoError(t, json.Unmarshal([]byte(raw), &list))
	require.Len(t, list.Codes, 1)
	assert.Equal(t, int64(1), list.Codes[0].Used)
	assert.Equal(t, "laun", list.Codes[0].Hint)
	assert.Equal(t, "press", list.Codes[0].Label)

	id := session.CodeID("launch-vip")
	status, raw, _ = ah.do(http.MethodDelete, "gates/default/codes/"+id, adminToken, "")
	require.Equal(t, http.StatusNoContent, status, raw)
	status, raw, _ = ah.do(http.MethodDelete, "gates/default/codes/"+id, adminToken, "")
	require.Equal(t, http.StatusNotFound, status, raw)
	assert.Equal(t, session.CodeCodeUnknown, errorCode(t, raw))
}

func TestPriorityCodeIssuedByABackend(t *testing.T) {
	ah, h := newCodeHarness(t)
	url := h.url + base + "/api/codes"
	r := do(t, newClient(t), http.MethodPost, url, "application/json", `{"uses":3}`)
	requireError(t, r, http.StatusUnauthorized, "api_key_required")
	r = do(t, newClient(t), http.MethodPost, url, "application/json", `{"code":"chosen-one","uses":3}`, gate.APIKeyHeader, codeAPIKey)
	requireError(t, r, http.StatusBadRequest, "invalid_argument")

	// A referrer's code: three friends get priority, the fourth does not.
	r = do(t, newClient(t), http.MethodPost, url, "application/json", `{"gate":"default","uses":3,"label":"referral:42"}`, gate.APIKeyHeader, codeAPIKey)
	require.Equal(t, http.StatusCreated, r.status, r.raw)
	code, _ := r.body["code"].(string)
	require.Len(t, code, 26)
	assert.True(t, session.ValidCode(code))
	assert.Equal(t, "referral:42", r.body["label"])

	h.join(t, newClient(t)) // takes the slot
	for i := 0; i < 3; i++ {
		rr := joinWith(t, h, newClient(t), code)
		require.Equal(t, http.StatusOK, rr.status, rr.raw)
		assert.Equal(t, "priority", rr.body["lane"])
		assert.Equal(t, float64(i+1), rr.body["place"])
	}
	rr := joinWith(t, h, newClient(t), code)
	requireError(t, rr, http.StatusConflict, "code_used")
	status, raw, _ := ah.do(http.MethodGet, "gates/default/codes", adminToken, "")
	require.Equal(t, http.StatusOK, status, raw)
	assert.Contains(t, raw, `"used":3`)
}

func TestPriorityCodeHostileJoins(t *testing.T) {
	ah, h := newCodeHarness(t, func(o *gate.Options) { o.CodeRateLimit = gate.RateLimitOptions{PerSecond: 100, Burst: 100} })
	ah.createCode("default", `{"code":"real-code-1","uses":100}`)
	h.join(t, newClient(t))
	cases := []struct{ name, code string }{
		{"long", strings.Repeat("a", 3000)},
		{"unicode", "ñandú-código"},
		{"lookalike", "real-code-1\u200b"},
		{"case", "REAL-CODE-1"},
		{"nul", "real\x00code-1"},
		{"space", " real-code-1"},
		{"short", "real"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := joinWith(t, h, newClient(t), tc.code)
			requireError(t, r, http.StatusNotFound, "code_unknown")
			assert.Equal(t, "waiting", r.body["status"], "the join still happens")
			assert.Nil(t, r.body["lane"])
		})
	}
}

func TestPriorityCodeGuessingIsRateLimited(t *testing.T) {
	ah, h := newCodeHarness(t)
	ah.createCode("default", `{"code":"guess-me-42","uses":100}`)
	var limited reply
	n := 0
	for ; n < 20; n++ {
		r := joinWith(t, h, newClient(t), fmt.Sprintf("guess-%05d", n))
		if r.status == http.StatusTooManyRequests {
			limited = r
			break
		}
		requireError(t, r, http.StatusNotFound, "code_unknown")
	}
	require.Equal(t, 5, n, "the burst of code attempts is 5")
	requireError(t, limited, http.StatusTooManyRequests, "rate_limited")
	assert.NotEmpty(t, limited.header.Get("Retry-After"))
	assert.Empty(t, limited.header.Get("Set-Cookie"), "a refused attempt creates no session")
	// The right code is refused too while over the budget; a join without a
	// code is not.
	r := joinWith(t, h, newClient(t), "guess-me-42")
	requireError(t, r, http.StatusTooManyRequests, "rate_limited")
	r = do(t, newClient(t), http.MethodPost, h.url+base+"/api/join", "application/json", `{"gate":"default"}`)
	require.Equal(t, http.StatusOK, r.status, r.raw)
}

func TestPriorityCodeAdminHostileBodies(t *testing.T) {
	ah, _ := newCodeHarness(t)
	ah.createCode("default", `{"code":"taken-code"}`)
	cases := []struct {
		name, path, body string
		status           int
		code             session.Code
	}{
		{"zero uses", "default", `{"uses":0}`, 400, session.CodeInvalidArgument},
		{"negative uses", "default", `{"uses":-5}`, 400, session.CodeInvalidArgument},
		{"huge uses", "default", `{"uses":9223372036854775807}`, 400, session.CodeInvalidArgument},
		{"overflowing uses", "default", `{"uses":1e40}`, 400, "invalid_json"},
		{"negative ttl", "default", `{"ttl":"-1h"}`, 400, session.CodeInvalidArgument},
		{"ten years", "default", `{"ttl":"87600h"}`, 400, session.CodeInvalidArgument},
		{"past expiry", "default", `{"expiresAt":"2001-01-01T00:00:00Z"}`, 400, session.CodeInvalidArgument},
		{"ttl and expiry", "default", `{"ttl":"1h","expiresAt":"2099-01-01T00:00:00Z"}`, 400, session.CodeInvalidArgument},
		{"unicode code", "default", `{"code":"código-vip"}`, 400, session.CodeInvalidArgument},
		{"long code", "default", `{"code":"` + strings.Repeat("x", 65) + `"}`, 400, session.CodeInvalidArgument},
		{"long label", "default", `{"label":"` + strings.Repeat("é", 100) + `"}`, 400, session.CodeInvalidArgument},
		{"gate in body", "default", `{"gate":"vip"}`, 400, session.CodeInvalidArgument},
		{"unknown field", "default", `{"priority":99}`, 400, "invalid_json"},
		{"trailing data", "default", `{} {}`, 400, "invalid_json"},
		{"duplicate", "default", `{"code":"taken-code"}`, 409, session.CodeCodeExists},
		{"unknown gate", "nope", `{}`, 404, session.CodeUnknownGate},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			status, raw, _ := ah.do(http.MethodPost, "gates/"+tc.path+"/codes", adminToken, tc.body)
			assert.Equal(t, tc.status, status, raw)
			assert.Equal(t, tc.code, errorCode(t, raw))
		})
	}
	status, raw, _ := ah.do(http.MethodPost, "gates/default/codes", "", `{}`)
	assert.Equal(t, http.StatusUnauthorized, status, "codes need the admin token: %s", raw)
	status, raw, _ = ah.do(http.MethodDelete, "gates/default/codes/../../gates/default", adminToken, "")
	assert.NotEqual(t, http.StatusNoContent, status, raw)
	status, raw, _ = ah.do(http.MethodDelete, "gates/default/codes/not-hex", adminToken, "")
	assert.Equal(t, http.StatusBadRequest, status, raw)
	status, raw, _ = ah.do(http.MethodGet, "gates/nope/codes", adminToken, "")
	assert.Equal(t, http.StatusNotFound, status, raw)
	// A generated code by default: one use, a week.
	c := ah.createCode("default", `{}`)
	assert.Len(t, c["code"], 26)
	assert.Equal(t, float64(1), c["maxUses"])
}

// Fifty browsers join at once with a one-use code: exactly one gets the
// priority lane, the others 409 code_used, and every one of them joined.
func TestPriorityCodeOneUseFiftyConcurrentJoins(t *testing.T) {
	ah, h := newCodeHarness(t, func(o *gate.Options) { o.CodeRateLimit = gate.RateLimitOptions{PerSecond: 1000, Burst: 1000} })
	ah.createCode("default", `{"code":"only-one-wins","uses":1}`)
	h.join(t, newClient(t))
	const n = 50
	statuses := make([]int, n)
	lanes := make([]any, n)
	done := make(chan int, n)
	for i := 0; i < n; i++ {
		go func(i int) {
			r := joinWith(t, h, newClient(t), "only-one-wins")
			statuses[i], lanes[i] = r.status, r.body["lane"]
			done <- i
		}(i)
	}
	for i := 0; i < n; i++ {
		<-done
	}
	ok, used, prio := 0, 0, 0
	for i := range statuses {
		switch statuses[i] {
		case http.StatusOK:
			ok++
		case http.StatusConflict:
			used++
		default:
			t.Errorf("join %d: status %d", i, statuses[i])
		}
		if lanes[i] == "priority" {
			prio++
		}
	}
	assert.Equal(t, 1, ok)
	assert.Equal(t, n-1, used)
	assert.Equal(t, 1, prio)
	g, err := h.waitlist.Global("default")
	require.NoError(t, err)
	require.NotNil(t, g.Priority)
	assert.Equal(t, int64(1), g.Priority.Waiting)
	assert.Equal(t, int64(n-1), g.Waiting)
}
