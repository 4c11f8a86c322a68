package gate_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/gate"
	"github.com/anteroomhq/anteroom/gate/gatetest"
	"github.com/anteroomhq/anteroom/gate/wire"
	"github.com/anteroomhq/anteroom/session"
)

// codeJoinAnswer is a join's answer with a code that gave no priority.
type codeJoinAnswer struct {
	session.SessionView
	Token string           `json:"token"`
	Error wire.ErrorDetail `json:"error"`
}

// TestCodeJoinAnswersCarryTheJoin: a join whose code is unknown or used up
// is answered 404/409 with the code's error, and still with everything a
// join answers: the session's token, its cookie (not for a backend's named
// join), and, at a gate with admission tokens, the admission of a session
// let in. A session promoted from the priority lane gets its admission
// once it claims.
func TestCodeJoinAnswersCarryTheJoin(t *testing.T) {
	sale := gatetest.Gate("sale", 1)
	sale.ClaimTimeout = time.Minute
	sc := gatetest.StartSidecar(t, gatetest.Options{
		Gates:        []session.GateConfig{sale},
		AdmissionTTL: map[string]time.Duration{"sale": 5 * time.Minute},
		Gate: func(o *gate.Options) {
			o.APIKeys = []string{admissionKey}
			o.CodeRateLimit = gate.RateLimitOptions{PerSecond: 1000, Burst: 1000}
		},
	})
	b := sc.URL + gatetest.BasePath
	_, err := sc.Waitlist.CreateCode(t.Context(), "sale", "ONE-USE-CODE", "", 1, time.Hour)
	require.NoError(t, err)

	// An unknown code, a free slot: 404, admitted, admission and cookie.
	a := call(t, http.MethodPost, b+"/api/join", `{"gate":"sale","code":"NO-SUCH-CODE"}`)
	require.Equal(t, http.StatusNotFound, a.status, "%s", a.body)
	var first codeJoinAnswer
	require.NoError(t, json.Unmarshal(a.body, &first))
	assert.Equal(t, session.CodeCodeUnknown, first.Error.Code)
	assert.Equal(t, session.StatusActive, first.Status)
	assert.NotEmpty(t, first.Token)
	assert.NotEmpty(t, first.Admission, "the admitted session's admission token")
	assert.Contains(t, a.header.Get("Set-Cookie"), gate.CookieName+"="+first.Token)

	// The code spent by a waiter in the priority lane, then used up: 409,
	// waiting, with Retry-After and a cookie, and no admission.
	a = call(t, http.MethodPost, b+"/api/join", `{"gate":"sale","code":"ONE-USE-CODE"}`)
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	var prio codeJoinAnswer
	require.NoError(t, json.Unmarshal(a.body, &prio))
	assert.Equal(t, "priority", prio.Lane)
	a = call(t, http.MethodPost, b+"/api/join", `{"gate":"sale","code":"ONE-USE-CODE"}`)
	require.Equal(t, http.StatusConflict, a.status, "%s", a.body)
	var used codeJoinAnswer
	require.NoError(t, json.Unmarshal(a.body, &used))
	assert.Equal(t, session.CodeCodeUsed, used.Error.Code)
	assert.Equal(t, session.StatusWaiting, used.Status)
	assert.Empty(t, used.Lane, "the normal lane")
	assert.Empty(t, used.Admission)
	assert.NotEmpty(t, a.header.Get("Retry-After"))
	assert.Contains(t, a.header.Get("Set-Cookie"), gate.CookieName+"="+used.Token)

	// A backend's named join with a bad code: the error, no cookie.
	a = call(t, http.MethodPost, b+"/api/join", `{"gate":"sale","sessionId":"user-42","code":"NO-SUCH-CODE"}`, gate.APIKeyHeader, admissionKey)
	require.Equal(t, http.StatusNotFound, a.status, "%s", a.body)
	assert.Empty(t, a.header.Get("Set-Cookie"))

	// The first session leaves: the priority waiter is promoted ahead of
	// the normal lane, and gets its admission when it claims.
	a = call(t, http.MethodPost, b+"/api/release?gate=sale", "", "Authorization", "Bearer "+first.Token)
	require.Equal(t, http.StatusNoContent, a.status, "%s", a.body)
	v := viewOf(t, sc, http.MethodGet, "/api/status", "sale", prio.Token)
	assert.Equal(t, session.StatusActive, v.Status)
	assert.Nil(t, v.ClaimDeadline, "the status claimed the slot")
	assert.NotEmpty(t, v.Admission, "the promoted priority session's admission token")
	w := viewOf(t, sc, http.MethodGet, "/api/status", "sale", used.Token)
	assert.Equal(t, session.StatusWaiting, w.Status)
	assert.Empty(t, w.Admission)
}
