package session_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/anteroomhq/anteroom/session"
)

func TestDrawOf(t *testing.T) {
	t0 := time.Date(2026, 11, 24, 18, 0, 0, 0, time.UTC)
	now := t0.Add(time.Hour)
	waiting := func(pos int64) session.SessionView {
		return session.SessionView{Status: session.StatusWaiting, Position: pos}
	}
	prequeue := session.ScheduledEvent{ID: "a", PrequeueAt: t0, StartsAt: now.Add(time.Minute), Shuffle: true,
		Phase: session.EventPrequeue, FirstPosition: 10}
	started := session.ScheduledEvent{ID: "a", PrequeueAt: t0, StartsAt: now.Add(-time.Minute), Shuffle: true,
		Phase: session.EventStarted, FirstPosition: 10, Positions: []int64{10, 12, 13, 20}}
	ended := started
	ended.EndsAt = now.Add(-time.Second)
	fifo := prequeue
	fifo.Shuffle = false
	fifoStarted := started
	fifoStarted.Shuffle = false
	later := session.ScheduledEvent{ID: "b", PrequeueAt: now.Add(time.Hour), StartsAt: now.Add(2 * time.Hour), Shuffle: true,
		Phase: session.EventScheduled}
	laterDue := later
	laterDue.PrequeueAt = now.Add(-time.Second)
	laterOpen := later
	laterOpen.PrequeueAt, laterOpen.Phase, laterOpen.FirstPosition = now.Add(-time.Second), session.EventPrequeue, 30
	freshGate := prequeue
	freshGate.FirstPosition = 0
	priority := waiting(15)
	priority.Lane = "priority"
	active := waiting(15)
	active.Status = session.StatusActive

	for _, tc := range []struct {
		name   string
		events []session.ScheduledEvent
		view   session.SessionView
		want   string
	}{
		{"no events", nil, waiting(15), ""},
		{"in a shuffled pre-queue", []session.ScheduledEvent{prequeue}, waiting(10), session.DrawPending},
		{"waiting since before the pre-queue", []session.ScheduledEvent{prequeue}, waiting(9), ""},
		{"the first session of a new gate", []session.ScheduledEvent{freshGate}, waiting(0), session.DrawPending},
		{"first come, first served", []session.ScheduledEvent{fifo}, waiting(15), ""},
		{"the priority lane is never drawn", []session.ScheduledEvent{prequeue}, priority, ""},
		{"an active session", []session.ScheduledEvent{prequeue}, active, ""},
		{"drawn", []session.ScheduledEvent{started}, waiting(13), session.DrawDrawn},
		{"drawn, the overrides ended", []session.ScheduledEvent{ended}, waiting(20), session.DrawDrawn},
		{"arrived after the start", []session.ScheduledEvent{started}, waiting(21), ""},
		{"in the range but not drawn (priority then)", []session.ScheduledEvent{started}, waiting(11), ""},
		{"ahead of the draw", []session.ScheduledEvent{started}, waiting(5), ""},
		{"started in arrival order", []session.ScheduledEvent{fifoStarted}, waiting(13), ""},
		{"a later event scheduled: the draw is still current", []session.ScheduledEvent{started, later}, waiting(13), session.DrawDrawn},
		{"a later pre-queue due: no longer current", []session.ScheduledEvent{started, laterDue}, waiting(13), ""},
		{"a later pre-queue open: no longer current", []session.ScheduledEvent{started, laterOpen}, waiting(13), ""},
		{"in the later pre-queue", []session.ScheduledEvent{started, laterOpen}, waiting(31), session.DrawPending},
		{"order of the list does not matter", []session.ScheduledEvent{laterOpen, started}, waiting(31), session.DrawPending},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, session.DrawOf(tc.events, tc.view, now))
		})
	}
}
