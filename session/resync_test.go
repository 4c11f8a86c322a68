package session_test

import (
	"context"
	"errors"
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
