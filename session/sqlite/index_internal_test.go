package sqlite

import (
	"fmt"
	"math/rand/v2"
	"reflect"
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

// refIndex is the index as it was before remove recorded conditional
// deletions: remove reads the entry (lookup) and records an unconditional
// deletion only when it names the row. A model for the differential test
// below, with the same maps and the same hash (x.hash).
type refIndex struct {
	hash     func(string) uint64
	gates    map[string]*gateIDs
	pendH    map[hashKey]pending
	pendLong map[longKey]pending
}

func newRefIndex(hash func(string) uint64) *refIndex {
	return &refIndex{hash: hash, gates: make(map[string]*gateIDs),
		pendH: make(map[hashKey]pending), pendLong: make(map[longKey]pending)}
}

func (x *refIndex) get(gate, id string) (int64, bool) {
	g := x.gates[gate]
	if g == nil {
		return 0, false
	}
	if pos, ok := g.long[id]; ok {
		return pos, true
	}
	pos, ok := g.h[x.hash(id)]
	return pos, ok
}

func (x *refIndex) lookup(gate, id string) (int64, slot, bool) {
	sl := slot{hash: x.hash(id)}
	g := x.gates[gate]
	if p, ok := x.pendLong[longKey{gate, id}]; ok {
		return p.pos, slot{hash: sl.hash, long: true}, !p.del
	}
	if g != nil {
		if pos, ok := g.long[id]; ok {
			return pos, slot{hash: sl.hash, long: true}, true
		}
	}
	if p, ok := x.pendH[hashKey{gate, sl.hash}]; ok {
		return p.pos, sl, !p.del
	}
	if g == nil {
		return 0, sl, false
	}
	pos, ok := g.h[sl.hash]
	return pos, sl, ok
}

func (x *refIndex) put(gate, id string, sl slot, pos int64) {
	if sl.long {
		x.pendLong[longKey{gate, id}] = pending{pos: pos}
		return
	}
	x.pendH[hashKey{gate, sl.hash}] = pending{pos: pos}
}

func (x *refIndex) remove(gate, id string, pos int64) {
	cur, sl, ok := x.lookup(gate, id)
	if !ok || cur != pos {
		return
	}
	if sl.long {
		x.pendLong[longKey{gate, id}] = pending{del: true}
		return
	}
	x.pendH[hashKey{gate, sl.hash}] = pending{del: true}
}

func (x *refIndex) gate(gate string) *gateIDs {
	g := x.gates[gate]
	if g == nil {
		g = &gateIDs{h: make(map[uint64]int64), long: make(map[string]int64)}
		x.gates[gate] = g
	}
	return g
}

func (x *refIndex) commit() {
	for k, p := range x.pendH {
		if g := x.gate(k.gate); p.del {
			delete(g.h, k.h)
		} else {
			g.h[k.h] = p.pos
		}
	}
	for k, p := range x.pendLong {
		if g := x.gate(k.gate); p.del {
			delete(g.long, k.id)
		} else {
			g.long[k.id] = p.pos
		}
	}
	x.rollback()
}

func (x *refIndex) rollback() {
	clear(x.pendH)
	clear(x.pendLong)
}

// The index against refIndex, the index that reads the entry before it
// records a removal: random transactions of puts, removals, lookups,
// commits and rollbacks on a few ids of two gates (one absent at first),
// whose hashes collide, at a few positions so that removals often name the
// entry's row and often another's. After every step the writer's lookup
// and the readers' get of every key agree, and after a commit or a
// rollback so do the shared maps. Puts take their slot as the store does
// (lookup's, turned long when the entry names another live row) or, to
// reach states a store might not, any slot.
func TestTheIndexAgreesWithTheIndexThatReadsBeforeItRemoves(t *testing.T) {
	tests := []struct {
		name string
		hash func(id string) uint64
		ids  []string
	}{
		{"no collisions", func(id string) uint64 { return uint64(id[0]) }, []string{"a", "b", "c"}},
		{"pairs collide", func(id string) uint64 { return uint64(len(id)) }, []string{"a", "b", "cc", "dd"}},
		{"all collide", func(string) uint64 { return 7 }, []string{"a", "b", "c", "d"}},
	}
	gates := []string{"g", "h"}
	const sequences, steps = 3000, 40
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			testHookHash = tt.hash
			t.Cleanup(func() { testHookHash = nil })
			for seed := range uint64(sequences) {
				r := rand.New(rand.NewPCG(seed, 17))
				x, ref := newIDIndex(), newRefIndex(tt.hash)
				var trace []string // formatted only when a check fails
				type step struct {
					op, gate, id string
					long         bool
					pos          int64
				}
				var done []step
				fail := func(what string, args ...any) {
					for _, s := range done {
						switch s.op {
						case "put":
							trace = append(trace, fmt.Sprintf("put(%s,%s,long=%v,%d)", s.gate, s.id, s.long, s.pos))
						case "remove":
							trace = append(trace, fmt.Sprintf("remove(%s,%s,%d)", s.gate, s.id, s.pos))
						default:
							trace = append(trace, s.op)
						}
					}
					require.FailNow(t, fmt.Sprintf(what, args...), "seed %d, after %v", seed, trace)
				}
				for range steps {
					gate, id := gates[r.IntN(len(gates))], tt.ids[r.IntN(len(tt.ids))]
					pos := int64(1 + r.IntN(3))
					switch op := r.IntN(10); {
					case op < 3: // an insert, the slot as the store finds it
						_, sl, ok := ref.lookup(gate, id)
						if ok && r.IntN(2) == 0 {
							sl.long = true // the entry names another live row
						}
						if r.IntN(8) == 0 {
							sl.long = !sl.long // any slot
						}
						done = append(done, step{op: "put", gate: gate, id: id, long: sl.long, pos: pos})
						x.put(gate, id, sl, pos)
						ref.put(gate, id, sl, pos)
					case op < 7:
						if cur, _, ok := ref.lookup(gate, id); ok && r.IntN(2) == 0 {
							pos = cur // the row the entry names, often
						}
						done = append(done, step{op: "remove", gate: gate, id: id, pos: pos})
						x.remove(gate, id, pos)
						ref.remove(gate, id, pos)
					case op < 9:
						done = append(done, step{op: "commit"})
						x.commit()
						ref.commit()
					default:
						done = append(done, step{op: "rollback"})
						x.rollback()
						ref.rollback()
					}
					for _, gate := range gates {
						for _, id := range tt.ids {
							wpos, wsl, wok := ref.lookup(gate, id)
							pos, sl, ok := x.lookup(gate, id)
							if ok != wok || ok && pos != wpos || sl != wsl {
								fail("lookup(%s, %s) = %d, %+v, %v; want %d, %+v, %v", gate, id, pos, sl, ok, wpos, wsl, wok)
							}
							wpos, wok = ref.get(gate, id)
							pos, ok = x.get(gate, id)
							if ok != wok || pos != wpos {
								fail("get(%s, %s) = %d, %v; want %d, %v", gate, id, pos, ok, wpos, wok)
							}
						}
					}
					if last := done[len(done)-1].op; last == "commit" || last == "rollback" {
						if len(x.pendH) != 0 || len(x.pendLong) != 0 {
							fail("pending after %s: %v, %v", last, x.pendH, x.pendLong)
						}
						if !reflect.DeepEqual(ref.gates, x.gates) {
							fail("shared maps %v; want %v", x.gates, ref.gates)
						}
					}
				}
			}
		})
	}
}
