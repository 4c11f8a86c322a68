package sqlite

import (
	"context"
	"fmt"
	"time"

	"github.com/anteroomhq/anteroom/session"
)

// The statements of a gate's removal (rare: not kept prepared). The events
// are the meta rows in eventRange, their drawn lines those in lineRange;
// the settings row is settingsPrefix+gate.
const (
	sqlDeleteGateEvents = `DELETE FROM meta WHERE key >= ? AND key < ?`
	sqlDeleteGateCodes  = `DELETE FROM priority_codes WHERE gate = ?`
)

var _ session.GateRemover = (*Store)(nil)

// RemoveGate deletes gate cfg.Name's runtime settings, scheduled events and
// priority codes in one writer transaction, when session.CheckRemoveGate
// allows it with the gate's counters and events as stored. Sessions stay.
//
// Errors: a session.CodeGateInUse or session.CodePrequeueOpen error
// (nothing deleted); session.ErrInvalidArgument for a malformed gate name;
// session.ErrUnavailable after Close; the context's error when it is done
// before the removal ran; a session.CodeInternal error on storage failure.
func (s *Store) RemoveGate(ctx context.Context, cfg session.GateConfig, now time.Time) error {
	gate := cfg.Name
	return s.gateOp(ctx, gate, func(_ *batch, e *gateEntry) error { // settings, events, codes: beside a pending promotion
		evs, err := s.readEvents(gate, func(damage error, _ string, _ []byte) { s.logDamagedEvent(gate, damage) }) // no lines: the check needs none
		if err != nil {
			return err
		}
		if err := session.CheckRemoveGate(cfg, e.c, evs, now); err != nil {
			return err
		}
		lo, hi := eventRange(gate)
		llo, lhi := lineRange(gate)
		for _, r := range [][2]string{{lo, hi}, {llo, lhi}} {
			if _, err := s.wc.adhocExec(sqlDeleteGateEvents, r[0], r[1]); err != nil {
				return fmt.Errorf("delete events of gate %q: %w", gate, err)
			}
		}
		if _, err := s.wc.adhocExec(sqlDeleteGateCodes, gate); err != nil {
			return fmt.Errorf("delete codes of gate %q: %w", gate, err)
		}
		if _, err := s.wc.exec(s.wc.deleteMeta, settingsPrefix+gate); err != nil {
			return fmt.Errorf("delete settings of gate %q: %w", gate, err)
		}
		e.held, e.events, e.damagedEvents, e.damagedHold = nil, nil, false, false
		return nil
	})
}
