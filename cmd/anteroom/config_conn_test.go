package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestConnectionKeysParseWithDefaults(t *testing.T) {
	tests := []struct {
		name        string
		yaml        string
		env         []string
		wantTimeout time.Duration
		wantConns   int
	}{
		{name: "defaults", wantTimeout: 30 * time.Second, wantConns: 256},
		{name: "file", yaml: "upstream_timeout: 5s\nmax_conns_per_ip: 64\n", wantTimeout: 5 * time.Second, wantConns: 64},
		{name: "zero turns the cap off", yaml: "max_conns_per_ip: 0\n", wantTimeout: 30 * time.Second, wantConns: 0},
		{name: "environment", yaml: "upstream_timeout: 5s\n", env: []string{"ANTEROOM_UPSTREAM_TIMEOUT=1m", "ANTEROOM_MAX_CONNS_PER_IP=10"},
			wantTimeout: time.Minute, wantConns: 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := ""
			if tt.yaml != "" {
				path = writeConfig(t, tt.yaml)
			}
			cfg, _, err := LoadConfig(path, tt.env)
			require.NoError(t, err)
			assert.Equal(t, tt.wantTimeout, time.Duration(cfg.UpstreamTimeout))
			require.NotNil(t, cfg.MaxConnsPerIP)
			assert.Equal(t, tt.wantConns, *cfg.MaxConnsPerIP)
		})
	}
}

func TestConnectionKeysAreValidated(t *testing.T) {
	for name, tt := range map[string]struct {
		yaml    string
		env     []string
		wantErr string
	}{
		"negative timeout": {yaml: "upstream_timeout: -1s\n", wantErr: "upstream_timeout: must be a positive duration"},
		"not a duration":   {yaml: "upstream_timeout: soon\n", wantErr: "key \"upstream_timeout\" at line 1: want a duration like 30s"},
		"negative cap":     {yaml: "max_conns_per_ip: -1\n", wantErr: "max_conns_per_ip: must not be negative"},
		"env: not a number": {env: []string{"ANTEROOM_MAX_CONNS_PER_IP=lots"},
			wantErr: "environment ANTEROOM_MAX_CONNS_PER_IP: want a whole number such as 100, not \"lots\""},
		"env: not a duration": {env: []string{"ANTEROOM_UPSTREAM_TIMEOUT=10"}, wantErr: "environment ANTEROOM_UPSTREAM_TIMEOUT"},
	} {
		t.Run(name, func(t *testing.T) {
			path := ""
			if tt.yaml != "" {
				path = writeConfig(t, tt.yaml)
			}
			_, _, err := LoadConfig(path, tt.env)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.wantErr)
		})
	}
}
