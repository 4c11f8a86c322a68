package metrics_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/gate/metrics"
	"github.com/anteroomhq/anteroom/session"
)

// TestRemoteCommitsAreNotCounted: on a shared store every instance's
// memory follows every commit, but only the instance that made a commit
// counts it, so that the counters summed over the instances are the gate's
// (three instances each counting each join would triple the sum).
func TestRemoteCommitsAreNotCounted(t *testing.T) {
	m := metrics.New(metrics.Options{})
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	s := session.Session{Gate: "g", ID: "s1", Position: 1, Status: session.StatusActive, CreatedAt: at, LastActive: at.Add(time.Second)}
	events := []session.Event{
		{Kind: session.EventActivated, Session: s},
		{Kind: session.EventPromoted, Session: s},
		{Kind: session.EventDeactivated, Session: s, Reason: session.Released},
		// The kinds of other features, whatever the instance: no count.
		{Kind: session.EventReordered, Session: s},
		{Kind: session.EventLaunched, Session: session.Session{Gate: "g", ID: "launch", Position: 3}},
		{Kind: session.EventClaimed, Session: s},
		{Kind: session.EventLeft, Session: s},
		{Kind: session.EventReturned, Session: s},
	}
	m.ObserveCommit(session.Commit{Events: events})
	m.ObserveCommit(session.Commit{Events: events, Remote: true})
	m.ObserveCommit(session.Commit{Events: events, Remote: true})
	counts := map[string]int{}
	mfs, err := m.Registry().Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		for _, mt := range mf.GetMetric() {
			switch {
			case mt.GetCounter() != nil:
				counts[mf.GetName()] += int(mt.GetCounter().GetValue())
			case mt.GetHistogram() != nil && mf.GetName() == "anteroom_wait_seconds":
				counts[mf.GetName()] += int(mt.GetHistogram().GetSampleCount())
			}
		}
	}
	assert.Equal(t, 1, counts["anteroom_joins_total"], "one join")
	assert.Equal(t, 2, counts["anteroom_admissions_total"], "one direct, one promoted")
	assert.Equal(t, 1, counts["anteroom_purges_total"], "one release")
	assert.Equal(t, 1, counts["anteroom_wait_seconds"], "one wait")
}
