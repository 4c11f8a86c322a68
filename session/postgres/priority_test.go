package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
	"github.com/anteroomhq/anteroom/session/postgres/pgtest"
)

// A priority join on one instance reaches the others through the outbox
// with its lane: every instance shows both lanes and the same places, and a
// slot freed on another instance goes to the priority lane first.
func TestInstancesShareThePriorityLane(t *testing.T) {
	url := pgtest.DB(t)
	ins := startInstances(t, url, 2, 1, quiet)
	a, b := ins[0], ins[1]
	ctx := context.Background()
	_, err := a.wl.CreateCode(ctx, multiGate, "shared-code", "", 2, time.Hour)
	require.NoError(t, err)
	_, err = a.wl.Join(ctx, multiGate, "first")
	require.NoError(t, err)
	_, err = b.wl.Join(ctx, multiGate, "normal")
	require.NoError(t, err)
	v, codeErr, err := a.wl.JoinWithCode(ctx, multiGate, "vip", "shared-code")
	require.NoError(t, err)
	require.NoError(t, codeErr)
	assert.Equal(t, "priority", v.Lane)
	// The code's uses are counted in the shared database: B sees one left.
	_, codeErr, err = b.wl.JoinWithCode(ctx, multiGate, "vip2", "shared-code")
	require.NoError(t, err)
	require.NoError(t, codeErr)
	_, codeErr, err = b.wl.JoinWithCode(ctx, multiGate, "late", "shared-code")
	require.NoError(t, err)
	require.ErrorIs(t, codeErr, session.ErrCodeUsed)

	require.Eventually(t, func() bool {
		g, err := b.wl.Global(multiGate)
		return err == nil && g.Priority != nil && g.Priority.Waiting == 2 && g.Waiting == 2
	}, 10*time.Second, 20*time.Millisecond, "B follows A's priority join")
	ga, err := a.wl.Global(multiGate)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		ga, err = a.wl.Global(multiGate)
		return err == nil && ga.Priority != nil && ga.Priority.Waiting == 2
	}, 10*time.Second, 20*time.Millisecond)
	gb, err := b.wl.Global(multiGate)
	require.NoError(t, err)
	assert.Equal(t, ga.Priority, gb.Priority)
	sv, err := b.wl.Status(ctx, multiGate, "vip2")
	require.NoError(t, err)
	assert.Equal(t, int64(2), sv.Place)
	assert.Equal(t, "priority", sv.Lane)

	// B releases A's active session: the priority lane goes first.
	require.NoError(t, b.wl.Release(ctx, multiGate, "first"))
	s, err := a.store.Get(ctx, multiGate, "vip")
	require.NoError(t, err)
	assert.Equal(t, session.StatusActive, s.Status)
	s, err = a.store.Get(ctx, multiGate, "normal")
	require.NoError(t, err)
	assert.Equal(t, session.StatusWaiting, s.Status)
	require.Eventually(t, func() bool {
		g, err := a.wl.Global(multiGate)
		return err == nil && g.Priority != nil && g.Priority.Waiting == 1
	}, 10*time.Second, 20*time.Millisecond, "A follows B's promotion out of the priority lane")
}
