package postgres

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
	"github.com/anteroomhq/anteroom/session/postgres/pgtest"
)

// A resync that fails (here: on a context already done) leaves the gate
// pending and the Store unready; a later commit of the instance does not
// paper over it, and the follower's retry brings it back.
func TestFailedResyncIsRetried(t *testing.T) {
	url := pgtest.DB(t)
	ctx := context.Background()
	s, err := Open(ctx, url, Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	var mu sync.Mutex
	var resyncs, commits int
	s.SetCommitListener(func(c session.Commit) {
		mu.Lock()
		defer mu.Unlock()
		if c.Resync != nil {
			resyncs++
		} else {
			commits++
		}
	})
	cfg := session.GateConfig{Name: "g", ActiveLimit: 2, ActiveTimeout: time.Minute, WaitingTimeout: time.Minute}
	_, err = s.Load(ctx, []string{"g"})
	require.NoError(t, err)

	done, cancel := context.WithCancel(ctx)
	cancel()
	s.deliverMu.Lock()
	s.resyncGate(done, s.pool, "g")
	s.deliverMu.Unlock()
	require.ErrorIs(t, s.Ready(), session.ErrUnavailable)

	// This commit is not handed to a listener that is behind; it wakes
	// the follower, whose resync (which includes it) makes the Store ready.
	_, err = s.Join(ctx, cfg, "a", time.Now())
	require.NoError(t, err)
	require.Eventually(t, func() bool { return s.Ready() == nil }, 10*time.Second, 10*time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, 1, resyncs)
	assert.Equal(t, 0, commits, "the commit reached the listener through the resync only")
}

// A resync of a gate whose stored settings do not decode (an edit by hand,
// a newer version's row) leaves the Store ready and the listener's
// settings of the gate as they were; the rest of the gate's state is
// handed over. It used to fail the resync: every instance that resynced
// (after any lost connection) stayed unready until the row was mended.
func TestResyncOverDamagedSettingsKeepsTheListenersSettings(t *testing.T) {
	url := pgtest.DB(t)
	ctx := context.Background()
	s, err := Open(ctx, url, Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	var mu sync.Mutex
	var resyncs []session.Commit
	s.SetCommitListener(func(c session.Commit) {
		mu.Lock()
		defer mu.Unlock()
		if c.Resync != nil {
			resyncs = append(resyncs, c)
		}
	})
	cfg := session.GateConfig{Name: "g", ActiveLimit: 2, ActiveTimeout: time.Minute, WaitingTimeout: time.Minute}
	_, err = s.Load(ctx, []string{"g"})
	require.NoError(t, err)
	require.NoError(t, s.SaveGateSettings(ctx, "g", &cfg))
	_, err = s.Join(ctx, cfg, "a", time.Now())
	require.NoError(t, err)
	_, err = s.pool.Exec(ctx, `UPDATE anteroom_gate_settings SET settings = '{"activeLimit":-4}' WHERE gate = 'g'`)
	require.NoError(t, err)
	_, err = s.pool.Exec(ctx, `UPDATE anteroom_gates SET seq = seq + 1 WHERE name = 'g'`) // a commit the listener missed
	require.NoError(t, err)

	mu.Lock()
	before := len(resyncs)
	mu.Unlock()
	s.deliverMu.Lock()
	s.resyncGate(ctx, s.pool, "g")
	s.deliverMu.Unlock()
	require.NoError(t, s.Ready())
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, resyncs, before+1)
	c := resyncs[before]
	_, named := c.Settings["g"]
	assert.False(t, named, "no settings named: the listener keeps its own (nil would reset them)")
	require.Len(t, c.Resync["g"].Active, 1, "the gate's state is handed over")
	assert.Equal(t, "a", c.Resync["g"].Active[0].ID)
}
