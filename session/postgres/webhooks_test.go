package postgres_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
	"github.com/anteroomhq/anteroom/session/postgres/pgtest"
)

// Several instances' delivery workers claim the one outbox at once: every
// row is handed to exactly one of them (SKIP LOCKED and the lease), and
// none is lost.
func TestOutboxClaimedByOneInstance(t *testing.T) {
	url := pgtest.DB(t)
	r, err := session.NewOutboxRouting([]session.OutboxTarget{{Name: "t", Events: []string{session.WebhookEventStarted}}})
	require.NoError(t, err)
	const instances, rows = 3, 300
	stores := make([]session.OutboxStore, instances)
	for i := range stores {
		s := open(t, url, quiet)
		t.Cleanup(func() { _ = s.Close() })
		s.SetOutbox(r)
		stores[i] = s
	}
	ctx := context.Background()
	now := time.Now()
	for i := range rows {
		n, err := stores[i%instances].EnqueueOutbox(ctx, session.WebhookEventStarted, "default", fmt.Sprint("e", i), []byte(`{}`), now)
		require.NoError(t, err)
		require.Equal(t, 1, n)
	}
	var mu sync.Mutex
	seen := map[int64]int{}
	var wg sync.WaitGroup
	for i, s := range stores {
		for range 2 { // two workers per instance
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range rows { // bounded
					got, err := s.ClaimOutbox(ctx, session.OutboxTargets{}, now, time.Minute, 7)
					if !assert.NoError(t, err, "instance %d", i) || len(got) == 0 {
						return
					}
					mu.Lock()
					for _, m := range got {
						seen[m.ID]++
					}
					mu.Unlock()
				}
			}()
		}
	}
	wg.Wait()
	require.Len(t, seen, rows, "every row handed out")
	for id, n := range seen {
		assert.Equal(t, 1, n, "row %d handed out %d times", id, n)
	}
	c, err := stores[0].OutboxCounts(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(rows), c.Pending, "leased rows are still pending until answered")
}
