package sqlite

import (
	"database/sql/driver"

	"github.com/anteroomhq/anteroom/session"
)

// The gate's pacing (session.Pace) is saved in its row with the counters
// (migrations/0007), whenever they are: every admission changes a counter,
// and a refill alone needs no write (it is a function of the time).

// paceOf reads a gate row's pace_tokens and pace_at (0: a full bucket).
func paceOf(tokens, at driver.Value) session.Pace {
	var p session.Pace
	switch v := tokens.(type) {
	case float64:
		p.Tokens = v
	case int64:
		p.Tokens = float64(v)
	}
	if n := asInt(at); n != 0 {
		p.At = fromNanos(n)
	}
	return p
}

// paceRow is what paceOf reads back.
func paceRow(p session.Pace) (tokens float64, at int64) {
	if p.At.IsZero() {
		return p.Tokens, 0
	}
	return p.Tokens, p.At.UnixNano()
}
