package main

import (
	"math"
	"net"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/anteroomhq/anteroom/cronjobs"
)

// The config loader, fuzzed: whatever the YAML or the environment, parsing
// and validating never panic, and a config that is accepted holds values the
// program can run with, and survives being written out and read back.
//
// Seeds live in testdata/fuzz/Fuzz{ParseConfig,ConfigEnv}; plain go test runs
// them. To fuzz: scripts/fuzz.sh, or
//
//	go test -run='^$' -fuzz='^FuzzParseConfig$' -fuzztime=60s ./cmd/anteroom/

func FuzzParseConfig(f *testing.F) {
	f.Add([]byte("listen: \"127.0.0.1:8080\"\ngates:\n  default:\n    active_limit: 3\n    active_timeout: 5m\n    waiting_timeout: 1m\n"))
	f.Add([]byte("base_path: /room/\nupdate_interval: \"*/2 * * * *\"\nrate_limit: {per_second: 0.5, burst: 2}\n"))
	f.Add([]byte("gates:\n  a: {active_limit: 0}\n  b.c-d_e: {active_limit: 9}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := ParseConfig(data)
		if err != nil {
			if strings.Contains(err.Error(), "main.") {
				t.Fatalf("error for %q speaks Go, not config: %v", data, err)
			}
			return
		}
		cfg.fillDefaults()
		if err := cfg.Validate(); err != nil {
			return
		}
		requireSensible(t, cfg, string(data))
		requireRoundTrip(t, cfg, string(data))
	})
}

func FuzzConfigEnv(f *testing.F) {
	f.Add("GATES_DEFAULT_ACTIVE_LIMIT", "7")
	f.Add("RATE_LIMIT_PER_SECOND", "0")
	f.Add("TRUSTED_PROXIES", "10.0.0.0/8, 127.0.0.1")
	f.Fuzz(func(t *testing.T, name, value string) {
		environ := []string{envPrefix + name + "=" + value}
		cfg, _, err := LoadConfig("", environ)
		if err != nil {
			return
		}
		requireSensible(t, cfg, strings.Join(environ, "\n"))
		requireRoundTrip(t, cfg, strings.Join(environ, "\n"))
	})
}

// requireSensible checks an accepted, defaulted config: everything run()
// does with it would succeed, and no number is out of range.
func requireSensible(t *testing.T, cfg Config, input string) {
	t.Helper()
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("accepted %q, but "+format, append([]any{input}, args...)...)
	}
	if _, _, err := net.SplitHostPort(cfg.Listen); err != nil {
		fail("listen %q: %v", cfg.Listen, err)
	}
	if !strings.HasPrefix(cfg.BasePath, "/") || strings.HasSuffix(cfg.BasePath, "/") {
		fail("base_path %q (the gate refuses it)", cfg.BasePath)
	}
	if strings.TrimSpace(cfg.Database) == "" {
		fail("no database")
	}
	if _, err := cronjobs.ParseSchedule(cfg.UpdateInterval); err != nil {
		fail("update_interval: %v", err)
	}
	if _, err := parseLogLevel(cfg.LogLevel); err != nil {
		fail("log_level: %v", err)
	}
	if _, err := cfg.TrustedNetworks(); err != nil {
		fail("trusted_proxies: %v", err)
	}
	if time.Duration(cfg.BroadcastInterval) <= 0 {
		fail("broadcast_interval %v", time.Duration(cfg.BroadcastInterval))
	}
	if cfg.Secret != "" && len(cfg.Secret) < minSecretLength {
		fail("a secret of %d bytes", len(cfg.Secret))
	}
	if r := cfg.RateLimit.PerSecond; r == nil {
		fail("no rate_limit.per_second")
	} else if math.IsNaN(*r) || *r < 0 {
		fail("rate_limit.per_second %v (the limiter then admits everything: the rate limit is silently off)", *r)
	}
	if cfg.RateLimit.Burst < 0 {
		fail("rate_limit.burst %d", cfg.RateLimit.Burst)
	}
	for _, k := range cfg.APIKeys {
		if len(k) < minAPIKeyLength {
			fail("an API key of %d bytes", len(k))
		}
	}
	gates := cfg.SessionGates()
	if len(gates) == 0 {
		fail("no gate")
	}
	for _, g := range gates {
		if err := g.Validate(); err != nil {
			fail("gate %q: %v", g.Name, err)
		}
	}
}

// requireRoundTrip writes cfg out as YAML (durations as Go duration
// strings), reads it back with the same loader and wants the same config.
func requireRoundTrip(t *testing.T, cfg Config, input string) {
	t.Helper()
	data, err := yaml.Marshal(yamlValue(reflect.ValueOf(cfg)))
	if err != nil {
		t.Fatalf("accepted %q, cannot write it back: %v", input, err)
	}
	again, err := ParseConfig(data)
	if err != nil {
		t.Fatalf("accepted %q, written back as\n%s\nrefused: %v", input, data, err)
	}
	again.fillDefaults()
	if err := again.Validate(); err != nil {
		t.Fatalf("accepted %q, written back as\n%s\nrefused: %v", input, data, err)
	}
	if !reflect.DeepEqual(cfg, again) {
		t.Fatalf("accepted %q, written back as\n%s\nread as %+v, want %+v", input, data, again, cfg)
	}
}

// yamlValue turns a config value into what yaml.Marshal writes as the file
// would say it: structs by their yaml tags, Durations as duration strings.
// It follows the Config type, so new keys are covered without a change here.
func yamlValue(v reflect.Value) any {
	if v.Type() == durationType {
		return time.Duration(v.Int()).String()
	}
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return nil
		}
		return yamlValue(v.Elem())
	case reflect.Struct:
		out := map[string]any{}
		for i := range v.NumField() {
			f := v.Type().Field(i)
			if !f.IsExported() {
				continue
			}
			name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if name == "-" {
				continue
			}
			if name == "" {
				name = strings.ToLower(f.Name)
			}
			out[name] = yamlValue(v.Field(i))
		}
		return out
	case reflect.Map:
		if v.IsNil() {
			return nil
		}
		out := map[string]any{}
		for it := v.MapRange(); it.Next(); {
			out[it.Key().String()] = yamlValue(it.Value())
		}
		return out
	case reflect.Slice:
		if v.IsNil() {
			return nil
		}
		out := make([]any, v.Len())
		for i := range out {
			out[i] = yamlValue(v.Index(i))
		}
		return out
	default:
		return v.Interface()
	}
}
