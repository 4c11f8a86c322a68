package postgres_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
	"github.com/anteroomhq/anteroom/session/postgres"
	"github.com/anteroomhq/anteroom/session/postgres/pgtest"
	"github.com/anteroomhq/anteroom/session/sessiontest"
)

// followerHold holds one instance's follower: once held, the queries of
// its listening connection that read the outbox wait, so the instance's
// memory does not apply the other instances' commits, until a query of
// another of its connections (its writer) releases them, as when the
// follower is slow and the writer catches up before applying its own
// commit.
type followerHold struct {
	mu      sync.Mutex
	listen  *pgx.Conn
	holding bool
	held    chan struct{} // closed when the follower waits
	release chan struct{} // closed to let it go
	armed   bool          // a query of another connection releases it
}

func newFollowerHold() *followerHold {
	return &followerHold{held: make(chan struct{}), release: make(chan struct{})}
}

// hold holds the follower from now on (again after letGo); heldC is closed
// once it waits.
func (f *followerHold) hold() (heldC <-chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.holding = true
	select {
	case <-f.release: // let go before: a new round
		f.held, f.release = make(chan struct{}), make(chan struct{})
	default:
	}
	return f.held
}

func (f *followerHold) arm() { f.mu.Lock(); f.armed = true; f.mu.Unlock() }

func (f *followerHold) letGo() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.holding, f.armed = false, false
	select {
	case <-f.release:
	default:
		close(f.release)
	}
}

func (f *followerHold) other(conn *pgx.Conn) {
	f.mu.Lock()
	armed := f.armed && conn != f.listen
	f.mu.Unlock()
	if armed {
		f.letGo()
	}
}

func (f *followerHold) TraceQueryStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	f.mu.Lock()
	if strings.HasPrefix(data.SQL, "LISTEN") {
		f.listen = conn
	}
	wait := f.holding && conn == f.listen && strings.Contains(data.SQL, "anteroom_commits")
	release := f.release
	if wait {
		select {
		case <-f.held:
		default:
			close(f.held)
		}
	}
	f.mu.Unlock()
	if wait {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return ctx
	}
	f.other(conn)
	return ctx
}

func (f *followerHold) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (f *followerHold) TraceBatchStart(ctx context.Context, conn *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	f.other(conn)
	return ctx
}

func (f *followerHold) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

func (f *followerHold) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// TestClaimLinkOnInstanceBehind: instance A promotes a called-back session;
// instance B's follower has not applied that commit when the claim link is
// visited on B. B asks the store, which claims the slot (B's own commit
// brings its memory up to date first); the link is used after that, on
// both instances.
func TestClaimLinkOnInstanceBehind(t *testing.T) {
	url := pgtest.DB(t)
	ctx := context.Background()
	cfg := sessiontest.GateConfig(multiGate, 1)
	cfg.ClaimTimeout = time.Minute
	cfg.NotifyClaimTimeout = 15 * time.Minute
	hold := newFollowerHold()
	t.Cleanup(hold.letGo)
	var wls [2]*session.Waitlist
	var stores [2]*postgres.Store
	for i := range wls {
		opts := postgres.Options{Logger: slog.New(slog.DiscardHandler), FollowPoll: time.Hour}
		if i == 1 {
			opts.Tracer = hold
		}
		s := open(t, url, opts)
		stores[i] = s
		t.Cleanup(func() { _ = s.Close() })
		w, err := session.New(ctx, s, []session.GateConfig{cfg}, session.Options{TouchInterval: -1, SweepInterval: -1, Logger: quiet.Logger})
		require.NoError(t, err)
		t.Cleanup(func() { _ = w.Close() })
		wls[i] = w
	}
	a, b := wls[0], wls[1]
	_, err := a.Join(ctx, multiGate, "holder")
	require.NoError(t, err)
	_, err = a.Join(ctx, multiGate, "w")
	require.NoError(t, err)
	_, err = a.SetNotify(ctx, multiGate, "w", true)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		g, err := b.Global(multiGate)
		return err == nil && g.Waiting == 1
	}, 10*time.Second, 5*time.Millisecond, "B follows the line")

	held := hold.hold()
	require.NoError(t, a.Release(ctx, multiGate, "holder"))
	select {
	case <-held:
	case <-time.After(10 * time.Second):
		t.Fatal("B's follower never read the promotion")
	}
	require.ErrorIs(t, b.ValidateSessionIsActive(multiGate, "w"), session.ErrNotActive, "B has not applied the promotion")
	row, err := stores[0].Get(ctx, multiGate, "w")
	require.NoError(t, err)
	require.False(t, row.ClaimDeadline.IsZero(), "promoted, unclaimed")

	deadline := row.ClaimDeadline
	hold.arm()
	require.NoError(t, b.ClaimLink(ctx, multiGate, "w", deadline), "B asks the store, which claims")
	hold.letGo()
	require.NoError(t, b.ValidateSessionIsActive(multiGate, "w"), "B caught up before answering")
	row, err = stores[0].Get(ctx, multiGate, "w")
	require.NoError(t, err)
	assert.True(t, row.ClaimDeadline.IsZero(), "claimed as stored")
	assert.ErrorIs(t, b.ClaimLink(ctx, multiGate, "w", deadline), session.ErrNotActive, "used, on B")
	assert.ErrorIs(t, a.ClaimLink(ctx, multiGate, "w", deadline), session.ErrNotActive, "used, on A")

	// Rounds of the same link visited twice on A (which holds the
	// promotion) and twice on B (which does not) at once: exactly one
	// visit claims it.
	prev := "w"
	for round := range 3 {
		require.NoError(t, a.Release(ctx, multiGate, prev))
		holder, waiter := fmt.Sprintf("h%d", round), fmt.Sprintf("w%d", round)
		_, err := a.Join(ctx, multiGate, holder)
		require.NoError(t, err)
		_, err = a.Join(ctx, multiGate, waiter)
		require.NoError(t, err)
		_, err = a.SetNotify(ctx, multiGate, waiter, true)
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			g, err := b.Global(multiGate)
			return err == nil && g.Waiting == 1 && b.ValidateSessionIsActive(multiGate, holder) == nil
		}, 10*time.Second, 5*time.Millisecond, "B follows the line")
		held := hold.hold()
		require.NoError(t, a.Release(ctx, multiGate, holder))
		select {
		case <-held:
		case <-time.After(10 * time.Second):
			t.Fatal("B's follower never read the promotion")
		}
		row, err := stores[0].Get(ctx, multiGate, waiter)
		require.NoError(t, err)
		require.False(t, row.ClaimDeadline.IsZero(), "promoted, unclaimed")
		require.NoError(t, a.ValidateSessionIsActive(multiGate, waiter), "A holds the promotion")
		require.ErrorIs(t, b.ValidateSessionIsActive(multiGate, waiter), session.ErrNotActive, "B does not")
		hold.arm()
		errs := make([]error, 4)
		var wg sync.WaitGroup
		for i := range errs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = wls[i%2].ClaimLink(ctx, multiGate, waiter, row.ClaimDeadline)
			}()
		}
		wg.Wait()
		hold.letGo()
		won := 0
		for _, err := range errs {
			if err == nil {
				won++
			} else {
				assert.ErrorIs(t, err, session.ErrNotActive)
			}
		}
		assert.Equal(t, 1, won, "round %d: exactly one visit claims the slot", round)
		prev = waiter
	}
}
