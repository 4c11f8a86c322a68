package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/anteroomhq/anteroom/session"
)

// Runtime settings follow the gate's commits. SaveGateSettings runs through
// the writer as a commit of the gate: it writes (or deletes) the settings
// row under the gate's row lock, takes the gate's next seq, and puts the new
// settings in the outbox row (payload "g") and a marker in the notification
// ("<seq> <gate> s"). Every instance applies it in seq order with the
// gate's other commits, so two operators changing a gate on two instances
// end with the same settings everywhere: the last committed. A settings row
// that was inserted (a gate added at runtime, or the first change of a gate
// of the config file) makes every instance resync the gate from the tables
// instead, so that an instance that does not have the gate gets its whole
// state with it. A gate an instance does not follow yet is adopted
// (adoptGate) when a notification with the marker names it, at every
// resync after a lost connection (resyncAll reads every settings row), and
// by the poll when the notification was lost (poll.go). A resync reads the
// settings with the rest of the gate, so a change missed while not
// listening is applied with it. A change (or a removal) of a gate followed
// whose notification was lost is a commit of the gate like any other: the
// poll sees its seq behind and catches it up from the outbox.

// noteSettings marks the notification of a commit that changed settings.
const noteSettings = "s"

// errBadSettings wraps the error of a settings row that does not decode or
// validate.
var errBadSettings = errors.New("settings do not decode")

// FollowsSettings marks the Store as a session.SettingsFollower: it reports
// every change of runtime settings, its own included, to the commit
// listener.
func (s *Store) FollowsSettings() {}

var _ session.SettingsFollower = (*Store)(nil)

// settingsChange is what an opSettings did to its gate.
type settingsChange struct {
	cfg   *session.GateConfig // nil: forgotten
	added bool                // the row was inserted, not updated
}

// wireSettings is the settings part of an outbox row.
type wireSettings struct {
	// Config is the gate's settings after the commit, absent when forgotten.
	Config *storedSettings `json:"c,omitempty"`
	// Added: the row was inserted; receivers resync the gate.
	Added bool `json:"a,omitempty"`
}

// applySettings writes the settings row of opSettings in the batch's
// transaction.
func (s *Store) applySettings(ctx context.Context, b *batch, o *op) error {
	g := b.gates[o.cfg.Name]
	ch := &settingsChange{cfg: o.settings}
	if o.settings == nil {
		if _, err := b.tx.Exec(ctx, sqlForgetSettings, g.name); err != nil {
			return fmt.Errorf("forget settings: %w", err)
		}
	} else {
		raw, err := encodeSettings(*o.settings)
		if err != nil {
			return fmt.Errorf("encode settings: %w", err)
		}
		if err := b.tx.QueryRow(ctx, sqlSaveSettings, g.name, raw).Scan(&ch.added); err != nil {
			return fmt.Errorf("save settings: %w", err)
		}
	}
	if g.settings != nil && g.settings.added {
		ch.added = true // inserted by an earlier op of the batch
	}
	g.settings = ch
	// The later ops of the batch decide with them (and the gate's events,
	// read at its lock, over them); none when they were forgotten or an
	// event does not decode: the ops keep their own configuration.
	g.held = o.settings
	if g.damagedEvents {
		g.held = nil
	}
	g.report = true
	return nil
}

// finishSettings puts the gate's settings change in the outbox row p and
// the local commit c; when the row was inserted, c carries the gate's whole
// state (Resync) instead of its events, for a Waitlist that does not have
// the gate yet. The batch's rows are flushed.
func (s *Store) finishSettings(ctx context.Context, b *batch, g *gateTx, st session.GateState, c *session.Commit, p *payload) error {
	ch := g.settings
	p.Settings = &wireSettings{Added: ch.added}
	if c.Settings == nil {
		c.Settings = map[string]*session.GateConfig{}
	}
	c.Settings[g.name] = nil
	if ch.cfg != nil {
		ws := toStored(*ch.cfg)
		p.Settings.Config = &ws
		cfg := *ch.cfg
		c.Settings[g.name] = &cfg
	}
	if !ch.added {
		return nil
	}
	rows, err := b.tx.Query(ctx, sqlActive, g.name)
	if err != nil {
		return fmt.Errorf("read active sessions: %w", err)
	}
	active, err := scanSessions(rows, nil)
	if err != nil {
		return fmt.Errorf("read active sessions: %w", err)
	}
	waiting, err := waitingPositions(ctx, b.tx, g.name, st.Waiting)
	if err != nil {
		return err
	}
	if c.Resync == nil {
		c.Resync = map[string]session.GateSnapshot{}
	}
	c.Resync[g.name] = session.GateSnapshot{State: st, Active: active, Waiting: waiting, Settings: c.Settings[g.name]}
	// The snapshot holds what the events did.
	evs := make([]session.Event, 0, len(c.Events))
	for _, ev := range c.Events {
		if ev.Session.Gate != g.name {
			evs = append(evs, ev)
		}
	}
	c.Events = evs
	return nil
}

// settingsMap is the Commit.Settings of an outbox row of gate, nil when the
// row changed no settings (or holds settings that do not validate, which
// are logged).
func (s *Store) settingsMap(gate string, w *wireSettings) map[string]*session.GateConfig {
	if w == nil {
		return nil
	}
	if w.Config == nil {
		return map[string]*session.GateConfig{gate: nil}
	}
	cfg, err := w.Config.config(gate)
	if err != nil {
		s.log.Error("anteroom: unreadable settings in the outbox; ignored", "gate", gate, "err", err)
		return nil
	}
	return map[string]*session.GateConfig{gate: &cfg}
}

// readSettings reads gate's runtime settings, nil when it has none.
func readSettings(ctx context.Context, q pgx.Tx, gate string) (*session.GateConfig, error) {
	var raw []byte
	err := q.QueryRow(ctx, sqlGateSettings, gate).Scan(&raw)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read settings: %w", err)
	}
	cfg, err := decodeSettings(gate, raw)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errBadSettings, err)
	}
	return &cfg, nil
}

// adoptGates adopts every gate with runtime settings that this instance
// does not follow yet: added by another instance while this one was not
// listening. A gate whose settings do not decode is logged and left alone
// (the poll tries it again when its seq moves). deliverMu is held. Errors:
// the reads'.
func (s *Store) adoptGates(ctx context.Context, q querier) error {
	rows, err := q.Query(ctx, `SELECT gate FROM anteroom_gate_settings ORDER BY gate`)
	if err != nil {
		return err
	}
	var names []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			rows.Close()
			return err
		}
		names = append(names, n)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, n := range names {
		if _, known := s.applied[n]; known || !session.ValidGateName(n) {
			continue
		}
		if err := s.adoptGate(ctx, q, n); errors.Is(err, errBadSettings) {
			s.log.Error("anteroom: a gate added at runtime has settings that do not decode; not followed", "gate", n, "err", err)
		} else if err != nil {
			return err
		}
	}
	return nil
}

// adoptGate starts following gate, which this instance does not follow
// yet, when it has runtime settings (a gate added at runtime elsewhere):
// its whole state, read in one snapshot, goes to the listener as a Resync
// with its settings. A gate without settings (removed meanwhile, or of
// another instance's config file) is left alone. deliverMu is held.
// Errors: the snapshot's, wrapping errBadSettings when the settings do not
// decode or validate; the gate stays unfollowed and the Store's readiness
// unchanged.
//
// Nothing is adopted before the Store's first Load was delivered: Load
// reads every gate with settings, and its snapshot is what the listener
// (a Waitlist being created) starts from; a gate adopted before it would
// be followed from an older seq, and the commits between applied on top of
// that snapshot a second time.
func (s *Store) adoptGate(ctx context.Context, q querier, gate string) error {
	if !s.loadedOnce.Load() {
		return nil
	}
	snap, seq, err := readSnapshot(ctx, q, gate)
	if err != nil {
		return err
	}
	if snap.Settings == nil {
		return nil
	}
	if s.applySnapshot(gate, snap, seq, false) {
		s.log.Info("anteroom: following a gate added at runtime", "gate", gate, "seq", seq)
	}
	return nil
}
