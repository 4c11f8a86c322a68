package session_test

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
)

var (
	t0  = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	cfg = session.GateConfig{Name: "default", ActiveLimit: 2, ActiveTimeout: 5 * time.Minute, WaitingTimeout: time.Minute}
)

func TestDecideJoin(t *testing.T) {
	now := t0.Add(30 * time.Second)
	waiting := session.Session{Gate: "default", ID: "w", Position: 7, Status: session.StatusWaiting, LastActive: t0, CreatedAt: t0}
	seen := waiting
	seen.LastActive = now
	active := session.Session{Gate: "default", ID: "a", Position: 3, Status: session.StatusActive, LastActive: t0, CreatedAt: t0}
	refreshed := active
	refreshed.LastActive = now
	unclaimed := active
	unclaimed.ClaimDeadline = t0.Add(time.Minute)

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
			name:     "new session at the limit waits, seen now",
			counters: session.Counters{NextPosition: 5, Active: 2},
			want: session.Outcome{Action: session.ActionInsert,
				Session: session.Session{Gate: "default", ID: "new", Position: 5, Status: session.StatusWaiting, LastActive: now, CreatedAt: now},
				Delta:   session.Counters{NextPosition: 1, Waiting: 1}},
		},
		{
			name:     "new session with a free slot but people waiting does not jump the queue",
			counters: session.Counters{NextPosition: 9, Active: 1, Waiting: 1},
			want: session.Outcome{Action: session.ActionInsert,
				Session: session.Session{Gate: "default", ID: "new", Position: 9, Status: session.StatusWaiting, LastActive: now, CreatedAt: now},
				Delta:   session.Counters{NextPosition: 1, Waiting: 1}},
		},
		{
			name:     "returning waiter is seen now and keeps its position",
			counters: session.Counters{NextPosition: 9, Active: 2, Waiting: 3},
			existing: &waiting,
			want:     session.Outcome{Action: session.ActionUpdate, Session: seen, Note: session.EventReturned},
		},
		{
			name:     "active session joining again is refreshed, counters untouched",
			counters: session.Counters{NextPosition: 9, Active: 2},
			existing: &active,
			want:     session.Outcome{Action: session.ActionUpdate, Session: refreshed},
		},
		{
			name:     "an unclaimed promoted session joining again claims its slot",
			counters: session.Counters{NextPosition: 9, Active: 2},
			existing: &unclaimed,
			want:     session.Outcome{Action: session.ActionUpdate, Session: refreshed, Note: session.EventClaimed},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := session.DecideJoin(cfg, tt.counters, session.Pace{}, tt.existing, "new", now)
			assert.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

// TestDecideJoinNeverWrapsPositions: a newcomer is refused, not given a
// position that would wrap or stand ahead of the line, when the next
// position is out of range (damaged counters); the last position that can
// be followed is still given.
func TestDecideJoinNeverWrapsPositions(t *testing.T) {
	now := t0.Add(time.Second)
	for _, tt := range []struct {
		name string
		next int64
		ok   bool
	}{
		{"the last position that has a next", math.MaxInt64 - 1, true},
		{"the last int64", math.MaxInt64, false},
		{"zero", 0, false},
		{"negative", -5, false},
		{"the smallest int64", math.MinInt64, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := session.DecideJoin(cfg, session.Counters{NextPosition: tt.next}, session.Pace{}, nil, "new", now)
			if tt.ok {
				require.NoError(t, err)
				assert.Equal(t, tt.next, got.Session.Position)
				return
			}
			require.Error(t, err)
			assert.Equal(t, session.CodeUnavailable, session.CodeOf(err), "the op fails alone, not its transaction")
			assert.Equal(t, session.ActionNone, got.Action)
			assert.Equal(t, session.Counters{}, got.Delta)
		})
	}
	// A returning session is not a newcomer: it keeps its place whatever
	// the counter says.
	existing := session.Session{Gate: "default", ID: "w", Position: 7, Status: session.StatusWaiting, LastActive: t0, CreatedAt: t0}
	got, err := session.DecideJoin(cfg, session.Counters{NextPosition: math.MaxInt64}, session.Pace{}, &existing, "w", now)
	require.NoError(t, err)
	assert.Equal(t, int64(7), got.Session.Position)
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
		{"waiting session gets its departure mark", &waiting, session.Outcome{Action: session.ActionUpdate, Session: marked, Note: session.EventLeft}},
		{"active session is only refreshed", &active, session.Outcome{Action: session.ActionUpdate, Session: refreshed, Note: session.EventLeft}},
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
					joined, err := session.DecideJoin(c, cs, session.Pace{}, &a, "a", now)
					assert.NoError(t, err)
					stillActive(t, "join", joined)
					stillActive(t, "leave", session.DecideLeave(&a, now))
					stillActive(t, "release", session.DecideRelease(c, cs, &a))
					stillActive(t, "purge", session.DecidePurge(a))
					stillActive(t, "touch", session.DecideTouch(&a, session.Touch{ID: "a", LastActive: now, ClaimDeadline: now}))
					n += 5
				}
			}
		}
	}
	// Promote, the one rule that changes a status, goes the other way.
	w := session.Session{Gate: "default", ID: "w", Position: 7, Status: session.StatusWaiting, CreatedAt: t0}
	assert.Equal(t, session.StatusActive, session.Promote(cfg, w, t0).Session.Status)
	assert.Positive(t, n)
}

func TestPromote(t *testing.T) {
	w := session.Session{Gate: "default", ID: "w", Position: 7, Status: session.StatusWaiting, CreatedAt: t0}
	now := t0.Add(time.Second)
	o := session.Promote(cfg, w, now)
	assert.Equal(t, session.ActionUpdate, o.Action)
	assert.Equal(t, session.StatusActive, o.Session.Status)
	assert.Equal(t, now, o.Session.LastActive)
	assert.Equal(t, int64(7), o.Session.Position)
	assert.True(t, o.Session.ClaimDeadline.IsZero(), "without a claim timeout a promotion needs no claim")
	assert.Equal(t, session.Counters{Active: 1, Waiting: -1}, o.Delta)

	claimed := cfg
	claimed.ClaimTimeout = time.Minute
	o = session.Promote(claimed, w, now)
	assert.Equal(t, now.Add(time.Minute), o.Session.ClaimDeadline)
}

func TestDecideTouch(t *testing.T) {
	active := session.Session{Gate: "default", ID: "a", Position: 3, Status: session.StatusActive, LastActive: t0, CreatedAt: t0}
	unclaimed := active
	unclaimed.ClaimDeadline = t0.Add(time.Minute)
	waiting := session.Session{Gate: "default", ID: "w", Position: 7, Status: session.StatusWaiting, LastActive: t0, CreatedAt: t0}
	later := t0.Add(10 * time.Second)
	with := func(s session.Session, la time.Time, deadline time.Time) session.Session {
		s.LastActive, s.ClaimDeadline = la, deadline
		return s
	}
	tests := []struct {
		name     string
		existing *session.Session
		touch    session.Touch
		want     session.Outcome
	}{
		{"absent: nothing", nil, session.Touch{LastActive: later}, session.Outcome{Action: session.ActionNone}},
		{"active moves forward", &active, session.Touch{LastActive: later}, session.Outcome{Action: session.ActionUpdate, Session: with(active, later, time.Time{})}},
		{"never backwards", &active, session.Touch{LastActive: t0.Add(-time.Second)}, session.Outcome{Action: session.ActionNone, Session: active}},
		{"a waiter is seen", &waiting, session.Touch{LastActive: later}, session.Outcome{Action: session.ActionUpdate, Session: with(waiting, later, time.Time{})}},
		{"a claim of its promotion clears the deadline", &unclaimed, session.Touch{LastActive: later, ClaimDeadline: unclaimed.ClaimDeadline}, session.Outcome{Action: session.ActionUpdate, Session: with(unclaimed, later, time.Time{}), Note: session.EventClaimed}},
		{"the same instant in another zone claims", &unclaimed, session.Touch{LastActive: later, ClaimDeadline: unclaimed.ClaimDeadline.In(time.FixedZone("x", 3600))}, session.Outcome{Action: session.ActionUpdate, Session: with(unclaimed, later, time.Time{}), Note: session.EventClaimed}},
		{"a claim of an earlier promotion only refreshes", &unclaimed, session.Touch{LastActive: later, ClaimDeadline: unclaimed.ClaimDeadline.Add(-time.Minute)}, session.Outcome{Action: session.ActionUpdate, Session: with(unclaimed, later, unclaimed.ClaimDeadline)}},
		{"a claim a nanosecond off only refreshes", &unclaimed, session.Touch{LastActive: later, ClaimDeadline: unclaimed.ClaimDeadline.Add(time.Nanosecond)}, session.Outcome{Action: session.ActionUpdate, Session: with(unclaimed, later, unclaimed.ClaimDeadline)}},
		{"a claim of another promotion at an old time: nothing", &unclaimed, session.Touch{LastActive: t0, ClaimDeadline: t0}, session.Outcome{Action: session.ActionNone, Session: unclaimed}},
		{"a refresh without claim keeps it", &unclaimed, session.Touch{LastActive: later}, session.Outcome{Action: session.ActionUpdate, Session: with(unclaimed, later, unclaimed.ClaimDeadline)}},
		{"a claim of a claimed session at an old time: nothing", &active, session.Touch{LastActive: t0, ClaimDeadline: unclaimed.ClaimDeadline}, session.Outcome{Action: session.ActionNone, Session: active}},
		{"a claim of a waiter: only seen", &waiting, session.Touch{LastActive: later, ClaimDeadline: unclaimed.ClaimDeadline}, session.Outcome{Action: session.ActionUpdate, Session: with(waiting, later, time.Time{})}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.touch.ID = "x"
			assert.Equal(t, tt.want, session.DecideTouch(tt.existing, tt.touch))
		})
	}
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
		{"waiting, seen just now", session.Session{Status: session.StatusWaiting, LastActive: now}, false},
		{"waiting, seen exactly waiting_timeout ago", session.Session{Status: session.StatusWaiting, LastActive: now.Add(-cfg.WaitingTimeout)}, false},
		{"waiting, seen 1ns more than waiting_timeout ago (beacon or not)", session.Session{Status: session.StatusWaiting, LastActive: now.Add(-cfg.WaitingTimeout - 1)}, true},
		{"waiting row from before presence: its creation counts", session.Session{Status: session.StatusWaiting, CreatedAt: now.Add(-cfg.WaitingTimeout - 1)}, true},
		{"waiting row from before presence, recent", session.Session{Status: session.StatusWaiting, CreatedAt: now}, false},
		{"active, unclaimed, deadline not passed", session.Session{Status: session.StatusActive, LastActive: now, ClaimDeadline: now}, false},
		{"active, unclaimed past its deadline", session.Session{Status: session.StatusActive, LastActive: now, ClaimDeadline: now.Add(-1)}, true},
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
		// Past a year a deadline's Unix nanoseconds could wrap into the past
		// (every promoted session purged at once).
		{"claim timeout past a year", func(c *session.GateConfig) { c.ClaimTimeout = 2562047 * time.Hour }, "claim_timeout"},
		{"claim timeout of a year", func(c *session.GateConfig) { c.ClaimTimeout = session.MaxWindow }, ""},
		{"notify claim timeout past a year", func(c *session.GateConfig) { c.NotifyClaimTimeout = session.MaxWindow + 1 }, "notify_claim_timeout"},
		{"release grace past a year", func(c *session.GateConfig) { c.ReleaseOnDisconnect = session.MaxWindow + 1 }, "release_on_disconnect"},
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
	// The cause is said once: Errorf's message holds it already.
	assert.Equal(t, "internal: sqlite: join: "+cause.Error(), wrapped.Error())
	// A message without it gets it appended.
	assert.Equal(t, "internal: open: "+cause.Error(), (&session.Error{Code: session.CodeInternal, Message: "open", Err: cause}).Error())
}

func TestStaleReason(t *testing.T) {
	now := t0.Add(time.Hour)
	assert.Equal(t, session.Gone, session.StaleReason(cfg, session.Session{Status: session.StatusWaiting, LastActive: t0}, now))
	assert.Equal(t, session.Idle, session.StaleReason(cfg, session.Session{Status: session.StatusActive, LastActive: t0}, now))
	assert.Equal(t, session.Unclaimed, session.StaleReason(cfg, session.Session{Status: session.StatusActive, LastActive: t0, ClaimDeadline: t0}, now))
	assert.Equal(t, session.NotStale, session.StaleReason(cfg, session.Session{Status: session.StatusActive, LastActive: now}, now))
	assert.Equal(t, "unclaimed", session.Unclaimed.String())
}

func TestGlobalViewEqual(t *testing.T) {
	a := session.GlobalView{Gate: "g", Waiting: 3, Buckets: []int64{0, 3}}
	b := a
	b.Buckets = []int64{0, 3}
	assert.True(t, a.Equal(b))
	b.Buckets = []int64{0, 2}
	assert.False(t, a.Equal(b))
	b = a
	b.Active = 1
	assert.False(t, a.Equal(b))
}

func TestEstimatePlace(t *testing.T) {
	// Waiters at 10, 11, 14, 20, 21, 22 (12, 13, 15-19 left).
	v := session.GlobalView{FirstWaitingPosition: 10, LastWaitingPosition: 22, Waiting: 6}
	tests := []struct {
		name     string
		buckets  []int64
		position int64
		want     int64
	}{
		{"no summary: Convex's upper bound", nil, 20, 11},
		{"first waiter", []int64{0, 3, 10, 3}, 10, 1},
		{"bucket start is exact", []int64{0, 3, 10, 3}, 20, 4},
		{"inside the last bucket", []int64{0, 3, 10, 3}, 22, 6},
		{"one bucket per waiter is exact", []int64{0, 1, 1, 1, 4, 1, 10, 1, 11, 1, 12, 1}, 21, 5},
		{"not in line", []int64{0, 6}, 9, 0},
		{"past the line", []int64{0, 6}, 23, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v.Buckets = tt.buckets
			assert.Equal(t, tt.want, v.EstimatePlace(tt.position))
		})
	}
}

func TestRepairCounters(t *testing.T) {
	for _, tt := range []struct {
		name                  string
		stored                session.Counters
		active, waiting, maxP int64
		want                  session.Counters
		repaired              bool
	}{
		{"matching", session.Counters{NextPosition: 10, Active: 2, Waiting: 3}, 2, 3, 9, session.Counters{NextPosition: 10, Active: 2, Waiting: 3}, false},
		{"an empty new gate", session.Counters{NextPosition: 1}, 0, 0, 0, session.Counters{NextPosition: 1}, false},
		{"counts off", session.Counters{NextPosition: 10, Active: -3, Waiting: 7}, 2, 3, 9, session.Counters{NextPosition: 10, Active: 2, Waiting: 3}, true},
		{"next position behind a row", session.Counters{NextPosition: 5, Active: 2, Waiting: 3}, 2, 3, 9, session.Counters{NextPosition: 10, Active: 2, Waiting: 3}, true},
		{"next position ahead is kept (never reused)", session.Counters{NextPosition: 50, Active: 2, Waiting: 3}, 2, 3, 9, session.Counters{NextPosition: 50, Active: 2, Waiting: 3}, false},
		{"next position below 1", session.Counters{NextPosition: -4}, 0, 0, 0, session.Counters{NextPosition: 1}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, repaired := session.RepairCounters(tt.stored, tt.active, tt.waiting, tt.maxP)
			assert.Equal(t, tt.want, got)
			assert.Equal(t, tt.repaired, repaired)
		})
	}
}
