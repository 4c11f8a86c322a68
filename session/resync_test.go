package session_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
)

// listenerStore is a Store that only loads a snapshot and hands out its
// commit listener, so that a test can play a shared Store's commits.
type listenerStore struct {
	session.Store
	snap     session.GateSnapshot
	listener func(session.Commit)
}

func (s *listenerStore) SetCommitListener(fn func(session.Commit)) { s.listener = fn }

func (s *listenerStore) Load(_ context.Context, gates []string) (map[string]session.GateSnapshot, error) {
	return map[string]session.GateSnapshot{gates[0]: s.snap}, nil
}

func (s *listenerStore) Touch(context.Context, string, []session.Touch) error { return nil }

func activeSession(id string, pos int64, at time.Time) session.Session {
	return session.Session{Gate: "g", ID: id, Position: pos, Status: session.StatusActive, LastActive: at, CreatedAt: at}
}

func TestResyncReplacesActiveSet(t *testing.T) {
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	st := &listenerStore{snap: session.GateSnapshot{
		State:  session.GateState{Counters: session.Counters{NextPosition: 3, Active: 2}, FirstWaitingPosition: 3, LastWaitingPosition: 2},
		Active: []session.Session{activeSession("a", 1, at), activeSession("b", 2, at)},
	}}
	cfg := session.GateConfig{Name: "g", ActiveLimit: 5, ActiveTimeout: time.Minute, WaitingTimeout: time.Minute}
	w, err := session.New(context.Background(), st, []session.GateConfig{cfg}, session.Options{TouchInterval: -1})
	require.NoError(t, err)
	defer w.Close()
	require.NoError(t, w.ValidateSessionIsActive("g", "a"))

	// Another instance released a and admitted c while this one was away.
	state := session.GateState{Counters: session.Counters{NextPosition: 4, Active: 2}, FirstWaitingPosition: 4, LastWaitingPosition: 3}
	st.listener(session.Commit{
		Gates:  map[string]session.GateState{"g": state},
		Resync: map[string]session.GateSnapshot{"g": {State: state, Active: []session.Session{activeSession("b", 2, at), activeSession("c", 3, at)}}},
	})
	assert.ErrorIs(t, w.ValidateSessionIsActive("g", "a"), session.ErrNotActive, "gone after the resync")
	assert.NoError(t, w.ValidateSessionIsActive("g", "b"))
	assert.NoError(t, w.ValidateSessionIsActive("g", "c"))
	g, err := w.Global("g")
	require.NoError(t, err)
	assert.Equal(t, int64(4), g.FirstWaitingPosition)
}

func TestValidateRefusesWhileNotFollowing(t *testing.T) {
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	st := &listenerStore{snap: session.GateSnapshot{
		State:  session.GateState{Counters: session.Counters{NextPosition: 2, Active: 1}, FirstWaitingPosition: 2, LastWaitingPosition: 1},
		Active: []session.Session{activeSession("a", 1, at)},
	}}
	var notReady error
	cfg := session.GateConfig{Name: "g", ActiveLimit: 5, ActiveTimeout: time.Minute, WaitingTimeout: time.Minute}
	w, err := session.New(context.Background(), st, []session.GateConfig{cfg}, session.Options{
		TouchInterval: -1,
		Ready:         func() error { return notReady },
	})
	require.NoError(t, err)
	defer w.Close()
	require.NoError(t, w.ValidateSessionIsActive("g", "a"))
	require.NoError(t, w.ValidateSessionAndRefreshLastActive("g", "a"))

	notReady = errors.New("listening connection lost")
	assert.ErrorIs(t, w.ValidateSessionIsActive("g", "a"), session.ErrUnavailable)
	assert.ErrorIs(t, w.ValidateSessionAndRefreshLastActive("g", "a"), session.ErrUnavailable)
	notReady = session.Errorf(session.CodeUnavailable, "resyncing")
	assert.ErrorIs(t, w.ValidateSessionIsActive("g", "nobody"), session.ErrUnavailable)

	notReady = nil
	assert.NoError(t, w.ValidateSessionIsActive("g", "a"))
}

// earlyStore is a listenerStore whose follower applies commits of another
// instance between Load's snapshot and the Waitlist's memory: during Load,
// and from another goroutine while New builds the gates.
type earlyStore struct {
	listenerStore
	during  []session.Commit
	racing  []session.Commit
	started chan struct{}
}

func (s *earlyStore) Load(ctx context.Context, gates []string) (map[string]session.GateSnapshot, error) {
	snaps, err := s.listenerStore.Load(ctx, gates)
	for _, c := range s.during {
		s.listener(c)
	}
	go func() {
		defer close(s.started)
		for _, c := range s.racing {
			s.listener(c)
		}
	}()
	return snaps, err
}

func TestCommitsAppliedWhileStartingAreKept(t *testing.T) {
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	state := func(next, active int64) session.GateState {
		return session.GateState{Counters: session.Counters{NextPosition: next, Active: active}, FirstWaitingPosition: next, LastWaitingPosition: next - 1}
	}
	activated := func(id string, pos int64) session.Commit {
		return session.Commit{Gates: map[string]session.GateState{"g": state(pos+1, pos)}, Remote: true,
			Events: []session.Event{{Kind: session.EventActivated, Session: activeSession(id, pos, at)}}}
	}
	// a is in the snapshot; b is admitted elsewhere during Load; c..l
	// race with New building memory, in order.
	st := &earlyStore{
		listenerStore: listenerStore{snap: session.GateSnapshot{State: state(2, 1), Active: []session.Session{activeSession("a", 1, at)}}},
		during:        []session.Commit{activated("b", 2)},
		started:       make(chan struct{}),
	}
	ids := []string{"c", "d", "e", "f", "g", "h", "i", "j", "k", "l"}
	for i, id := range ids {
		st.racing = append(st.racing, activated(id, int64(3+i)))
	}
	cfg := session.GateConfig{Name: "g", ActiveLimit: 50, ActiveTimeout: time.Minute, WaitingTimeout: time.Minute}
	w, err := session.New(context.Background(), st, []session.GateConfig{cfg}, session.Options{TouchInterval: -1, SweepInterval: -1})
	require.NoError(t, err)
	defer w.Close()
	<-st.started
	for _, id := range append([]string{"a", "b"}, ids...) {
		assert.NoError(t, w.ValidateSessionIsActive("g", id), "session %s", id)
	}
	g, err := w.Global("g")
	require.NoError(t, err)
	assert.Equal(t, int64(2+len(ids)), g.Active, "the last commit's state, applied last")
	assert.Equal(t, int64(3+len(ids)), g.FirstWaitingPosition)
}

func TestCommitsKeptWhileStartingAreDroppedWhenNewFails(t *testing.T) {
	st := &earlyStore{started: make(chan struct{})}
	st.during = []session.Commit{{Gates: map[string]session.GateState{"g": {}}}}
	// The listenerStore loads one gate only: asking for two fails New.
	cfgs := []session.GateConfig{
		{Name: "g", ActiveLimit: 5, ActiveTimeout: time.Minute, WaitingTimeout: time.Minute},
		{Name: "h", ActiveLimit: 5, ActiveTimeout: time.Minute, WaitingTimeout: time.Minute},
	}
	_, err := session.New(context.Background(), st, cfgs, session.Options{TouchInterval: -1, SweepInterval: -1})
	require.Error(t, err)
	<-st.started
	assert.NotPanics(t, func() { st.listener(session.Commit{Gates: map[string]session.GateState{"g": {}}}) }, "a late commit to a Waitlist never returned is ignored")
}

// touchStore is a listenerStore that records the touches memory flushes.
// during, when set, runs inside the next Touch call, once: what happens
// while a flush is under way.
type touchStore struct {
	listenerStore
	touches []session.Touch
	during  func()
}

func (s *touchStore) Touch(_ context.Context, _ string, ts []session.Touch) error {
	s.touches = append(s.touches, ts...)
	if during := s.during; during != nil {
		s.during = nil
		during()
	}
	return nil
}

// claimWaitlist is a Waitlist of gate "g" with a claim window, on a store
// that records the touches it is sent: "a" active, "b" waiting at 2. It
// returns the time the sessions were seen at.
func claimWaitlist(t *testing.T) (*touchStore, *session.Waitlist, time.Time) {
	t.Helper()
	st := &touchStore{listenerStore: listenerStore{snap: session.GateSnapshot{
		State: session.GateState{Counters: session.Counters{NextPosition: 3, Active: 1, Waiting: 1}, FirstWaitingPosition: 2, LastWaitingPosition: 2},
	}}}
	cfg := session.GateConfig{Name: "g", ActiveLimit: 5, ActiveTimeout: time.Minute, WaitingTimeout: time.Minute, ClaimTimeout: time.Minute}
	w, err := session.New(context.Background(), st, []session.GateConfig{cfg}, session.Options{TouchInterval: -1, SweepInterval: -1})
	require.NoError(t, err)
	t.Cleanup(func() { _ = w.Close() })
	return st, w, time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
}

// promotedB is the commit of claimWaitlist's "b" promoted at at, unclaimed
// until deadline.
func promotedB(at, deadline time.Time) session.Commit {
	b := activeSession("b", 2, at)
	b.ClaimDeadline = deadline
	return session.Commit{Gates: map[string]session.GateState{"g": {Counters: session.Counters{NextPosition: 3, Active: 2}, FirstWaitingPosition: 3, LastWaitingPosition: 2}},
		Events: []session.Event{{Kind: session.EventPromoted, Session: b}}}
}

// A promotion delivered a second time (a follower's catch-up after a
// replay, say) does not undo the claim memory made of it: the slot is
// claimed once, and no second claim is sent.
func TestPromotionSeenTwiceKeepsItsClaim(t *testing.T) {
	st, w, at := claimWaitlist(t)
	promoted := promotedB(at, at.Add(time.Minute))
	b := promoted.Events[0].Session
	st.listener(promoted)
	require.NoError(t, w.ValidateSessionIsActive("g", "b"), "the person arrives: claimed")
	require.NoError(t, w.FlushTouches(context.Background()))
	st.listener(promoted)
	require.NoError(t, w.ValidateSessionIsActive("g", "b"))
	require.NoError(t, w.FlushTouches(context.Background()))
	claims := 0
	for _, tc := range st.touches {
		if !tc.ClaimDeadline.IsZero() {
			claims++
			assert.True(t, tc.ClaimDeadline.Equal(b.ClaimDeadline), "the claim names b's promotion: %+v", tc)
		}
	}
	assert.Equal(t, 1, claims, "touches %+v", st.touches)
}

// A claim made while a flush is under way is not forgotten when that flush
// sent the claim of another promotion: memory clears only the claim it
// sent, and the next flush names the promotion of the later claim.
func TestClaimDuringFlushStaysPending(t *testing.T) {
	st, w, at := claimWaitlist(t)
	promoted := func(deadline time.Time) session.Commit { return promotedB(at, deadline) }
	first, second := at.Add(time.Minute), at.Add(time.Minute+time.Millisecond)
	st.listener(promoted(first))
	require.NoError(t, w.ValidateSessionIsActive("g", "b"), "a sign of life claims the first promotion")
	st.during = func() {
		st.listener(promoted(second))
		require.NoError(t, w.ValidateSessionIsActive("g", "b"), "a sign of life claims the second promotion")
	}
	require.NoError(t, w.FlushTouches(context.Background()))
	require.NoError(t, w.FlushTouches(context.Background()))
	var claims []time.Time
	for _, tc := range st.touches {
		if !tc.ClaimDeadline.IsZero() {
			claims = append(claims, tc.ClaimDeadline)
		}
	}
	require.Len(t, claims, 2, "touches %+v", st.touches)
	assert.True(t, claims[0].Equal(first), "the first flush claims the first promotion: %v", claims[0])
	assert.True(t, claims[1].Equal(second), "the second flush claims the second promotion: %v", claims[1])
}

// ValidateSessionIsActive allocates nothing, also when it claims a
// promoted slot (memory keeps which promotion it claimed).
func TestValidateClaimAllocatesNothing(t *testing.T) {
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	const n = 200
	snap := session.GateSnapshot{State: session.GateState{Counters: session.Counters{NextPosition: n + 1, Active: n}, FirstWaitingPosition: n + 1, LastWaitingPosition: n}}
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("s%d", i)
		s := activeSession(ids[i], int64(i+1), at)
		s.ClaimDeadline = at.Add(time.Minute + time.Duration(i))
		snap.Active = append(snap.Active, s)
	}
	st := &touchStore{listenerStore: listenerStore{snap: snap}}
	cfg := session.GateConfig{Name: "g", ActiveLimit: n, ActiveTimeout: time.Minute, WaitingTimeout: time.Minute, ClaimTimeout: time.Minute}
	w, err := session.New(context.Background(), st, []session.GateConfig{cfg}, session.Options{TouchInterval: -1, SweepInterval: -1})
	require.NoError(t, err)
	defer w.Close()
	next := 0
	allocs := testing.AllocsPerRun(n/2, func() {
		if err := w.ValidateSessionIsActive("g", ids[next]); err != nil {
			panic(err)
		}
		next++
	})
	assert.Zero(t, allocs)
	require.NoError(t, w.FlushTouches(context.Background()))
	claims := 0
	for _, tc := range st.touches {
		if !tc.ClaimDeadline.IsZero() {
			claims++
		}
	}
	assert.Equal(t, next, claims, "every validation claimed a slot")
}
