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
	sqlSaveSettings   = `INSERT INTO anteroom_gate_settings (gate, settings) VALUES ($1, $2) ON CONFLICT (gate) DO UPDATE SET settings = EXCLUDED.settings`
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
}

// SaveGateSettings persists settings as gate's runtime settings, which Load
// returns (GateSnapshot.Settings) from then on, on every instance and after
// restarts; with settings nil it forgets them. Instances already running
// take them at their next start (see the README).
//
// Errors: session.ErrInvalidArgument for a malformed gate name or settings
// that do not validate or name another gate; session.ErrUnavailable when
// the store is closed or the database cannot be reached.
func (s *Store) SaveGateSettings(ctx context.Context, gate string, settings *session.GateConfig) error {
	if !session.ValidGateName(gate) {
		return session.Errorf(session.CodeInvalidArgument, "postgres: save settings: gate name %q", gate)
	}
	if s.closed.Load() {
		return session.ErrUnavailable
	}
	if settings == nil {
		if _, err := s.pool.Exec(ctx, sqlForgetSettings, gate); err != nil {
			return storageErr("save settings", err)
		}
		return nil
	}
	if settings.Name != gate {
		return session.Errorf(session.CodeInvalidArgument, "postgres: save settings: settings of gate %q given for gate %q", settings.Name, gate)
	}
	if err := settings.Validate(); err != nil {
		return err
	}
	b, err := json.Marshal(storedSettings{
		ActiveLimit:         settings.ActiveLimit,
		ActiveTimeout:       int64(settings.ActiveTimeout),
		WaitingTimeout:      int64(settings.WaitingTimeout),
		ClaimTimeout:        int64(settings.ClaimTimeout),
		ReleaseOnDisconnect: int64(settings.ReleaseOnDisconnect),
		Mode:                settings.Mode,
		NewUsersPerMinute:   settings.NewUsersPerMinute,
	})
	if err != nil {
		return session.Errorf(session.CodeInternal, "postgres: save settings: encode: %w", err)
	}
	if _, err := s.pool.Exec(ctx, sqlSaveSettings, gate, b); err != nil {
		return storageErr("save settings", err)
	}
	return nil
}

// allSettings reads every gate's persisted settings.
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
		var st storedSettings
		if err := json.Unmarshal(raw, &st); err != nil {
			return nil, session.Errorf(session.CodeInternal, "postgres: settings of gate %q: %w", gate, err)
		}
		c := session.GateConfig{
			Name:                gate,
			ActiveLimit:         st.ActiveLimit,
			ActiveTimeout:       time.Duration(st.ActiveTimeout),
			WaitingTimeout:      time.Duration(st.WaitingTimeout),
			ClaimTimeout:        time.Duration(st.ClaimTimeout),
			ReleaseOnDisconnect: time.Duration(st.ReleaseOnDisconnect),
			Mode:                st.Mode,
			NewUsersPerMinute:   st.NewUsersPerMinute,
		}
		if err := c.Validate(); err != nil {
			return nil, fmt.Errorf("postgres: settings of gate %q: %w", gate, err)
		}
		out[gate] = c
	}
	if err := rows.Err(); err != nil {
		return nil, storageErr("read settings", err)
	}
	return out, nil
}
