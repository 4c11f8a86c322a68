package sessiontest

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
)

// testPacePersists: the pacing of a gate (its token bucket) is kept by the
// Store with the gate's counters, so a restart hands out no fresh burst
// (and instances sharing a Store share one bucket).
func testPacePersists(t *testing.T, open Opener) {
	h := newHarness(t, open)
	cfg := GateConfig(gateName, 100)
	cfg.NewUsersPerMinute = 600 // ten a second, a burst of ten
	admitted := 0
	for i := range 20 {
		s, err := h.store.Join(h.ctx, cfg, fmt.Sprintf("p%02d", i), h.clock.Now())
		require.NoError(t, err)
		if s.Status == session.StatusActive {
			admitted++
		}
	}
	require.Equal(t, 10, admitted, "one second's burst, then the line")

	h.reopen()
	r, err := h.store.Purge(h.ctx, cfg, nil, h.clock.Now())
	require.NoError(t, err)
	assert.Zero(t, r.Promoted, "reopened at the same instant: the bucket is still empty")
	r, err = h.store.Purge(h.ctx, cfg, nil, h.clock.Advance(500*time.Millisecond))
	require.NoError(t, err)
	assert.Equal(t, int64(5), r.Promoted, "half a second later: half the burst")
	r, err = h.store.Purge(h.ctx, cfg, nil, h.clock.Advance(10*time.Second))
	require.NoError(t, err)
	assert.Equal(t, int64(5), r.Promoted, "the rest of the line, within the burst")
}
