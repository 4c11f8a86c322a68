package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/anteroomhq/anteroom/session"
)

// EventConfig is one scheduled event of a gate (gates.<name>.events, a
// list): a launch with a pre-queue and, with shuffle, an auditable lottery
// (session.ScheduledEvent). Times are RFC 3339. The environment variable
// ANTEROOM_GATES_<NAME>_EVENTS holds the same list as JSON.
type EventConfig struct {
	ID                string `yaml:"id" json:"id"`
	PrequeueAt        string `yaml:"prequeue_at" json:"prequeue_at"`
	StartsAt          string `yaml:"starts_at" json:"starts_at"`
	EndsAt            string `yaml:"ends_at" json:"ends_at"`
	Shuffle           bool   `yaml:"shuffle" json:"shuffle"`
	ActiveLimit       *int64 `yaml:"active_limit" json:"active_limit"`
	NewUsersPerMinute *int64 `yaml:"new_users_per_minute" json:"new_users_per_minute"`
}

// parseEventsEnv reads the JSON list of ANTEROOM_GATES_<NAME>_EVENTS
// strictly.
func parseEventsEnv(v string) ([]EventConfig, error) {
	dec := json.NewDecoder(bytes.NewReader([]byte(v)))
	dec.DisallowUnknownFields()
	var out []EventConfig
	if err := dec.Decode(&out); err != nil || dec.More() {
		return nil, fmt.Errorf(`want a JSON list such as [{"id":"launch","prequeue_at":"2026-12-01T17:50:00Z","starts_at":"2026-12-01T18:00:00Z","shuffle":true}]`)
	}
	return out, nil
}

// sessionEvents turns a gate's events into the session's, or returns an
// error naming the key (gates.<gate>.events[i].<field>) of the first one
// out of range. Times relative to now are the Waitlist's to judge.
func sessionEvents(gate string, evs []EventConfig) ([]session.ScheduledEvent, error) {
	out := make([]session.ScheduledEvent, 0, len(evs))
	ids := map[string]bool{}
	for i, e := range evs {
		key := fmt.Sprintf("gates.%s.events[%d]", gate, i)
		bad := func(field, format string, args ...any) error {
			return fmt.Errorf("config: %s.%s: %s", key, field, fmt.Sprintf(format, args...))
		}
		if !session.ValidGateName(e.ID) {
			return nil, bad("id", "event ids are 1-64 characters of a-z, A-Z, 0-9, '-', '_' or '.'")
		}
		if ids[e.ID] {
			return nil, bad("id", "%s appears twice", quote(e.ID))
		}
		ids[e.ID] = true
		ev := session.ScheduledEvent{Gate: gate, ID: e.ID, Shuffle: e.Shuffle, ActiveLimit: e.ActiveLimit, NewUsersPerMinute: e.NewUsersPerMinute}
		for _, f := range []struct {
			field, v string
			dst      *time.Time
			required bool
		}{
			{"prequeue_at", e.PrequeueAt, &ev.PrequeueAt, true},
			{"starts_at", e.StartsAt, &ev.StartsAt, true},
			{"ends_at", e.EndsAt, &ev.EndsAt, false},
		} {
			if strings.TrimSpace(f.v) == "" {
				if f.required {
					return nil, bad(f.field, "required: an RFC 3339 time such as \"2026-12-01T18:00:00Z\"")
				}
				continue
			}
			t, err := time.Parse(time.RFC3339Nano, strings.TrimSpace(f.v))
			if err != nil || t.Year() < 2000 || t.Year() > 9999 {
				return nil, bad(f.field, "want an RFC 3339 time such as \"2026-12-01T18:00:00Z\", not %s", quote(f.v))
			}
			*f.dst = t.UTC()
		}
		if err := ev.Validate(); err != nil {
			return nil, fmt.Errorf("config: %s: %w", key, err)
		}
		out = append(out, ev)
	}
	return out, nil
}

// SessionEvents returns every gate's events as the session package wants
// them (Options.Events). The config must have been validated.
func (c Config) SessionEvents() []session.ScheduledEvent {
	var out []session.ScheduledEvent
	for _, name := range sortedKeys(c.Gates) {
		evs, err := sessionEvents(name, c.Gates[name].Events)
		if err == nil {
			out = append(out, evs...)
		}
	}
	return out
}
