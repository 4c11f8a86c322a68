package session_test

import (
	"bytes"
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
)

// TestSameEvent: two events are the same when every field is, times by
// Equal (a time read back from a store is UTC, one computed in memory may
// not be), overrides by value, positions nil or empty alike; a change of
// any one field makes them differ. Every field of ScheduledEvent must have
// a case here: a field added and forgotten by sameEvent would keep a
// stale published view after a reload.
func TestSameEvent(t *testing.T) {
	local := time.FixedZone("elsewhere", 5*3600)
	base := session.ScheduledEvent{
		Gate: "g", ID: "e", PrequeueAt: t0, StartsAt: t0.Add(time.Minute), EndsAt: t0.Add(time.Hour), Shuffle: true,
		ActiveLimit: i64(5), NewUsersPerMinute: i64(60), Seed: bytes.Clone(testSeed), Phase: session.EventStarted,
		FirstPosition: 7, Positions: []int64{7, 8, 9}, PrequeueOpenedAt: t0, StartedAt: t0.Add(time.Minute),
	}
	differ := map[string]func(e *session.ScheduledEvent){
		"Gate":              func(e *session.ScheduledEvent) { e.Gate = "h" },
		"ID":                func(e *session.ScheduledEvent) { e.ID = "f" },
		"PrequeueAt":        func(e *session.ScheduledEvent) { e.PrequeueAt = e.PrequeueAt.Add(time.Nanosecond) },
		"StartsAt":          func(e *session.ScheduledEvent) { e.StartsAt = e.StartsAt.Add(-time.Nanosecond) },
		"EndsAt":            func(e *session.ScheduledEvent) { e.EndsAt = time.Time{} },
		"Shuffle":           func(e *session.ScheduledEvent) { e.Shuffle = false },
		"ActiveLimit":       func(e *session.ScheduledEvent) { e.ActiveLimit = nil },
		"NewUsersPerMinute": func(e *session.ScheduledEvent) { e.NewUsersPerMinute = i64(61) },
		"Seed":              func(e *session.ScheduledEvent) { e.Seed = append(bytes.Clone(e.Seed[:len(e.Seed)-1]), 0) },
		"Phase":             func(e *session.ScheduledEvent) { e.Phase = session.EventPrequeue },
		"FirstPosition":     func(e *session.ScheduledEvent) { e.FirstPosition = 8 },
		"Positions":         func(e *session.ScheduledEvent) { e.Positions = []int64{7, 9, 8} },
		"PrequeueOpenedAt":  func(e *session.ScheduledEvent) { e.PrequeueOpenedAt = time.Time{} },
		"StartedAt":         func(e *session.ScheduledEvent) { e.StartedAt = e.StartedAt.Add(time.Microsecond) },
	}
	typ := reflect.TypeFor[session.ScheduledEvent]()
	for i := range typ.NumField() {
		name := typ.Field(i).Name
		t.Run("differs by "+name, func(t *testing.T) {
			change, ok := differ[name]
			require.True(t, ok, "no case changes field %s", name)
			other := base
			change(&other)
			assert.False(t, session.SameEvent(base, other))
			assert.False(t, session.SameEvent(other, base))
		})
	}
	assert.Len(t, differ, typ.NumField(), "a case for a field that is gone")

	now := time.Now() // with a monotonic reading
	for _, tc := range []struct {
		name string
		a, b func(e *session.ScheduledEvent)
	}{
		{"itself", nil, nil},
		{"times in another location", nil, func(e *session.ScheduledEvent) {
			e.PrequeueAt, e.StartsAt, e.EndsAt = e.PrequeueAt.In(local), e.StartsAt.In(local), e.EndsAt.In(local)
			e.PrequeueOpenedAt, e.StartedAt = e.PrequeueOpenedAt.In(local), e.StartedAt.In(local)
		}},
		{"a time with a monotonic reading, one without", func(e *session.ScheduledEvent) { e.StartedAt = now },
			func(e *session.ScheduledEvent) { e.StartedAt = now.Round(0) }},
		{"overrides and seed in other memory", nil, func(e *session.ScheduledEvent) {
			e.ActiveLimit, e.NewUsersPerMinute, e.Seed = i64(5), i64(60), bytes.Clone(e.Seed)
		}},
		{"positions copied", nil, func(e *session.ScheduledEvent) { e.Positions = append([]int64(nil), e.Positions...) }},
		{"no positions, nil and empty", func(e *session.ScheduledEvent) { e.Positions = nil },
			func(e *session.ScheduledEvent) { e.Positions = []int64{} }},
	} {
		t.Run("same: "+tc.name, func(t *testing.T) {
			a, b := base, base
			for _, p := range []struct {
				e      *session.ScheduledEvent
				change func(e *session.ScheduledEvent)
			}{{&a, tc.a}, {&b, tc.b}} {
				if p.change != nil {
					p.change(p.e)
				}
			}
			assert.True(t, session.SameEvent(a, b))
			assert.True(t, session.SameEvent(b, a))
		})
	}
}
