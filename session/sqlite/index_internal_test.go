package sqlite

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The index's transaction: what the writer sees of its own changes, and
// what commit leaves in the shared maps. remove records a deletion of the
// shared map's entry only if it holds the row's position, without reading
// the entry (commit checks it); every sequence here must give what an
// index that reads the entry at once would.
func TestTheIndexTransactionSeesItsOwnRemovals(t *testing.T) {
	type want struct {
		pos   int64
		found bool
	}
	tests := []struct {
		name      string
		committed map[string]int64 // id -> position before the transaction
		do        func(x *idIndex)
		inTx      map[string]want // lookup inside the transaction, after do
		after     map[string]want // get after commit
	}{
		{
			name:      "a removal of the row the entry names",
			committed: map[string]int64{"a": 1, "b": 2},
			do:        func(x *idIndex) { x.remove("g", "a", 1) },
			inTx:      map[string]want{"a": {}, "b": {2, true}},
			after:     map[string]want{"a": {}, "b": {2, true}},
		},
		{
			name:      "a removal of another row leaves the entry",
			committed: map[string]int64{"a": 1},
			do:        func(x *idIndex) { x.remove("g", "a", 7) },
			inTx:      map[string]want{"a": {1, true}},
			after:     map[string]want{"a": {1, true}},
		},
		{
			name:      "a removal of an id the gate does not hold",
			committed: map[string]int64{"a": 1},
			do:        func(x *idIndex) { x.remove("g", "z", 1) },
			inTx:      map[string]want{"a": {1, true}, "z": {}},
			after:     map[string]want{"a": {1, true}, "z": {}},
		},
		{
			name:      "twice, the second of another row",
			committed: map[string]int64{"a": 1},
			do: func(x *idIndex) {
				x.remove("g", "a", 7)
				x.remove("g", "a", 1)
			},
			inTx:  map[string]want{"a": {}},
			after: map[string]want{"a": {}},
		},
		{
			name:      "twice the same row",
			committed: map[string]int64{"a": 1},
			do: func(x *idIndex) {
				x.remove("g", "a", 1)
				x.remove("g", "a", 1)
			},
			inTx:  map[string]want{"a": {}},
			after: map[string]want{"a": {}},
		},
		{
			name:      "removed, then put at a new position",
			committed: map[string]int64{"a": 1},
			do: func(x *idIndex) {
				x.remove("g", "a", 1)
				_, sl, ok := x.lookup("g", "a")
				require.False(t, ok)
				x.put("g", "a", sl, 9)
			},
			inTx:  map[string]want{"a": {9, true}},
			after: map[string]want{"a": {9, true}},
		},
		{
			name:      "put, then removed",
			committed: map[string]int64{},
			do: func(x *idIndex) {
				_, sl, _ := x.lookup("g", "a")
				x.put("g", "a", sl, 3)
				x.remove("g", "a", 3)
			},
			inTx:  map[string]want{"a": {}},
			after: map[string]want{"a": {}},
		},
		{
			name:      "put, then a removal of another row",
			committed: map[string]int64{"a": 1},
			do: func(x *idIndex) {
				_, sl, _ := x.lookup("g", "a")
				x.put("g", "a", sl, 3)
				x.remove("g", "a", 1)
			},
			inTx:  map[string]want{"a": {3, true}},
			after: map[string]want{"a": {3, true}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x := newIDIndex()
			g := x.gate("g")
			for id, pos := range tt.committed {
				g.h[x.hash(id)] = pos
			}
			tt.do(x)
			for id, w := range tt.inTx {
				pos, _, ok := x.lookup("g", id)
				require.Equal(t, w.found, ok, "lookup of %q in the transaction", id)
				if ok {
					require.Equal(t, w.pos, pos, "lookup of %q in the transaction", id)
				}
				pos, ok = x.get("g", id)
				committed, was := tt.committed[id]
				require.Equal(t, was, ok, "get of %q sees only what is committed", id)
				require.Equal(t, committed, pos, "get of %q sees only what is committed", id)
			}
			x.commit()
			for id, w := range tt.after {
				pos, ok := x.get("g", id)
				require.Equal(t, w.found, ok, "get of %q after commit", id)
				if ok {
					require.Equal(t, w.pos, pos, "get of %q after commit", id)
				}
			}
			require.Empty(t, x.pendH, "commit leaves nothing pending")

			// The same changes rolled back leave the committed entries.
			x = newIDIndex()
			g = x.gate("g")
			for id, pos := range tt.committed {
				g.h[x.hash(id)] = pos
			}
			tt.do(x)
			x.rollback()
			x.commit()
			require.Equal(t, len(tt.committed), x.size())
			for id, pos := range tt.committed {
				got, ok := x.get("g", id)
				require.True(t, ok)
				require.Equal(t, pos, got)
			}
		})
	}
}
