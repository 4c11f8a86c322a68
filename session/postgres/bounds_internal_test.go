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
	Type  string     `json:"Node Type"`
	Rows  float64    `json:"Actual Rows"`
	Loops float64    `json:"Actual Loops"`
	Plans []planNode `json:"Plans"`
}
