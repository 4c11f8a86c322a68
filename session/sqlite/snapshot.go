package sqlite

import (
	"bufio"
	"bytes"
	"context"
	"database/sql/driver"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
)

// The index's snapshot (issue 14). Reading every row at Open costs about a
// microsecond per session in SQLite; a clean Close therefore saves what the
// start-up scan would find (the id index with its hash key, and per gate the
// counts, the largest position and the waiting positions) to path+".idx",
// and the next Open takes it instead of the scan when the database file is
// exactly as that Close left it: the same size and modification time to the
// nanosecond, and no WAL with frames in it. Any write to the database after
// the Close, by anyone, changes the file or leaves a WAL, and the snapshot
// is not used. Open removes the file as it reads it, so a snapshot serves
// one start only, and a crash afterwards leaves none.
//
// What the snapshot says is checked before it is trusted: a checksum over
// the whole file, the counts against the gates' stored counters (a
// mismatch is repaired, as after a scan), and the largest position and the
// set of gates with rows against the table (index seeks). PRAGMA
// quick_check runs at every Open either way.

const (
	snapshotMagic  = "anteroom-idx-1\n"
	snapshotSuffix = ".idx"
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// snapshotStamp is what a snapshot records of the database file it was
// taken beside.
type snapshotStamp struct {
	size, mtime int64
}

func stampOf(path string) (snapshotStamp, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return snapshotStamp{}, err
	}
	return snapshotStamp{size: fi.Size(), mtime: fi.ModTime().UnixNano()}, nil
}

// snapGate is one gate in a snapshot.
type snapGate struct {
	name string
	scan gateScan
	h    map[uint64]int64
	long map[string]int64
}

// snapshotGates reads, on the writer's connection after the writer
// stopped, what a snapshot holds besides the index: every gate's counters
// and waiting positions.
func (s *Store) snapshotGates() ([]snapGate, error) {
	st, err := prepareOn(s.wc.c, `SELECT name, next_position, active, waiting, purged_seen, purged_position FROM gates ORDER BY name`)
	if err != nil {
		return nil, err
	}
	defer st.st.Close()
	rows, err := s.wc.query(st)
	if err != nil {
		return nil, err
	}
	var out []snapGate
	var marks []purgeMark
	var dest [6]driver.Value
	for {
		err := rows.Next(dest[:])
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			rows.Close()
			return nil, err
		}
		out = append(out, snapGate{name: asString(dest[0]), scan: gateScan{maxPos: asInt(dest[1]) - 1, active: asInt(dest[2]), waiting: asInt(dest[3])}})
		marks = append(marks, purgeMark{asInt(dest[4]), asInt(dest[5])})
	}
	if err := rows.Close(); err != nil {
		return nil, err
	}
	for i := range out {
		g := &out[i]
		if g.scan.waitingPos, err = s.waitingPositions(g.name, marks[i], g.scan.waiting); err != nil {
			return nil, err
		}
		if int64(len(g.scan.waitingPos)) != g.scan.waiting {
			return nil, fmt.Errorf("gate %q: %d waiting rows, counter %d", g.name, len(g.scan.waitingPos), g.scan.waiting)
		}
	}
	return out, nil
}

// writeSnapshot saves the index and gates beside the database at path,
// stamped with the file as it is now (after every connection closed).
func writeSnapshot(path string, x *idIndex, gates []snapGate) error {
	stamp, err := stampOf(path)
	if err != nil {
		return err
	}
	if fi, err := os.Stat(path + "-wal"); err == nil && fi.Size() > 0 {
		return fmt.Errorf("the WAL still holds %d bytes", fi.Size())
	}
	file := path + snapshotSuffix
	tmp, err := os.CreateTemp(filepath.Dir(file), filepath.Base(file)+".tmp*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // fails harmlessly after the rename
	if err := tmp.Chmod(fileMode); err != nil {
		tmp.Close()
		return err
	}
	crc := crc32.New(crcTable)
	bw := bufio.NewWriterSize(io.MultiWriter(tmp, crc), 1<<20)
	var b [8]byte
	u64 := func(v uint64) { binary.LittleEndian.PutUint64(b[:], v); bw.Write(b[:]) }
	str := func(s string) { u64(uint64(len(s))); bw.WriteString(s) }
	bw.WriteString(snapshotMagic)
	u64(uint64(stamp.size))
	u64(uint64(stamp.mtime))
	u64(x.key)
	u64(uint64(len(gates)))
	for _, g := range gates {
		ids := x.gates[g.name]
		str(g.name)
		u64(uint64(g.scan.active))
		u64(uint64(g.scan.waiting))
		u64(uint64(g.scan.maxPos))
		var nh, nl int
		if ids != nil {
			nh, nl = len(ids.h), len(ids.long)
		}
		u64(uint64(nh))
		if ids != nil {
			for h, pos := range ids.h {
				u64(h)
				u64(uint64(pos))
			}
		}
		u64(uint64(nl))
		if ids != nil {
			for id, pos := range ids.long {
				str(id)
				u64(uint64(pos))
			}
		}
		u64(uint64(len(g.scan.waitingPos)))
		for _, p := range g.scan.waitingPos {
			u64(uint64(p))
		}
	}
	err = bw.Flush()
	if err == nil {
		binary.LittleEndian.PutUint32(b[:4], crc.Sum32())
		_, err = tmp.Write(b[:4])
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), file)
	}
	return err
}

// takeSnapshot reads and removes the snapshot beside path. It returns nil
// (and why, for the log) when there is none, it is damaged, or the database
// file is not exactly as the snapshot's Close left it.
func takeSnapshot(path string) ([]snapGate, uint64, string) {
	file := path + snapshotSuffix
	data, err := os.ReadFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, 0, "none"
	}
	_ = os.Remove(file) // one start only
	if err != nil {
		return nil, 0, err.Error()
	}
	if len(data) < len(snapshotMagic)+4 || !bytes.HasPrefix(data, []byte(snapshotMagic)) {
		return nil, 0, "not a snapshot"
	}
	body, sum := data[:len(data)-4], binary.LittleEndian.Uint32(data[len(data)-4:])
	if crc32.Checksum(body, crcTable) != sum {
		return nil, 0, "checksum mismatch"
	}
	r := snapReader{b: body[len(snapshotMagic):]}
	want := snapshotStamp{size: int64(r.u64()), mtime: int64(r.u64())}
	key := r.u64()
	got, err := stampOf(path)
	if err != nil {
		return nil, 0, err.Error()
	}
	if got != want {
		return nil, 0, "the database changed since the snapshot"
	}
	if fi, err := os.Stat(path + "-wal"); err == nil && fi.Size() > 0 {
		return nil, 0, "the database has a WAL"
	}
	n := r.u64()
	var gates []snapGate
	for i := uint64(0); i < n && r.err == nil; i++ {
		g := snapGate{name: r.str()}
		g.scan.active, g.scan.waiting, g.scan.maxPos = int64(r.u64()), int64(r.u64()), int64(r.u64())
		nh := r.count(16)
		g.h = make(map[uint64]int64, nh)
		for range nh {
			h := r.u64()
			g.h[h] = int64(r.u64())
		}
		nl := r.count(16)
		g.long = make(map[string]int64, nl)
		for range nl {
			id := r.str()
			g.long[id] = int64(r.u64())
		}
		nw := r.count(8)
		g.scan.waitingPos = make([]int64, nw)
		for j := range g.scan.waitingPos {
			g.scan.waitingPos[j] = int64(r.u64())
		}
		if !sort.SliceIsSorted(g.scan.waitingPos, func(a, b int) bool { return g.scan.waitingPos[a] < g.scan.waitingPos[b] }) ||
			int64(nw) != g.scan.waiting || int64(nh+nl) != g.scan.active+g.scan.waiting {
			return nil, 0, fmt.Sprintf("gate %q does not add up", g.name)
		}
		gates = append(gates, g)
	}
	if r.err != nil || len(r.b) != 0 {
		return nil, 0, "truncated"
	}
	return gates, key, ""
}

type snapReader struct {
	b   []byte
	err error
}

func (r *snapReader) u64() uint64 {
	if len(r.b) < 8 {
		r.err, r.b = io.ErrUnexpectedEOF, nil
		return 0
	}
	v := binary.LittleEndian.Uint64(r.b)
	r.b = r.b[8:]
	return v
}

// count reads a count of items of at least size bytes each, bounded by
// what is left.
func (r *snapReader) count(size int) int {
	n := r.u64()
	if n > uint64(len(r.b)/size) {
		r.err, r.b = io.ErrUnexpectedEOF, nil
		return 0
	}
	return int(n)
}

func (r *snapReader) str() string {
	n := r.u64()
	if n > uint64(len(r.b)) {
		r.err, r.b = io.ErrUnexpectedEOF, nil
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}

// useSnapshot checks the snapshot's gates against the table on c (the set
// of gates with rows, and each one's largest position: index seeks) and,
// when they agree, installs its index in x. It returns the scan the
// snapshot stands for, or nil when it disagrees.
func useSnapshot(c driver.Conn, x *idIndex, gates []snapGate, key uint64) (map[string]*gateScan, error) {
	w := &wconn{c: c}
	var stmts []*stmt
	defer func() {
		for _, s := range stmts {
			s.st.Close()
		}
	}()
	prep := func(q string) (*stmt, error) {
		st, err := prepareOn(c, q)
		if err == nil {
			stmts = append(stmts, st)
		}
		return st, err
	}
	names, err := prep(sqlScanGates)
	if err != nil {
		return nil, err
	}
	maxPos, err := prep(`SELECT max(position) FROM sessions WHERE gate = ?`)
	if err != nil {
		return nil, err
	}
	withRows := map[string]bool{}
	rows, err := w.query(names)
	if err != nil {
		return nil, err
	}
	var dest [1]driver.Value
	for {
		err := rows.Next(dest[:])
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			rows.Close()
			return nil, err
		}
		withRows[asString(dest[0])] = true
	}
	if err := rows.Close(); err != nil {
		return nil, err
	}
	out := make(map[string]*gateScan, len(gates))
	for i := range gates {
		g := &gates[i]
		if g.scan.active+g.scan.waiting == 0 {
			if withRows[g.name] {
				return nil, nil
			}
			continue
		}
		if !withRows[g.name] {
			return nil, nil
		}
		delete(withRows, g.name)
		if _, err := w.queryRow(maxPos, dest[:], g.name); err != nil {
			return nil, err
		}
		if asInt(dest[0]) != g.scan.maxPos {
			// next_position - 1 is recorded: the largest position may be
			// below it (the last joiner left), never above.
			if asInt(dest[0]) > g.scan.maxPos {
				return nil, nil
			}
			g.scan.maxPos = asInt(dest[0])
		}
		out[g.name] = &g.scan
	}
	if len(withRows) > 0 {
		return nil, nil // a gate with rows the snapshot does not know
	}
	x.key = key
	for i := range gates {
		g := &gates[i]
		ids := x.gate(g.name)
		ids.h, ids.long = g.h, g.long
	}
	return out, nil
}

// prepareOn prepares q on the driver connection c, outside the writer's
// set of statements (the caller closes it).
func prepareOn(c driver.Conn, q string) (*stmt, error) {
	pc, ok := c.(driver.ConnPrepareContext)
	if !ok {
		return nil, errors.New("driver connection cannot prepare with a context")
	}
	st, err := pc.PrepareContext(context.Background(), q)
	if err != nil {
		return nil, fmt.Errorf("prepare %q: %w", q, err)
	}
	s := &stmt{st: st}
	s.ex, _ = st.(driver.StmtExecContext)
	if s.q, ok = st.(driver.StmtQueryContext); !ok {
		st.Close()
		return nil, errors.New("driver statement cannot query with a context")
	}
	return s, nil
}
