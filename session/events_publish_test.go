package session_test

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
	"github.com/anteroomhq/anteroom/session/sessiontest"
	"github.com/anteroomhq/anteroom/session/sqlite"
)

// sessionViews records the session messages a Waitlist publishes.
type sessionViews struct {
	mu    sync.Mutex
	views map[string][]session.SessionView
}

func (p *sessionViews) PublishGlobal(session.GlobalView) {}

func (p *sessionViews) PublishSession(v session.SessionView) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.views[v.Session] = append(p.views[v.Session], v)
}

// TestLotteryTellsMovedSessionsTheirPosition: every session the draw moved
// gets a session message with its new position (its snippet computes its
// place from it), and one it did not move gets none.
func TestLotteryTellsMovedSessionsTheirPosition(t *testing.T) {
	store, err := sqlite.Open(filepath.Join(t.TempDir(), "anteroom.db"), sqlite.Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Close() })
	clock := sessiontest.NewClock(t0)
	pub := &sessionViews{views: map[string][]session.SessionView{}}
	w, err := session.New(t.Context(), store, []session.GateConfig{{Name: "g", ActiveLimit: 0, ActiveTimeout: time.Hour, WaitingTimeout: time.Hour}},
		session.Options{Clock: clock, Publisher: pub, TouchInterval: -1, SweepInterval: -1})
	require.NoError(t, err)
	t.Cleanup(func() { _ = w.Close() })
	_, err = w.AddEvent(t.Context(), session.ScheduledEvent{Gate: "g", ID: "e", PrequeueAt: t0, StartsAt: t0.Add(time.Minute), Shuffle: true})
	require.NoError(t, err)
	var ids []string
	for i := 0; i < 20; i++ {
		ids = append(ids, fmt.Sprintf("s%02d", i))
		_, err := w.Join(t.Context(), "g", ids[i])
		require.NoError(t, err)
	}
	clock.Set(t0.Add(time.Minute))
	require.NoError(t, w.Sweep(t.Context()))
	evs, err := w.Events("g")
	require.NoError(t, err)
	require.Equal(t, session.EventStarted, evs[0].Phase)
	served, err := session.LotteryOrder(evs[0].Seed, evs[0].Positions)
	require.NoError(t, err)
	moved := 0
	pub.mu.Lock()
	defer pub.mu.Unlock()
	for k, old := range served {
		id := ids[old-1]
		got := pub.views[id]
		if old == evs[0].Positions[k] {
			assert.Empty(t, got, "%s stayed: no message", id)
			continue
		}
		moved++
		require.Len(t, got, 1, "%s moved: one message", id)
		assert.Equal(t, evs[0].Positions[k], got[0].Position)
		assert.Equal(t, session.StatusWaiting, got[0].Status)
		assert.Equal(t, int64(k+1), got[0].Place, "its exact place is its rank in the draw")
	}
	assert.Greater(t, moved, 10)
}
