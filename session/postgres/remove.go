package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/anteroomhq/anteroom/session"
)

// The statements of a gate's removal.
const (
	sqlDeleteGateEvents = `DELETE FROM anteroom_events WHERE gate = $1`
	sqlDeleteGateCodes  = `DELETE FROM anteroom_priority_codes WHERE gate = $1`
)

var _ session.GateRemover = (*Store)(nil)

// RemoveGate deletes gate cfg.Name's runtime settings, scheduled events and
// priority codes in one writer transaction under the gate's row lock, when
// session.CheckRemoveGate allows it with the gate's counters and events as
// stored. Forgetting the settings is a commit like SaveGateSettings with
// nil: every instance's commit listener hears of it. Sessions stay.
//
// Errors: a session.CodeGateInUse or session.CodePrequeueOpen error
// (nothing deleted); session.ErrInvalidArgument for a malformed gate name;
// session.ErrUnavailable when the store is closed or the database cannot be
// reached; the context's error; a session.CodeInternal error on storage
// failure.
func (s *Store) RemoveGate(ctx context.Context, cfg session.GateConfig, now time.Time) error {
	gate := cfg.Name
	return s.eventOp(ctx, gate, func(ctx context.Context, b *batch, g *gateTx) error {
		rows, err := b.tx.Query(ctx, sqlGateEventsNoLine, gate)
		if err != nil {
			return fmt.Errorf("read events of gate %q: %w", gate, err)
		}
		var evs []session.ScheduledEvent
		for rows.Next() {
			var id string
			var raw []byte
			if err := rows.Scan(&id, &raw); err != nil {
				rows.Close()
				return fmt.Errorf("read events of gate %q: %w", gate, err)
			}
			ev, damage := session.DecodeStoredEvent(gate, id, raw)
			if damage != nil {
				// Left out, as every decision leaves it out; deleted with
				// the rest.
				s.log.Warn("anteroom: a gate's stored event is damaged and left out", "gate", gate, "event", id, "err", damage)
				continue
			}
			evs = append(evs, ev)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("read events of gate %q: %w", gate, err)
		}
		if err := session.CheckRemoveGate(cfg, g.c, evs, now); err != nil {
			return err
		}
		if _, err := b.tx.Exec(ctx, sqlDeleteGateEvents, gate); err != nil {
			return fmt.Errorf("delete events of gate %q: %w", gate, err)
		}
		if _, err := b.tx.Exec(ctx, sqlDeleteGateCodes, gate); err != nil {
			return fmt.Errorf("delete codes of gate %q: %w", gate, err)
		}
		// The writer's decodings of what is deleted (a gate that is not
		// locked again would keep them; were the batch undone, they are
		// read again at the next lock).
		delete(s.held, gate)
		delete(s.heldEvents, gate)
		s.readCache.set(gate, nil, time.Now()) // and Events' decodings

		g.scheduled, g.damagedEvents, g.damagedHold = nil, false, false // for the batch's later ops
		return s.applySettings(ctx, b, &op{kind: opSettings, ctx: ctx, cfg: session.GateConfig{Name: gate}})
	})
}
