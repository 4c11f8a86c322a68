package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
)

func TestExampleConfigParsesAndValidates(t *testing.T) {
	cfg, _, err := LoadConfig(filepath.Join("..", "..", "config.example.yaml"), nil)
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.1:8080", cfg.Listen)
	assert.Equal(t, "/anteroom", cfg.BasePath)
	assert.Equal(t, "anteroom.db", cfg.Database)
	assert.Equal(t, "1m", cfg.UpdateInterval)
	assert.Equal(t, 250*time.Millisecond, time.Duration(cfg.BroadcastInterval))
	assert.Equal(t, []session.GateConfig{{Name: "default", ActiveLimit: 100, ActiveTimeout: 5 * time.Minute, WaitingTimeout: 5 * time.Minute,
		ClaimTimeout: time.Minute, ReleaseOnDisconnect: 3 * time.Second, Mode: session.ModeOpen}}, cfg.SessionGates(), "the demo releases a closed tab's slot after 3s")

	// The example states the defaults: no file at all gives the same config.
	none, _, err := LoadConfig("", nil)
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
		notWant string
	}{
		{name: "unknown key", yaml: "listen: x:1\nlisen: y\n", wantErr: `unknown key "lisen" at line 2 (did you mean "listen"?); known keys: listen, base_path,`},
		{name: "unknown gate key", yaml: "gates:\n  default:\n    limit: 3\n", wantErr: `unknown key "gates.default.limit" at line 3; known keys: active_limit, active_timeout, waiting_timeout`},
		{name: "unknown nested key", yaml: "rate_limit:\n  burst: 3\n  per_minute: 3\n", wantErr: `unknown key "rate_limit.per_minute" at line 3`},
		{name: "no Go type names", yaml: "gates:\n  default:\n    limit: 3\n", wantErr: "known keys", notWant: "main."},
		{name: "duplicate key", yaml: "listen: a:1\nbase_path: /x\nlisten: b:2\n", wantErr: `key "listen" appears twice (lines 1 and 3)`},
		{name: "duplicate gate", yaml: "gates:\n  a: {}\n  a: {}\n", wantErr: `key "gates.a" appears twice`},
		{name: "not a mapping", yaml: "- listen\n", wantErr: "line 1: the file must be a mapping of keys"},
		{name: "not YAML", yaml: "listen: [\n", wantErr: "not valid YAML"},
		{name: "gates not a mapping", yaml: "gates: [default]\n", wantErr: `key "gates" at line 1: want a mapping of names to sections, not a list`},
		{name: "section not a mapping", yaml: "rate_limit: 5\n", wantErr: `key "rate_limit" at line 1: want a mapping of keys (per_second, burst), not "5"`},
		{name: "bad listen", yaml: "listen: nope\n", wantErr: "listen: \"nope\" is not host:port"},
		{name: "listen a list", yaml: "listen: [a, b]\n", wantErr: `key "listen" at line 1: want a text value, not a list`},
		{name: "base path without slash", yaml: "base_path: anteroom\n", wantErr: "base_path"},
		{name: "base path root", yaml: "base_path: /\n", wantErr: "base_path"},
		{name: "bad update interval", yaml: "update_interval: soon\n", wantErr: "update_interval: \"soon\" is neither a duration nor a cron spec"},
		{name: "short secret", yaml: "secret: abc\n", wantErr: "secret: must be at least 32 characters"},
		{name: "upstream not a URL", yaml: "upstream: localhost:3000\n", wantErr: "upstream"},
		{name: "bad duration", yaml: "gates:\n  default:\n    active_timeout: forever\n", wantErr: `key "gates.default.active_timeout" at line 3: want a duration like 30s, 5m or 250ms, not "forever"`},
		{name: "duration a number", yaml: "broadcast_interval: 250\n", wantErr: `key "broadcast_interval" at line 1: want a duration like 30s`},
		{name: "limit not a number", yaml: "gates:\n  default:\n    active_limit: many\n", wantErr: `key "gates.default.active_limit" at line 3: want a whole number such as 100, not "many"`},
		{name: "limit a fraction", yaml: "gates:\n  default:\n    active_limit: 1.5\n", wantErr: `key "gates.default.active_limit" at line 3: want a whole number`},
		{name: "limit too large", yaml: "gates:\n  default:\n    active_limit: 99999999999999999999\n", wantErr: `key "gates.default.active_limit" at line 3: want a whole number`},
		{name: "rate not a number", yaml: "rate_limit:\n  per_second: fast\n", wantErr: `key "rate_limit.per_second" at line 2: want a number such as 5 or 0.5, not "fast"`},
		{name: "demo not a bool", yaml: "demo: maybe\n", wantErr: `key "demo" at line 1: want true or false, not "maybe"`},
		{name: "list item a mapping", yaml: "protect:\n  - {a: b}\n", wantErr: `key "protect[0]" at line 2: want a text value, not a mapping`},
		{name: "protect a string", yaml: "protect: /app/\n", wantErr: `key "protect" at line 1: want a list such as ["a", "b"], not "/app/"`},
		{name: "long value cut", yaml: "demo: " + strings.Repeat("x", 500) + "\n", wantErr: `not "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"...`},
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
		{name: "gates clash on env name", yaml: "gates:\n  a-b: {}\n  a.b: {}\n", wantErr: `gates "a-b" and "a.b" would both be set by the same environment variables ANTEROOM_GATES_A_B_*`},
		{name: "gates clash by case", yaml: "gates:\n  VIP: {}\n  vip: {}\n", wantErr: `gates "VIP" and "vip"`},
		{name: "gates clash with an env override", yaml: "gates:\n  a_b: {}\n  a-b: {}\n", env: []string{"ANTEROOM_GATES_A_B_ACTIVE_LIMIT=3"}, wantErr: `environment ANTEROOM_GATES_A_B_ACTIVE_LIMIT: gates "a-b" and "a_b"`},
		{name: "env: bad limit", env: []string{"ANTEROOM_GATES_DEFAULT_ACTIVE_LIMIT=many"}, wantErr: "environment ANTEROOM_GATES_DEFAULT_ACTIVE_LIMIT: want a whole number such as 100, not \"many\""},
		{name: "env: bad duration", env: []string{"ANTEROOM_BROADCAST_INTERVAL=soon"}, wantErr: "environment ANTEROOM_BROADCAST_INTERVAL: want a duration like 30s"},
		{name: "env: bad demo", env: []string{"ANTEROOM_DEMO=perhaps"}, wantErr: "environment ANTEROOM_DEMO: want true or false"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := ""
			if tt.yaml != "" {
				path = writeConfig(t, tt.yaml)
			}
			_, _, err := LoadConfig(path, tt.env)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.wantErr)
			if tt.notWant != "" {
				assert.NotContains(t, err.Error(), tt.notWant)
			}
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
	cfg, _, err := LoadConfig(path, []string{
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
	const demo = 3 * time.Second // release_on_disconnect while the demo is served
	assert.Equal(t, []session.GateConfig{
		{Name: "default", ActiveLimit: 7, ActiveTimeout: 5 * time.Minute, WaitingTimeout: 5 * time.Minute, ClaimTimeout: time.Minute, ReleaseOnDisconnect: demo, Mode: session.ModeOpen},
		{Name: "extra", ActiveLimit: 1, ActiveTimeout: 5 * time.Minute, WaitingTimeout: 5 * time.Minute, ClaimTimeout: time.Minute, ReleaseOnDisconnect: demo, Mode: session.ModeOpen},
		{Name: "vip-room", ActiveLimit: 2, ActiveTimeout: 5 * time.Minute, WaitingTimeout: 30 * time.Second, ClaimTimeout: time.Minute, ReleaseOnDisconnect: demo, Mode: session.ModeOpen},
	}, cfg.SessionGates())
}

func TestZeroLimitIsKeptNotDefaulted(t *testing.T) {
	cfg, _, err := LoadConfig(writeConfig(t, "gates:\n  default:\n    active_limit: 0\n"), nil)
	require.NoError(t, err)
	assert.Equal(t, int64(0), cfg.SessionGates()[0].ActiveLimit, "0 closes the gate; it is not 'unset'")
}

func TestTrailingSlashOfBasePathIsDropped(t *testing.T) {
	cfg, _, err := LoadConfig(writeConfig(t, "base_path: /queue/\n"), nil)
	require.NoError(t, err)
	assert.Equal(t, "/queue", cfg.BasePath)
}

func TestTrustedProxiesAcceptAddressesAndCIDRs(t *testing.T) {
	cfg, _, err := LoadConfig(writeConfig(t, "trusted_proxies: [\"127.0.0.1\", \"10.0.0.0/8\", \"::1\"]\n"), []string{"ANTEROOM_RATE_LIMIT_PER_SECOND=0"})
	require.NoError(t, err)
	nets, err := cfg.TrustedNetworks()
	require.NoError(t, err)
	require.Len(t, nets, 3)
	assert.Equal(t, "127.0.0.1/32", nets[0].String())
	assert.Equal(t, "10.0.0.0/8", nets[1].String())
	assert.Equal(t, "::1/128", nets[2].String())
	assert.Equal(t, 0.0, *cfg.RateLimit.PerSecond, "0 from the environment turns the limit off, it is not 'unset'")
}

// An ANTEROOM_* variable that names no setting is a warning, not a crash:
// Kubernetes sets ANTEROOM_PORT=tcp://... for a Service named anteroom.
func TestUnknownEnvironmentVariablesWarn(t *testing.T) {
	tests := []struct {
		name        string
		yaml        string
		env         string
		wantNearest string
		kubernetes  bool
	}{
		{name: "kubernetes service link", env: "ANTEROOM_PORT=tcp://10.0.0.1:8080", kubernetes: true},
		{name: "kubernetes port address", env: "ANTEROOM_PORT_8080_TCP_ADDR=10.0.0.1", kubernetes: true},
		{name: "kubernetes service host", env: "ANTEROOM_SERVICE_HOST=10.0.0.1", kubernetes: true},
		{name: "kubernetes named service port", env: "ANTEROOM_SERVICE_PORT_HTTP=8080", kubernetes: true},
		{name: "typo", env: "ANTEROOM_LISTN=127.0.0.1:1", wantNearest: "ANTEROOM_LISTEN"},
		{name: "typo of a secret", env: "ANTEROOM_SECRT=" + strings.Repeat("k", 40), wantNearest: "ANTEROOM_SECRET"},
		{name: "unknown gate field", env: "ANTEROOM_GATES_DEFAULT_ACTIVE_LIMITS=3", wantNearest: "ANTEROOM_GATES_DEFAULT_ACTIVE_LIMIT"},
		{name: "gate field typo", yaml: "gates:\n  vip-room: {}\n", env: "ANTEROOM_GATES_VIP_ROOM_WAITING_TIMOUT=1m", wantNearest: "ANTEROOM_GATES_VIP_ROOM_WAITING_TIMEOUT"},
		{name: "gate without a name", env: "ANTEROOM_GATES__ACTIVE_LIMIT=3", wantNearest: "ANTEROOM_GATES_DEFAULT_ACTIVE_LIMIT"},
		{name: "bare prefix", env: "ANTEROOM_=1"},
		{name: "huge name", env: "ANTEROOM_" + strings.Repeat("X", 1<<16) + "=1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := ""
			if tt.yaml != "" {
				path = writeConfig(t, tt.yaml)
			}
			cfg, warnings, err := LoadConfig(path, []string{tt.env, "HOME=/root"})
			require.NoError(t, err)
			name, _, _ := strings.Cut(tt.env, "=")
			require.Len(t, warnings, 1)
			assert.Equal(t, name, warnings[0].Var)
			assert.NotEmpty(t, warnings[0].Nearest)
			if tt.wantNearest != "" {
				assert.Equal(t, tt.wantNearest, warnings[0].Nearest)
			}
			assert.Equal(t, tt.kubernetes, strings.Contains(warnings[0].Hint, "Kubernetes"), warnings[0].Hint)
			// Ignored: the config is the one without the variable.
			want, _, err := LoadConfig(path, nil)
			require.NoError(t, err)
			assert.Equal(t, want, cfg)
		})
	}
}

// Gate overrides are deterministic: every gate has its own environment
// name, and a config where two share one is refused, naming both, whatever
// the order of the gates in the file.
func TestGateEnvironmentNamesAreUnambiguous(t *testing.T) {
	for _, order := range [][]string{{"a-b", "a.b", "a_b"}, {"a_b", "a.b", "a-b"}, {"a.b", "a_b"}} {
		yamlText := "gates:\n"
		for _, g := range order {
			yamlText += "  \"" + g + "\": {active_limit: 1}\n"
		}
		for _, env := range [][]string{nil, {"ANTEROOM_GATES_A_B_ACTIVE_LIMIT=9"}} {
			_, _, err := LoadConfig(writeConfig(t, yamlText), env)
			require.Error(t, err, "%v %v", order, env)
			assert.Regexp(t, `gates "a[-._]b" and "a[-._]b" would both be set by the same environment variables ANTEROOM_GATES_A_B_\*: rename one of them`, err.Error())
		}
	}

	// One gate per name: the override reaches it, the others keep theirs.
	cfg, _, err := LoadConfig(writeConfig(t, "gates:\n  a-b: {active_limit: 1}\n  ab: {active_limit: 2}\n  A.b.C: {active_limit: 3}\n"),
		[]string{"ANTEROOM_GATES_A_B_ACTIVE_LIMIT=7", "ANTEROOM_GATES_A_B_C_ACTIVE_LIMIT=8"})
	require.NoError(t, err)
	assert.Equal(t, int64(7), *cfg.Gates["a-b"].ActiveLimit)
	assert.Equal(t, int64(2), *cfg.Gates["ab"].ActiveLimit)
	assert.Equal(t, int64(8), *cfg.Gates["A.b.C"].ActiveLimit)
	assert.Len(t, cfg.Gates, 3, "no gate created beside the configured ones")
}

func TestDemoDefaultsOnAndCanBeTurnedOff(t *testing.T) {
	cfg, _, err := LoadConfig("", nil)
	require.NoError(t, err)
	assert.True(t, *cfg.Demo)
	cfg, _, err = LoadConfig(writeConfig(t, "demo: false\n"), nil)
	require.NoError(t, err)
	assert.False(t, *cfg.Demo)
	cfg, _, err = LoadConfig(writeConfig(t, "demo: false\n"), []string{"ANTEROOM_DEMO=true"})
	require.NoError(t, err)
	assert.True(t, *cfg.Demo, "the environment overrides the file")
	cfg, _, err = LoadConfig("", []string{"ANTEROOM_DEMO=0"})
	require.NoError(t, err)
	assert.False(t, *cfg.Demo)
}

// claim_timeout (default 60s, 0 off) and release_on_disconnect (default off,
// 3s while the demo is served unless set) per gate, from the file or the
// environment, reach the session's GateConfig; negative values are refused.
func TestClaimTimeoutAndReleaseOnDisconnect(t *testing.T) {
	tests := []struct {
		name           string
		yaml           string
		env            []string
		claim, release time.Duration
		wantErr        string
	}{
		{name: "defaults: the demo", claim: time.Minute, release: 3 * time.Second},
		{name: "defaults: demo off", yaml: "demo: false\n", claim: time.Minute, release: 0},
		{name: "defaults: reverse proxy", yaml: "upstream: http://127.0.0.1:3000\n", claim: time.Minute, release: 0},
		{name: "demo, release set off", yaml: "gates:\n  default:\n    release_on_disconnect: 0s\n", claim: time.Minute, release: 0},
		{name: "null is unset", yaml: "gates:\n  default:\n    release_on_disconnect: null\n    claim_timeout: ~\n", claim: time.Minute, release: 3 * time.Second},
		{name: "file", yaml: "upstream: http://127.0.0.1:3000\ngates:\n  default:\n    claim_timeout: 15s\n    release_on_disconnect: 2s\n", claim: 15 * time.Second, release: 2 * time.Second},
		{name: "claim off", yaml: "gates:\n  default:\n    claim_timeout: \"0\"\n", claim: 0, release: 3 * time.Second},
		{name: "environment", env: []string{"ANTEROOM_GATES_DEFAULT_CLAIM_TIMEOUT=30s", "ANTEROOM_GATES_DEFAULT_RELEASE_ON_DISCONNECT=500ms"}, claim: 30 * time.Second, release: 500 * time.Millisecond},
		{name: "environment beats the file", yaml: "gates:\n  default:\n    claim_timeout: 15s\n", env: []string{"ANTEROOM_GATES_DEFAULT_CLAIM_TIMEOUT=0"}, claim: 0, release: 3 * time.Second},
		{name: "negative claim", yaml: "gates:\n  default:\n    claim_timeout: -1s\n", wantErr: "gates.default.claim_timeout: must not be negative"},
		{name: "negative release", env: []string{"ANTEROOM_GATES_DEFAULT_RELEASE_ON_DISCONNECT=-3s"}, wantErr: "gates.default.release_on_disconnect: must not be negative"},
		{name: "not a duration", env: []string{"ANTEROOM_GATES_DEFAULT_CLAIM_TIMEOUT=soon"}, wantErr: "ANTEROOM_GATES_DEFAULT_CLAIM_TIMEOUT"},
		{name: "not a duration in the file", yaml: "gates:\n  default:\n    release_on_disconnect: [1s]\n", wantErr: `key "gates.default.release_on_disconnect" at line 3`},
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
			gates := cfg.SessionGates()
			require.Len(t, gates, 1)
			assert.Equal(t, tt.claim, gates[0].ClaimTimeout, "claim_timeout")
			assert.Equal(t, tt.release, gates[0].ReleaseOnDisconnect, "release_on_disconnect")
			assert.Equal(t, 5*time.Minute, gates[0].WaitingTimeout, "waiting_timeout: a locked phone keeps its place for minutes")
		})
	}
}

func TestGateModeAndPacingConfig(t *testing.T) {
	cfg, _, err := LoadConfig(writeConfig(t, "gates:\n  sale:\n    mode: queue_all\n    new_users_per_minute: 600\n"), []string{"ANTEROOM_GATES_VIP_MODE=reject", "ANTEROOM_GATES_VIP_NEW_USERS_PER_MINUTE=30"})
	require.NoError(t, err)
	gates := cfg.SessionGates()
	require.Len(t, gates, 2)
	assert.Equal(t, [2]any{session.ModeQueueAll, int64(600)}, [2]any{gates[0].Mode, gates[0].NewUsersPerMinute})
	assert.Equal(t, [2]any{session.ModeReject, int64(30)}, [2]any{gates[1].Mode, gates[1].NewUsersPerMinute})

	for _, tc := range []struct{ yaml, env, key string }{
		{"gates:\n  default:\n    mode: closed\n", "", "gates.default.mode"},
		{"gates:\n  default:\n    mode: OPEN\n", "", "gates.default.mode"},
		{"gates:\n  default:\n    new_users_per_minute: -1\n", "", "gates.default.new_users_per_minute"},
		{"", "ANTEROOM_GATES_DEFAULT_NEW_USERS_PER_MINUTE=fast", "ANTEROOM_GATES_DEFAULT_NEW_USERS_PER_MINUTE"},
		{"", "ANTEROOM_ADMIN_TOKEN=short", "admin_token"},
	} {
		path := ""
		if tc.yaml != "" {
			path = writeConfig(t, tc.yaml)
		}
		_, _, err := LoadConfig(path, []string{tc.env})
		require.Error(t, err, tc.yaml+tc.env)
		assert.Contains(t, err.Error(), tc.key)
	}
	cfg, _, err = LoadConfig("", []string{"ANTEROOM_ADMIN_TOKEN=" + strings.Repeat("t", 32)})
	require.NoError(t, err)
	assert.Equal(t, strings.Repeat("t", 32), cfg.AdminToken)
}
