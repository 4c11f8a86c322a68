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
