package sqlite

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
	"github.com/anteroomhq/anteroom/session/sessiontest"
)

// Settings or event rows damaged by hand: the gate keeps working, deciding
// with the ops' own configuration, and the writer warns.
func TestDamagedStoredRowsKeepTheGateWorking(t *testing.T) {
	good := `{"activeLimit":1,"activeTimeoutNs":60000000000,"waitingTimeoutNs":120000000000,"mode":"open"}`
	for _, tc := range []struct {
		name string
		rows []string // meta (key, value) pairs, as SQL values
		warn string
	}{
		{"settings do not validate", []string{`'gate_settings/default', '{"activeLimit": -4}'`}, "stored runtime settings are damaged"},
		{"settings not an object", []string{`'gate_settings/default', '[1, 2]'`}, "stored runtime settings are damaged"},
		{"event not JSON", []string{`'gate_settings/default', '` + good + `'`, `'gate_events/default/e', 'garbage'`}, "stored event is damaged"},
		{"event of a bad phase", []string{`'gate_settings/default', '` + good + `'`, `'gate_events/default/e', '{"phase":"bogus"}'`}, "stored event is damaged"},
		{"event of a bad id", []string{`'gate_settings/default', '` + good + `'`, `'gate_events/default/a b', '{"phase":"scheduled"}'`}, "stored event is damaged"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "d.db")
			s, err := Open(path, Options{Logger: slog.New(slog.DiscardHandler)})
			require.NoError(t, err)
			require.NoError(t, s.Close())
			stmts := make([]string, len(tc.rows))
			for i, r := range tc.rows {
				stmts[i] = "INSERT OR REPLACE INTO meta (key, value) VALUES (" + r + ")"
			}
			rawExec(t, path, stmts...)
			logs := &sessiontest.LogBuffer{}
			s, err = Open(path, Options{Logger: slog.New(slog.NewTextHandler(logs, nil))})
			require.NoError(t, err)
			t.Cleanup(func() { _ = s.Close() })
			cfg := sessiontest.GateConfig("default", 2)
			ctx := context.Background()
			for i := range 2 {
				got, err := s.Join(ctx, cfg, fmt.Sprint("s", i), epoch)
				require.NoError(t, err)
				assert.Equal(t, session.StatusActive, got.Status, "decided with the op's own limit (2)")
			}
			_, err = s.Release(ctx, cfg, "s0", epoch)
			require.NoError(t, err)
			_, err = s.Update(ctx, cfg, epoch, 0)
			require.NoError(t, err)
			assert.Equal(t, 1, strings.Count(logs.String(), tc.warn), logs.String())
		})
	}
}
