package session_test

import (
	"context"
	"log/slog"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
	"github.com/anteroomhq/anteroom/session/sessiontest"
	"github.com/anteroomhq/anteroom/session/sqlite"
)

// chunkStore records the chunk of each Update and the size of each Touch.
type chunkStore struct {
	session.Store
	mu      sync.Mutex
	chunks  []int
	touches []int
}

func (s *chunkStore) Update(ctx context.Context, cfg session.GateConfig, now time.Time, chunk int) (session.UpdateReport, error) {
	s.mu.Lock()
	s.chunks = append(s.chunks, chunk)
	s.mu.Unlock()
	return s.Store.Update(ctx, cfg, now, chunk)
}

func (s *chunkStore) Touch(ctx context.Context, gate string, touches []session.Touch) error {
	s.mu.Lock()
	s.touches = append(s.touches, len(touches))
	s.mu.Unlock()
	return s.Store.Touch(ctx, gate, touches)
}

// Options.UpdateChunk is the one owner of the transaction size: Update is
// asked for it, and refreshes are persisted at most that many per Touch.
// Unset, it is DefaultUpdateChunk (256), not another default of its own.
func TestUpdateChunkHasOneOwner(t *testing.T) {
	cases := []struct {
		name       string
		option     int
		wantChunk  int
		wantTouchs []int
	}{
		{"unset: the default", 0, session.DefaultUpdateChunk, []int{5}},
		{"set: honoured", 2, 2, []int{2, 2, 1}},
	}
	assert.Equal(t, 256, session.DefaultUpdateChunk, "the documented default")
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sq, err := sqlite.Open(filepath.Join(t.TempDir(), "c.db"), sqlite.Options{Logger: slog.New(slog.DiscardHandler)})
			require.NoError(t, err)
			t.Cleanup(func() { _ = sq.Close() })
			st := &chunkStore{Store: sq}
			clock := sessiontest.NewClock(sessiontest.Epoch)
			cfg := sessiontest.GateConfig("default", 10)
			ctx := context.Background()
			w, err := session.New(ctx, st, []session.GateConfig{cfg}, session.Options{Clock: clock, TouchInterval: -1, UpdateChunk: tc.option})
			require.NoError(t, err)
			t.Cleanup(func() { _ = w.Close() })
			for i := range 5 {
				_, err := w.Join(ctx, "default", "a"+strconv.Itoa(i))
				require.NoError(t, err)
			}
			clock.Advance(time.Second)
			for i := range 5 {
				require.NoError(t, w.ValidateSessionAndRefreshLastActive("default", "a"+strconv.Itoa(i)))
			}
			_, err = w.Update(ctx)
			require.NoError(t, err)
			st.mu.Lock()
			defer st.mu.Unlock()
			assert.Equal(t, []int{tc.wantChunk}, st.chunks)
			assert.Equal(t, tc.wantTouchs, st.touches)
			for i := range 5 {
				s, err := sq.Get(ctx, "default", "a"+strconv.Itoa(i))
				require.NoError(t, err)
				assert.True(t, clock.Now().Equal(s.LastActive), "refresh of a%d persisted", i)
			}
		})
	}
}
