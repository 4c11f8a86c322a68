package metrics_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session/sessiontest"
)

// The waiting gauge counts both lanes (the global view's own waiting is the
// normal lane's while the priority lane is not empty).
func TestMetricsWaitingCountsThePriorityLane(t *testing.T) {
	s := startSidecar(t, sessiontest.GateConfig("default", 1), nil)
	ctx := context.Background()
	_, err := s.waitlist.CreateCode(ctx, "default", "metrics-vip", "", 5, time.Hour)
	require.NoError(t, err)
	s.join(t) // active
	s.join(t) // normal lane
	_, codeErr, err := s.waitlist.JoinWithCode(ctx, "default", "vip-1", "metrics-vip")
	require.NoError(t, err)
	require.NoError(t, codeErr)
	g, err := s.waitlist.Global("default")
	require.NoError(t, err)
	require.NotNil(t, g.Priority)
	resp, body := s.scrape(t, "Bearer "+adminToken)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	mfs := parse(t, body)
	assert.Equal(t, 2.0, value(t, mfs, "anteroom_waiting_sessions", "gate", "default"))
}
