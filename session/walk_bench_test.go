package session_test

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
)

// activeStore is a Store whose Load returns a gate of n active sessions and
// no waiter, and which hands its commit listener to the benchmark. Every
// other method is the nil embedded Store's (the benchmark calls none).
type activeStore struct {
	session.Store
	n  int
	fn func(session.Commit)
}

func (s *activeStore) SetCommitListener(fn func(session.Commit)) { s.fn = fn }

func (s *activeStore) Load(context.Context, []string) (map[string]session.GateSnapshot, error) {
	now := time.Now()
	active := make([]session.Session, s.n)
	for i := range active {
		active[i] = session.Session{Gate: "default", ID: fmt.Sprintf("s%021d", i), Status: session.StatusActive, Position: int64(i) + 1, CreatedAt: now, LastActive: now}
	}
	st := session.GateState{Counters: session.Counters{NextPosition: int64(s.n) + 1, Active: int64(s.n)}, FirstWaitingPosition: int64(s.n) + 1, LastWaitingPosition: int64(s.n)}
	return map[string]session.GateSnapshot{"default": {State: st, Active: active}}, nil
}

// BenchmarkCommitDuringSweeps measures the commit listener on a commit of
// one join while the sweeper walks a gate of 50,000 active sessions back
// to back: the walk in steps of walkStep sessions against the same walk in
// one step (the lock held for all of it), in the same run. Every commit
// waits for the listener, and the listener for the gate's lock, so the
// figures are what a join waits: max-us and p99-us per commit.
func BenchmarkCommitDuringSweeps(b *testing.B) {
	const n = 50_000
	for _, tc := range []struct {
		name string
		step int
	}{{"steps=" + strconv.Itoa(session.DefaultWalkStep), session.DefaultWalkStep}, {"one-step", math.MaxInt}} {
		b.Run(tc.name, func(b *testing.B) {
			defer session.SetWalkStep(tc.step)()
			st := &activeStore{n: n}
			w, err := session.New(context.Background(), st, []session.GateConfig{{Name: "default", ActiveLimit: n, ActiveTimeout: time.Hour, WaitingTimeout: time.Hour}},
				session.Options{TouchInterval: -1, SweepInterval: -1, Logger: slog.New(slog.DiscardHandler)})
			require.NoError(b, err)
			b.Cleanup(func() { _ = w.Close() })
			ctx, stop := context.WithCancel(context.Background())
			sweeps, started := make(chan int), make(chan struct{})
			go func() {
				k := 0
				for ctx.Err() == nil {
					if err := w.Sweep(ctx); err != nil && ctx.Err() == nil {
						b.Error(err)
						break
					}
					if k++; k == 1 {
						close(started)
					}
				}
				sweeps <- k
			}()
			<-started
			now := time.Now()
			waits := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := range b.N {
				s := session.Session{Gate: "default", ID: "j" + strconv.Itoa(i), Status: session.StatusWaiting, Position: int64(n + 1 + i), CreatedAt: now, LastActive: now}
				t0 := time.Now()
				st.fn(session.Commit{Events: []session.Event{{Kind: session.EventQueued, Session: s}}})
				waits = append(waits, time.Since(t0))
				time.Sleep(50 * time.Microsecond) // joins arrive apart, not back to back
			}
			b.StopTimer()
			stop()
			k := <-sweeps
			if b.N >= 100 {
				require.Greater(b, k, 1, "the sweeper ran during the commits")
			}
			slices.Sort(waits)
			b.ReportMetric(float64(waits[len(waits)-1].Microseconds()), "max-us")
			b.ReportMetric(float64(waits[len(waits)*99/100].Microseconds()), "p99-us")
			b.ReportMetric(float64(k)/float64(b.N), "sweeps/op")
		})
	}
}
