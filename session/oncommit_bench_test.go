package session_test

import (
	"context"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
)

// lineStore is a Store whose Load returns a gate of n waiters (positions
// 1..n) and which hands its commit listener to the benchmark: onCommit is
// measured alone, without a database. Every other method is the nil
// embedded Store's (the benchmark calls none).
type lineStore struct {
	session.Store
	n  int64
	fn func(session.Commit)
}

func (s *lineStore) SetCommitListener(fn func(session.Commit)) { s.fn = fn }

func (s *lineStore) Load(context.Context, []string) (map[string]session.GateSnapshot, error) {
	waiting := make([]int64, s.n)
	for i := range waiting {
		waiting[i] = int64(i) + 1
	}
	st := session.GateState{Counters: session.Counters{NextPosition: s.n + 1, Waiting: s.n}, FirstWaitingPosition: 1, LastWaitingPosition: s.n}
	return map[string]session.GateSnapshot{"default": {State: st, Waiting: waiting}}, nil
}

// BenchmarkOnCommit measures the Waitlist's commit listener on a commit of
// 16 joins to the line (an HTTP join batch), a commit of 16 departures from
// the middle of the line, and one of 16 promotions from its front, at lines
// of 10k, 1M and 5M waiters. cpu-ns/op is the process's CPU time per
// commit (GC included), steadier than the wall time on a shared machine.
func BenchmarkOnCommit(b *testing.B) {
	for _, n := range []int64{10_000, 1_000_000, 5_000_000} {
		for _, kind := range []string{"join16", "leave16", "promote16"} {
			b.Run(kind+"/waiting="+strconv.FormatInt(n, 10), func(b *testing.B) {
				st := &lineStore{n: n}
				w, err := session.New(context.Background(), st, []session.GateConfig{{Name: "default", ActiveLimit: 0, ActiveTimeout: time.Minute, WaitingTimeout: time.Minute}},
					session.Options{TouchInterval: -1, SweepInterval: -1, Logger: slog.New(slog.DiscardHandler)})
				require.NoError(b, err)
				b.Cleanup(func() { _ = w.Close() })
				now := time.Now()
				state := session.GateState{Counters: session.Counters{NextPosition: n + 1, Waiting: n}, FirstWaitingPosition: 1, LastWaitingPosition: n}
				front, mid := int64(1), n/2
				evs := make([]session.Event, 16)
				b.ReportAllocs()
				b.ResetTimer()
				cpu0 := processCPU()
				for range b.N {
					for j := range evs {
						s := session.Session{Gate: "default", Status: session.StatusWaiting, CreatedAt: now, LastActive: now}
						switch kind {
						case "join16":
							s.Position = state.NextPosition
							state.NextPosition++
							state.Waiting++
							state.LastWaitingPosition = s.Position
							evs[j] = session.Event{Kind: session.EventQueued, Session: s}
						case "leave16":
							// Each departure from the middle, a new join at the
							// tail: the line keeps its length.
							if j%2 == 0 {
								s.Position = mid
								mid++
								evs[j] = session.Event{Kind: session.EventDequeued, Session: s}
							} else {
								s.Position = state.NextPosition
								state.NextPosition++
								state.LastWaitingPosition = s.Position
								evs[j] = session.Event{Kind: session.EventQueued, Session: s}
							}
						case "promote16":
							if j%2 == 0 {
								s.Position, s.Status = front, session.StatusActive
								s.ID = "p" + strconv.FormatInt(front, 10)
								front++
								state.FirstWaitingPosition = front
								evs[j] = session.Event{Kind: session.EventPromoted, Session: s}
							} else {
								s.Position = state.NextPosition
								state.NextPosition++
								state.LastWaitingPosition = s.Position
								evs[j] = session.Event{Kind: session.EventQueued, Session: s}
							}
						}
					}
					st.fn(session.Commit{Events: evs, Gates: map[string]session.GateState{"default": state}})
				}
				b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
			})
		}
	}
}
