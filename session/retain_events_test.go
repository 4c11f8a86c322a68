package session_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
	"github.com/anteroomhq/anteroom/session/sessiontest"
)

// A gate's scheduled events live in memory (and in the Store's writer)
// until they change: what they hold of the names they were given must be
// copies. A gate name is a piece of its request (?gate= in the request
// line a client may pad to 64 KB: any join's, which runs a due event's
// transition before it joins; the admin API's path), and so is the event id
// of PUT and DELETE {base}/admin/api/gates/{gate}/events/{event}.
func TestScheduledEventsKeepNoCallersMemoryOfANameOrID(t *testing.T) {
	ctx := context.Background()
	event := func(id string, prequeue time.Time) session.ScheduledEvent {
		return session.ScheduledEvent{Gate: "default", ID: id, PrequeueAt: prequeue, StartsAt: prequeue.Add(time.Hour)}
	}
	for _, tc := range []struct {
		name, piece string
		// use sets up w, then does with piece what holds it.
		use func(t *testing.T, w *session.Waitlist, clock *sessiontest.Clock, piece string)
		// want is the gate's events' ids once done.
		want []string
	}{
		{"a join that opens a due event's pre-queue (its ?gate=)", "default", func(t *testing.T, w *session.Waitlist, clock *sessiontest.Clock, gate string) {
			_, err := w.AddEvent(ctx, event("launch", clock.Now().Add(time.Minute)))
			require.NoError(t, err)
			clock.Advance(2 * time.Minute)
			_, err = w.Join(ctx, gate, "visitor")
			require.NoError(t, err)
			evs, err := w.Events("default")
			require.NoError(t, err)
			require.Equal(t, session.EventPrequeue, evs[0].Phase, "the join opened the pre-queue")
		}, []string{"launch"}},
		{"AddEvent (the admin API's path)", "default", func(t *testing.T, w *session.Waitlist, clock *sessiontest.Clock, gate string) {
			ev := event("launch", clock.Now().Add(time.Minute))
			ev.Gate = gate
			_, err := w.AddEvent(ctx, ev)
			require.NoError(t, err)
		}, []string{"launch"}},
		{"ReplaceEvent (the id in the admin API's path)", "launch", func(t *testing.T, w *session.Waitlist, clock *sessiontest.Clock, id string) {
			_, err := w.AddEvent(ctx, event("launch", clock.Now().Add(time.Minute)))
			require.NoError(t, err)
			_, err = w.ReplaceEvent(ctx, event(id, clock.Now().Add(2*time.Minute)))
			require.NoError(t, err)
		}, []string{"launch"}},
		{"RemoveEvent (the admin API's path)", "default", func(t *testing.T, w *session.Waitlist, clock *sessiontest.Clock, gate string) {
			_, err := w.AddEvent(ctx, event("first", clock.Now().Add(time.Minute)))
			require.NoError(t, err)
			_, err = w.AddEvent(ctx, event("second", clock.Now().Add(2*time.Hour)))
			require.NoError(t, err)
			require.NoError(t, w.RemoveEvent(ctx, gate, "second"))
		}, []string{"first"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := sessiontest.NewClock(sessiontest.Epoch)
			w := retainWaitlist(t, clock, sessiontest.GateConfig("default", 10))
			sessiontest.RequireFreed(t, tc.piece, func(piece string) func() {
				tc.use(t, w, clock, piece)
				_, err := w.Update(ctx) // the Store's writer forgets its last transaction
				require.NoError(t, err)
				return func() {
					evs, err := w.Events("default")
					require.NoError(t, err)
					var ids []string
					for _, e := range evs {
						ids = append(ids, e.ID)
					}
					require.Equal(t, tc.want, ids)
				}
			}, "the gate's events still hold the caller's memory through a name or id they were given")
		})
	}
}
