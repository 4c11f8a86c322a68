package gate_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/gate/gatetest"
	"github.com/anteroomhq/anteroom/session"
)

// TestAdminRemoveGateTakesEventsAndCodes: a gate removed over the admin API
// is refused with 409 prequeue_open while an event's pre-queue is open;
// once removed, a gate added again under its name has neither the old
// events nor the old codes.
func TestAdminRemoveGateTakesEventsAndCodes(t *testing.T) {
	h := newAdminHarness(t, adminToken, nil)
	start := gatetest.Start
	code, body, _ := h.do(http.MethodPost, "gates", adminToken, `{"name":"launch","activeLimit":1,"mode":"reject"}`)
	require.Equal(t, http.StatusCreated, code, body)
	ev := `{"id":"drop","prequeueAt":"` + rfc(start.Add(time.Minute)) + `","startsAt":"` + rfc(start.Add(2*time.Minute)) + `"}`
	code, body, _ = h.do(http.MethodPost, "gates/launch/events", adminToken, ev)
	require.Equal(t, http.StatusCreated, code, body)
	code, body, _ = h.do(http.MethodPost, "gates/launch/codes", adminToken, `{"code":"vip-code-0123456789","uses":3}`)
	require.Equal(t, http.StatusCreated, code, body)

	h.sc.Clock.Set(start.Add(time.Minute))
	code, body, _ = h.do(http.MethodDelete, "gates/launch", adminToken, "")
	assert.Equal(t, http.StatusConflict, code, body)
	assert.Equal(t, session.CodePrequeueOpen, errorCode(t, body))
	code, _, _ = h.do(http.MethodGet, "gates/launch", adminToken, "")
	assert.Equal(t, http.StatusOK, code, "the refused removal kept the gate")

	h.sc.Clock.Set(start.Add(2 * time.Minute))
	require.NoError(t, h.sc.Waitlist.AdvanceEvents(t.Context()))
	code, body, _ = h.do(http.MethodDelete, "gates/launch", adminToken, "")
	require.Equal(t, http.StatusNoContent, code, body)

	code, body, _ = h.do(http.MethodPost, "gates", adminToken, `{"name":"launch","activeLimit":1}`)
	require.Equal(t, http.StatusCreated, code, body)
	assert.Empty(t, publicEvents(t, h.sc, "launch").Events, "no event inherited")
	code, body, _ = h.do(http.MethodGet, "gates/launch/codes", adminToken, "")
	require.Equal(t, http.StatusOK, code, body)
	var list struct {
		Codes []session.PriorityCode `json:"codes"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &list))
	assert.Empty(t, list.Codes, "no code inherited")
}
