package postgres_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
	"github.com/anteroomhq/anteroom/session/postgres/pgtest"
	"github.com/anteroomhq/anteroom/session/sessiontest"
)

// TestRemoteCommitsAreMarked: an instance's observer sees its own commits
// as local and those it follows from another instance as Remote (the
// metrics count each commit once, on the instance that made it).
func TestRemoteCommitsAreMarked(t *testing.T) {
	url := pgtest.DB(t)
	cfg := sessiontest.GateConfig(multiGate, 5)
	type seen struct {
		mu            sync.Mutex
		local, remote map[string]int
	}
	var obs [2]*seen
	var wls [2]*session.Waitlist
	for i := range wls {
		o := &seen{local: map[string]int{}, remote: map[string]int{}}
		obs[i] = o
		store := open(t, url, quiet)
		t.Cleanup(func() { _ = store.Close() })
		var err error
		wls[i], err = session.New(context.Background(), store, []session.GateConfig{cfg}, session.Options{
			TouchInterval: -1, Logger: quiet.Logger,
			Observer: func(c session.Commit) {
				o.mu.Lock()
				defer o.mu.Unlock()
				for _, ev := range c.Events {
					if ev.Kind == session.EventActivated || ev.Kind == session.EventQueued {
						if c.Remote {
							o.remote[ev.Session.ID]++
						} else {
							o.local[ev.Session.ID]++
						}
					}
				}
			},
		})
		require.NoError(t, err)
		t.Cleanup(func() { _ = wls[i].Close() })
	}
	// Many commits on each side: the follower often reads an own commit
	// from the outbox before the writer hands it over.
	const n = 40
	want := [2]map[string]int{{}, {}}
	for k := range n {
		for i, wl := range wls {
			id := fmt.Sprintf("made-on-%d-%02d", i, k)
			_, err := wl.Join(t.Context(), multiGate, id)
			require.NoError(t, err)
			want[i][id] = 1
		}
	}
	require.Eventually(t, func() bool {
		for _, o := range obs {
			o.mu.Lock()
			got := len(o.local) + len(o.remote)
			o.mu.Unlock()
			if got < 2*n {
				return false
			}
		}
		return true
	}, 20*time.Second, 10*time.Millisecond)
	for i := range obs {
		obs[i].mu.Lock()
		assert.Equal(t, want[i], obs[i].local, "instance %d: its own commits are local", i)
		assert.Equal(t, want[1-i], obs[i].remote, "instance %d: the other's are remote", i)
		obs[i].mu.Unlock()
	}
}
