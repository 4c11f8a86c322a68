package postgres_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
	"github.com/anteroomhq/anteroom/session/postgres/pgtest"
	"github.com/anteroomhq/anteroom/session/sessiontest"
)

// A transaction that promoted and then failed leaves the line as it was,
// the writer's bound of the first waiter included. Before, the bound had
// moved past the rolled-back promotion: the next free slot went to the
// second in line, and the first was never promoted again by that instance.
// A trigger fails the first waiting→active write once (a sequence is not
// transactional, so the retry passes), standing in for a lost connection or
// a server restart in the middle of the commit.
func TestFailedPromotionKeepsTheFirstWaiterFirst(t *testing.T) {
	ctx := context.Background()
	url := pgtest.DB(t)
	st := open(t, url, quiet)
	t.Cleanup(func() { _ = st.Close() })
	clock := sessiontest.NewClock(sessiontest.Epoch)
	w, err := session.New(ctx, st, []session.GateConfig{sessiontest.GateConfig("g", 1)},
		session.Options{Clock: clock, TouchInterval: -1, SweepInterval: -1, Logger: quiet.Logger})
	require.NoError(t, err)
	t.Cleanup(func() { _ = w.Close() })
	for _, id := range []string{"a", "b", "c"} { // a active, b first in line, c second
		_, err = w.Join(ctx, "g", id)
		require.NoError(t, err)
	}

	c, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer c.Close(ctx)
	_, err = c.Exec(ctx, `
CREATE SEQUENCE fail_once;
CREATE FUNCTION fail_once() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF OLD.status = 0 AND NEW.status = 1 AND nextval('fail_once') = 1 THEN
    RAISE EXCEPTION 'injected failure';
  END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER fail_once BEFORE UPDATE ON anteroom_sessions FOR EACH ROW EXECUTE FUNCTION fail_once();`)
	require.NoError(t, err)

	require.Error(t, w.Release(ctx, "g", "a"), "the injected failure fails the release and its promotion")
	require.NoError(t, w.Release(ctx, "g", "a"), "retried, it commits")
	status := func(id string) session.Status {
		v, err := w.Status(ctx, "g", id)
		require.NoError(t, err)
		return v.Status
	}
	assert.Equal(t, session.StatusActive, status("b"), "the freed slot is the first waiter's")
	assert.Equal(t, session.StatusWaiting, status("c"), "the second still waits")

	// And the line goes on from there.
	require.NoError(t, w.Release(ctx, "g", "b"))
	assert.Equal(t, session.StatusActive, status("c"))
}
