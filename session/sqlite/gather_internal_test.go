package sqlite

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// The writer gathers the ops of callers that queue one after another while
// it yields (as HTTP handlers do, each when it gets the CPU), not only those
// queued at its first yield; a lone caller costs one yield; the gathering
// ends at the batch size or after maxGatherYields yields. The yield here
// queues the next caller's op, as a caller that got the CPU would.
func TestGatherWaitsForCallersQueueingOneAfterAnother(t *testing.T) {
	for _, tc := range []struct {
		name       string
		callers    int
		maxBatch   int
		want       int
		wantYields int
	}{
		{"lone caller", 0, 256, 1, 1},
		{"five in turn", 5, 256, 6, 6},
		{"up to the batch size", 5, 4, 4, 3},
		{"at most maxGatherYields yields", 3 * maxGatherYields, 256, 1 + maxGatherYields, maxGatherYields},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &Store{ops: make(chan *op, 1024), maxBatch: tc.maxBatch}
			fed, yields := 0, 0
			yield := func() {
				yields++
				if fed < tc.callers {
					s.ops <- &op{}
					fed++
				}
			}
			got := s.gather([]*op{{}}, yield)
			assert.Len(t, got, tc.want)
			assert.Equal(t, tc.wantYields, yields)
		})
	}
}

// Ops already queued are taken without a yield.
func TestGatherTakesWhatIsQueuedWithoutYielding(t *testing.T) {
	s := &Store{ops: make(chan *op, 16), maxBatch: 256}
	for range 3 {
		s.ops <- &op{}
	}
	yields := 0
	got := s.gather([]*op{{}}, func() { yields++ })
	assert.Len(t, got, 4)
	assert.Equal(t, 1, yields, "one yield once the queue is empty, which brought nothing")
}
