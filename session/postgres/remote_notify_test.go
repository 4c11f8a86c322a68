package postgres_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
	"github.com/anteroomhq/anteroom/session/postgres/pgtest"
	"github.com/anteroomhq/anteroom/session/sessiontest"
)

// viewRecorder keeps the last session notice per session.
type viewRecorder struct {
	mu    sync.Mutex
	views map[string]session.SessionView
}

func (r *viewRecorder) PublishGlobal(session.GlobalView) {}

func (r *viewRecorder) PublishSession(v session.SessionView) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.views == nil {
		r.views = map[string]session.SessionView{}
	}
	r.views[v.Session] = v
}

func (r *viewRecorder) get(id string) (session.SessionView, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	v, ok := r.views[id]
	return v, ok
}

// TestRemotePromotionCarriesNotify: a called-back session promoted by one
// instance is announced by the other with notify set (its clients learn
// that a claim link is on its way).
func TestRemotePromotionCarriesNotify(t *testing.T) {
	url := pgtest.DB(t)
	ctx := context.Background()
	cfg := sessiontest.GateConfig(multiGate, 1)
	cfg.NotifyClaimTimeout = 15 * time.Minute
	var wls [2]*session.Waitlist
	var pubs [2]*viewRecorder
	for i := range wls {
		s := open(t, url, quiet)
		t.Cleanup(func() { _ = s.Close() })
		pubs[i] = &viewRecorder{}
		w, err := session.New(ctx, s, []session.GateConfig{cfg}, session.Options{Publisher: pubs[i], TouchInterval: -1, Logger: quiet.Logger})
		require.NoError(t, err)
		t.Cleanup(func() { _ = w.Close() })
		wls[i] = w
	}
	_, err := wls[0].Join(ctx, multiGate, "holder")
	require.NoError(t, err)
	_, err = wls[0].Join(ctx, multiGate, "called")
	require.NoError(t, err)
	_, err = wls[0].SetNotify(ctx, multiGate, "called", true)
	require.NoError(t, err)
	require.NoError(t, wls[0].Release(ctx, multiGate, "holder"))
	for i, p := range pubs {
		require.Eventually(t, func() bool {
			v, ok := p.get("called")
			return ok && v.Status == session.StatusActive
		}, 10*time.Second, 5*time.Millisecond, "instance %d announced the promotion", i)
		v, _ := p.get("called")
		require.True(t, v.Notify, "instance %d: the promotion notice carries notify", i)
	}
}
