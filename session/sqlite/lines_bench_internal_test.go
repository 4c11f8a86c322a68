package sqlite

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
)

// launchOfAMillion stores a started launch of a million entrants at gate
// "default" of a new store.
func launchOfAMillion(b *testing.B) *Store {
	s := openInternal(b)
	b.Cleanup(func() { _ = s.Close() })
	pos := make([]int64, 1_000_000)
	for i := range pos {
		pos[i] = int64(1_000_000 + 3*i)
	}
	ev := session.ScheduledEvent{Gate: "default", ID: "drop", PrequeueAt: epoch.Add(-2 * time.Hour), StartsAt: epoch.Add(-time.Hour),
		Phase: session.EventStarted, FirstPosition: 1_000_000, Positions: pos, Seed: make([]byte, session.LotterySeedSize),
		StartedAt: epoch.Add(-time.Hour)}
	require.NoError(b, s.gateOp(context.Background(), "default", func(*batch, *gateEntry) error { return s.writeEvent(ev) }))
	return s
}

// BenchmarkEventsForDecisions is what the writer reads of a gate's events
// at a cache miss of its entry (the first op after Open, every op after a
// failed batch), the gate holding a started launch of a million entrants.
func BenchmarkEventsForDecisions(b *testing.B) {
	s := launchOfAMillion(b)
	b.ResetTimer()
	require.NoError(b, s.gateOp(context.Background(), "default", func(*batch, *gateEntry) error {
		for b.Loop() {
			evs, _, _, err := s.storedEvents("default")
			if err != nil || len(evs) != 1 {
				b.Fatalf("%v %d", err, len(evs))
			}
		}
		return nil
	}))
}

// BenchmarkLoadWithALaunch is a Load of that gate: what a start reads.
func BenchmarkLoadWithALaunch(b *testing.B) {
	s := launchOfAMillion(b)
	b.ResetTimer()
	for b.Loop() {
		snaps, err := s.Load(context.Background(), []string{"default"})
		if err != nil || len(snaps["default"].Events) != 1 || len(snaps["default"].Events[0].Positions) != 1_000_000 {
			b.Fatalf("%v", err)
		}
	}
}
