package sqlite

import (
	"context"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/anteroomhq/anteroom/session"
)

// Runtime gate settings live in the meta table (migrations/0001), one row
// per gate keyed settingsPrefix+name, its value the JSON of storedSettings:
// no schema change, and nothing written until an operator changes a gate.
// A row is deleted when the settings are reset or the gate removed.
const settingsPrefix = "gate_settings/"

// The SQL of runtime gate settings. '/' + 1 is '0': the range holds exactly
// the keys that start with settingsPrefix.
const (
	sqlAllSettings = `SELECT substr(key, 15), value FROM meta WHERE key >= 'gate_settings/' AND key < 'gate_settings0'`
)

// storedSettings is the JSON of one gate_settings row. Durations are in
// nanoseconds; fields added later default to their zero value.
type storedSettings struct {
	ActiveLimit         int64        `json:"activeLimit"`
	ActiveTimeout       int64        `json:"activeTimeoutNs"`
	WaitingTimeout      int64        `json:"waitingTimeoutNs"`
	ClaimTimeout        int64        `json:"claimTimeoutNs"`
	ReleaseOnDisconnect int64        `json:"releaseOnDisconnectNs"`
	Mode                session.Mode `json:"mode"`
	NewUsersPerMinute   int64        `json:"newUsersPerMinute"`
	NotifyClaimTimeout  int64        `json:"notifyClaimTimeoutNs,omitempty"`
	AdmissionTTL        int64        `json:"admissionTtlNs,omitempty"`
}

func encodeSettings(c session.GateConfig) ([]byte, error) {
	return json.Marshal(storedSettings{
		ActiveLimit:         c.ActiveLimit,
		ActiveTimeout:       int64(c.ActiveTimeout),
		WaitingTimeout:      int64(c.WaitingTimeout),
		ClaimTimeout:        int64(c.ClaimTimeout),
		ReleaseOnDisconnect: int64(c.ReleaseOnDisconnect),
		Mode:                c.Mode,
		NewUsersPerMinute:   c.NewUsersPerMinute,
		NotifyClaimTimeout:  int64(c.NotifyClaimTimeout),
		AdmissionTTL:        int64(c.AdmissionTTL),
	})
}

// decodeSettings reads a row back; a row that does not decode or validate
// is an error (the Waitlist would otherwise run a gate on garbage).
func decodeSettings(gate string, b []byte) (session.GateConfig, error) {
	var s storedSettings
	if err := json.Unmarshal(b, &s); err != nil {
		return session.GateConfig{}, fmt.Errorf("settings of gate %q: %w", gate, err)
	}
	c := session.GateConfig{
		Name:                gate,
		ActiveLimit:         s.ActiveLimit,
		ActiveTimeout:       time.Duration(s.ActiveTimeout),
		WaitingTimeout:      time.Duration(s.WaitingTimeout),
		ClaimTimeout:        time.Duration(s.ClaimTimeout),
		ReleaseOnDisconnect: time.Duration(s.ReleaseOnDisconnect),
		Mode:                s.Mode,
		NewUsersPerMinute:   s.NewUsersPerMinute,
		NotifyClaimTimeout:  time.Duration(s.NotifyClaimTimeout),
		AdmissionTTL:        time.Duration(s.AdmissionTTL),
	}
	if err := c.Validate(); err != nil {
		return session.GateConfig{}, fmt.Errorf("settings of gate %q: %w", gate, err)
	}
	return c, nil
}

// SaveGateSettings persists settings as gate's runtime settings, which
// Load returns (GateSnapshot.Settings) from then on, also after a restart;
// with settings nil it forgets them (a reset, or a gate removed). It runs
// through the writer, in a transaction of its own batch.
//
// Errors: session.ErrInvalidArgument for a malformed gate name, settings
// that do not validate or name another gate; session.ErrUnavailable after
// Close; the context's error when it is done before the save ran; a
// session.CodeInternal error on storage failure.
func (s *Store) SaveGateSettings(ctx context.Context, gate string, settings *session.GateConfig) error {
	if !session.ValidGateName(gate) {
		return session.Errorf(session.CodeInvalidArgument, "sqlite: save settings: gate name %q", gate)
	}
	o := newOp(ctx, opSettings)
	o.cfg.Name = gate
	if settings != nil {
		if settings.Name != gate {
			putOp(o)
			return session.Errorf(session.CodeInvalidArgument, "sqlite: save settings: settings of gate %q given for gate %q", settings.Name, gate)
		}
		if err := settings.Validate(); err != nil {
			putOp(o)
			return err
		}
		o.setting = settings
	}
	err := s.do(o)
	putOp(o)
	return err
}

// applySettings writes (or deletes) the gate's settings row, and keeps the
// writer's entry of the gate, when it has one, holding them: the batch's
// later ops decide with them (decidedWith).
func (s *Store) applySettings(b *batch, o *op) error {
	if o.setting == nil {
		if _, err := s.wc.exec(s.wc.deleteMeta, settingsPrefix+o.cfg.Name); err != nil {
			return fmt.Errorf("delete settings of gate %q: %w", o.cfg.Name, err)
		}
	} else {
		raw, err := encodeSettings(*o.setting)
		if err != nil {
			return session.Errorf(session.CodeInternal, "sqlite: settings: encode: %w", err)
		}
		if _, err := s.wc.exec(s.wc.insertMeta, settingsPrefix+o.cfg.Name, raw); err != nil {
			return fmt.Errorf("save settings of gate %q: %w", o.cfg.Name, err)
		}
	}
	if s.cache[o.cfg.Name] == nil {
		return nil // read with the entry, when an op needs it
	}
	e, err := s.gate(b, o.cfg.Name) // cached: registers the undo, creates nothing
	if err != nil {
		return err
	}
	e.held = nil
	if o.setting != nil {
		cfg := *o.setting
		e.held = &cfg
	}
	return nil
}

func asBytes(v driver.Value) []byte {
	switch v := v.(type) {
	case []byte:
		return v
	case string:
		return []byte(v)
	}
	return nil
}

// allSettings reads every gate's persisted settings inside the
// transaction; a row that does not decode is logged and left out.
func (s *Store) allSettings() (map[string]session.GateConfig, error) {
	rows, err := s.wc.query(s.wc.allSettings)
	if err != nil {
		return nil, fmt.Errorf("read gate settings: %w", err)
	}
	defer rows.Close()
	out := make(map[string]session.GateConfig)
	var dest [2]driver.Value
	for {
		err := rows.Next(dest[:])
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read gate settings: %w", err)
		}
		gate := asString(dest[0])
		c, err := decodeSettings(gate, asBytes(dest[1]))
		if err != nil {
			// As the writer's decisions do (readStored): the gate runs on
			// the instance's own settings until they are saved or reset.
			s.log.Warn("anteroom: a gate's stored runtime settings are damaged and left out; save or reset them", "gate", gate, "err", err)
			continue
		}
		out[gate] = c
	}
}
