package session_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
)

var testSeed = bytes.Repeat([]byte{0x5a}, session.LotterySeedSize)

func i64(v int64) *int64 { return &v }

func TestLotteryOrderIsAPermutationAndDeterministic(t *testing.T) {
	for _, n := range []int{0, 1, 2, 3, 10, 1000} {
		pos := make([]int64, n)
		for i := range pos {
			pos[i] = int64(100 + 3*i)
		}
		a, err := session.LotteryOrder(testSeed, pos)
		require.NoError(t, err)
		b, err := session.LotteryOrder(testSeed, pos)
		require.NoError(t, err)
		assert.Equal(t, a, b, "same seed, same order")
		seen := map[int64]bool{}
		for _, p := range a {
			seen[p] = true
		}
		assert.Len(t, seen, n, "a permutation")
		for _, p := range pos {
			assert.True(t, seen[p])
		}
	}
	pos := []int64{1, 2, 3, 4, 5, 6, 7, 8}
	other := bytes.Repeat([]byte{0xa5}, session.LotterySeedSize)
	a, _ := session.LotteryOrder(testSeed, pos)
	b, _ := session.LotteryOrder(other, pos)
	assert.NotEqual(t, a, b, "another seed, another order")
	assert.Equal(t, []int64{1, 2, 3, 4, 5, 6, 7, 8}, pos, "the input is not changed")

	_, err := session.LotteryOrder([]byte("short"), pos)
	assert.ErrorIs(t, err, session.ErrInvalidArgument)
}

// TestLotteryOrderVector pins the algorithm: a change to it breaks every
// verifier out there.
func TestLotteryOrderVector(t *testing.T) {
	seed := make([]byte, session.LotterySeedSize)
	for i := range seed {
		seed[i] = byte(i)
	}
	got, err := session.LotteryOrder(seed, []int64{10, 11, 12, 13, 14, 15, 16, 17, 18, 19})
	require.NoError(t, err)
	assert.Equal(t, lotteryVector, got)
	sum := sha256.Sum256(seed)
	assert.Equal(t, hex.EncodeToString(sum[:]), session.LotteryCommitment(seed))
}

// lotteryVector is LotteryOrder of seed 00 01 … 1f over positions 10…19,
// as an independent Python implementation of the documented algorithm gives.
var lotteryVector = []int64{12, 11, 10, 17, 18, 19, 13, 14, 16, 15}

// TestLotteryOrderFair: over many seeds, each of three positions comes
// first about a third of the time (deterministic seeds: no flakiness).
func TestLotteryOrderFair(t *testing.T) {
	counts := map[int64]int{}
	seed := make([]byte, session.LotterySeedSize)
	const runs = 3000
	for i := 0; i < runs; i++ {
		seed[0], seed[1] = byte(i), byte(i>>8)
		got, err := session.LotteryOrder(seed, []int64{1, 2, 3})
		require.NoError(t, err)
		counts[got[0]]++
	}
	for p := int64(1); p <= 3; p++ {
		assert.InDelta(t, runs/3, counts[p], runs/3*0.15, "position %d first %d times", p, counts[p])
	}
}

func TestEventValidate(t *testing.T) {
	now := t0
	ok := session.ScheduledEvent{Gate: "default", ID: "launch", PrequeueAt: now.Add(time.Hour), StartsAt: now.Add(2 * time.Hour)}
	require.NoError(t, ok.ValidateNew(now))
	for name, mut := range map[string]func(e *session.ScheduledEvent){
		"starts before prequeue":  func(e *session.ScheduledEvent) { e.StartsAt = e.PrequeueAt.Add(-time.Second) },
		"starts at prequeue":      func(e *session.ScheduledEvent) { e.StartsAt = e.PrequeueAt },
		"ends before start":       func(e *session.ScheduledEvent) { e.EndsAt = e.StartsAt },
		"far future":              func(e *session.ScheduledEvent) { e.PrequeueAt, e.StartsAt = now.AddDate(5, 0, 0), now.AddDate(5, 0, 1) },
		"in the past":             func(e *session.ScheduledEvent) { e.PrequeueAt, e.StartsAt = now.Add(-2*time.Hour), now.Add(-time.Hour) },
		"pre-queue too long":      func(e *session.ScheduledEvent) { e.PrequeueAt = e.StartsAt.Add(-session.MaxPrequeue - time.Second) },
		"huge limit":              func(e *session.ScheduledEvent) { e.ActiveLimit = i64(1 << 62) },
		"negative limit":          func(e *session.ScheduledEvent) { e.ActiveLimit = i64(-1) },
		"huge pacing":             func(e *session.ScheduledEvent) { e.NewUsersPerMinute = i64(1 << 62) },
		"no prequeue":             func(e *session.ScheduledEvent) { e.PrequeueAt = time.Time{} },
		"bad id":                  func(e *session.ScheduledEvent) { e.ID = "a b" },
		"empty id":                func(e *session.ScheduledEvent) { e.ID = "" },
		"bad gate":                func(e *session.ScheduledEvent) { e.Gate = "../x" },
		"seed of the wrong size":  func(e *session.ScheduledEvent) { e.Seed = []byte{1} },
		"ends more than 1y later": func(e *session.ScheduledEvent) { e.EndsAt = e.StartsAt.Add(session.MaxEventLength + time.Second) },
	} {
		e := ok
		mut(&e)
		assert.ErrorIs(t, e.ValidateNew(now), session.ErrInvalidArgument, name)
	}
	// As an event is saved: Schedule, then ValidateNew. A time past 2262,
	// whose unix nanoseconds wrap around to an hour from now, stays as
	// given, and is refused.
	wrap := now.Add(math.MaxInt64).Add(math.MaxInt64).Add(2) // now + 2^64 ns
	far := ok
	far.PrequeueAt, far.StartsAt = wrap.Add(time.Hour), wrap.Add(2*time.Hour)
	require.Equal(t, now.Add(time.Hour).UnixNano(), far.PrequeueAt.UnixNano(), "the premise: its nanoseconds wrap")
	sched := far.Schedule()
	assert.True(t, sched.PrequeueAt.Equal(far.PrequeueAt) && sched.StartsAt.Equal(far.StartsAt), "Schedule moved the times: %v, %v", sched.PrequeueAt, sched.StartsAt)
	assert.ErrorIs(t, sched.ValidateNew(now), session.ErrInvalidArgument)
}

func TestEventConfig(t *testing.T) {
	base := cfg
	ev := session.ScheduledEvent{Gate: "default", ID: "e", PrequeueAt: t0.Add(time.Minute), StartsAt: t0.Add(2 * time.Minute),
		EndsAt: t0.Add(time.Hour), Phase: session.EventScheduled, ActiveLimit: i64(9), NewUsersPerMinute: i64(60)}
	started := ev
	started.Phase = session.EventStarted
	rejecting := base
	rejecting.Mode = session.ModeReject
	for _, tc := range []struct {
		name  string
		cfg   session.GateConfig
		ev    session.ScheduledEvent
		at    time.Time
		mode  session.Mode
		limit int64
		pace  int64
	}{
		{"before the pre-queue", base, ev, t0, base.Mode, 2, 0},
		{"pre-queue time, not yet opened: hold", base, ev, ev.PrequeueAt, session.ModeQueueAll, 2, 0},
		{"past the start, not drawn: hold", base, ev, ev.StartsAt.Add(time.Second), session.ModeQueueAll, 2, 0},
		{"reject stays reject", rejecting, ev, ev.PrequeueAt, session.ModeReject, 2, 0},
		{"started: overrides", base, started, ev.StartsAt, base.Mode, 9, 60},
		{"ended: as configured", base, started, ev.EndsAt, base.Mode, 2, 0},
	} {
		got := session.EventConfig(tc.cfg, []session.ScheduledEvent{tc.ev}, tc.at)
		assert.Equal(t, tc.mode, got.Mode, tc.name)
		assert.Equal(t, tc.limit, got.ActiveLimit, tc.name)
		assert.Equal(t, tc.pace, got.NewUsersPerMinute, tc.name)
	}
}

func TestDecidePrequeueAndStart(t *testing.T) {
	ev := session.ScheduledEvent{Gate: "default", ID: "e", PrequeueAt: t0, StartsAt: t0.Add(time.Minute), Shuffle: true, Seed: testSeed, Phase: session.EventScheduled}
	next, changed, due := session.DecidePrequeue(ev, session.Counters{NextPosition: 42}, t0.Add(-time.Nanosecond))
	assert.False(t, changed)
	assert.False(t, due)
	assert.Equal(t, session.EventScheduled, next.Phase)
	next, changed, due = session.DecidePrequeue(ev, session.Counters{NextPosition: 42}, t0)
	assert.True(t, changed)
	assert.False(t, due)
	assert.Equal(t, int64(42), next.FirstPosition)
	// Down through the whole pre-queue: both at once.
	all, changed, due := session.DecidePrequeue(ev, session.Counters{NextPosition: 42}, ev.StartsAt)
	assert.True(t, changed)
	assert.True(t, due)

	started, moves, err := session.DecideStart(all, []int64{42, 43, 45, 50}, ev.StartsAt)
	require.NoError(t, err)
	assert.Equal(t, session.EventStarted, started.Phase)
	assert.Equal(t, []int64{42, 43, 45, 50}, started.Positions)
	served, _ := session.LotteryOrder(testSeed, started.Positions)
	for k, old := range served {
		to, moved := moves[old]
		if !moved {
			to = old
		}
		assert.Equal(t, started.Positions[k], to)
	}
	_, _, err = session.DecideStart(started, nil, ev.StartsAt)
	assert.ErrorIs(t, err, session.ErrInvalidArgument, "a started event does not start again")
	_, _, err = session.DecideStart(all, []int64{5, 4}, ev.StartsAt)
	assert.ErrorIs(t, err, session.ErrInvalidArgument)

	fifo := all
	fifo.Shuffle = false
	_, moves, err = session.DecideStart(fifo, []int64{42, 43}, ev.StartsAt)
	require.NoError(t, err)
	assert.Empty(t, moves, "without shuffle, arrival order")
}

func TestStoredEventRoundTrip(t *testing.T) {
	ev := session.ScheduledEvent{Gate: "g", ID: "e", PrequeueAt: t0, StartsAt: t0.Add(time.Minute), EndsAt: t0.Add(time.Hour),
		Shuffle: true, ActiveLimit: i64(5), Seed: testSeed, Phase: session.EventStarted, FirstPosition: 7,
		Positions: []int64{7, 8, 9}, PrequeueOpenedAt: t0, StartedAt: t0.Add(time.Minute)}
	b, err := session.EncodeStoredEvent(ev)
	require.NoError(t, err)
	got, err := session.DecodeStoredEvent("g", "e", b)
	require.NoError(t, err)
	assert.Equal(t, ev, got)
	for _, bad := range []string{`{`, `{"seed":"zz"}`, `{"phase":"nope","seed":""}`, `{"prequeueAt":5,"startsAt":1,"phase":"scheduled","seed":""}`} {
		_, err := session.DecodeStoredEvent("g", "e", []byte(bad))
		assert.ErrorIs(t, err, session.ErrInternal, bad)
	}
}

func TestDamagedEventHoldsUnlessItReadsAsStarted(t *testing.T) {
	for _, c := range []struct {
		id, raw string
		want    bool
	}{
		{"a b", `{"phase":"prequeue"}`, false},
		{"", `{"phase":"prequeue"}`, false},
		{"drop", `{"phase":"started","startsAt":"soon"}`, false},
		{"drop", `{"phase":"prequeue","seed":"zz"}`, true},
		{"drop", `{"phase":"scheduled","startsAt":-1}`, true},
		{"drop", `{"phase":"paused"}`, true},
		{"drop", `{"phase":7}`, true},
		{"drop", `{}`, true},
		{"drop", `null`, true},
		{"drop", `"off"`, true},
		{"drop", `[{"phase":"started"}]`, true},
		{"drop", `not json`, true},
		{"drop", ``, true},
	} {
		assert.Equal(t, c.want, session.DamagedEventHolds(c.id, []byte(c.raw)), "%q %s", c.id, c.raw)
	}
}

func TestPrequeueHoldQueuesAnAdmittingGateWhileAPrequeueIsOpen(t *testing.T) {
	ev := func(phase session.EventPhase) session.ScheduledEvent {
		return session.ScheduledEvent{Phase: phase, FirstPosition: 10}
	}
	open := []session.ScheduledEvent{ev(session.EventStarted), ev(session.EventPrequeue)}
	for _, c := range []struct {
		name    string
		mode    session.Mode
		stored  []session.ScheduledEvent
		damaged bool
		want    session.Mode
	}{
		{"no events", session.ModeOpen, nil, false, session.ModeOpen},
		{"a damaged event", session.ModeOpen, nil, true, session.ModeQueueAll},
		{"a damaged event beside a started one", "", []session.ScheduledEvent{ev(session.EventStarted)}, true, session.ModeQueueAll},
		{"reject, a damaged event", session.ModeReject, nil, true, session.ModeReject},
		{"scheduled", session.ModeOpen, []session.ScheduledEvent{ev(session.EventScheduled)}, false, session.ModeOpen},
		{"started", "", []session.ScheduledEvent{ev(session.EventStarted)}, false, ""},
		{"open, pre-queue open", session.ModeOpen, open, false, session.ModeQueueAll},
		{"default mode, pre-queue open", "", open, false, session.ModeQueueAll},
		{"queue_all, pre-queue open", session.ModeQueueAll, open, false, session.ModeQueueAll},
		{"reject, pre-queue open", session.ModeReject, open, false, session.ModeReject},
	} {
		cfg := session.GateConfig{Name: "g", ActiveLimit: 5, Mode: c.mode}
		got := session.PrequeueHold(cfg, c.stored, c.damaged)
		assert.Equal(t, c.want, got.Mode, c.name)
		assert.Equal(t, int64(5), got.ActiveLimit, c.name)
		if c.want == session.ModeQueueAll {
			assert.Zero(t, session.Promotions(got, session.Counters{NextPosition: 20, Waiting: 3}), "%s: free slots filled", c.name)
		}
	}
}

// A schedule at or before the Unix epoch is refused: the stored form of an
// event writes a time as unix nanoseconds, 0 for none, so a pre-queue
// opening at the epoch read back as an event without one, damaged.
func TestEventValidateRefusesTheUnixEpoch(t *testing.T) {
	e := session.ScheduledEvent{Gate: "default", ID: "e", PrequeueAt: time.Unix(0, 0), StartsAt: time.Unix(3600, 0)}
	assert.ErrorIs(t, e.Validate(), session.ErrInvalidArgument)
	e.PrequeueAt = time.Unix(-1, 0)
	assert.ErrorIs(t, e.Validate(), session.ErrInvalidArgument)
	e.PrequeueAt = time.Unix(0, 1)
	assert.NoError(t, e.Validate())
}
