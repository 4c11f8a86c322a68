package webhook

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// A claim's lease covers the last row's turn: every attempt ahead of it on
// the lane's workers (the busy ones included) takes up to Timeout and the
// recording of its answer. A lease of Timeout per turn alone let another
// instance claim rows this one had not tried yet (the change review's case:
// Batch 4, one worker, a store slow to record).
func TestClaimLeaseCoversEveryTurn(t *testing.T) {
	for _, tc := range []struct {
		batch, workers, busy int
		timeout              time.Duration
	}{
		{4, 1, 0, 100 * time.Millisecond},
		{32, 4, 0, 10 * time.Second},
		{32, 4, 2, 10 * time.Second},
		{1, 8, 7, time.Second},
		{100, 3, 1, 2 * time.Second},
	} {
		d := &Deliverer{o: Options{Batch: tc.batch, Workers: tc.workers, Timeout: tc.timeout}}
		turns := (tc.busy + tc.batch + tc.workers - 1) / tc.workers
		need := time.Duration(turns) * (tc.timeout + recordTimeout)
		assert.Greater(t, d.claimLease(tc.busy, tc.batch), need, "batch %d, workers %d, busy %d", tc.batch, tc.workers, tc.busy)
	}
}

// A huge Timeout does not overflow the lease into a negative one (which the
// store refuses, so nothing would ever be claimed): it is capped.
func TestClaimLeaseIsCapped(t *testing.T) {
	d := &Deliverer{o: Options{Batch: 1000, Workers: 1, Timeout: 1 << 50}}
	assert.Equal(t, maxLease, d.claimLease(3, 1000))
}
