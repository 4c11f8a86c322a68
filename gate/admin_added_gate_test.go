package gate_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/gate"
	"github.com/anteroomhq/anteroom/gate/gatetest"
	"github.com/anteroomhq/anteroom/session"
)

// TestAdminAddedGateLikeConfigured: a gate added through the admin API
// takes the default gate's admission tokens and notify claim window like
// its other omitted settings, issues tokens at once, and keeps both in the
// store (so a restart or another instance has them too).
func TestAdminAddedGateLikeConfigured(t *testing.T) {
	def := gatetest.Gate("default", 5)
	def.NotifyClaimTimeout = 20 * time.Minute
	sc := gatetest.StartSidecar(t, gatetest.Options{
		Gates:        []session.GateConfig{def},
		AdmissionTTL: map[string]time.Duration{"default": 5 * time.Minute},
		Gate:         func(o *gate.Options) { o.AdminToken = adminToken },
	})
	h := &adminHarness{t: t, sc: sc}
	code, body, _ := h.do(http.MethodPost, "gates", adminToken, `{"name":"launch","activeLimit":1}`)
	require.Equal(t, http.StatusCreated, code, body)

	status, b := httpDo(t, http.MethodPost, sc.URL+base+"/api/join?gate=launch", "", `{}`)
	require.Equal(t, http.StatusOK, status, string(b))
	var v session.SessionView
	require.NoError(t, json.Unmarshal(b, &v))
	require.Equal(t, session.StatusActive, v.Status)
	assert.NotEmpty(t, v.Admission, "an admin-added gate issues admission tokens like the default gate")

	snaps, err := sc.Store.Load(context.Background(), nil)
	require.NoError(t, err)
	require.NotNil(t, snaps["launch"].Settings)
	assert.Equal(t, 20*time.Minute, snaps["launch"].Settings.NotifyClaimTimeout, "the notify claim window is stored")
	assert.Equal(t, 5*time.Minute, snaps["launch"].Settings.AdmissionTTL, "and the admission token lifetime")

	// Both are settings like the others: PATCH sets them, strictly.
	for _, tc := range []struct{ body, field string }{
		{`{"admissionTokenTtl":"25h"}`, "admissionTokenTtl"},
		{`{"admissionTokenTtl":"500ms"}`, "admissionTokenTtl"},
		{`{"admissionTokenTtl":"-1s"}`, "admissionTokenTtl"},
		{`{"notifyClaimTimeout":"-1s"}`, "notifyClaimTimeout"},
		{`{"notifyClaimTimeout":"soon"}`, "notifyClaimTimeout"},
	} {
		code, body, _ := h.do(http.MethodPatch, "gates/launch", adminToken, tc.body)
		assert.Equal(t, http.StatusBadRequest, code, tc.body)
		assert.Equal(t, session.CodeInvalidArgument, errorCode(t, body), tc.body)
		assert.Contains(t, body, tc.field)
	}
	code, body, _ = h.do(http.MethodPatch, "gates/launch", adminToken, `{"activeLimit":5,"notifyClaimTimeout":"30m","admissionTokenTtl":"0s"}`)
	require.Equal(t, http.StatusOK, code, body)
	var g gate.AdminGate
	require.NoError(t, json.Unmarshal([]byte(body), &g))
	assert.Equal(t, "30m0s", g.Settings.NotifyClaimTimeout)
	assert.Equal(t, "0s", g.Settings.AdmissionTokenTTL)
	status, b = httpDo(t, http.MethodPost, sc.URL+base+"/api/join?gate=launch", "", `{}`)
	require.Equal(t, http.StatusOK, status, string(b))
	var q session.SessionView
	require.NoError(t, json.Unmarshal(b, &q))
	require.Equal(t, session.StatusActive, q.Status)
	assert.Empty(t, q.Admission, "no lifetime, no token")
}
