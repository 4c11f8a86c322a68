package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
)

func TestExampleConfigParsesAndValidates(t *testing.T) {
	cfg, err := LoadConfig(filepath.Join("..", "..", "config.example.yaml"), nil)
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.1:8080", cfg.Listen)
	assert.Equal(t, "/anteroom", cfg.BasePath)
	assert.Equal(t, "anteroom.db", cfg.Database)
	assert.Equal(t, "1m", cfg.UpdateInterval)
	assert.Equal(t, 250*time.Millisecond, time.Duration(cfg.BroadcastInterval))
	assert.Equal(t, []session.GateConfig{{Name: "default", ActiveLimit: 100, ActiveTimeout: 5 * time.Minute, WaitingTimeout: time.Minute}}, cfg.SessionGates())

	// The example states the defaults: no file at all gives the same config.
	none, err := LoadConfig("", nil)
	require.NoError(t, err)
	none.AllowedOrigins, none.Bypass, none.APIKeys, none.TrustedProxies = cfg.AllowedOrigins, cfg.Bypass, cfg.APIKeys, cfg.TrustedProxies
	assert.Equal(t, cfg, none)
}

func writeConfig(t *testing.T, yaml string) string {
	p := filepath.Join(t.TempDir(), "anteroom.yaml")
	require.NoError(t, os.WriteFile(p, []byte(yaml), 0o600))
	return p
}

func TestConfigErrorsNameTheKey(t *testing.T) {
	tests := []struct {
		name    string
		yaml    string
		env     []string
		wantErr string
	}{
		{name: "unknown key", yaml: "listen: x:1\nlisen: y\n", wantErr: "field lisen not found"},
		{name: "unknown gate key", yaml: "gates:\n  default:\n    limit: 3\n", wantErr: "field limit not found"},
		{name: "bad listen", yaml: "listen: nope\n", wantErr: "listen: \"nope\" is not host:port"},
		{name: "base path without slash", yaml: "base_path: anteroom\n", wantErr: "base_path"},
		{name: "base path root", yaml: "base_path: /\n", wantErr: "base_path"},
		{name: "bad update interval", yaml: "update_interval: soon\n", wantErr: "update_interval: \"soon\" is neither a duration nor a cron spec"},
		{name: "short secret", yaml: "secret: abc\n", wantErr: "secret: must be at least 32 characters"},
		{name: "upstream not a URL", yaml: "upstream: localhost:3000\n", wantErr: "upstream"},
		{name: "bad duration", yaml: "gates:\n  default:\n    active_timeout: forever\n", wantErr: "line 3: \"forever\" is not a duration"},
		{name: "negative limit", yaml: "gates:\n  default:\n    active_limit: -1\n", wantErr: "gates.default.active_limit: must be a whole number, 0 or more"},
		{name: "negative timeout", yaml: "gates:\n  default:\n    waiting_timeout: -1m\n", wantErr: "gates.default.waiting_timeout: must be a positive duration"},
		{name: "bad gate name", yaml: "gates:\n  \"a/b\":\n    active_limit: 1\n", wantErr: "gates.a/b: gate names are"},
		{name: "protect not a path", yaml: "protect: [app]\n", wantErr: "protect[0]: \"app\" must be a path prefix"},
		{name: "bypass under base path", yaml: "bypass: [/anteroom/x]\n", wantErr: "bypass[0]: \"/anteroom/x\" lies under base_path"},
		{name: "short api key", yaml: "api_keys: [abc]\n", wantErr: "api_keys[0]: must be at least 16 characters"},
		{name: "bad trusted proxy", yaml: "trusted_proxies: [\"10.0.0.0/33\"]\n", wantErr: "trusted_proxies[0]: \"10.0.0.0/33\" is neither"},
		{name: "negative rate", yaml: "rate_limit:\n  per_second: -1\n", wantErr: "rate_limit.per_second"},
		{name: "negative socket cap", yaml: "websocket:\n  max_per_client: -1\n", wantErr: "websocket.max_per_client"},
		{name: "bad log level", yaml: "log_level: loud\n", wantErr: "log_level"},
		{name: "env: bad limit", env: []string{"ANTEROOM_GATES_DEFAULT_ACTIVE_LIMIT=many"}, wantErr: "environment ANTEROOM_GATES_DEFAULT_ACTIVE_LIMIT: \"many\" is not a whole number"},
		{name: "env: unknown variable", env: []string{"ANTEROOM_LISTN=x"}, wantErr: "environment ANTEROOM_LISTN: unknown variable"},
		{name: "env: bad gate field", env: []string{"ANTEROOM_GATES_DEFAULT_SIZE=3"}, wantErr: "environment ANTEROOM_GATES_DEFAULT_SIZE"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := ""
			if tt.yaml != "" {
				path = writeConfig(t, tt.yaml)
			}
			_, err := LoadConfig(path, tt.env)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.wantErr)
		})
	}
}

func TestEnvironmentOverridesTheFile(t *testing.T) {
	path := writeConfig(t, `
listen: "127.0.0.1:9000"
gates:
  default:
    active_limit: 5
  vip-room:
    active_limit: 2
`)
	cfg, err := LoadConfig(path, []string{
		"ANTEROOM_LISTEN=127.0.0.1:9999",
		"ANTEROOM_DATABASE=/tmp/x.db",
		"ANTEROOM_UPDATE_INTERVAL=10s",
		"ANTEROOM_ALLOWED_ORIGINS=a.example.com, *.b.example.com",
		"ANTEROOM_BROADCAST_INTERVAL=1s",
		"ANTEROOM_GATES_DEFAULT_ACTIVE_LIMIT=7",
		"ANTEROOM_GATES_VIP_ROOM_WAITING_TIMEOUT=30s",
		"ANTEROOM_GATES_EXTRA_ACTIVE_LIMIT=1",
		"HOME=/root", // not ours: ignored
	})
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.1:9999", cfg.Listen)
	assert.Equal(t, "/tmp/x.db", cfg.Database)
	assert.Equal(t, "10s", cfg.UpdateInterval)
	assert.Equal(t, []string{"a.example.com", "*.b.example.com"}, cfg.AllowedOrigins)
	assert.Equal(t, time.Second, time.Duration(cfg.BroadcastInterval))
	assert.Equal(t, []session.GateConfig{
		{Name: "default", ActiveLimit: 7, ActiveTimeout: 5 * time.Minute, WaitingTimeout: time.Minute},
		{Name: "extra", ActiveLimit: 1, ActiveTimeout: 5 * time.Minute, WaitingTimeout: time.Minute},
		{Name: "vip-room", ActiveLimit: 2, ActiveTimeout: 5 * time.Minute, WaitingTimeout: 30 * time.Second},
	}, cfg.SessionGates())
}

func TestZeroLimitIsKeptNotDefaulted(t *testing.T) {
	cfg, err := LoadConfig(writeConfig(t, "gates:\n  default:\n    active_limit: 0\n"), nil)
	require.NoError(t, err)
	assert.Equal(t, int64(0), cfg.SessionGates()[0].ActiveLimit, "0 closes the gate; it is not 'unset'")
}

func TestTrailingSlashOfBasePathIsDropped(t *testing.T) {
	cfg, err := LoadConfig(writeConfig(t, "base_path: /queue/\n"), nil)
	require.NoError(t, err)
	assert.Equal(t, "/queue", cfg.BasePath)
}

func TestTrustedProxiesAcceptAddressesAndCIDRs(t *testing.T) {
	cfg, err := LoadConfig(writeConfig(t, "trusted_proxies: [\"127.0.0.1\", \"10.0.0.0/8\", \"::1\"]\n"), []string{"ANTEROOM_RATE_LIMIT_PER_SECOND=0"})
	require.NoError(t, err)
	nets, err := cfg.TrustedNetworks()
	require.NoError(t, err)
	require.Len(t, nets, 3)
	assert.Equal(t, "127.0.0.1/32", nets[0].String())
	assert.Equal(t, "10.0.0.0/8", nets[1].String())
	assert.Equal(t, "::1/128", nets[2].String())
	assert.Equal(t, 0.0, *cfg.RateLimit.PerSecond, "0 from the environment turns the limit off, it is not 'unset'")
}
