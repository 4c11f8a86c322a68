package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fillAndClose creates n gates (padded names, so that their rows fill many
// pages) in a new store at path and closes it.
func fillAndClose(t *testing.T, path string, n int) {
	t.Helper()
	s, err := Open(path, Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	var gates []string
	for i := range n {
		gates = append(gates, fmt.Sprintf("gate-%05d-padding-padding-padding-padding", i))
	}
	_, err = s.Load(context.Background(), gates)
	require.NoError(t, err)
	require.NoError(t, s.Close())
}

// corruptLeaf overwrites the header of a leaf page of table in the middle of
// the file, so that a scan of the table fails part way.
func corruptLeaf(t *testing.T, path, table string) {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	require.NoError(t, err)
	var pageSize int64
	require.NoError(t, db.QueryRow("PRAGMA page_size").Scan(&pageSize))
	var pages []int64
	rows, err := db.Query(`SELECT pageno FROM dbstat WHERE name = ? AND pagetype = 'leaf' ORDER BY pageno`, table)
	require.NoError(t, err)
	for rows.Next() {
		var p int64
		require.NoError(t, rows.Scan(&p))
		pages = append(pages, p)
	}
	require.NoError(t, rows.Err())
	require.NoError(t, db.Close())
	require.Greater(t, len(pages), 4, "the table spans several leaves")
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	require.NoError(t, err)
	defer f.Close()
	junk := make([]byte, 64)
	for i := range junk {
		junk[i] = 0xEE
	}
	_, err = f.WriteAt(junk, (pages[len(pages)/2]-1)*pageSize)
	require.NoError(t, err)
}

// A scan that fails part way (a damaged page) is an error, not the end of
// the rows: without checking rows.Err, verifyCounters took the gates it had
// read for all of them and went on to repair counters from a partial view.
func TestVerifyCountersStopsOnAFailedScan(t *testing.T) {
	path := filepath.Join(t.TempDir(), "v.db")
	fillAndClose(t, path, 3000)
	corruptLeaf(t, path, "gates")

	db, err := sql.Open("sqlite", path)
	require.NoError(t, err)
	defer db.Close()
	ctx := context.Background()
	conn, err := db.Conn(ctx)
	require.NoError(t, err)
	defer conn.Close()
	repairs, err := verifyCounters(ctx, conn, slog.New(slog.DiscardHandler))
	require.Error(t, err, "repairs made: %d", len(repairs))
	assert.Contains(t, err.Error(), "malformed")
}
