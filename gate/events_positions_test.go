package gate_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/gate/gatetest"
	"github.com/anteroomhq/anteroom/gate/wire"
	"github.com/anteroomhq/anteroom/session"
)

// TestEventsWithoutPositions: GET /api/events?positions=0 leaves out a
// started event's positions (the whole pre-queue, which every waiting
// client would otherwise download at the start) and nothing else; any
// other value of the parameter changes nothing.
func TestEventsWithoutPositions(t *testing.T) {
	sc := gatetest.StartSidecar(t, gatetest.Options{Gates: []session.GateConfig{gatetest.Gate("default", 1)}})
	ctx := context.Background()
	w := sc.Waitlist
	_, err := w.Join(ctx, "default", "holder")
	require.NoError(t, err)
	now := sc.Clock.Now()
	_, err = w.AddEvent(ctx, session.ScheduledEvent{Gate: "default", ID: "launch",
		PrequeueAt: now.Add(-time.Second), StartsAt: now.Add(time.Minute), Shuffle: true})
	require.NoError(t, err)
	require.NoError(t, w.Sweep(ctx))
	for _, id := range []string{"a", "b", "c"} {
		_, err := w.Join(ctx, "default", id)
		require.NoError(t, err)
	}
	sc.Clock.Advance(time.Minute)
	require.NoError(t, w.Sweep(ctx))

	get := func(query string) wire.EventView {
		t.Helper()
		code, body := httpDo(t, http.MethodGet, sc.URL+base+"/api/events?gate=default"+query, "", "")
		require.Equal(t, http.StatusOK, code, string(body))
		var v wire.EventsView
		require.NoError(t, json.Unmarshal(body, &v))
		require.Len(t, v.Events, 1)
		return v.Events[0]
	}
	full := get("")
	require.Equal(t, "started", full.Phase)
	require.Len(t, full.Positions, 3)
	for _, tc := range []struct {
		query     string
		positions bool
	}{
		{"&positions=0", false},
		{"&positions=1", true},
		{"&positions=", true},
		{"&positions=00", true},
		{"&positions=0&positions=1", false}, // the first value counts, as echo reads it
	} {
		t.Run(tc.query, func(t *testing.T) {
			got := get(tc.query)
			if tc.positions {
				assert.Equal(t, full, got)
				return
			}
			assert.Empty(t, got.Positions)
			got.Positions = full.Positions
			assert.Equal(t, full, got, "only the positions are left out")
		})
	}
}
