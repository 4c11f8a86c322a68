package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/anteroomhq/anteroom/session"
)

// The SQL of runtime gate settings (migrations/0003).
const (
	// sqlSaveSettings answers whether it inserted the row (xmax = 0) rather
	// than updated it.
	sqlSaveSettings   = `INSERT INTO anteroom_gate_settings (gate, settings) VALUES ($1, $2) ON CONFLICT (gate) DO UPDATE SET settings = EXCLUDED.settings RETURNING (xmax = 0)`
	sqlGateSettings   = `SELECT settings FROM anteroom_gate_settings WHERE gate = $1`
	sqlForgetSettings = `DELETE FROM anteroom_gate_settings WHERE gate = $1`
	sqlAllSettings    = `SELECT gate, settings FROM anteroom_gate_settings`
)

// storedSettings is the JSON of one anteroom_gate_settings row, the same
// shape as the SQLite store's. Durations are in nanoseconds; fields added
// later default to their zero value.
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

// SaveGateSettings persists settings as gate's runtime settings, which Load
// returns (GateSnapshot.Settings) from then on, on every instance and after
// restarts; with settings nil it forgets them. The change is a commit of the
// gate like any other (through the writer, under the gate's row lock, with
// an outbox row and a notification): every instance's commit listener gets
// it (session.Commit.Settings) in the gate's commit order, this one's before
// SaveGateSettings returns, the others' within the notification's round
// trip. See settings_follow.go.
//
// Errors: session.ErrInvalidArgument for a malformed gate name or settings
// that do not validate or name another gate; session.ErrUnavailable when
// the store is closed or the database cannot be reached; the context's
// error when it is done before the change ran; a session.CodeInternal
// error on storage failure.
func (s *Store) SaveGateSettings(ctx context.Context, gate string, settings *session.GateConfig) error {
	if !session.ValidGateName(gate) {
		return session.Errorf(session.CodeInvalidArgument, "postgres: save settings: gate name %q", gate)
	}
	if s.closed.Load() {
		return session.ErrUnavailable
	}
	if settings != nil {
		if settings.Name != gate {
			return session.Errorf(session.CodeInvalidArgument, "postgres: save settings: settings of gate %q given for gate %q", settings.Name, gate)
		}
		if err := settings.Validate(); err != nil {
			return err
		}
		c := *settings
		settings = &c
	}
	return s.do(&op{kind: opSettings, ctx: ctx, cfg: session.GateConfig{Name: gate}, settings: settings})
}

// encodeSettings is the JSON of a settings row.
func encodeSettings(c session.GateConfig) ([]byte, error) {
	return json.Marshal(toStored(c))
}

func toStored(c session.GateConfig) storedSettings {
	return storedSettings{
		ActiveLimit:         c.ActiveLimit,
		ActiveTimeout:       int64(c.ActiveTimeout),
		WaitingTimeout:      int64(c.WaitingTimeout),
		ClaimTimeout:        int64(c.ClaimTimeout),
		ReleaseOnDisconnect: int64(c.ReleaseOnDisconnect),
		Mode:                c.Mode,
		NewUsersPerMinute:   c.NewUsersPerMinute,
		NotifyClaimTimeout:  int64(c.NotifyClaimTimeout),
		AdmissionTTL:        int64(c.AdmissionTTL),
	}
}

// decodeSettings is the gate's configuration a settings row's JSON holds.
// Errors: the JSON's, or the configuration's when it does not validate.
func decodeSettings(gate string, raw []byte) (session.GateConfig, error) {
	var st storedSettings
	if err := json.Unmarshal(raw, &st); err != nil {
		return session.GateConfig{}, fmt.Errorf("postgres: settings of gate %q: %w", gate, err)
	}
	return st.config(gate)
}

// config is the gate's configuration a row holds, or an error when it does
// not validate.
func (st storedSettings) config(gate string) (session.GateConfig, error) {
	c := session.GateConfig{
		Name:                gate,
		ActiveLimit:         st.ActiveLimit,
		ActiveTimeout:       time.Duration(st.ActiveTimeout),
		WaitingTimeout:      time.Duration(st.WaitingTimeout),
		ClaimTimeout:        time.Duration(st.ClaimTimeout),
		ReleaseOnDisconnect: time.Duration(st.ReleaseOnDisconnect),
		Mode:                st.Mode,
		NewUsersPerMinute:   st.NewUsersPerMinute,
		NotifyClaimTimeout:  time.Duration(st.NotifyClaimTimeout),
		AdmissionTTL:        time.Duration(st.AdmissionTTL),
	}
	if err := c.Validate(); err != nil {
		return c, fmt.Errorf("postgres: settings of gate %q: %w", gate, err)
	}
	return c, nil
}

// allSettings reads every gate's persisted settings; a row that does not
// decode is logged and left out.
func (s *Store) allSettings(ctx context.Context) (map[string]session.GateConfig, error) {
	rows, err := s.pool.Query(ctx, sqlAllSettings)
	if err != nil {
		return nil, storageErr("read settings", err)
	}
	defer rows.Close()
	out := map[string]session.GateConfig{}
	for rows.Next() {
		var gate string
		var raw []byte
		if err := rows.Scan(&gate, &raw); err != nil {
			return nil, storageErr("read settings", err)
		}
		c, err := decodeSettings(gate, raw)
		if err != nil {
			// As the writer's decisions do (heldConfig): the gate runs on
			// the instance's own settings until they are saved or reset.
			s.log.Warn("anteroom: a gate's stored runtime settings are damaged and left out; save or reset them", "gate", gate, "err", err)
			continue
		}
		out[gate] = c
	}
	if err := rows.Err(); err != nil {
		return nil, storageErr("read settings", err)
	}
	return out, nil
}
