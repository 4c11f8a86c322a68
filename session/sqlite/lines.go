package sqlite

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/anteroomhq/anteroom/session"
)

// A started launch's drawn line (session.ScheduledEvent.Positions: every
// entrant's position in arrival order, a million for a large launch) is
// kept in a meta row of its own, keyed linesPrefix+gate+"/"+id, beside the
// event's JSON: the writer decides with a gate's events at every cache
// miss and never needs the line, which in the JSON took 0.15 s to decode
// at a million entrants. Only Load and Events read it. An event written
// before, with its line in its JSON, still reads as it is.
//
// The row's value: a format byte (1), the count as a uvarint, then the
// first position and each one's step from the one before, as uvarints
// (the positions ascend: every step is at least 1). A million positions in
// a row take about 2 MB instead of 8.
const linesPrefix = "gate_event_lines/"

const lineFormat = 1

func lineKey(gate, id string) string { return linesPrefix + gate + "/" + id }

func lineRange(gate string) (lo, hi string) {
	return linesPrefix + gate + "/", linesPrefix + gate + "0"
}

// encodeLine returns the row value of positions, which ascend.
func encodeLine(positions []int64) []byte {
	b := make([]byte, 0, 1+binary.MaxVarintLen64+2*len(positions))
	b = append(b, lineFormat)
	b = binary.AppendUvarint(b, uint64(len(positions)))
	prev := int64(0)
	for _, p := range positions {
		b = binary.AppendUvarint(b, uint64(p-prev))
		prev = p
	}
	return b
}

var errLine = errors.New("drawn line does not decode")

// decodeLine reads back what encodeLine wrote. Errors wrap errLine: a
// value that is not exactly such a row (another format, a count the bytes
// cannot hold, a step of 0, a position past int64, bytes left over).
func decodeLine(b []byte) ([]int64, error) {
	var out []int64
	err := scanLine(b, func(n uint64) { out = make([]int64, 0, n) }, func(p int64) { out = append(out, p) })
	return out, err
}

// checkLine is decodeLine's check alone: it keeps no position.
func checkLine(b []byte) error { return scanLine(b, func(uint64) {}, func(int64) {}) }

// scanLine reads a line's value, giving its count to start and each
// position to each; errors as decodeLine's.
func scanLine(b []byte, start func(n uint64), each func(p int64)) error {
	if len(b) == 0 || b[0] != lineFormat {
		return fmt.Errorf("%w: format", errLine)
	}
	b = b[1:]
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)-k) { // each position takes a byte at least
		return fmt.Errorf("%w: count", errLine)
	}
	b = b[k:]
	start(n)
	var prev uint64
	for i := uint64(0); i < n; i++ {
		d, k := binary.Uvarint(b)
		if k <= 0 || (i > 0 && d == 0) || d > math.MaxInt64-prev {
			return fmt.Errorf("%w: position %d", errLine, i)
		}
		b = b[k:]
		prev += d
		each(int64(prev))
	}
	if len(b) != 0 {
		return fmt.Errorf("%w: %d bytes past its end", errLine, len(b))
	}
	return nil
}

// eventRow is how an event is kept: its JSON without the line, and the
// line's row value, nil when it has none. A started event has one, empty
// for a launch with nobody in its pre-queue (a row left by a build that
// deleted only events' rows must not be taken for its line).
func eventRow(ev session.ScheduledEvent) (js, line []byte, err error) {
	if ev.Positions != nil {
		line = encodeLine(ev.Positions)
	}
	ev.Positions = nil
	js, err = session.EncodeStoredEvent(ev)
	return js, line, err
}

// withLines gives each started event of evs without positions in its JSON
// its line, read with get (the line's row value, or found false: an event
// started before its line had a row, with nobody in its pre-queue); with
// keep false it only checks them (the writer's decisions need none). An
// event whose line does not decode goes to onDamaged and is left out, by
// every reader alike. Errors: get's.
func withLines(evs []session.ScheduledEvent, get func(key string) (value []byte, found bool, err error), onDamaged func(id string, err error), keep bool) ([]session.ScheduledEvent, error) {
	out := evs[:0]
	for _, ev := range evs {
		if ev.Phase == session.EventStarted && ev.Positions == nil {
			v, found, err := get(lineKey(ev.Gate, ev.ID))
			if err != nil {
				return nil, err
			}
			if found && keep {
				ev.Positions, err = decodeLine(v)
			} else if found {
				err = checkLine(v)
			}
			if err != nil {
				onDamaged(ev.ID, session.Errorf(session.CodeInternal, "event %q of gate %q: %w", ev.ID, ev.Gate, err))
				continue
			}
		}
		out = append(out, ev)
	}
	return out, nil
}
