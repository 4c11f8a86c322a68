package sessiontest

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
)

// history reads the whole history of a gate (paging through it), newest
// first.
func (h *harness) history(q session.HistoryQuery) []session.HistoryRecord {
	h.tb.Helper()
	var out []session.HistoryRecord
	for range 1000 {
		page, err := h.store.History(h.ctx, q)
		require.NoError(h.tb, err)
		out = append(out, page.Records...)
		if page.Next == nil {
			return out
		}
		q.Before = page.Next
	}
	h.tb.Fatal("history: more than 1000 pages")
	return nil
}

// brief is a record as "kind:session@position", "purged" with its reason.
func brief(recs []session.HistoryRecord) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = fmt.Sprintf("%s:%s@%d", r.Kind, r.Session, r.Position)
		if r.Kind == session.HistoryPurged {
			out[i] += "/" + r.Reason.String()
		}
	}
	return out
}

func testHistory(t *testing.T, open Opener) {
	t.Run("lifecycle", func(t *testing.T) {
		h := newHarness(t, open)
		cfg := GateConfig(gateName, 1)
		cfg.ClaimTimeout = time.Minute
		t0 := h.clock.Now()
		h.join(cfg, "a")
		h.join(cfg, "b")
		h.join(cfg, "c")
		h.clock.Advance(10 * time.Second)
		h.leave(cfg, "b")
		h.clock.Advance(10 * time.Second)
		h.join(cfg, "b") // it comes back
		h.clock.Advance(10 * time.Second)
		promotedAt := h.clock.Now()
		h.release(cfg, "a") // b takes the slot, unclaimed
		h.clock.Advance(time.Second)
		h.claim("b", h.clock.Now())
		h.leave(cfg, "c")
		h.clock.Advance(cfg.WaitingTimeout + time.Second)
		h.seen("b")
		h.update(cfg, 0) // c is gone
		h.clock.Advance(time.Second)
		// A refused join writes nothing.
		closed := cfg
		closed.Mode = session.ModeReject
		_, err := h.store.Join(h.ctx, closed, "x", h.clock.Now())
		require.ErrorIs(t, err, session.ErrGateClosed)
		h.release(cfg, "b")

		recs := h.history(session.HistoryQuery{Gate: gateName})
		assert.Equal(t, []string{
			"released:b@2", "purged:c@3/gone", "left:c@3", "claimed:b@2", "promoted:b@2", "released:a@1",
			"returned:b@2", "left:b@2", "joined:c@3", "joined:b@2", "joined:a@1",
		}, brief(recs))
		require.Len(t, recs, 11)
		ids := map[int64]bool{}
		for i, r := range recs {
			assert.Equal(t, gateName, r.Gate)
			assert.False(t, ids[r.ID], "record ids are unique")
			ids[r.ID] = true
			if i > 0 {
				assert.False(t, r.At.After(recs[i-1].At), "newest first")
			}
		}
		byKind := func(kind session.HistoryKind, id string) session.HistoryRecord {
			for _, r := range recs {
				if r.Kind == kind && r.Session == id {
					return r
				}
			}
			t.Fatalf("no %s record of %s", kind, id)
			return session.HistoryRecord{}
		}
		joinedA := byKind(session.HistoryJoined, "a")
		assertTime(t, t0, joinedA.At)
		assert.Equal(t, session.StatusActive, joinedA.Status)
		assert.Equal(t, time.Duration(0), joinedA.Wait, "admitted at once")
		assert.True(t, joinedA.Admission())
		joinedB := byKind(session.HistoryJoined, "b")
		assert.Equal(t, session.StatusWaiting, joinedB.Status)
		assert.Negative(t, joinedB.Wait)
		assert.False(t, joinedB.Admission())
		promoted := byKind(session.HistoryPromoted, "b")
		assertTime(t, promotedAt, promoted.At)
		assert.Equal(t, promotedAt.Sub(t0), promoted.Wait)
		assert.True(t, promoted.Admission())
		assertTime(t, promotedAt.Add(time.Second), byKind(session.HistoryClaimed, "b").At)
		assert.Equal(t, session.Released, byKind(session.HistoryReleased, "a").Reason)
		assertTime(t, promotedAt, byKind(session.HistoryReleased, "a").At)
		purged := byKind(session.HistoryPurged, "c")
		assert.Equal(t, session.Gone, purged.Reason)
		assert.Equal(t, session.StatusWaiting, purged.Status)
		assertTime(t, promotedAt.Add(time.Second+cfg.WaitingTimeout+time.Second), purged.At, "a purge is recorded at the update's time")

		// History survives a restart.
		h.reopen()
		assert.Equal(t, brief(recs), brief(h.history(session.HistoryQuery{Gate: gateName})))
	})

	t.Run("filters and pages", func(t *testing.T) {
		h := newHarness(t, open)
		cfg := GateConfig(gateName, 2)
		other := GateConfig("other", 2)
		var stamps []time.Time
		for i := range 12 {
			stamps = append(stamps, h.clock.Now())
			h.join(cfg, idOf("s", i)) // two active, ten waiting
			h.join(other, idOf("o", i))
			if i%3 == 0 {
				h.leave(cfg, idOf("s", i))
			}
			h.clock.Advance(time.Second)
		}
		all := h.history(session.HistoryQuery{Gate: gateName})
		require.Len(t, all, 16, "12 joins and 4 leaves of the gate, none of the other")
		for _, r := range all {
			assert.Equal(t, gateName, r.Gate)
		}

		// Paging with every limit gives the same records, each once.
		for _, limit := range []int{1, 3, 5, 16, 17} {
			paged := h.history(session.HistoryQuery{Gate: gateName, Limit: limit})
			assert.Equal(t, all, paged, "limit %d", limit)
		}
		page, err := h.store.History(h.ctx, session.HistoryQuery{Gate: gateName, Limit: 16})
		require.NoError(t, err)
		assert.Nil(t, page.Next, "no next page after the last record")

		// One session.
		s3 := h.history(session.HistoryQuery{Gate: gateName, Session: idOf("s", 3)})
		assert.Equal(t, []string{"left:s003@4", "joined:s003@4"}, brief(s3))

		// A time range: [since, until).
		ranged := h.history(session.HistoryQuery{Gate: gateName, Since: stamps[3], Until: stamps[6]})
		assert.Equal(t, []string{"joined:s005@6", "joined:s004@5", "left:s003@4", "joined:s003@4"}, brief(ranged))
		both := h.history(session.HistoryQuery{Gate: gateName, Session: idOf("s", 3), Since: stamps[4]})
		assert.Empty(t, both)

		// Hostile filters: an id that is SQL finds nothing and breaks
		// nothing; malformed ones are refused.
		for _, id := range []string{`s003'--`, `'OR'1'='1`, `s003";DROP`, `%`, `s00_`} {
			got := h.history(session.HistoryQuery{Gate: gateName, Session: id})
			assert.Empty(t, got, "session %q", id)
		}
		for _, q := range []session.HistoryQuery{
			{Gate: gateName, Session: "a b"},
			{Gate: gateName, Session: "x.y"},
			{Gate: gateName, Limit: session.MaxHistoryLimit + 1},
			{Gate: gateName, Limit: -1},
			{Gate: "bad gate"},
			{Gate: gateName, Since: stamps[5], Until: stamps[5]},
		} {
			_, err := h.store.History(h.ctx, q)
			assert.ErrorIs(t, err, session.ErrInvalidArgument, "%+v", q)
		}
		none := h.history(session.HistoryQuery{Gate: "nobody"})
		assert.Empty(t, none)
		assert.Len(t, h.history(session.HistoryQuery{Gate: gateName}), 16, "still all there")
	})

	t.Run("same transaction", func(t *testing.T) {
		h := newHarness(t, open)
		tc, ok := h.store.(TransactionCounter)
		if !ok {
			t.Skip("the Store does not count its transactions")
		}
		cfg := GateConfig(gateName, 1)
		h.join(cfg, "a")
		for i := range 5 {
			before := tc.Transactions()
			h.join(cfg, idOf("w", i))
			assert.Equal(t, before+1, tc.Transactions(), "a join and its record commit in one transaction")
			// Visible as soon as the join is answered.
			got := h.history(session.HistoryQuery{Gate: gateName, Session: idOf("w", i)})
			assert.Equal(t, []string{fmt.Sprintf("joined:%s@%d", idOf("w", i), i+2)}, brief(got))
		}
	})

	t.Run("prune", func(t *testing.T) {
		h := newHarness(t, open)
		cfg := GateConfig(gateName, 100)
		for i := range 25 {
			h.join(cfg, idOf("s", i))
			h.clock.Advance(time.Second)
		}
		cut := h.clock.Now().Add(-5 * time.Second) // the last 5 joins are newer
		var total int64
		for range 10 {
			n, err := h.store.PruneHistory(h.ctx, cut, 7)
			require.NoError(t, err)
			assert.LessOrEqual(t, n, int64(7), "one bounded chunk")
			total += n
			if n < 7 {
				break
			}
		}
		assert.Equal(t, int64(20), total)
		left := h.history(session.HistoryQuery{Gate: gateName})
		require.Len(t, left, 5)
		for _, r := range left {
			assert.False(t, r.At.Before(cut))
		}
		n, err := h.store.PruneHistory(h.ctx, cut, 7)
		require.NoError(t, err)
		assert.Zero(t, n, "nothing more to prune")
	})

	t.Run("waitlist prunes by the retention", func(t *testing.T) {
		h := newHarness(t, open)
		cfg := GateConfig(gateName, 100)
		w, err := session.New(h.ctx, teeStore{Store: h.store, h: h}, []session.GateConfig{cfg}, session.Options{
			Clock: h.clock, TouchInterval: -1, SweepInterval: -1, UpdateChunk: 3, HistoryRetention: time.Hour,
		})
		require.NoError(t, err)
		t.Cleanup(func() { _ = w.Close() })
		for i := range 10 {
			_, err := w.Join(h.ctx, gateName, idOf("s", i))
			require.NoError(t, err)
		}
		h.clock.Advance(2 * time.Hour)
		_, err = w.Join(h.ctx, gateName, "late")
		require.NoError(t, err)
		// Keep the sessions: the update must only prune history.
		h.seen(func() []string {
			var ids []string
			for i := range 10 {
				ids = append(ids, idOf("s", i))
			}
			return ids
		}()...)
		_, err = w.Update(h.ctx)
		require.NoError(t, err)
		page, err := w.History(h.ctx, session.HistoryQuery{Gate: gateName})
		require.NoError(t, err)
		assert.Equal(t, []string{"joined:late@11"}, brief(page.Records))
		_, err = w.History(h.ctx, session.HistoryQuery{Gate: "unknown"})
		assert.ErrorIs(t, err, session.ErrUnknownGate)
	})
}
