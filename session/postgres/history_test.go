package postgres_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
	"github.com/anteroomhq/anteroom/session/postgres/pgtest"
	"github.com/anteroomhq/anteroom/session/sessiontest"
)

// DisableHistory writes nothing; what was written before stays readable.
func TestHistoryDisabled(t *testing.T) {
	ctx := context.Background()
	url := pgtest.DB(t)
	cfg := sessiontest.GateConfig("g", 1)
	now := sessiontest.Epoch

	s := open(t, url, quiet)
	_, err := s.Join(ctx, cfg, "before", now)
	require.NoError(t, err)
	require.NoError(t, s.Close())

	off := quiet
	off.DisableHistory = true
	s = open(t, url, off)
	defer s.Close()
	_, err = s.Join(ctx, cfg, "a", now)
	require.NoError(t, err)
	_, err = s.Leave(ctx, cfg, "a", now)
	require.NoError(t, err)
	_, err = s.Release(ctx, cfg, "before", now) // a is promoted
	require.NoError(t, err)
	page, err := s.History(ctx, session.HistoryQuery{Gate: "g"})
	require.NoError(t, err)
	require.Len(t, page.Records, 1)
	assert.Equal(t, "before", page.Records[0].Session)
}
