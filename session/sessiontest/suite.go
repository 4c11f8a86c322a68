package sessiontest

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
)

// Opener is a factory of Stores: called once per test, it returns the
// function that opens that test's Store: a new, empty Store the first time,
// the same one again (a restart) on each later call, always after the
// suite closed the previous one. Both fail tb when they cannot.
type Opener func(tb testing.TB) func() session.Store

// AtPath returns the Opener of a Store kept in a file: each test gets a path
// in its tb.TempDir(), which open opens (creating the file when missing).
func AtPath(open func(tb testing.TB, path string) session.Store) Opener {
	return func(tb testing.TB) func() session.Store {
		path := filepath.Join(tb.TempDir(), "anteroom.db")
		return func() session.Store { return open(tb, path) }
	}
}

// Inspector is optionally implemented by a Store to let the suite check its
// rows in one call. Without it the suite reads them with Get, one by one.
type Inspector interface {
	// Rows returns every session of gate, in position order.
	Rows(ctx context.Context, gate string) ([]session.Session, error)
}

// TransactionCounter is optionally implemented by a Store that batches
// operations into transactions (group commit); the suite's group-commit test
// needs it and is skipped without it.
type TransactionCounter interface {
	// Transactions returns the number of write transactions committed since
	// the Store was opened.
	Transactions() int64
}

// Epoch is where the suite's fake clocks start.
var Epoch = time.Date(2026, time.March, 1, 12, 0, 0, 0, time.UTC)

// Timeouts of the gates the suite configures.
const (
	ActiveTimeout  = 10 * time.Minute
	WaitingTimeout = 2 * time.Minute
)

// GateConfig returns the configuration the suite uses for a gate.
func GateConfig(name string, limit int64) session.GateConfig {
	return session.GateConfig{Name: name, ActiveLimit: limit, ActiveTimeout: ActiveTimeout, WaitingTimeout: WaitingTimeout}
}

// RunStoreSuite runs the tests every session.Store must pass. open is called
// once per test; the Stores it opens are closed by the suite.
func RunStoreSuite(t *testing.T, open Opener) {
	t.Run("Join", func(t *testing.T) { testJoin(t, open) })
	t.Run("Leave", func(t *testing.T) { testLeave(t, open) })
	t.Run("Release", func(t *testing.T) { testRelease(t, open) })
	t.Run("StaleBoundaries", func(t *testing.T) { testStaleBoundaries(t, open) })
	t.Run("StaleIsExactlyIsStale", func(t *testing.T) { testStaleIsExactlyIsStale(t, open) })
	t.Run("ActiveNeverWaitsAgain", func(t *testing.T) { testActiveNeverWaitsAgain(t, open) })
	t.Run("PromotionCount", func(t *testing.T) { testPromotionCount(t, open) })
	t.Run("UpdateChunks", func(t *testing.T) { testUpdateChunks(t, open) })
	t.Run("PositionsNeverReused", func(t *testing.T) { testPositionsNeverReused(t, open) })
	t.Run("Touch", func(t *testing.T) { testTouch(t, open) })
	t.Run("Load", func(t *testing.T) { testLoad(t, open) })
	t.Run("Get", func(t *testing.T) { testGet(t, open) })
	t.Run("InvalidArgument", func(t *testing.T) { testInvalidArgument(t, open) })
	t.Run("CanceledContext", func(t *testing.T) { testCanceledContext(t, open) })
	t.Run("Closed", func(t *testing.T) { testClosed(t, open) })
	t.Run("CommitListener", func(t *testing.T) { testCommitListener(t, open) })
	t.Run("ListenerBeforeAnswer", func(t *testing.T) { testListenerBeforeAnswer(t, open) })
	t.Run("CommitListenerConcurrent", func(t *testing.T) { testCommitListenerConcurrent(t, open) })
	t.Run("Restart", func(t *testing.T) { testRestart(t, open) })
	t.Run("ConcurrentJoins", func(t *testing.T) { testConcurrentJoins(t, open) })
	t.Run("GroupCommit", func(t *testing.T) { testGroupCommit(t, open) })
	t.Run("Waitlist", func(t *testing.T) { testWaitlist(t, open) })
	t.Run("Randomized", func(t *testing.T) { testRandomized(t, open) })
	t.Run("Claim", func(t *testing.T) { testClaim(t, open) })
	t.Run("Purge", func(t *testing.T) { testPurge(t, open) })
	t.Run("Presence", func(t *testing.T) { testPresence(t, open) })
	t.Run("ReleaseOnDisconnect", func(t *testing.T) { testReleaseOnDisconnect(t, open) })
	t.Run("ExactPlace", func(t *testing.T) { testExactPlace(t, open) })
	t.Run("EventReasons", func(t *testing.T) { testEventReasons(t, open) })
	t.Run("Modes", func(t *testing.T) { testModes(t, open) })
	t.Run("Pacing", func(t *testing.T) { testPacing(t, open) })
	t.Run("PacePersists", func(t *testing.T) { testPacePersists(t, open) })
	t.Run("GateSettings", func(t *testing.T) { testGateSettings(t, open) })
	t.Run("RuntimeSettings", func(t *testing.T) { testRuntimeSettings(t, open) })
	t.Run("StoredSettingsDecide", func(t *testing.T) { testStoredSettingsDecide(t, open) })
	t.Run("Events", func(t *testing.T) { testEvents(t, open) })
	t.Run("Admissions", func(t *testing.T) { testAdmissions(t, open) })
	t.Run("AdmissionKeyring", func(t *testing.T) { testAdmissionKeyring(t, open) })
	t.Run("Notify", func(t *testing.T) { testNotify(t, open) })                         // suite_webhooks.go
	t.Run("Outbox", func(t *testing.T) { testOutbox(t, open) })                         // suite_webhooks.go
	t.Run("OutboxEventStarted", func(t *testing.T) { testOutboxEventStarted(t, open) }) // suite_webhooks.go
	t.Run("OutboxTargets", func(t *testing.T) { testOutboxTargets(t, open) })           // suite_webhooks.go
	t.Run("History", func(t *testing.T) { testHistory(t, open) })
	t.Run("Priority", func(t *testing.T) { testPriority(t, open) })
	t.Run("RemoveGate", func(t *testing.T) { testRemoveGate(t, open) })       // suite_remove.go
	t.Run("Promotable", func(t *testing.T) { testPromotable(t, open) })       // suite_promotable.go
	t.Run("ClaimLinkOnce", func(t *testing.T) { testClaimLinkOnce(t, open) }) // suite_claimlink.go
	t.Run("ClaimLinkBoundToPromotion", func(t *testing.T) { testClaimLinkBoundToPromotion(t, open) })
	t.Run("ClaimLinkMemoryBehind", func(t *testing.T) { testClaimLinkMemoryBehind(t, open) })
	t.Run("ClaimWindowInViews", func(t *testing.T) { testClaimWindowInViews(t, open) })
	t.Run("JoinLeavesLinkClaim", func(t *testing.T) { testJoinLeavesLinkClaim(t, open) })
	t.Run("ClaimOutputsOnce", func(t *testing.T) { testClaimOutputsOnce(t, open) })
	t.Run("TouchClaimBoundToPromotion", func(t *testing.T) { testTouchClaimBoundToPromotion(t, open) }) // suite_touchclaim.go
	t.Run("DuplicateTouches", func(t *testing.T) { testDuplicateTouches(t, open) })                     // suite_touchclaim.go
	t.Run("TimesAreUTC", func(t *testing.T) { testTimesAreUTC(t, open) })                               // suite_touchclaim.go
	t.Run("StaleClaimAfterPromotionAgain", func(t *testing.T) { testStaleClaimAfterPromotionAgain(t, open) })
}

// harness is one Store under test, the function that opens it, a fake clock and a
// record of every commit the Store reported.
type harness struct {
	tb    testing.TB
	ctx   context.Context
	open  func() session.Store
	store session.Store
	clock *Clock

	mu      sync.Mutex
	commits []session.Commit
	next    func(session.Commit) // the Waitlist's listener, when one is attached
}

func newHarness(tb testing.TB, open Opener) *harness {
	tb.Helper()
	h := &harness{
		tb:    tb,
		ctx:   context.Background(),
		open:  open(tb),
		clock: NewClock(Epoch),
	}
	h.store = h.openStore()
	tb.Cleanup(func() { _ = h.store.Close() })
	return h
}

func (h *harness) openStore() session.Store {
	h.tb.Helper()
	s := h.open()
	require.NotNil(h.tb, s)
	s.SetCommitListener(h.record)
	return s
}

// reopen closes the Store and opens it again: a restart.
func (h *harness) reopen() {
	h.tb.Helper()
	require.NoError(h.tb, h.store.Close())
	h.store = h.openStore()
}

func (h *harness) record(c session.Commit) {
	h.mu.Lock()
	h.commits = append(h.commits, c)
	next := h.next
	h.mu.Unlock()
	if next != nil {
		next(c)
	}
}

// mark returns a bookmark in the commit record.
func (h *harness) mark() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.commits)
}

// commitsSince returns the commits recorded after mark.
func (h *harness) commitsSince(mark int) []session.Commit {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]session.Commit(nil), h.commits[mark:]...)
}

// eventsSince returns the events of the commits recorded after mark, in order.
func (h *harness) eventsSince(mark int) []session.Event {
	var evs []session.Event
	for _, c := range h.commitsSince(mark) {
		evs = append(evs, c.Events...)
	}
	return evs
}

// teeStore hands the Waitlist a Store whose commit listener is the harness's
// recorder chained to the Waitlist's own.
type teeStore struct {
	session.Store
	h *harness
}

func (t teeStore) SetCommitListener(fn func(session.Commit)) {
	t.h.mu.Lock()
	t.h.next = fn
	t.h.mu.Unlock()
	t.Store.SetCommitListener(t.h.record)
}

// EventsAndDamaged passes session.DamageReporter through, for a Store
// that is one (none damaged for one that is not).
func (t teeStore) EventsAndDamaged(ctx context.Context, gate string) ([]session.ScheduledEvent, []session.DamagedEvent, error) {
	if r, ok := t.Store.(session.DamageReporter); ok {
		return r.EventsAndDamaged(ctx, gate)
	}
	evs, err := t.Events(ctx, gate)
	return evs, nil, err
}

// waitlist starts a Waitlist over the harness's Store with its clock.
func (h *harness) waitlist(gates ...session.GateConfig) *session.Waitlist {
	h.tb.Helper()
	w, err := session.New(h.ctx, teeStore{Store: h.store, h: h}, gates, session.Options{
		Clock:         h.clock,
		TouchInterval: -1,
		SweepInterval: -1,
		UpdateChunk:   7,
	})
	require.NoError(h.tb, err)
	h.tb.Cleanup(func() { _ = w.Close() })
	return w
}

func (h *harness) join(cfg session.GateConfig, id string) session.Session {
	h.tb.Helper()
	s, err := h.store.Join(h.ctx, cfg, id, h.clock.Now())
	require.NoError(h.tb, err, "join %s", id)
	return s
}

func (h *harness) leave(cfg session.GateConfig, id string) session.Session {
	h.tb.Helper()
	s, err := h.store.Leave(h.ctx, cfg, id, h.clock.Now())
	require.NoError(h.tb, err, "leave %s", id)
	return s
}

func (h *harness) release(cfg session.GateConfig, id string) session.Session {
	h.tb.Helper()
	s, err := h.store.Release(h.ctx, cfg, id, h.clock.Now())
	require.NoError(h.tb, err, "release %s", id)
	return s
}

func (h *harness) update(cfg session.GateConfig, chunk int) session.UpdateReport {
	h.tb.Helper()
	r, err := h.store.Update(h.ctx, cfg, h.clock.Now(), chunk)
	require.NoError(h.tb, err, "update %s", cfg.Name)
	return r
}

// seen touches the sessions of the suite's gate at the clock's time: signs
// of life, as an open socket gives.
func (h *harness) seen(ids ...string) {
	h.tb.Helper()
	touches := make([]session.Touch, len(ids))
	for i, id := range ids {
		touches[i] = session.Touch{ID: id, LastActive: h.clock.Now()}
	}
	require.NoError(h.tb, h.store.Touch(h.ctx, gateName, touches))
}

// claim touches id at at with a claim of the promotion its row holds now:
// a sign of life seen under that promotion.
func (h *harness) claim(id string, at time.Time) {
	h.tb.Helper()
	t := session.Touch{ID: id, LastActive: at, ClaimDeadline: h.mustGet(gateName, id).ClaimDeadline}
	require.NoError(h.tb, h.store.Touch(h.ctx, gateName, []session.Touch{t}))
}

func (h *harness) get(gate, id string) (session.Session, bool) {
	h.tb.Helper()
	s, err := h.store.Get(h.ctx, gate, id)
	if errors.Is(err, session.ErrNotFound) {
		// Every store says it the same way: clients read the message.
		require.EqualError(h.tb, err, session.NotFoundError(gate, id).Error())
		return session.Session{}, false
	}
	require.NoError(h.tb, err, "get %s", id)
	return s, true
}

func (h *harness) mustGet(gate, id string) session.Session {
	h.tb.Helper()
	s, ok := h.get(gate, id)
	require.True(h.tb, ok, "session %s of gate %s not found", id, gate)
	return s
}

func (h *harness) requireAbsent(gate, id string) {
	h.tb.Helper()
	_, ok := h.get(gate, id)
	require.False(h.tb, ok, "session %s of gate %s still exists", id, gate)
}

// state returns the gate's persisted state, via Load.
func (h *harness) state(gate string) session.GateState {
	h.tb.Helper()
	return h.snapshot(gate).State
}

func (h *harness) snapshot(gate string) session.GateSnapshot {
	h.tb.Helper()
	snaps, err := h.store.Load(h.ctx, []string{gate})
	require.NoError(h.tb, err)
	snap, ok := snaps[gate]
	require.True(h.tb, ok, "Load did not return gate %s", gate)
	return snap
}

// rows returns the sessions of gate among ids (all of them when the Store is
// an Inspector), in position order.
func (h *harness) rows(gate string, ids []string) []session.Session {
	h.tb.Helper()
	if in, ok := h.store.(Inspector); ok {
		rows, err := in.Rows(h.ctx, gate)
		require.NoError(h.tb, err)
		return rows
	}
	var rows []session.Session
	for _, id := range ids {
		if s, ok := h.get(gate, id); ok {
			rows = append(rows, s)
		}
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].Position < rows[j].Position })
	return rows
}

// counters returns what the rows of a gate count.
func counted(rows []session.Session) (active, waiting int64) {
	for _, r := range rows {
		if r.Status == session.StatusActive {
			active++
		} else {
			waiting++
		}
	}
	return active, waiting
}

// requireState checks a gate's state against the wanted counters, deriving
// the waiting bounds from the given waiting positions (first, last), or
// from NextPosition when nobody waits.
func requireState(tb testing.TB, want session.Counters, first, last int64, got session.GateState) {
	tb.Helper()
	if want.Waiting == 0 {
		first, last = want.NextPosition, want.NextPosition-1
	}
	require.Equal(tb, session.GateState{Counters: want, FirstWaitingPosition: first, LastWaitingPosition: last}, got)
}

// requireSession checks a session field by field, times with Equal.
func requireSession(tb testing.TB, want, got session.Session, msgAndArgs ...any) {
	tb.Helper()
	assert.Equal(tb, want.Gate, got.Gate, msgAndArgs...)
	assert.Equal(tb, want.ID, got.ID, msgAndArgs...)
	assert.Equal(tb, want.Position, got.Position, msgAndArgs...)
	assert.Equal(tb, want.Status, got.Status, msgAndArgs...)
	assertTime(tb, want.LastActive, got.LastActive, msgAndArgs...)
	assertTime(tb, want.CreatedAt, got.CreatedAt, msgAndArgs...)
	assertTime(tb, want.ClaimDeadline, got.ClaimDeadline, msgAndArgs...)
	if tb.Failed() {
		tb.FailNow()
	}
}

func assertTime(tb testing.TB, want, got time.Time, msgAndArgs ...any) {
	tb.Helper()
	msg := fmt.Sprintf("time: want %v, got %v", want, got)
	if len(msgAndArgs) > 0 {
		// The caller's message, formatted as testify would alone.
		if format, ok := msgAndArgs[0].(string); ok {
			msg += ": " + fmt.Sprintf(format, msgAndArgs[1:]...)
		} else {
			msg += fmt.Sprint(": ", msgAndArgs)
		}
	}
	if want.IsZero() || got.IsZero() {
		assert.Equal(tb, want.IsZero(), got.IsZero(), "zero "+msg)
		return
	}
	assert.True(tb, want.Equal(got), msg)
}

// kinds returns "kind:id" for each event, for readable comparisons.
func kinds(evs []session.Event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = kindName(e.Kind) + ":" + e.Session.ID
	}
	return out
}

func kindName(k session.EventKind) string {
	switch k {
	case session.EventActivated:
		return "activated"
	case session.EventPromoted:
		return "promoted"
	case session.EventRefreshed:
		return "refreshed"
	case session.EventDeactivated:
		return "deactivated"
	case session.EventQueued:
		return "queued"
	case session.EventDequeued:
		return "dequeued"
	case session.EventLeft:
		return "left"
	case session.EventReturned:
		return "returned"
	case session.EventClaimed:
		return "claimed"
	}
	return "unknown"
}
