package postgres

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session/postgres/pgtest"
)

// The bounds of the line are read in every commit that changed a gate. On
// a table the planner has no statistics for yet (a new database during its
// first burst of joins, before autovacuum analyzes it), the generic plan of
// min()/max() aggregated over every waiting position: each commit read the
// whole line, and joins slowed down as it grew (the bench's pg-join showed
// it). Read with ORDER BY ... LIMIT 1, both ends are one index entry each
// whatever the statistics.
func TestBoundsReadTwoIndexEntriesWithoutStatistics(t *testing.T) {
	url := pgtest.DB(t)
	ctx := context.Background()
	s, err := Open(ctx, url, Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	_ = s.Close()
	c, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer c.Close(ctx)
	const n = 5000
	_, err = c.Exec(ctx, `INSERT INTO anteroom_sessions (gate, position, id, status, created_at)
		SELECT 'g', p, 's' || p, CASE WHEN p <= 10 THEN 1 ELSE 0 END, 0 FROM generate_series(1, `+"5000"+`) p`)
	require.NoError(t, err)
	// No ANALYZE: the state of a table filled since the last one. The
	// writer's statements are prepared, so their plan is the generic one.
	_, err = c.Exec(ctx, "SET plan_cache_mode = force_generic_plan")
	require.NoError(t, err)
	_, err = c.Prepare(ctx, "bounds", sqlBounds)
	require.NoError(t, err)
	var first, last int64
	require.NoError(t, c.QueryRow(ctx, "bounds", "g").Scan(&first, &last))
	assert.Equal(t, []int64{11, n}, []int64{first, last})

	_, err = c.Exec(ctx, "PREPARE b(text) AS "+sqlBounds)
	require.NoError(t, err)
	var plan string
	require.NoError(t, c.QueryRow(ctx, "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, FORMAT JSON) EXECUTE b('g')").Scan(&plan))
	var doc []struct{ Plan planNode }
	require.NoError(t, json.Unmarshal([]byte(plan), &doc))
	require.Len(t, doc, 1)
	var rows float64
	var walk func(p planNode)
	walk = func(p planNode) {
		if p.Type == "Index Scan" || p.Type == "Index Only Scan" || p.Type == "Seq Scan" || p.Type == "Bitmap Heap Scan" {
			rows += p.Rows * max(p.Loops, 1)
		}
		for _, c := range p.Plans {
			walk(c)
		}
	}
	walk(doc[0].Plan)
	assert.LessOrEqual(t, rows, 2.0, "rows read to find both ends of a line of %d: %s", n-10, plan)
}

type planNode struct {
	Type     string     `json:"Node Type"`
	Relation string     `json:"Relation Name"`
	Rows     float64    `json:"Actual Rows"`
	Loops    float64    `json:"Actual Loops"`
	Plans    []planNode `json:"Plans"`
}

// A prepared statement's generic plan is made once and kept: made while the
// sessions table was nearly empty (a new database), the writer's prefetch
// of the batch's sessions by id kept a sequential scan of the whole table
// as the line grew, in every commit (pg-join slowed down round after round).
// The store's connections plan each execution for its parameters and the
// table as it is.
func TestPooledConnectionsDoNotKeepAPlanMadeOnAnEmptyTable(t *testing.T) {
	url := pgtest.DB(t)
	ctx := context.Background()
	s, err := Open(ctx, url, Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	c, err := s.pool.Acquire(ctx)
	require.NoError(t, err)
	defer c.Release()
	_, err = c.Exec(ctx, `INSERT INTO anteroom_sessions (gate, position, id, status, created_at)
		SELECT 'g', p, 's' || p, 0, 0 FROM generate_series(1, 10) p`)
	require.NoError(t, err)
	_, err = c.Exec(ctx, "PREPARE k(text[], text[]) AS "+sqlSelectKeys)
	require.NoError(t, err)
	for range 8 { // past the executions after which a generic plan is kept
		_, err = c.Exec(ctx, "EXECUTE k('{g,g}', '{s1,x}')")
		require.NoError(t, err)
	}
	_, err = c.Exec(ctx, `INSERT INTO anteroom_sessions (gate, position, id, status, created_at)
		SELECT 'g', p, 's' || p, 0, 0 FROM generate_series(11, 20000) p`)
	require.NoError(t, err)
	var plan string
	require.NoError(t, c.QueryRow(ctx, "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, FORMAT JSON) EXECUTE k('{g,g}', '{s1,x}')").Scan(&plan))
	var doc []struct{ Plan planNode }
	require.NoError(t, json.Unmarshal([]byte(plan), &doc))
	require.Len(t, doc, 1)
	var rows float64
	var walk func(p planNode)
	walk = func(p planNode) {
		if p.Type == "Seq Scan" && p.Relation == "anteroom_sessions" {
			rows += p.Rows * max(p.Loops, 1)
		}
		for _, c := range p.Plans {
			walk(c)
		}
	}
	walk(doc[0].Plan)
	assert.Zero(t, rows, "sessions read by a sequential scan to find 2 of 20,000 by id: %s", plan)
}
