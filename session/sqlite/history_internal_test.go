package sqlite

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
)

// Records survive packing as they were, and a damaged row is an error,
// never a panic nor a wrong record.
func TestHistoryRecordPacking(t *testing.T) {
	at := time.Date(2026, 3, 1, 12, 0, 0, 123, time.UTC)
	recs := []session.HistoryRecord{
		{At: at, Gate: "g", Session: "a", Kind: session.HistoryJoined, Status: session.StatusActive, Position: 1, Wait: 0},
		{At: at.Add(time.Hour), Gate: "g", Session: "=cmd|' /C calc'!A0", Kind: session.HistoryPurged, Status: session.StatusWaiting, Position: 1 << 40, Reason: session.Gone, Wait: -1},
		{At: time.Unix(0, -5).UTC(), Gate: "g", Session: string(make([]byte, session.MaxIDLength)), Kind: session.HistoryPromoted, Status: session.StatusActive, Position: 0, Wait: 90 * time.Second},
	}
	var data []byte
	for _, r := range recs {
		data = appendRecord(data, r)
	}
	got, err := decodeRecords("g", 10, int64(len(recs)), data)
	require.NoError(t, err)
	for i, r := range recs {
		r.ID = 10 + int64(i)
		assert.Equal(t, r, got[i])
	}
	for cut := range len(data) {
		_, err := decodeRecords("g", 10, int64(len(recs)), data[:cut])
		assert.Error(t, err, "cut at %d", cut)
	}
	_, err = decodeRecords("g", 10, int64(len(recs))+1, data)
	assert.Error(t, err, "one record more than the row holds")
}
