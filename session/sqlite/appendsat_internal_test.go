package sqlite

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// The writeback stops short of where the writer appends next. After a
// reading that found every frame backfilled, the writer's next commit
// restarts the WAL from its start, so the frames of the last reading are
// no longer below the writer: only those written since are.
func TestAppendsAtAfterAFullBackfill(t *testing.T) {
	for _, tc := range []struct {
		name               string
		log, done, written int64
		want               int64
	}{
		{"frames left to backfill: the WAL grows on", 100, 40, 60, 110},
		{"every frame backfilled: the WAL restarts", 100, 100, 60, 10},
		{"an empty WAL", 0, 0, 60, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var k checkpointer
			k.reading.Store(&ckptReading{log: tc.log, done: tc.done, writtenAt: 50})
			assert.Equal(t, tc.want, k.appendsAt(tc.written))
			frames, _ := k.wal(tc.written)
			assert.Equal(t, tc.log+tc.written-50, frames, "the WAL's length is estimated as before")
		})
	}
}
