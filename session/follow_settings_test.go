package session_test

import (
	"context"
	"log/slog"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
	"github.com/anteroomhq/anteroom/session/sqlite"
)

// followingStore is a real SQLite store made a SettingsFollower: it reports
// its own settings changes to the listener as a shared store does, and the
// test plays the other instances by calling remote.
type followingStore struct {
	session.Store
	mu sync.Mutex
	fn func(session.Commit)
}

func (f *followingStore) FollowsSettings() {}

func (f *followingStore) SetCommitListener(fn func(session.Commit)) {
	f.mu.Lock()
	f.fn = fn
	f.mu.Unlock()
	f.Store.SetCommitListener(fn)
}

// remote delivers c as a commit of another instance.
func (f *followingStore) remote(c session.Commit) {
	f.mu.Lock()
	fn := f.fn
	f.mu.Unlock()
	fn(c)
}

func (f *followingStore) SaveGateSettings(ctx context.Context, gate string, s *session.GateConfig) error {
	if err := f.Store.SaveGateSettings(ctx, gate, s); err != nil {
		return err
	}
	if s != nil {
		c := *s
		s = &c
	}
	f.remote(session.Commit{Settings: map[string]*session.GateConfig{gate: s}})
	return nil
}

func newFollowing(t *testing.T, gates ...session.GateConfig) (*followingStore, *session.Waitlist) {
	t.Helper()
	sq, err := sqlite.Open(filepath.Join(t.TempDir(), "anteroom.db"), sqlite.Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sq.Close() })
	st := &followingStore{Store: sq}
	w, err := session.New(context.Background(), st, gates, session.Options{TouchInterval: -1, SweepInterval: -1, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = w.Close() })
	return st, w
}

func gateCfg(name string, limit int64) session.GateConfig {
	return session.GateConfig{Name: name, ActiveLimit: limit, ActiveTimeout: time.Minute, WaitingTimeout: time.Minute}
}

// What another instance changed reaches the Waitlist through Commit.Settings:
// settings replace the gate's, nil goes back to the file's (or removes a
// gate added at runtime), an unknown gate comes with its state, and
// settings that do not validate are ignored.
func TestWaitlistFollowsSettings(t *testing.T) {
	ctx := context.Background()
	st, w := newFollowing(t, gateCfg("default", 1))

	changed := gateCfg("default", 5)
	st.remote(session.Commit{Settings: map[string]*session.GateConfig{"default": &changed}})
	got, err := w.GateConfig("default")
	require.NoError(t, err)
	assert.Equal(t, changed, got)
	v, err := w.Global("default")
	require.NoError(t, err)
	assert.Equal(t, int64(5), v.Limit, "the global view carries the new limit")

	hostile := []struct {
		name string
		cfg  session.GateConfig
	}{
		{"another gate's name", gateCfg("other", 9)},
		{"a negative limit", gateCfg("default", -1)},
		{"no timeout", session.GateConfig{Name: "default", ActiveLimit: 3}},
		{"an unknown mode", session.GateConfig{Name: "default", ActiveLimit: 3, ActiveTimeout: time.Minute, WaitingTimeout: time.Minute, Mode: "party"}},
	}
	for _, h := range hostile {
		c := h.cfg
		st.remote(session.Commit{Settings: map[string]*session.GateConfig{"default": &c}})
		got, err := w.GateConfig("default")
		require.NoError(t, err)
		assert.Equal(t, changed, got, h.name+": ignored")
	}

	// Forgotten: back to the file's.
	st.remote(session.Commit{Settings: map[string]*session.GateConfig{"default": nil}})
	got, err = w.GateConfig("default")
	require.NoError(t, err)
	assert.Equal(t, int64(1), got.ActiveLimit)
	stats, err := w.Stats("default")
	require.NoError(t, err)
	assert.False(t, stats.Runtime)

	// A gate added elsewhere, without its state: not installed (it cannot
	// be followed without one); with its state: installed and usable.
	extra := gateCfg("extra", 2)
	st.remote(session.Commit{Settings: map[string]*session.GateConfig{"extra": &extra}})
	assert.NotContains(t, w.Gates(), "extra")
	st.remote(session.Commit{
		Settings: map[string]*session.GateConfig{"extra": &extra},
		Resync:   map[string]session.GateSnapshot{"extra": {State: session.GateState{Counters: session.Counters{NextPosition: 1}, FirstWaitingPosition: 1}}},
	})
	require.Contains(t, w.Gates(), "extra")
	sv, err := w.Join(ctx, "extra", "x")
	require.NoError(t, err)
	assert.Equal(t, session.StatusActive, sv.Status)

	// Removed elsewhere: a gate added at runtime goes.
	st.remote(session.Commit{Settings: map[string]*session.GateConfig{"extra": nil}})
	assert.False(t, slices.Contains(w.Gates(), "extra"))
	_, err = w.Join(ctx, "extra", "y")
	require.ErrorIs(t, err, session.ErrUnknownGate)
}

// With a Store that reports settings, the Waitlist's own changes take
// effect through the Store's report (the order every instance sees), and
// AddGate, SetGateConfig, ResetGateConfig and RemoveGate still do what
// they say.
func TestWaitlistRuntimeChangesThroughFollowingStore(t *testing.T) {
	ctx := context.Background()
	_, w := newFollowing(t, gateCfg("default", 1))
	_, err := w.Join(ctx, "default", "a")
	require.NoError(t, err)
	_, err = w.Join(ctx, "default", "b")
	require.NoError(t, err)
	require.ErrorIs(t, w.ValidateSessionIsActive("default", "b"), session.ErrNotActive)

	_, err = w.SetGateConfig(ctx, gateCfg("default", 2))
	require.NoError(t, err)
	require.NoError(t, w.ValidateSessionIsActive("default", "b"), "a raised limit promotes at once")
	_, err = w.ResetGateConfig(ctx, "default")
	require.NoError(t, err)
	got, _ := w.GateConfig("default")
	assert.Equal(t, int64(1), got.ActiveLimit)

	require.NoError(t, w.AddGate(ctx, gateCfg("launch", 3)))
	_, err = w.Join(ctx, "launch", "l")
	require.NoError(t, err)
	require.NoError(t, w.ValidateSessionIsActive("launch", "l"))
	launch := gateCfg("launch", 3)
	launch.Mode = session.ModeReject
	_, err = w.SetGateConfig(ctx, launch)
	require.NoError(t, err)
	require.NoError(t, w.RemoveGate(ctx, "launch"))
	assert.NotContains(t, w.Gates(), "launch")
}
