package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
	"github.com/anteroomhq/anteroom/session/postgres"
	"github.com/anteroomhq/anteroom/session/postgres/pgtest"
	"github.com/anteroomhq/anteroom/session/sessiontest"
)

// The server crashes under load and comes back: the instances go unready
// and refuse validate meanwhile, reconnect, resync, and nothing
// acknowledged is lost nor anybody admitted twice.
func TestServerRestartUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server of its own and crashes it")
	}
	srv, url := pgtest.Own(t)
	ctx := context.Background()

	const limit = 20
	cfg := sessiontest.GateConfig(multiGate, limit)
	type inst struct {
		store *postgres.Store
		wl    *session.Waitlist
		pub   *recorder
	}
	var ins [2]*inst
	for i := range ins {
		opts := quiet
		opts.ReconnectDelay = 50 * time.Millisecond
		st := open(t, url, opts)
		t.Cleanup(func() { _ = st.Close() })
		in := &inst{store: st, pub: &recorder{}}
		var err error
		in.wl, err = session.New(ctx, st, []session.GateConfig{cfg}, session.Options{Publisher: in.pub, TouchInterval: -1, Ready: st.Ready, Logger: quiet.Logger})
		require.NoError(t, err)
		t.Cleanup(func() { _ = in.wl.Close() })
		ins[i] = in
	}

	var acked sync.Map // id -> position
	var released sync.Map
	var failures atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var n atomic.Int64
	for w := range 8 {
		wg.Go(func() {
			in := ins[w%2]
			for k := 0; ; k++ {
				select {
				case <-stop:
					return
				default:
				}
				id := fmt.Sprintf("w%d-%d", w, n.Add(1))
				v, err := in.wl.Join(ctx, multiGate, id)
				if err != nil {
					failures.Add(1)
					time.Sleep(5 * time.Millisecond)
					continue
				}
				acked.Store(id, v.Position)
				if v.Status == session.StatusActive && k%3 == 0 {
					if err := in.wl.Release(ctx, multiGate, id); err == nil {
						released.Store(id, true)
					}
				}
			}
		})
	}
	time.Sleep(300 * time.Millisecond)
	srv.Kill()
	for i, in := range ins {
		require.Eventually(t, func() bool { return in.store.Ready() != nil }, 20*time.Second, 5*time.Millisecond, "instance %d goes unready", i)
		assert.ErrorIs(t, in.wl.ValidateSessionIsActive(multiGate, "w0-1"), session.ErrUnavailable,
			"instance %d answers no validate from memory while it does not follow", i)
	}
	time.Sleep(200 * time.Millisecond) // joins fail meanwhile
	require.NoError(t, srv.Restart(false))
	for i, in := range ins {
		require.Eventually(t, func() bool { return in.store.Ready() == nil }, 30*time.Second, 10*time.Millisecond, "instance %d is ready again", i)
	}
	time.Sleep(300 * time.Millisecond)
	close(stop)
	wg.Wait()
	assert.Positive(t, failures.Load(), "joins failed while the server was down")

	rows, err := ins[0].store.Rows(ctx, multiGate)
	require.NoError(t, err)
	stored := map[string]session.Session{}
	var act, wait int64
	for _, r := range rows {
		stored[r.ID] = r
		if r.Status == session.StatusActive {
			act++
		} else {
			wait++
		}
	}
	lost := 0
	acked.Range(func(k, v any) bool {
		id := k.(string)
		if _, rel := released.Load(id); rel {
			if _, still := stored[id]; still {
				t.Errorf("released %s is still stored", id)
			}
			return true
		}
		if stored[id].Position != v.(int64) {
			lost++
		}
		return true
	})
	assert.Zero(t, lost, "acknowledged joins lost")
	snaps, err := ins[1].store.Load(ctx, []string{multiGate})
	require.NoError(t, err)
	st := snaps[multiGate].State
	assert.Equal(t, act, st.Active, "active counter equals rows")
	assert.Equal(t, wait, st.Waiting, "waiting counter equals rows")
	assert.LessOrEqual(t, act, int64(limit))

	// Both memories equal the tables, and nobody was admitted twice.
	for i, in := range ins {
		// The same counts may have been seen before the last commit: wait
		// until the whole memory matches, then say what differs.
		matches := func(report bool) bool {
			ok := true
			g, _ := in.wl.Global(multiGate)
			if g.Active != act || g.Waiting != wait {
				ok = false
				if report {
					t.Errorf("instance %d's view: active %d waiting %d, want %d %d", i, g.Active, g.Waiting, act, wait)
				}
			}
			for id, r := range stored {
				err := in.wl.ValidateSessionIsActive(multiGate, id)
				if (r.Status == session.StatusActive) != (err == nil) || (err != nil && !errors.Is(err, session.ErrNotActive)) {
					ok = false
					if report {
						t.Errorf("instance %d: %s (%s): validate says %v", i, id, r.Status, err)
					}
				}
			}
			return ok
		}
		if !assert.Eventually(t, func() bool { return matches(false) }, 10*time.Second, 10*time.Millisecond, "instance %d's memory equals the tables", i) {
			matches(true)
		}
		in.pub.mu.Lock()
		for id, times := range in.pub.promoted {
			assert.Equal(t, 1, times, "instance %d told %s of its promotion %d times", i, id, times)
		}
		in.pub.mu.Unlock()
	}
}
