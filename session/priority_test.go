package session

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDecideCode(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	code := func(used, max int64, expires time.Time) *PriorityCode {
		return &PriorityCode{MaxUses: max, Used: used, ExpiresAt: expires}
	}
	waits := Outcome{Action: ActionInsert, Session: Session{Status: StatusWaiting}}
	admitted := Outcome{Action: ActionInsert, Session: Session{Status: StatusActive}}
	existing := Outcome{Action: ActionUpdate, Session: Session{Status: StatusWaiting}}
	later := now.Add(time.Hour)
	cases := []struct {
		name string
		c    *PriorityCode
		out  Outcome
		lane Lane
		use  bool
		err  error
	}{
		{"unknown", nil, waits, LaneNormal, false, ErrCodeUnknown},
		{"unknown, admitted", nil, admitted, LaneNormal, false, ErrCodeUnknown},
		{"fresh, waits", code(0, 1, later), waits, LanePriority, true, nil},
		{"last use", code(4, 5, later), waits, LanePriority, true, nil},
		{"used up", code(1, 1, later), waits, LaneNormal, false, ErrCodeUsed},
		{"over used (never written, still refused)", code(7, 5, later), waits, LaneNormal, false, ErrCodeUsed},
		{"expires now", code(0, 1, now), waits, LaneNormal, false, ErrCodeUsed},
		{"expired", code(0, 1, now.Add(-time.Nanosecond)), waits, LaneNormal, false, ErrCodeUsed},
		{"admitted at once uses nothing", code(0, 1, later), admitted, LaneNormal, false, nil},
		{"an existing session keeps its lane", code(0, 1, later), existing, LaneNormal, false, nil},
		{"an existing session with a used code: ignored", code(1, 1, later), existing, LaneNormal, false, nil},
		{"an existing session with an unknown code: ignored", nil, existing, LaneNormal, false, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := DecideCode(tc.c, tc.out, now)
			assert.Equal(t, tc.lane, d.Lane)
			assert.Equal(t, tc.use, d.Use)
			if tc.err == nil {
				assert.NoError(t, d.Err)
			} else {
				assert.ErrorIs(t, d.Err, tc.err)
			}
			out := ApplyCode(tc.out, d)
			if tc.out.Action == ActionInsert {
				assert.Equal(t, tc.lane, out.Session.Lane)
			} else {
				assert.Equal(t, tc.out, out, "an update keeps the row's lane")
			}
		})
	}
}

func TestNewPriorityCode(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	cases := []struct {
		name, gate, code, label string
		uses                    int64
		exp                     time.Time
		ok                      bool
	}{
		{"ok", "default", "launch-vip", "press", 1, now.Add(time.Hour), true},
		{"max uses", "default", "launch-vip", "", MaxCodeUses, now.Add(MaxCodeTTL), true},
		{"bad gate", "no/gate", "launch-vip", "", 1, now.Add(time.Hour), false},
		{"short code", "default", "abc12", "", 1, now.Add(time.Hour), false},
		{"long code", "default", strings.Repeat("a", MaxCodeLength+1), "", 1, now.Add(time.Hour), false},
		{"unicode code", "default", "código-vip", "", 1, now.Add(time.Hour), false},
		{"space in code", "default", "launch vip", "", 1, now.Add(time.Hour), false},
		{"zero uses", "default", "launch-vip", "", 0, now.Add(time.Hour), false},
		{"too many uses", "default", "launch-vip", "", MaxCodeUses + 1, now.Add(time.Hour), false},
		{"expired", "default", "launch-vip", "", 1, now, false},
		{"too far", "default", "launch-vip", "", 1, now.Add(MaxCodeTTL + time.Second), false},
		{"long label", "default", "launch-vip", strings.Repeat("l", MaxCodeLabel+1), 1, now.Add(time.Hour), false},
		{"invalid utf-8 label", "default", "launch-vip", "\xff\xfe", 1, now.Add(time.Hour), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := NewPriorityCode(tc.gate, tc.code, tc.label, tc.uses, tc.exp, now)
			if !tc.ok {
				require.ErrorIs(t, err, ErrInvalidArgument)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, CodeID(tc.code), c.ID)
			assert.True(t, ValidCodeID(c.ID))
			assert.NotContains(t, c.ID, tc.code, "the stored form is a digest")
			assert.Equal(t, tc.code[:4], c.Hint)
			assert.Zero(t, c.Used)
		})
	}
	assert.False(t, ValidCodeID(strings.Repeat("g", 64)))
	assert.False(t, ValidCodeID("abc"))
}

// TestLanesInMemory checks the Waitlist's memory of both lanes: places per
// lane, the normal lane's bounds narrowed while the priority lane is
// non-empty, and a snapshot split back into lanes.
func TestLanesInMemory(t *testing.T) {
	g := &gateMemory{}
	cfg := GateConfig{Name: "g"}
	g.cfg.Store(&cfg)
	snap := GateSnapshot{
		State:           GateState{Counters: Counters{NextPosition: 20, Waiting: 6}, FirstWaitingPosition: 3, LastWaitingPosition: 19},
		Waiting:         []int64{3, 5, 8, 12, 15, 19},
		PriorityWaiting: []int64{12, 19},
	}
	g.resetLines(snap)
	place := func(p int64) (int64, string) {
		g.mu.RLock()
		defer g.mu.RUnlock()
		return g.place(p)
	}
	for _, tc := range []struct {
		pos   int64
		place int64
		lane  string
	}{{3, 1, ""}, {5, 2, ""}, {8, 3, ""}, {15, 4, ""}, {12, 1, "priority"}, {19, 2, "priority"}} {
		p, l := place(tc.pos)
		assert.Equal(t, tc.place, p, "place of %d", tc.pos)
		assert.Equal(t, tc.lane, l, "lane of %d", tc.pos)
	}
	v := g.globalView(snap.State, time.Time{})
	assert.Equal(t, int64(4), v.Waiting)
	assert.Equal(t, int64(3), v.FirstWaitingPosition)
	assert.Equal(t, int64(15), v.LastWaitingPosition)
	require.NotNil(t, v.Priority)
	assert.Equal(t, LaneView{FirstWaitingPosition: 12, LastWaitingPosition: 19, Waiting: 2, Buckets: []int64{0, 2}}, *v.Priority)
	assert.Equal(t, int64(6), v.AllWaiting())
	assert.Equal(t, int64(2), v.EstimatePlaceIn(LanePriority, 19))
	assert.Equal(t, int64(4), v.EstimatePlaceIn(LaneNormal, 15))
	assert.Zero(t, v.EstimatePlaceIn(LanePriority, 8), "outside that lane")

	// A priority join, then the priority lane leaves: the normal lane's
	// bounds come back to the store's.
	g.mu.Lock()
	g.addWaiter(Session{Position: 20, Lane: LanePriority})
	g.mu.Unlock()
	p, l := place(20)
	assert.Equal(t, int64(3), p)
	assert.Equal(t, "priority", l)
	p, _ = place(15)
	assert.Equal(t, int64(4), p, "a priority join does not move the normal lane")
	g.mu.Lock()
	for _, pos := range []int64{12, 19, 20} {
		g.removeWaiter(pos)
	}
	g.mu.Unlock()
	st := GateState{Counters: Counters{NextPosition: 21, Waiting: 4}, FirstWaitingPosition: 3, LastWaitingPosition: 15}
	v = g.globalView(st, time.Time{})
	assert.Nil(t, v.Priority)
	assert.Equal(t, int64(4), v.Waiting)
	assert.Equal(t, int64(15), v.LastWaitingPosition)
	assert.True(t, v.Equal(g.globalView(st, time.Time{})))
	w := v
	w.Priority = &LaneView{Waiting: 1}
	assert.False(t, v.Equal(w), "Equal compares the priority lane")
}
