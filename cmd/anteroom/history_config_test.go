package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
)

// history_retention: 7 days unless set; 0 turns history off (no writes, no
// pruning: -1 for the Waitlist); out-of-range values name the key.
func TestHistoryRetentionConfig(t *testing.T) {
	tests := []struct {
		name    string
		yaml    string
		env     []string
		want    time.Duration // cfg.historyRetention()
		wantErr string
	}{
		{name: "default", want: session.DefaultHistoryRetention},
		{name: "file", yaml: "history_retention: 36h\n", want: 36 * time.Hour},
		{name: "zero turns it off", yaml: "history_retention: 0s\n", want: -1},
		{name: "environment wins", yaml: "history_retention: 36h\n", env: []string{"ANTEROOM_HISTORY_RETENTION=0"}, want: -1},
		{name: "environment", env: []string{"ANTEROOM_HISTORY_RETENTION=90m"}, want: 90 * time.Minute},
		{name: "negative", yaml: "history_retention: -1h\n", wantErr: "history_retention"},
		{name: "too short", yaml: "history_retention: 1s\n", wantErr: "history_retention"},
		{name: "too long", yaml: "history_retention: 1000000h\n", wantErr: "history_retention"},
		{name: "not a duration", env: []string{"ANTEROOM_HISTORY_RETENTION=week"}, wantErr: "ANTEROOM_HISTORY_RETENTION"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := ""
			if tt.yaml != "" {
				path = writeConfig(t, tt.yaml)
			}
			cfg, _, err := LoadConfig(path, tt.env)
			if tt.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tt.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, cfg.historyRetention())
		})
	}
}
