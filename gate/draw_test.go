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
	"github.com/anteroomhq/anteroom/session"
)

// TestJoinAndStatusSayWhetherThePlaceIsDrawn: a join or status answer says
// whether the session's place is still to be drawn (draw "pending": the
// snippet shows no place) or was drawn by the current event ("drawn": the
// snippet says so, also to a visitor who loads the page long after the
// draw), so that the snippet shows the right card from it alone, before
// GET /api/events answers.
func TestJoinAndStatusSayWhetherThePlaceIsDrawn(t *testing.T) {
	for _, shuffle := range []bool{true, false} {
		t.Run(map[bool]string{true: "lottery", false: "first come"}[shuffle], func(t *testing.T) {
			sc := gatetest.StartSidecar(t, gatetest.Options{Gates: []session.GateConfig{gatetest.Gate("default", 1)}})
			ctx := context.Background()
			w := sc.Waitlist
			joinHTTP := func() joined {
				t.Helper()
				code, body := httpDo(t, http.MethodPost, sc.URL+base+"/api/join", "", `{"gate":"default"}`)
				require.Equal(t, http.StatusOK, code, string(body))
				var v joined
				require.NoError(t, json.Unmarshal(body, &v))
				return v
			}
			status := func(tok string) session.SessionView {
				t.Helper()
				code, body := httpDo(t, http.MethodGet, sc.URL+base+"/api/status", tok, "")
				require.Equal(t, http.StatusOK, code, string(body))
				var v session.SessionView
				require.NoError(t, json.Unmarshal(body, &v))
				return v
			}
			holder := joinHTTP()
			require.Equal(t, session.StatusActive, holder.Status)
			assert.Empty(t, holder.Draw)
			early := joinHTTP()
			require.Equal(t, session.StatusWaiting, early.Status)
			assert.Empty(t, early.Draw, "no event yet")

			now := sc.Clock.Now()
			_, err := w.AddEvent(ctx, session.ScheduledEvent{Gate: "default", ID: "launch",
				PrequeueAt: now.Add(time.Second), StartsAt: now.Add(time.Minute), Shuffle: shuffle})
			require.NoError(t, err)
			sc.Clock.Advance(time.Second) // due: the next join opens the pre-queue first
			var pre []joined
			for range 4 {
				pre = append(pre, joinHTTP())
			}
			wantPending := ""
			if shuffle {
				wantPending = session.DrawPending
			}
			for i, v := range pre {
				assert.Equal(t, wantPending, v.Draw, "join %d in the pre-queue", i)
				assert.Equal(t, wantPending, status(v.Token).Draw, "status %d in the pre-queue", i)
			}
			assert.Empty(t, status(early.Token).Draw, "waiting since before the pre-queue: keeps its place")

			sc.Clock.Advance(time.Minute)
			require.NoError(t, w.Sweep(ctx))
			evs, err := w.Events("default")
			require.NoError(t, err)
			require.Equal(t, session.EventStarted, evs[0].Phase)
			after := joinHTTP()
			assert.Empty(t, after.Draw, "arrived after the start")
			wantDrawn := ""
			if shuffle {
				wantDrawn = session.DrawDrawn
			}
			// A visitor loading the page long after the draw: its status.
			sc.Clock.Advance(10 * time.Minute)
			for i, v := range pre {
				s := status(v.Token)
				require.Equal(t, session.StatusWaiting, s.Status)
				assert.Equal(t, wantDrawn, s.Draw, "status %d after the draw", i)
			}
			assert.Empty(t, status(early.Token).Draw)
			assert.Empty(t, status(after.Token).Draw)
			assert.Empty(t, status(holder.Token).Draw, "active")

			// A later event's pre-queue opens: the first draw is no longer the current one.
			now = sc.Clock.Now()
			_, err = w.AddEvent(ctx, session.ScheduledEvent{Gate: "default", ID: "encore",
				PrequeueAt: now.Add(time.Second), StartsAt: now.Add(time.Hour), Shuffle: true})
			require.NoError(t, err)
			sc.Clock.Advance(time.Second)
			require.NoError(t, w.Sweep(ctx))
			assert.Empty(t, status(pre[0].Token).Draw, "a later event is the current one")
			assert.Equal(t, session.DrawPending, joinHTTP().Draw, "in the later event's draw")
		})
	}
}
