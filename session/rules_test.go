package session_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/anteroomhq/anteroom/session"
)

var (
	t0  = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	cfg = session.GateConfig{Name: "default", ActiveLimit: 2, ActiveTimeout: 5 * time.Minute, WaitingTimeout: time.Minute}
)

func TestDecideJoin(t *testing.T) {
	waiting := session.Session{Gate: "default", ID: "w", Position: 7, Status: session.StatusWaiting, CreatedAt: t0}
	departed := waiting
	departed.LastActive = t0.Add(10 * time.Second)
	active := session.Session{Gate: "default", ID: "a", Position: 3, Status: session.StatusActive, LastActive: t0, CreatedAt: t0}
	now := t0.Add(30 * time.Second)

	tests := []struct {
		name     string
		counters session.Counters
		existing *session.Session
		want     session.Outcome
	}{
		{
			name:     "new session with a free slot and nobody waiting is active",
			counters: session.Counters{NextPosition: 5, Active: 1},
			want: session.Outcome{Action: session.ActionInsert,
				Session: session.Session{Gate: "default", ID: "new", Position: 5, Status: session.StatusActive, LastActive: now, CreatedAt: now},
				Delta:   session.Counters{NextPosition: 1, Active: 1}},
		},
		{
			name:     "new session at the limit waits",
			counters: session.Counters{NextPosition: 5, Active: 2},
			want: session.Outcome{Action: session.ActionInsert,
				Session: session.Session{Gate: "default", ID: "new", Position: 5, Status: session.StatusWaiting, CreatedAt: now},
				Delta:   session.Counters{NextPosition: 1, Waiting: 1}},
		},
		{
			name:     "new session with a free slot but people waiting does not jump the queue",
			counters: session.Counters{NextPosition: 9, Active: 1, Waiting: 1},
			want: session.Outcome{Action: session.ActionInsert,
				Session: session.Session{Gate: "default", ID: "new", Position: 9, Status: session.StatusWaiting, CreatedAt: now},
				Delta:   session.Counters{NextPosition: 1, Waiting: 1}},
		},
		{
			name:     "returning waiter has its departure mark cleared and keeps its position",
			counters: session.Counters{NextPosition: 9, Active: 2, Waiting: 3},
			existing: &departed,
			want:     session.Outcome{Action: session.ActionUpdate, Session: waiting},
		},
		{
			name:     "waiter joining again without having left changes nothing (idempotent)",
			counters: session.Counters{NextPosition: 9, Active: 2, Waiting: 3},
			existing: &waiting,
			want:     session.Outcome{Action: session.ActionNone, Session: waiting},
		},
		{
			name:     "active session joining again is refreshed, counters untouched",
			counters: session.Counters{NextPosition: 9, Active: 2},
			existing: &active,
			want: session.Outcome{Action: session.ActionUpdate,
				Session: session.Session{Gate: "default", ID: "a", Position: 3, Status: session.StatusActive, LastActive: now, CreatedAt: t0}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, session.DecideJoin(cfg, tt.counters, tt.existing, "new", now))
		})
	}
}

func TestDecideLeave(t *testing.T) {
	now := t0.Add(time.Minute)
	waiting := session.Session{Gate: "default", ID: "w", Position: 7, Status: session.StatusWaiting, CreatedAt: t0}
	active := session.Session{Gate: "default", ID: "a", Position: 3, Status: session.StatusActive, LastActive: t0, CreatedAt: t0}
	marked, refreshed := waiting, active
	marked.LastActive, refreshed.LastActive = now, now

	tests := []struct {
		name     string
		existing *session.Session
		want     session.Outcome
	}{
		{"absent session: nothing (idempotent)", nil, session.Outcome{Action: session.ActionNone}},
		{"waiting session gets its departure mark", &waiting, session.Outcome{Action: session.ActionUpdate, Session: marked}},
		{"active session is only refreshed", &active, session.Outcome{Action: session.ActionUpdate, Session: refreshed}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, session.DecideLeave(tt.existing, now))
		})
	}
}

func TestDecideRelease(t *testing.T) {
	waiting := session.Session{Gate: "default", ID: "w", Position: 7, Status: session.StatusWaiting}
	active := session.Session{Gate: "default", ID: "a", Position: 3, Status: session.StatusActive, LastActive: t0}

	tests := []struct {
		name     string
		counters session.Counters
		existing *session.Session
		want     session.Outcome
	}{
		{"absent session: nothing", session.Counters{Active: 2, Waiting: 4}, nil, session.Outcome{Action: session.ActionNone}},
		{"active with waiters: deleted and one waiter promoted", session.Counters{Active: 2, Waiting: 4}, &active,
			session.Outcome{Action: session.ActionDelete, Session: active, Delta: session.Counters{Active: -1}, Promote: 1}},
		{"active with nobody waiting: nothing to promote", session.Counters{Active: 2}, &active,
			session.Outcome{Action: session.ActionDelete, Session: active, Delta: session.Counters{Active: -1}}},
		{"active over a lowered limit: no promotion", session.Counters{Active: 5, Waiting: 4}, &active,
			session.Outcome{Action: session.ActionDelete, Session: active, Delta: session.Counters{Active: -1}}},
		{"waiter giving up leaves the line", session.Counters{Active: 2, Waiting: 4}, &waiting,
			session.Outcome{Action: session.ActionDelete, Session: waiting, Delta: session.Counters{Waiting: -1}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, session.DecideRelease(cfg, tt.counters, tt.existing))
		})
	}
}

func TestDecidePurge(t *testing.T) {
	waiting := session.Session{Gate: "default", ID: "w", Position: 7, Status: session.StatusWaiting, LastActive: t0}
	active := session.Session{Gate: "default", ID: "a", Position: 3, Status: session.StatusActive, LastActive: t0}
	tests := []struct {
		name string
		s    session.Session
		want session.Outcome
	}{
		{"stale waiter: deleted, one fewer waiting", waiting,
			session.Outcome{Action: session.ActionDelete, Session: waiting, Delta: session.Counters{Waiting: -1}}},
		{"stale active session: deleted, one fewer active, no promotion decided", active,
			session.Outcome{Action: session.ActionDelete, Session: active, Delta: session.Counters{Active: -1}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, session.DecidePurge(tt.s))
		})
	}
}

// No rule turns an active session back into a waiting one, whatever the
// counters and the limit (also one lowered to zero), the time, or the
// session's LastActive.
func TestNoRuleTurnsActiveIntoWaiting(t *testing.T) {
	limits := []int64{0, 1, 2, 100}
	counters := []session.Counters{
		{NextPosition: 1}, {NextPosition: 9, Active: 1}, {NextPosition: 9, Active: 2, Waiting: 5},
		{NextPosition: 9, Active: 50, Waiting: 1}, {NextPosition: 9, Waiting: 7},
	}
	times := []time.Time{t0.Add(-time.Hour), t0, t0.Add(time.Nanosecond), t0.Add(24 * time.Hour)}
	lastActives := []time.Time{{}, t0.Add(-time.Hour), t0}
	stillActive := func(t *testing.T, what string, o session.Outcome) {
		t.Helper()
		if o.Action == session.ActionInsert || o.Action == session.ActionUpdate {
			assert.Equal(t, session.StatusActive, o.Session.Status, "%s: an active session became %s", what, o.Session.Status)
			assert.Zero(t, o.Delta.Waiting, "%s: waiting counter moved for an active session", what)
		}
		assert.LessOrEqual(t, o.Delta.Active, int64(0), "%s: an active session counted again", what)
	}
	n := 0
	for _, limit := range limits {
		c := cfg
		c.ActiveLimit = limit
		for _, cs := range counters {
			for _, now := range times {
				for _, la := range lastActives {
					a := session.Session{Gate: "default", ID: "a", Position: 3, Status: session.StatusActive, LastActive: la, CreatedAt: t0}
					stillActive(t, "join", session.DecideJoin(c, cs, &a, "a", now))
					stillActive(t, "leave", session.DecideLeave(&a, now))
					stillActive(t, "release", session.DecideRelease(c, cs, &a))
					stillActive(t, "purge", session.DecidePurge(a))
					n += 4
				}
			}
		}
	}
	// Promote, the one rule that changes a status, goes the other way.
	w := session.Session{Gate: "default", ID: "w", Position: 7, Status: session.StatusWaiting, CreatedAt: t0}
	assert.Equal(t, session.StatusActive, session.Promote(w, t0).Session.Status)
	assert.Positive(t, n)
}

func TestPromote(t *testing.T) {
	w := session.Session{Gate: "default", ID: "w", Position: 7, Status: session.StatusWaiting, CreatedAt: t0}
	o := session.Promote(w, t0.Add(time.Second))
	assert.Equal(t, session.ActionUpdate, o.Action)
	assert.Equal(t, session.StatusActive, o.Session.Status)
	assert.Equal(t, t0.Add(time.Second), o.Session.LastActive)
	assert.Equal(t, int64(7), o.Session.Position)
	assert.Equal(t, session.Counters{Active: 1, Waiting: -1}, o.Delta)
}

func TestPromotionCount(t *testing.T) {
	tests := []struct {
		limit                   int64
		active, waiting, expect int64
	}{
		{limit: 10, active: 10, waiting: 5, expect: 0},
		{limit: 10, active: 7, waiting: 5, expect: 3},
		{limit: 10, active: 7, waiting: 2, expect: 2},
		{limit: 10, active: 0, waiting: 0, expect: 0},
		{limit: 3, active: 8, waiting: 5, expect: 0}, // limit lowered below active
		{limit: 100, active: 2, waiting: 50, expect: 50},
		{limit: 0, active: 0, waiting: 5, expect: 0},
	}
	for _, tt := range tests {
		got := session.PromotionCount(tt.limit, session.Counters{Active: tt.active, Waiting: tt.waiting})
		assert.Equal(t, tt.expect, got, "limit=%d active=%d waiting=%d", tt.limit, tt.active, tt.waiting)
	}
}

func TestIsStaleAtExactBoundaries(t *testing.T) {
	now := t0.Add(time.Hour)
	tests := []struct {
		name  string
		s     session.Session
		stale bool
	}{
		{"waiting, never left", session.Session{Status: session.StatusWaiting}, false},
		{"waiting, left exactly waiting_timeout ago", session.Session{Status: session.StatusWaiting, LastActive: now.Add(-cfg.WaitingTimeout)}, false},
		{"waiting, left 1ns more than waiting_timeout ago", session.Session{Status: session.StatusWaiting, LastActive: now.Add(-cfg.WaitingTimeout - 1)}, true},
		{"active, seen exactly active_timeout ago", session.Session{Status: session.StatusActive, LastActive: now.Add(-cfg.ActiveTimeout)}, false},
		{"active, seen 1ns more than active_timeout ago", session.Session{Status: session.StatusActive, LastActive: now.Add(-cfg.ActiveTimeout - 1)}, true},
		{"active, seen just now", session.Session{Status: session.StatusActive, LastActive: now}, false},
		{"active, seen longer ago than waiting_timeout but within active_timeout", session.Session{Status: session.StatusActive, LastActive: now.Add(-2 * time.Minute)}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.stale, session.IsStale(cfg, tt.s, now))
		})
	}
}

func TestGateConfigValidate(t *testing.T) {
	ok := cfg
	tests := []struct {
		name    string
		mutate  func(*session.GateConfig)
		wantErr string
	}{
		{"valid", func(*session.GateConfig) {}, ""},
		{"empty name", func(c *session.GateConfig) { c.Name = "" }, "gate name"},
		{"name with slash", func(c *session.GateConfig) { c.Name = "a/b" }, "gate name"},
		{"negative limit", func(c *session.GateConfig) { c.ActiveLimit = -1 }, "active_limit"},
		{"zero active timeout", func(c *session.GateConfig) { c.ActiveTimeout = 0 }, "active_timeout"},
		{"zero waiting timeout", func(c *session.GateConfig) { c.WaitingTimeout = 0 }, "waiting_timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := ok
			tt.mutate(&c)
			err := c.Validate()
			if tt.wantErr == "" {
				assert.NoError(t, err)
				return
			}
			assert.ErrorIs(t, err, session.ErrInvalidArgument)
			assert.ErrorContains(t, err, tt.wantErr)
		})
	}
}

func TestValidID(t *testing.T) {
	long := make([]byte, session.MaxIDLength+1)
	for i := range long {
		long[i] = 'a'
	}
	for id, want := range map[string]bool{
		"abc":                      true,
		"user:42":                  true,
		"":                         false,
		"a.b":                      false,
		"a b":                      false,
		"ü":                        false,
		string(long):               false,
		string(long[:len(long)-1]): true,
	} {
		assert.Equal(t, want, session.ValidID(id), "id %q", id)
	}
}

func TestErrorCodes(t *testing.T) {
	err := session.Errorf(session.CodeNotFound, "session %q", "x")
	assert.ErrorIs(t, err, session.ErrNotFound)
	assert.NotErrorIs(t, err, session.ErrNotActive)
	assert.Equal(t, session.CodeNotFound, session.CodeOf(err))
	assert.Equal(t, session.CodeInternal, session.CodeOf(assert.AnError))
	assert.Equal(t, session.Code(""), session.CodeOf(nil))

	cause := assert.AnError
	wrapped := session.Errorf(session.CodeInternal, "sqlite: join: %w", cause)
	assert.ErrorIs(t, wrapped, cause)
}

func TestSessionViewPlace(t *testing.T) {
	v := session.SessionView{GlobalView: session.GlobalView{FirstWaitingPosition: 10, LastWaitingPosition: 14}, Status: session.StatusWaiting, Position: 12}
	assert.Equal(t, int64(3), v.Place())
	v.Status = session.StatusActive
	assert.Equal(t, int64(0), v.Place())
}
