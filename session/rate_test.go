package session_test

import (
	"context"
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

// globals records the global views published.
type globals struct {
	mu    sync.Mutex
	views []session.GlobalView
}

func (p *globals) PublishGlobal(v session.GlobalView) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.views = append(p.views, v)
}

func (p *globals) PublishSession(session.SessionView) {}

func (p *globals) all() []session.GlobalView {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]session.GlobalView(nil), p.views...)
}

// rateHarness is a one-slot gate with ten waiters on a fake clock: each
// release promotes the next waiter.
func rateHarness(t *testing.T) (*session.Waitlist, *sessiontest.Clock, *globals) {
	t.Helper()
	store, err := sqlite.Open(filepath.Join(t.TempDir(), "anteroom.db"), sqlite.Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Close() })
	clock := sessiontest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	cfg := session.GateConfig{Name: "default", ActiveLimit: 1, ActiveTimeout: time.Hour, WaitingTimeout: time.Hour}
	pub := &globals{}
	w, err := session.New(context.Background(), store, []session.GateConfig{cfg}, session.Options{Clock: clock, TouchInterval: -1, Publisher: pub})
	require.NoError(t, err)
	t.Cleanup(func() { _ = w.Close() })
	for _, id := range []string{"s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7", "s8", "s9"} {
		_, err := w.Join(context.Background(), "default", id)
		require.NoError(t, err)
	}
	return w, clock, pub
}

func rateOf(t *testing.T, w *session.Waitlist) float64 {
	t.Helper()
	v, err := w.Global("default")
	require.NoError(t, err)
	return v.AdmittedPerMinute
}

// admittedPerMinute counts promotions over the last five minutes, once there
// is evidence for a rate: at least three promotions spread over at least a
// minute. One promotion, or a burst, gives no rate (no "about 5 min" after a
// single admission). The count is divided by the time the evidence covers,
// from its first ten-second bucket to now, not by the whole window: a gate
// that began admitting a minute ago is not five times slower than it is.
func TestAdmittedPerMinuteNeedsEvidence(t *testing.T) {
	tests := []struct {
		name string
		gaps []time.Duration // before each promotion
		want float64
	}{
		{"none", nil, 0},
		{"one", []time.Duration{0}, 0},
		{"two over two minutes", []time.Duration{0, 2 * time.Minute}, 0},
		{"three within ten seconds", []time.Duration{0, time.Second, time.Second}, 0},
		{"three over fifty seconds", []time.Duration{0, 25 * time.Second, 25 * time.Second}, 0},
		{"three over a minute (seven buckets)", []time.Duration{0, 30 * time.Second, 30 * time.Second}, 3 / (70.0 / 60)},
		{"four over four minutes (25 buckets)", []time.Duration{0, time.Minute, time.Minute, 2 * time.Minute}, 4 / (250.0 / 60)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, clock, _ := rateHarness(t)
			for i, gap := range tt.gaps {
				clock.Advance(gap)
				require.NoError(t, w.Release(context.Background(), "default", "s"+string(rune('0'+i))))
			}
			assert.InDelta(t, tt.want, rateOf(t, w), 1e-9)
		})
	}
}

// The rate is computed when read, not frozen at the last commit: thirty
// minutes after the last promotion, with nothing committed since, Global and
// Status say 0. The update republishes the view when the rate changed, and
// only then.
func TestAdmittedPerMinuteDecaysWithoutCommitsAndIsRepublished(t *testing.T) {
	w, clock, pub := rateHarness(t)
	ctx := context.Background()
	for i := range 4 {
		require.NoError(t, w.Release(ctx, "default", "s"+string(rune('0'+i))))
		clock.Advance(30 * time.Second)
	}
	assert.InDelta(t, 4/(130.0/60), rateOf(t, w), 1e-9, "four over the 130 s they cover")

	// 4m50s after the first promotion all four are still in the window,
	// which they now cover whole; a little later the first has left it.
	clock.Advance(2*time.Minute + 50*time.Second)
	assert.InDelta(t, 4.0/5, rateOf(t, w), 1e-9)
	clock.Advance(20 * time.Second)
	later := 3 / (290.0 / 60) // from the second promotion's bucket to now
	assert.InDelta(t, later, rateOf(t, w), 1e-9, "read at call time, no commit needed")
	st, err := w.Status(ctx, "default", "s9")
	require.NoError(t, err)
	assert.InDelta(t, later, st.AdmittedPerMinute, 1e-9, "status reads it at call time too")
	active, err := w.Status(ctx, "default", "s4")
	require.NoError(t, err)
	require.Equal(t, session.StatusActive, active.Status)
	assert.InDelta(t, later, active.AdmittedPerMinute, 1e-9, "active sessions' status too")

	clock.Advance(30 * time.Minute)
	assert.Zero(t, rateOf(t, w), "thirty minutes after the last promotion")

	// Nothing to purge or promote, yet the update tells the clients.
	before := len(pub.all())
	_, err = w.Update(ctx)
	require.NoError(t, err)
	views := pub.all()[before:]
	require.Len(t, views, 1, "one republished view")
	assert.Zero(t, views[0].AdmittedPerMinute)
	assert.EqualValues(t, 5, views[0].Waiting, "the rest of the view is the current one")
	_, err = w.Update(ctx)
	require.NoError(t, err)
	assert.Len(t, pub.all(), before+1, "no change, no message")
}
