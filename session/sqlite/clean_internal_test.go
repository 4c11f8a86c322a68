package sqlite

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The cleaner leaves the writer a pause of cleanPause between two of its
// ops (clean.go): sent back to back, the two goroutines kept their P to
// themselves. Each op's end is recorded in the writer; the next op of the
// cleaner can only begin after the cleaner heard of the last one's commit
// and waited, so every gap is at least the pause (a sleep never ends
// early), and without the pause it is a few microseconds.
func TestTheCleanerPausesBetweenItsOps(t *testing.T) {
	chunk, pause := cleanChunk, cleanPause
	t.Cleanup(func() { cleanChunk, cleanPause = chunk, pause }) // after the store's Close
	cleanChunk, cleanPause = 1, 20*time.Millisecond
	s, cfg, _, release := purgeFixture(t)

	var mu sync.Mutex
	var ends []time.Time
	setHooks(t, func(o *op) error {
		if o.kind == opFunc {
			mu.Lock()
			ends = append(ends, time.Now())
			mu.Unlock()
		}
		return nil
	}, nil)
	release()
	require.NoError(t, s.WaitClean(context.Background()))
	require.Equal(t, 8, physicalRows(t, s, cfg.Name), "the cleaner deleted the 4 purged rows")

	mu.Lock()
	defer mu.Unlock()
	// One op a purged row, and the last, which finds none and lowers the
	// marks.
	require.Len(t, ends, 5)
	for i := 1; i < len(ends); i++ {
		assert.GreaterOrEqual(t, ends[i].Sub(ends[i-1]), cleanPause, "between the cleaner's ops %d and %d", i-1, i)
	}
}
