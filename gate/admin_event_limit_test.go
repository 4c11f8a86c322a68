package gate_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/gate/gatetest"
	"github.com/anteroomhq/anteroom/session"
)

// TestAdminShowsTheEventsLimitAndMode: GET gates shows the limit and the
// mode in effect (a scheduled event's pre-queue holds the line, a running
// event overrides the limit) and the configured ones under settings; the
// public global view shows the same limit, and overLimit is judged against
// it.
func TestAdminShowsTheEventsLimitAndMode(t *testing.T) {
	h := newAdminHarness(t, adminToken, nil)
	start := gatetest.Start
	body := `{"id":"drop","prequeueAt":"` + rfc(start.Add(time.Minute)) + `","startsAt":"` + rfc(start.Add(2*time.Minute)) +
		`","endsAt":"` + rfc(start.Add(time.Hour)) + `","activeLimit":3}`
	code, resp, _ := h.do(http.MethodPost, "gates/default/events", adminToken, body)
	require.Equal(t, http.StatusCreated, code, resp)

	g := h.gate("default")
	assert.Equal(t, int64(1), g.Limit)
	assert.Equal(t, session.ModeOpen, g.Mode)

	h.sc.Clock.Set(start.Add(time.Minute))
	g = h.gate("default")
	assert.Equal(t, session.ModeQueueAll, g.Mode, "the pre-queue holds the line")
	assert.Equal(t, session.ModeOpen, g.Settings.Mode, "as configured")

	h.sc.Clock.Set(start.Add(2 * time.Minute))
	require.NoError(t, h.sc.Waitlist.Sweep(t.Context()))
	for _, id := range []string{"a-session-000001", "b-session-000001", "c-session-000001"} {
		assert.Equal(t, session.StatusActive, h.join("default", id).Status)
	}
	g = h.gate("default")
	assert.Equal(t, int64(3), g.Limit, "the event's limit")
	assert.Equal(t, int64(1), g.Settings.ActiveLimit, "the configured one")
	assert.Equal(t, session.ModeOpen, g.Mode)
	assert.False(t, g.OverLimit, "3 active under the event's limit of 3 is not over it")
	code, b := httpDo(t, http.MethodGet, h.sc.URL+base+"/api/global?gate=default", "", "")
	require.Equal(t, http.StatusOK, code, string(b))
	assert.Contains(t, string(b), `"limit":3`)

	h.sc.Clock.Set(start.Add(time.Hour)) // the event ends: 3 active over the limit of 1
	g = h.gate("default")
	assert.Equal(t, int64(1), g.Limit)
	assert.True(t, g.OverLimit)
}
