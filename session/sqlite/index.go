package sqlite

import (
	"crypto/rand"
	"encoding/binary"
	"strings"
	"sync"
)

// idIndex finds a session's row from its key (gate, id): per gate, it maps
// the id to the row's position, the table's key with the gate. It lives in
// memory only and is rebuilt from the table at Open.
//
// Why not an SQL index: session ids are random, so an index on them takes
// every insert to a random page, and every join writes a page of its own
// to the WAL; SQLite's batched random-key insert tops out at about a fifth
// of its insert in key order here. Without it, a join appends to the end of
// its gate's range, and a transaction of hundreds of joins writes a handful
// of pages. Owning the file alone (the process lock) is what makes an index
// kept beside the table sound, as it does for the counters.
//
// Memory: the ids are not kept, only a 64-bit keyed hash of each (a random
// key, kept with the index's snapshot at Close: snapshot.go) and the position, about 40 bytes per session (36 MB for
// a million; rebuilding it takes about a second per million rows), in maps
// without pointers, which the garbage collector does not scan. Every hit is
// verified against the row itself, so a hash collision is never taken for
// the session: an id that finds its hash taken by another live session goes
// to the gate's small map of full ids, long.
//
// The shared maps hold what is committed; they are read by Get (under mu)
// and by the writer, and changed only by the writer, after each commit,
// from the transaction's pending changes (dropped when it rolls back). The
// writer sees its own pending changes first.
type idIndex struct {
	key uint64 // of hashID

	mu    sync.RWMutex
	gates map[string]*gateIDs

	// The transaction's changes, owned by the writer: a position, or a
	// deletion (of whatever the entry holds, or only of the position the
	// shared map holds for it).
	pendH    map[hashKey]pending
	pendLong map[longKey]pending
}

// gateIDs is the index of one gate: positions are a gate's own.
type gateIDs struct {
	h    map[uint64]int64 // hash(id) -> position
	long map[string]int64 // id -> position, for ids whose hash another session holds
}

type hashKey struct {
	gate string
	h    uint64
}

type longKey struct{ gate, id string }

type pending struct {
	pos int64
	del bool
	// ifAt: the deletion takes the shared map's entry only if it holds
	// pos (remove, without reading that entry: at millions of sessions
	// each read of the shared map is a cache miss, and commit reads it
	// anyway to delete it).
	ifAt bool
}

func newIDIndex() *idIndex {
	return &idIndex{
		key:      randomKey(),
		gates:    make(map[string]*gateIDs),
		pendH:    make(map[hashKey]pending),
		pendLong: make(map[longKey]pending),
	}
}

func (x *idIndex) hash(id string) uint64 {
	if testHookHash != nil {
		return testHookHash(id)
	}
	return hashID(x.key, id)
}

func randomKey() uint64 {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	return binary.LittleEndian.Uint64(b[:])
}

// hashID is FNV-1a from a state set by key, then the splitmix64 finalizer.
// Keyed, so that which ids collide cannot be known from outside; a
// collision costs only a place in the long map (every hit is verified
// against the row). Unlike hash/maphash, its key can be saved with the
// index's snapshot.
func hashID[T string | []byte](key uint64, id T) uint64 {
	h := key ^ 14695981039346656037
	for i := 0; i < len(id); i++ {
		h ^= uint64(id[i])
		h *= 1099511628211
	}
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	return h
}

// hashBytes is hash of the id in b.
func (x *idIndex) hashBytes(b []byte) uint64 {
	if testHookHash != nil {
		return testHookHash(string(b))
	}
	return hashID(x.key, b)
}

// testHookHash, set only by this package's tests before Open, replaces the
// hash, to make collisions happen.
var testHookHash func(id string) uint64

// slot says where an id's entry is, or would go.
type slot struct {
	hash uint64
	long bool // the id is in long (or goes there)
}

// get returns the committed position that may hold (gate, id), and whether
// there is one. The caller verifies the row. Safe for concurrent use.
func (x *idIndex) get(gate, id string) (int64, bool) {
	h := x.hash(id)
	x.mu.RLock()
	defer x.mu.RUnlock()
	g := x.gates[gate]
	if g == nil {
		return 0, false
	}
	if len(g.long) > 0 {
		if pos, ok := g.long[id]; ok {
			return pos, true
		}
	}
	pos, ok := g.h[h]
	return pos, ok
}

// lookup is get for the writer, inside its transaction: pending changes
// first. The writer is the only one to change the shared maps, so it reads
// them without the lock.
func (x *idIndex) lookup(gate, id string) (int64, slot, bool) {
	sl := slot{hash: x.hash(id)}
	g := x.gates[gate]
	if len(x.pendLong) > 0 || g != nil && len(g.long) > 0 {
		if p, ok := x.pendLong[longKey{gate, id}]; ok {
			return p.pos, slot{hash: sl.hash, long: true}, !p.del
		}
		if g != nil {
			if pos, ok := g.long[id]; ok {
				return pos, slot{hash: sl.hash, long: true}, true
			}
		}
	}
	p, pend := x.pendH[hashKey{gate, sl.hash}]
	if pend && !p.ifAt {
		return p.pos, sl, !p.del
	}
	if g == nil {
		return 0, sl, false
	}
	pos, ok := g.h[sl.hash]
	if pend && ok && pos == p.pos { // deleted by this transaction
		return 0, sl, false
	}
	return pos, sl, ok
}

// put records, in the transaction, that the id now lives at pos.
func (x *idIndex) put(gate, id string, sl slot, pos int64) {
	if sl.long {
		x.pendLong[longKey{gate, id}] = pending{pos: pos}
		return
	}
	x.pendH[hashKey{gate, sl.hash}] = pending{pos: pos}
}

// remove records, in the transaction, that the row at pos of (gate, id) is
// gone. An entry that names another row (an id that shares the hash) is
// left.
//
// When neither the transaction nor the gate holds a long id and the
// transaction has not touched the hash, the shared map is not read here:
// the deletion is recorded as one of pos only, which commit checks where
// it deletes (one read of the entry instead of two, which at millions of
// sessions are each a cache miss: a purge of 50,000 sessions at 5M).
func (x *idIndex) remove(gate, id string, pos int64) {
	g := x.gates[gate]
	if len(x.pendLong) == 0 && (g == nil || len(g.long) == 0) {
		h := x.hash(id)
		k := hashKey{gate, h}
		if _, pend := x.pendH[k]; !pend {
			if g != nil {
				x.pendH[k] = pending{pos: pos, del: true, ifAt: true}
			}
			return
		}
	}
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

// gateIDs returns the shared index of gate, creating it; the caller holds
// mu (or is loading, before the writer starts).
func (x *idIndex) gate(gate string) *gateIDs {
	g := x.gates[gate]
	if g == nil {
		g = &gateIDs{h: make(map[uint64]int64), long: make(map[string]int64)}
		x.gates[gate] = g
	}
	return g
}

// commit applies the transaction's changes to the shared maps.
func (x *idIndex) commit() {
	if len(x.pendH) == 0 && len(x.pendLong) == 0 {
		return
	}
	x.mu.Lock()
	for k, p := range x.pendH {
		g := x.gate(k.gate)
		if p.ifAt {
			if cur, ok := g.h[k.h]; ok && cur == p.pos {
				delete(g.h, k.h)
			}
		} else if p.del {
			delete(g.h, k.h)
		} else {
			g.h[k.h] = p.pos
		}
	}
	for k, p := range x.pendLong {
		g := x.gate(k.gate)
		if p.del {
			delete(g.long, k.id)
		} else {
			// Kept while the session lives: a copy, not the op's id (a
			// piece of its request, maybe). Rare: a hash collision.
			g.long[strings.Clone(k.id)] = p.pos
		}
	}
	x.mu.Unlock()
	x.rollback()
}

// rollback drops the transaction's changes.
func (x *idIndex) rollback() {
	clear(x.pendH)
	clear(x.pendLong)
}

// size returns the number of sessions indexed.
func (x *idIndex) size() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	n := 0
	for _, g := range x.gates {
		n += len(g.h) + len(g.long)
	}
	return n
}
