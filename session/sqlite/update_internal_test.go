package sqlite

import (
	"context"
	"fmt"
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
)

// An update's transaction ends after at most session.UpdateYieldRows rows
// once another operation waits for the writer, whether that operation is
// queued behind it (a batch of one op) or in its batch: a join waits for a
// few dozen rows, not for the chunk.
func TestUpdateYieldsToAWaitingOp(t *testing.T) {
	defer func(d time.Duration) { updateYieldAfter = d }(updateYieldAfter)
	cases := []struct {
		name     string
		maxBatch int
		after    time.Duration // updateYieldAfter
		wantHeld int           // rows committed before the join, at most
	}{
		{"the join is queued behind the update", 1, 0, session.UpdateYieldRows},
		{"the join is in the update's batch", 0, 0, session.UpdateYieldRows},
		// Not before the transaction ran session.UpdateYieldAfter: here
		// never, and the join waits for the chunk.
		{"the transaction is too young to yield", 0, time.Hour, session.DefaultUpdateChunk},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			updateYieldAfter = tc.after
			s, err := Open(filepath.Join(t.TempDir(), "u.db"), Options{Logger: slog.New(slog.DiscardHandler), MaxBatch: tc.maxBatch})
			require.NoError(t, err)
			defer s.Close()
			cfg := sessiontest.GateConfig("default", 10) // 10 active, 290 waiting
			ctx := context.Background()
			var wg sync.WaitGroup
			for i := range 300 {
				wg.Go(func() {
					_, err := s.Join(ctx, cfg, "a"+strconv.Itoa(i), epoch)
					assert.NoError(t, err)
				})
			}
			wg.Wait()
			// The rows each commit purged, until the one with the join.
			var mu sync.Mutex
			var purgedPerCommit []int
			joinedIn := -1
			s.SetCommitListener(func(c session.Commit) {
				mu.Lock()
				defer mu.Unlock()
				n := 0
				for _, e := range c.Events {
					switch {
					case e.Kind == session.EventDeactivated || e.Kind == session.EventDequeued:
						n++
					case e.Session.ID == "late" && joinedIn < 0:
						joinedIn = len(purgedPerCommit)
					}
				}
				purgedPerCommit = append(purgedPerCommit, n)
			})

			// Hold the writer, queue the update, then a join behind it.
			entered, release := make(chan struct{}), make(chan struct{})
			go func() {
				o := newOp(ctx, opFunc)
				o.fn = func(*batch) error { close(entered); <-release; return nil }
				assert.NoError(t, s.do(o))
			}()
			<-entered
			now := epoch.Add(max(cfg.ActiveTimeout, cfg.WaitingTimeout) + time.Second) // every row is stale
			var rep session.UpdateReport
			var upErr error
			done := make(chan struct{})
			go func() {
				defer close(done)
				rep, upErr = s.Update(ctx, cfg, now, session.DefaultUpdateChunk)
			}()
			require.Eventually(t, func() bool { return len(s.ops) == 1 }, 5*time.Second, time.Millisecond)
			joined := make(chan error, 1)
			go func() {
				_, err := s.Join(ctx, cfg, "late", now)
				joined <- err
			}()
			require.Eventually(t, func() bool { return len(s.ops) == 2 }, 5*time.Second, time.Millisecond)
			close(release)
			<-done
			require.NoError(t, upErr)
			require.NoError(t, <-joined)

			assert.EqualValues(t, 10, rep.PurgedActive)
			assert.EqualValues(t, 290, rep.PurgedWaiting)
			mu.Lock()
			defer mu.Unlock()
			require.GreaterOrEqual(t, joinedIn, 0, "the join committed")
			held, total := 0, 0
			for i, n := range purgedPerCommit {
				if i <= joinedIn {
					held += n // committed after the join was queued, before or with it
				}
				total += n
			}
			assert.LessOrEqual(t, held, tc.wantHeld, "a waiting join was held by more than one step of the update: %v (joined in commit %d)", purgedPerCommit, joinedIn)
			assert.Equal(t, 300, total)
			if tc.after > 0 {
				assert.Equal(t, tc.wantHeld, held, "the update yielded before it ran updateYieldAfter")
			}
		})
	}
}

// A join queued while an update's transaction runs ends that transaction
// after the step and runs in it: it shares the update's commit instead of
// waiting for it and then for a commit of its own.
func TestUpdateTakesAJoinQueuedDuringItsStep(t *testing.T) {
	defer func(d time.Duration) { updateYieldAfter = d }(updateYieldAfter)
	updateYieldAfter = 0
	s, err := Open(filepath.Join(t.TempDir(), "u.db"), Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	defer s.Close()
	cfg := sessiontest.GateConfig("default", 10)
	ctx := context.Background()
	for i := range 100 {
		_, err := s.Join(ctx, cfg, "a"+strconv.Itoa(i), epoch)
		require.NoError(t, err)
	}
	type commit struct {
		purged int
		late   bool
	}
	var mu sync.Mutex
	var commits []commit
	s.SetCommitListener(func(c session.Commit) {
		mu.Lock()
		defer mu.Unlock()
		var cm commit
		for _, e := range c.Events {
			switch {
			case e.Kind == session.EventDeactivated || e.Kind == session.EventDequeued:
				cm.purged++
			case e.Session.ID == "late" && e.Kind == session.EventQueued:
				cm.late = true
			}
		}
		commits = append(commits, cm)
	})
	now := epoch.Add(max(cfg.ActiveTimeout, cfg.WaitingTimeout) + time.Second)
	joined := make(chan error, 1)
	atUpdateStep(t, s, 1, 1, func() {
		go func() {
			_, err := s.Join(ctx, cfg, "late", now)
			joined <- err
		}()
	})
	rep, err := s.Update(ctx, cfg, now, session.DefaultUpdateChunk)
	require.NoError(t, err)
	require.NoError(t, <-joined)
	assert.EqualValues(t, 90, rep.PurgedWaiting)
	assert.EqualValues(t, 10, rep.PurgedActive)
	mu.Lock()
	defer mu.Unlock()
	require.NotEmpty(t, commits)
	assert.True(t, commits[0].late, "the join is not in the update's first transaction: %+v", commits)
	assert.Equal(t, session.UpdateYieldRows, commits[0].purged, "the first transaction is one step")
	assert.EqualValues(t, 2, s.Stats().MaxBatch, "the update and the join it took count as one batch of two")
	total := 0
	for _, c := range commits {
		total += c.purged
	}
	assert.Equal(t, 100, total)
}

// An update promotes only the sessions in line when it began
// (session.Promotable): a join that arrives while it runs waits for the
// next op, and the update stops there. Before, the update's later
// transactions promoted such joins with the configuration it read at its
// start: an update that began before an event's pre-queue opened admitted
// the pre-queue's first arrivals, in arrival order, before the draw.
func TestUpdatePromotesOnlyWhoWasInLine(t *testing.T) {
	defer func(d time.Duration) { updateYieldAfter = d }(updateYieldAfter)
	updateYieldAfter = 0 // the update yields to the queued joins after its first step
	s, err := Open(filepath.Join(t.TempDir(), "u.db"), Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	defer s.Close()
	ctx := context.Background()
	clock := sessiontest.NewClock(epoch)
	w, err := session.New(ctx, s, []session.GateConfig{sessiontest.GateConfig("default", 3)},
		session.Options{Clock: clock, TouchInterval: -1, SweepInterval: -1, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	defer w.Close()
	for _, id := range []string{"a1", "a2", "a3"} { // the active sessions, stale at the update
		_, err := w.Join(ctx, "default", id)
		require.NoError(t, err)
	}
	clock.Advance(sessiontest.ActiveTimeout + time.Second)
	_, err = w.AddEvent(ctx, session.ScheduledEvent{Gate: "default", ID: "drop",
		PrequeueAt: clock.Now().Add(10 * time.Second), StartsAt: clock.Now().Add(time.Minute), Shuffle: true})
	require.NoError(t, err)

	arrivals := []string{"first-arrival", "second-arrival"}
	joined := make(chan error, len(arrivals))
	atUpdateStep(t, s, 1, len(arrivals), func() { // after the update's first step: the pre-queue opens, two arrive
		clock.Advance(11 * time.Second)
		for _, id := range arrivals {
			go func() {
				v, err := w.Join(ctx, "default", id)
				if err == nil && v.Status != session.StatusWaiting {
					err = fmt.Errorf("%s joined %s during the pre-queue", id, v.Status)
				}
				joined <- err
			}()
		}
	})
	rep, err := w.Update(ctx)
	require.NoError(t, err)
	for range arrivals {
		require.NoError(t, <-joined)
	}
	require.Len(t, rep, 1)
	assert.EqualValues(t, 3, rep[0].PurgedActive)
	assert.Zero(t, rep[0].Promoted, "the update promoted someone who was not in line when it began")
	for _, id := range arrivals {
		v, err := w.Status(ctx, "default", id)
		require.NoError(t, err)
		assert.Equal(t, session.StatusWaiting, v.Status, "%s was admitted before the draw", id)
	}
	// The next update sees the pre-queue and holds the line.
	rep, err = w.Update(ctx)
	require.NoError(t, err)
	assert.Zero(t, rep[0].Promoted)
}
