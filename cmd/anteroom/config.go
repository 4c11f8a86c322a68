package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/url"
	"os"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/anteroomhq/anteroom/cronjobs"
	"github.com/anteroomhq/anteroom/session"
)

// Config is the sidecar's configuration: YAML (see config.example.yaml),
// then ANTEROOM_* environment overrides, then defaults for what is unset.
type Config struct {
	Listen            string          `yaml:"listen"`
	BasePath          string          `yaml:"base_path"`
	Database          string          `yaml:"database"`
	UpdateInterval    string          `yaml:"update_interval"`
	Secret            string          `yaml:"secret"`
	SecretPrevious    string          `yaml:"secret_previous"`
	TokenTTL          Duration        `yaml:"token_ttl"`
	Upstream          string          `yaml:"upstream"`
	Protect           []string        `yaml:"protect"`
	Bypass            []string        `yaml:"bypass"`
	UpstreamTimeout   Duration        `yaml:"upstream_timeout"`
	MaxConnsPerIP     *int            `yaml:"max_conns_per_ip"`
	APIKeys           []string        `yaml:"api_keys"`
	BroadcastInterval Duration        `yaml:"broadcast_interval"`
	AllowedOrigins    []string        `yaml:"allowed_origins"`
	Demo              *bool           `yaml:"demo"`
	LogLevel          string          `yaml:"log_level"`
	AdminToken        string          `yaml:"admin_token"`
	AccessLog         bool            `yaml:"access_log"`
	HistoryRetention  *Duration       `yaml:"history_retention"`
	RateLimit         RateLimitConfig `yaml:"rate_limit"`
	TrustedProxies    []string        `yaml:"trusted_proxies"`
	Websocket         WebsocketConfig `yaml:"websocket"`
	// PublicURL is the origin visitors reach the sidecar at (claim links).
	PublicURL string `yaml:"public_url"`
	// Webhooks are the endpoints of the webhook outbox (webhooks.go).
	Webhooks []WebhookConfig       `yaml:"webhooks"`
	Gates    map[string]GateConfig `yaml:"gates"`
}

// GateConfig is one gate's section of the configuration.
type GateConfig struct {
	ActiveLimit    *int64   `yaml:"active_limit"`
	ActiveTimeout  Duration `yaml:"active_timeout"`
	WaitingTimeout Duration `yaml:"waiting_timeout"`
	// ClaimTimeout: a promoted session that shows no sign of life within it
	// loses its slot to the next waiter (0: off). Unset: 60s.
	ClaimTimeout *Duration `yaml:"claim_timeout"`
	// ReleaseOnDisconnect: the grace after an active session's last socket
	// closed before its slot is freed (0: off). Unset: off, but 3s when the
	// demo is served.
	ReleaseOnDisconnect *Duration `yaml:"release_on_disconnect"`
	// Mode is open (default), queue_all or reject (session.Mode).
	Mode string `yaml:"mode"`
	// NewUsersPerMinute paces admissions (0: no pacing).
	NewUsersPerMinute int64 `yaml:"new_users_per_minute"`
	// NotifyClaimTimeout is the claim window of a called-back (notify)
	// session. Unset (0): session.DefaultNotifyClaimTimeout, 15m.
	NotifyClaimTimeout Duration `yaml:"notify_claim_timeout"`
	// Events are the gate's scheduled events (config_events.go).
	Events []EventConfig `yaml:"events"`
	// AdmissionToken turns on admission tokens (JWT, EdDSA) for the gate.
	AdmissionToken AdmissionTokenConfig `yaml:"admission_token"`
}

// AdmissionTokenConfig is a gate's admission_token section.
type AdmissionTokenConfig struct {
	// TTL is how long an admission token is valid (0: no tokens).
	TTL Duration `yaml:"ttl"`
}

// RateLimitConfig bounds the client API per client IP.
type RateLimitConfig struct {
	PerSecond *float64 `yaml:"per_second"`
	Burst     int      `yaml:"burst"`
}

// WebsocketConfig caps the live-update sockets.
type WebsocketConfig struct {
	MaxConnections *int `yaml:"max_connections"`
	MaxPerClient   *int `yaml:"max_per_client"`
}

// Duration is a time.Duration written as a Go duration string ("5m").
type Duration time.Duration

// UnmarshalYAML parses a Go duration string. It returns an error, with the
// line, when the value is not one.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	var s string
	if err := n.Decode(&s); err != nil {
		return fmt.Errorf("line %d: %s", n.Line, wantDuration)
	}
	v, err := parseDuration(s)
	if err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	*d = Duration(v)
	return nil
}

const wantDuration = "want a duration like 30s, 5m or 250ms"

func parseDuration(s string) (time.Duration, error) {
	v, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		return 0, fmt.Errorf("%s, not %s", wantDuration, quote(s))
	}
	return v, nil
}

// Defaults.
const (
	defaultListen              = "127.0.0.1:8080"
	defaultBasePath            = "/anteroom"
	defaultDatabase            = "anteroom.db"
	defaultUpdateInterval      = "1m"
	defaultBroadcastInterval   = 250 * time.Millisecond
	defaultTokenTTL            = 24 * time.Hour
	minTokenTTL                = time.Minute
	defaultGate                = "default"
	defaultActiveLimit         = 100
	defaultActiveTimeout       = 5 * time.Minute
	defaultWaitingTimeout      = 5 * time.Minute
	defaultClaimTimeout        = time.Minute
	minSecretLength            = 32
	minAPIKeyLength            = 16
	minAdminTokenLength        = 32
	defaultRatePerSecond       = 5.0
	defaultRateBurst           = 20
	defaultMaxSockets          = 10000
	defaultMaxSocketsPerClient = 100
)

// maxAdmissionTTL bounds gates.<name>.admission_token.ttl
// (token.MaxAdmissionTTL).
const maxAdmissionTTL = 24 * time.Hour

// AdmissionTTLs returns the admission token lifetime of each gate that
// issues them.
func (c Config) AdmissionTTLs() map[string]time.Duration {
	out := map[string]time.Duration{}
	for name, g := range c.Gates {
		if g.AdmissionToken.TTL > 0 {
			out[name] = time.Duration(g.AdmissionToken.TTL)
		}
	}
	return out
}

// history_retention's bounds when not 0 (history off): at least a minute, at
// most ten years.
const (
	minHistoryRetention = time.Minute
	maxHistoryRetention = 10 * 365 * 24 * time.Hour
)

// demoReleaseOnDisconnect is release_on_disconnect's default when the
// demo is served: a closed demo tab frees its slot at once.
const demoReleaseOnDisconnect = 3 * time.Second

// Connection defaults: the upstream's time to send response headers, and
// the connections one client address may hold open.
const (
	defaultUpstreamTimeout = 30 * time.Second
	defaultMaxConnsPerIP   = 256
)

// LoadConfig reads the YAML file at path (none when path is empty), applies
// the environment overrides from environ (KEY=VALUE pairs, as os.Environ),
// fills defaults and validates. It returns the ANTEROOM_* variables it
// ignored (for the caller to log), and an error that names the key and says
// what it wants in plain words.
func LoadConfig(path string, environ []string) (Config, []EnvWarning, error) {
	var cfg Config
	if path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return Config{}, nil, fmt.Errorf("config: %w", err)
		}
		if cfg, err = ParseConfig(data); err != nil {
			return Config{}, nil, fmt.Errorf("config %s: %w", path, err)
		}
	}
	warnings, err := cfg.applyEnv(environ)
	if err != nil {
		return Config{}, nil, err
	}
	cfg.fillDefaults()
	if err := cfg.Validate(); err != nil {
		return Config{}, nil, err
	}
	return cfg, warnings, nil
}

// ParseConfig decodes YAML strictly. It neither fills defaults nor
// validates. It returns an error naming the key and its line when a key is
// unknown ("unknown key \"lisen\" at line 2; known keys: ..."), given
// twice, or holds a value of the wrong kind ("key \"gates.default.active_timeout\"
// at line 3: want a duration like 30s, ...").
func ParseConfig(data []byte) (Config, error) {
	var doc yaml.Node
	if err := yaml.NewDecoder(bytes.NewReader(data)).Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return Config{}, nil
		}
		return Config{}, fmt.Errorf("not valid YAML: %w", err)
	}
	// checkNode follows every alias at each use: refuse first a file whose
	// aliases expand it past maxExpandedNodes (31 KB of aliases to aliases
	// took seconds of CPU before yaml's own guard said no).
	if n := expandedNodes(&doc, map[*yaml.Node]int{}, 0); n > maxExpandedNodes {
		return Config{}, fmt.Errorf("not valid YAML: its aliases expand it to more than %d nodes", maxExpandedNodes)
	}
	if err := checkNode(&doc, configType, ""); err != nil {
		return Config{}, err
	}
	var cfg Config
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&cfg); err != nil && !errors.Is(err, io.EOF) {
		// checkNode has caught what it can name; this is the rest
		// (merge keys), said without Go's type names.
		return Config{}, errors.New(goTypeNames.ReplaceAllString(err.Error(), ""))
	}
	return cfg, nil
}

var (
	configType   = reflect.TypeFor[Config]()
	durationType = reflect.TypeFor[Duration]()
	// goTypeNames matches the Go type names in yaml's own errors.
	goTypeNames = regexp.MustCompile(` (in|into) (type )?[\w.*\[\]]+`)
)

// maxExpandedNodes bounds the nodes of a config file with its aliases
// expanded: far more than any real configuration (a gate is a few dozen).
const maxExpandedNodes = 200_000

// expandedNodes counts the nodes under n with every alias expanded, each
// node's count computed once (memo), so it costs the file's size, not its
// expansion; past maxExpandedNodes it stops counting.
func expandedNodes(n *yaml.Node, memo map[*yaml.Node]int, depth int) int {
	if n == nil || depth > 1000 {
		return maxExpandedNodes + 1 // nesting that deep is no configuration
	}
	if c, ok := memo[n]; ok {
		return c
	}
	memo[n] = maxExpandedNodes + 1 // an alias cycle counts as too many
	c := 1
	if n.Kind == yaml.AliasNode {
		c = expandedNodes(n.Alias, memo, depth+1)
	}
	for _, ch := range n.Content {
		if c > maxExpandedNodes {
			break
		}
		c += expandedNodes(ch, memo, depth+1)
	}
	c = min(c, maxExpandedNodes+1)
	memo[n] = c
	return c
}

// maxAliasDepth bounds how many aliases checkNode follows in a row.
const maxAliasDepth = 16

// checkNode checks that the YAML node n fits type t, the type of key (a
// dotted path, "" for the document), and returns an error in plain words
// naming the key and the line where it does not.
func checkNode(n *yaml.Node, t reflect.Type, key string) error {
	for i := 0; n.Kind == yaml.AliasNode; i++ {
		if i == maxAliasDepth || n.Alias == nil {
			return fmt.Errorf("line %d: too many aliases in a row", n.Line)
		}
		n = n.Alias
	}
	if n.Kind == yaml.DocumentNode {
		if len(n.Content) == 0 {
			return nil
		}
		return checkNode(n.Content[0], t, key)
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil // the key is unset: its default applies
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	wrong := func(want string) error {
		got := ""
		if n.Kind == yaml.ScalarNode {
			got = ", not " + quote(n.Value)
		} else if n.Kind == yaml.SequenceNode {
			got = ", not a list"
		} else if n.Kind == yaml.MappingNode {
			got = ", not a mapping"
		}
		if key == "" {
			return fmt.Errorf("line %d: the file must be a mapping of keys such as \"listen: 127.0.0.1:8080\"%s", n.Line, got)
		}
		return fmt.Errorf("key %q at line %d: %s%s", key, n.Line, want, got)
	}
	switch {
	case t == durationType:
		if n.Kind != yaml.ScalarNode {
			return wrong(wantDuration)
		}
		if _, err := parseDuration(n.Value); err != nil {
			return wrong(wantDuration)
		}
		return nil
	case t.Kind() == reflect.Struct || t.Kind() == reflect.Map:
		if n.Kind != yaml.MappingNode {
			if t.Kind() == reflect.Map {
				return wrong("want a mapping of names to sections")
			}
			return wrong("want a mapping of keys (" + strings.Join(yamlKeys(t), ", ") + ")")
		}
		seen := map[string]int{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Kind != yaml.ScalarNode {
				return fmt.Errorf("line %d: keys must be plain names", k.Line)
			}
			if k.Value == "<<" && k.Tag == "!!merge" {
				continue // a merge key: the decoder checks what it merges
			}
			sub := k.Value
			if key != "" {
				sub = key + "." + k.Value
			}
			if line, dup := seen[k.Value]; dup {
				return fmt.Errorf("key %q appears twice (lines %d and %d)", sub, line, k.Line)
			}
			seen[k.Value] = k.Line
			var vt reflect.Type
			if t.Kind() == reflect.Map {
				vt = t.Elem()
			} else {
				f, ok := fieldByYAMLKey(t, k.Value)
				if !ok {
					known := yamlKeys(t)
					msg := fmt.Sprintf("unknown key %q at line %d", sub, k.Line)
					if near := nearest(k.Value, known); editDistance(k.Value, near) <= max(2, len(near)/3) {
						msg += fmt.Sprintf(" (did you mean %q?)", near)
					}
					return fmt.Errorf("%s; known keys: %s", msg, strings.Join(known, ", "))
				}
				vt = f.Type
			}
			if err := checkNode(v, vt, sub); err != nil {
				return err
			}
		}
		return nil
	case t.Kind() == reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			return wrong("want a list such as [\"a\", \"b\"]")
		}
		for i, e := range n.Content {
			if err := checkNode(e, t.Elem(), fmt.Sprintf("%s[%d]", key, i)); err != nil {
				return err
			}
		}
		return nil
	}
	// Scalars: the YAML type must be the one wanted (yaml would turn 1.5
	// into a limit of 1), and the value must fit.
	var want string
	var tags []string
	switch t.Kind() {
	case reflect.String:
		want, tags = "want a text value", nil
	case reflect.Int, reflect.Int64:
		want, tags = "want a whole number such as 100", []string{"!!int"}
	case reflect.Float64:
		want, tags = "want a number such as 5 or 0.5", []string{"!!int", "!!float"}
	case reflect.Bool:
		want, tags = "want true or false", []string{"!!bool"}
	default:
		return nil
	}
	if n.Kind != yaml.ScalarNode || (tags != nil && !slices.Contains(tags, n.ShortTag())) ||
		n.Decode(reflect.New(t).Interface()) != nil {
		return wrong(want)
	}
	return nil
}

// fieldByYAMLKey returns the field of struct type t whose yaml tag is key.
func fieldByYAMLKey(t reflect.Type, key string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		if name, _, _ := strings.Cut(f.Tag.Get("yaml"), ","); f.IsExported() && name == key {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

// yamlKeys lists the yaml keys of struct type t, in declaration order.
func yamlKeys(t reflect.Type) []string {
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		if name, _, _ := strings.Cut(f.Tag.Get("yaml"), ","); f.IsExported() && name != "" && name != "-" {
			out = append(out, name)
		}
	}
	return out
}

const envPrefix = "ANTEROOM_"

// setting is one configuration key: its YAML key (a gate's as
// "gates.<name>.active_limit"), its environment variable (a gate's as
// "ANTEROOM_GATES_<NAME>_ACTIVE_LIMIT"), and how an environment value is
// applied. settings is the one list of them: the environment overrides, the
// -h text, and the README's and config.example.yaml's lists follow it (a
// test checks both files).
type setting struct {
	key  string
	env  string
	want string // what a value looks like, for -h and errors
	// apply sets the key from an environment value (nil for gate keys).
	apply func(c *Config, v string) error
	// applyGate sets a gate's key from an environment value.
	applyGate func(g *GateConfig, v string) error
	// verbatim: the value is used as given (an address, a path, a secret, a
	// URL), so an environment value with white space at an end or a
	// control character is refused (plainEnvValue). Durations, numbers,
	// lists and JSON are parsed, and trimmed where that matters.
	verbatim bool
}

// gateEnvPrefix begins every per-gate environment variable.
const gateEnvPrefix = envPrefix + "GATES_"

var settings = []setting{
	{key: "listen", env: "ANTEROOM_LISTEN", want: "host:port", verbatim: true, apply: func(c *Config, v string) error { c.Listen = v; return nil }},
	{key: "base_path", env: "ANTEROOM_BASE_PATH", want: "a path", verbatim: true, apply: func(c *Config, v string) error { c.BasePath = v; return nil }},
	{key: "database", env: "ANTEROOM_DATABASE", want: "a file", verbatim: true, apply: func(c *Config, v string) error { c.Database = v; return nil }},
	{key: "update_interval", env: "ANTEROOM_UPDATE_INTERVAL", want: "duration or cron spec", apply: func(c *Config, v string) error { c.UpdateInterval = v; return nil }},
	{key: "secret", env: "ANTEROOM_SECRET", want: "32+ characters", verbatim: true, apply: func(c *Config, v string) error { c.Secret = v; return nil }},
	{key: "secret_previous", env: "ANTEROOM_SECRET_PREVIOUS", want: "32+ characters", verbatim: true, apply: func(c *Config, v string) error { c.SecretPrevious = v; return nil }},
	{key: "token_ttl", env: "ANTEROOM_TOKEN_TTL", want: "duration", apply: func(c *Config, v string) error {
		d, err := parseDuration(v)
		c.TokenTTL = Duration(d)
		return err
	}},
	{key: "upstream", env: "ANTEROOM_UPSTREAM", want: "URL", verbatim: true, apply: func(c *Config, v string) error { c.Upstream = v; return nil }},
	{key: "upstream_timeout", env: "ANTEROOM_UPSTREAM_TIMEOUT", want: "duration", apply: func(c *Config, v string) error {
		d, err := parseDuration(v)
		c.UpstreamTimeout = Duration(d)
		return err
	}},
	{key: "max_conns_per_ip", env: "ANTEROOM_MAX_CONNS_PER_IP", want: "whole number", apply: func(c *Config, v string) error {
		n, err := parseInt(v)
		c.MaxConnsPerIP = &n
		return err
	}},
	{key: "protect", env: "ANTEROOM_PROTECT", want: "list", apply: func(c *Config, v string) error { c.Protect = splitList(v); return nil }},
	{key: "bypass", env: "ANTEROOM_BYPASS", want: "list", apply: func(c *Config, v string) error { c.Bypass = splitList(v); return nil }},
	{key: "api_keys", env: "ANTEROOM_API_KEYS", want: "list", apply: func(c *Config, v string) error { c.APIKeys = splitList(v); return nil }},
	{key: "demo", env: "ANTEROOM_DEMO", want: "true or false", apply: func(c *Config, v string) error {
		b, err := parseBool(v)
		c.Demo = &b
		return err
	}},
	{key: "rate_limit.per_second", env: "ANTEROOM_RATE_LIMIT_PER_SECOND", want: "number", apply: func(c *Config, v string) error {
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil {
			return fmt.Errorf("want a number such as 5 or 0.5, not %s", quote(v))
		}
		c.RateLimit.PerSecond = &f
		return nil
	}},
	{key: "rate_limit.burst", env: "ANTEROOM_RATE_LIMIT_BURST", want: "whole number", apply: func(c *Config, v string) (err error) {
		c.RateLimit.Burst, err = parseInt(v)
		return err
	}},
	{key: "trusted_proxies", env: "ANTEROOM_TRUSTED_PROXIES", want: "list", apply: func(c *Config, v string) error { c.TrustedProxies = splitList(v); return nil }},
	{key: "websocket.max_connections", env: "ANTEROOM_WEBSOCKET_MAX_CONNECTIONS", want: "whole number", apply: func(c *Config, v string) error {
		n, err := parseInt(v)
		c.Websocket.MaxConnections = &n
		return err
	}},
	{key: "websocket.max_per_client", env: "ANTEROOM_WEBSOCKET_MAX_PER_CLIENT", want: "whole number", apply: func(c *Config, v string) error {
		n, err := parseInt(v)
		c.Websocket.MaxPerClient = &n
		return err
	}},
	{key: "broadcast_interval", env: "ANTEROOM_BROADCAST_INTERVAL", want: "duration", apply: func(c *Config, v string) error {
		d, err := parseDuration(v)
		c.BroadcastInterval = Duration(d)
		return err
	}},
	{key: "allowed_origins", env: "ANTEROOM_ALLOWED_ORIGINS", want: "list", apply: func(c *Config, v string) error { c.AllowedOrigins = splitList(v); return nil }},
	{key: "log_level", env: "ANTEROOM_LOG_LEVEL", want: "debug, info, warn or error", apply: func(c *Config, v string) error { c.LogLevel = v; return nil }},
	{key: "admin_token", env: "ANTEROOM_ADMIN_TOKEN", want: "32+ characters", verbatim: true, apply: func(c *Config, v string) error { c.AdminToken = v; return nil }},
	{key: "access_log", env: "ANTEROOM_ACCESS_LOG", want: "true or false", apply: func(c *Config, v string) (err error) {
		c.AccessLog, err = parseBool(v)
		return err
	}},
	{key: "public_url", env: "ANTEROOM_PUBLIC_URL", want: "URL", verbatim: true, apply: func(c *Config, v string) error { c.PublicURL = strings.TrimSpace(v); return nil }},
	{key: "webhooks", env: "ANTEROOM_WEBHOOKS", want: "JSON list of {url, events, secret}", apply: func(c *Config, v string) (err error) {
		c.Webhooks, err = parseWebhooksEnv(v)
		return err
	}},
	{key: "history_retention", env: "ANTEROOM_HISTORY_RETENTION", want: "duration (0: no history)", apply: func(c *Config, v string) error {
		d, err := parseDuration(v)
		c.HistoryRetention = (*Duration)(&d)
		return err
	}},
	{key: "gates.<name>.active_limit", env: "ANTEROOM_GATES_<NAME>_ACTIVE_LIMIT", want: "whole number", applyGate: func(g *GateConfig, v string) error {
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil {
			return fmt.Errorf("want a whole number such as 100, not %s", quote(v))
		}
		g.ActiveLimit = &n
		return nil
	}},
	{key: "gates.<name>.active_timeout", env: "ANTEROOM_GATES_<NAME>_ACTIVE_TIMEOUT", want: "duration", applyGate: func(g *GateConfig, v string) error {
		d, err := parseDuration(v)
		g.ActiveTimeout = Duration(d)
		return err
	}},
	{key: "gates.<name>.waiting_timeout", env: "ANTEROOM_GATES_<NAME>_WAITING_TIMEOUT", want: "duration", applyGate: func(g *GateConfig, v string) error {
		d, err := parseDuration(v)
		g.WaitingTimeout = Duration(d)
		return err
	}},
	// Before claim_timeout: its variable ends the same way, and the first
	// suffix that matches names the field.
	{key: "gates.<name>.notify_claim_timeout", env: "ANTEROOM_GATES_<NAME>_NOTIFY_CLAIM_TIMEOUT", want: "duration", applyGate: func(g *GateConfig, v string) error {
		d, err := parseDuration(v)
		g.NotifyClaimTimeout = Duration(d)
		return err
	}},
	{key: "gates.<name>.claim_timeout", env: "ANTEROOM_GATES_<NAME>_CLAIM_TIMEOUT", want: "duration", applyGate: func(g *GateConfig, v string) error {
		d, err := parseDuration(v)
		g.ClaimTimeout = (*Duration)(&d)
		return err
	}},
	{key: "gates.<name>.release_on_disconnect", env: "ANTEROOM_GATES_<NAME>_RELEASE_ON_DISCONNECT", want: "duration", applyGate: func(g *GateConfig, v string) error {
		d, err := parseDuration(v)
		g.ReleaseOnDisconnect = (*Duration)(&d)
		return err
	}},
	{key: "gates.<name>.mode", env: "ANTEROOM_GATES_<NAME>_MODE", want: "open, queue_all or reject", applyGate: func(g *GateConfig, v string) error {
		g.Mode = strings.TrimSpace(v)
		return nil
	}},
	{key: "gates.<name>.new_users_per_minute", env: "ANTEROOM_GATES_<NAME>_NEW_USERS_PER_MINUTE", want: "whole number", applyGate: func(g *GateConfig, v string) error {
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil {
			return fmt.Errorf("want a whole number such as 600 (0: no pacing), not %s", quote(v))
		}
		g.NewUsersPerMinute = n
		return nil
	}},
	{key: "gates.<name>.events", env: "ANTEROOM_GATES_<NAME>_EVENTS", want: "list of events", applyGate: func(g *GateConfig, v string) (err error) {
		g.Events, err = parseEventsEnv(v)
		return err
	}},
	{key: "gates.<name>.admission_token.ttl", env: "ANTEROOM_GATES_<NAME>_ADMISSION_TOKEN_TTL", want: "duration", applyGate: func(g *GateConfig, v string) error {
		d, err := parseDuration(v)
		g.AdmissionToken.TTL = Duration(d)
		return err
	}},
}

// EnvWarning is an ANTEROOM_* environment variable that names no setting.
// It is ignored, not an error: Kubernetes sets ANTEROOM_PORT and friends for
// a Service named anteroom, and a sidecar must not crash-loop on them.
type EnvWarning struct {
	// Var is the variable's name (its value is never repeated: it may be
	// a secret under a misspelt name).
	Var string
	// Nearest is the known variable closest to Var (edit distance).
	Nearest string
	// Hint, when not empty, says where the variable likely comes from.
	Hint string
}

// kubernetesServiceLink matches the variables Kubernetes injects for a
// Service named anteroom (enableServiceLinks).
var kubernetesServiceLink = regexp.MustCompile(`^ANTEROOM_(SERVICE_HOST|SERVICE_PORT(_[A-Z0-9_]+)?|PORT(_[0-9]+_(TCP|UDP|SCTP)(_PROTO|_PORT|_ADDR)?)?)$`)

// applyEnv applies the ANTEROOM_* overrides of settings, in sorted order of
// their names. Lists are comma-separated. Per gate the variables are
// ANTEROOM_GATES_<NAME>_ACTIVE_LIMIT, _ACTIVE_TIMEOUT, _WAITING_TIMEOUT,
// _CLAIM_TIMEOUT and _RELEASE_ON_DISCONNECT, where <NAME> is the gate's name in upper case with '-' and '.' as '_'; a
// gate named only in the environment is created (its name in lower case).
// A variable that names no setting is returned as a warning. It returns an
// error naming the variable when a value is malformed, or when two
// configured gates share the same <NAME>.
func (c *Config) applyEnv(environ []string) ([]EnvWarning, error) {
	vars := map[string]string{}
	for _, kv := range environ {
		k, v, ok := strings.Cut(kv, "=")
		if ok && strings.HasPrefix(k, envPrefix) {
			vars[k] = v
		}
	}
	byEnv := make(map[string]setting, len(settings))
	for _, s := range settings {
		if s.apply != nil {
			byEnv[s.env] = s
		}
	}
	var warnings []EnvWarning
	for _, k := range sortedKeys(vars) {
		v := vars[k]
		var err error
		if s, ok := byEnv[k]; ok {
			if s.verbatim {
				err = plainEnvValue(v)
			}
			if err == nil {
				err = s.apply(c, v)
			}
		} else if applied, gerr := c.applyGateEnv(k, v); applied || gerr != nil {
			err = gerr
		} else {
			w := EnvWarning{Var: k, Nearest: c.nearestEnv(k)}
			if kubernetesServiceLink.MatchString(k) {
				w.Hint = "set by Kubernetes for a Service named anteroom (enableServiceLinks: false in the pod spec turns these off)"
			}
			warnings = append(warnings, w)
		}
		if err != nil {
			return nil, fmt.Errorf("config: environment %s: %w", k, err)
		}
	}
	return warnings, nil
}

// plainEnvValue refuses a verbatim setting's value with a control
// character or with white space at either end: a newline kept from a file
// (a Kubernetes ConfigMap made --from-file) made a database path name a new,
// empty file, and an admin token one that no header can carry.
func plainEnvValue(v string) error {
	if strings.TrimSpace(v) != v {
		return errors.New("has white space at its start or end (a newline from a file?)")
	}
	if i := strings.IndexFunc(v, func(r rune) bool { return r < 0x20 || r == 0x7f }); i >= 0 {
		return fmt.Errorf("has a control character (%q) at byte %d", v[i], i)
	}
	return nil
}

// hasGateEnvName reports whether a configured gate's environment name
// (gateEnvName) is envName.
func (c *Config) hasGateEnvName(envName string) bool {
	for n := range c.Gates {
		if gateEnvName(n) == envName {
			return true
		}
	}
	return false
}

// applyGateEnv applies k when it is a per-gate variable with a known field
// (ANTEROOM_GATES_<NAME>_<FIELD>); applied is false for any other name.
func (c *Config) applyGateEnv(k, v string) (applied bool, err error) {
	rest, ok := strings.CutPrefix(k, gateEnvPrefix)
	if !ok {
		return false, nil
	}
	// One field's name may end another's (_CLAIM_TIMEOUT, _NOTIFY_CLAIM_TIMEOUT):
	// of the ways to split the name, the one whose <NAME> is a configured
	// gate wins; two such are refused; with none, the longest field (the
	// first in settings that matches).
	var s setting
	var envName string
	configured := 0
	for _, cand := range settings {
		if cand.applyGate == nil {
			continue
		}
		field := strings.TrimPrefix(cand.env, gateEnvPrefix+"<NAME>")
		n, ok := strings.CutSuffix(rest, field)
		if !ok || n == "" {
			continue
		}
		if c.hasGateEnvName(n) {
			if configured++; configured > 1 {
				return true, fmt.Errorf("config: %s names two configured gates' settings (%s and %s): rename one of the gates", k, strings.ToLower(envName), strings.ToLower(n))
			}
			s, envName = cand, n
		} else if configured == 0 && s.applyGate == nil {
			s, envName = cand, n
		}
	}
	if s.applyGate == nil {
		return false, nil
	}
	name := ""
	for _, n := range sortedKeys(c.Gates) {
		if gateEnvName(n) != envName {
			continue
		}
		if name != "" {
			return true, gateEnvClash(name, n)
		}
		name = n
	}
	if name == "" {
		name = strings.ToLower(envName)
	}
	if c.Gates == nil {
		c.Gates = map[string]GateConfig{}
	}
	g := c.Gates[name]
	if err := s.applyGate(&g, v); err != nil {
		return true, err
	}
	c.Gates[name] = g
	return true, nil
}

// gateEnvClash is the error of two gates whose environment names are equal.
func gateEnvClash(a, b string) error {
	return fmt.Errorf("gates %q and %q would both be set by the same environment variables %s%s_*: rename one of them",
		a, b, gateEnvPrefix, gateEnvName(a))
}

// knownEnv lists every environment variable the config knows, gate
// variables spelt out for the configured gates (and <NAME> otherwise).
func (c *Config) knownEnv() []string {
	var out []string
	for _, s := range settings {
		if s.applyGate == nil {
			out = append(out, s.env)
			continue
		}
		for _, n := range sortedKeys(c.Gates) {
			out = append(out, strings.Replace(s.env, "<NAME>", gateEnvName(n), 1))
		}
		if len(c.Gates) == 0 {
			out = append(out, strings.Replace(s.env, "<NAME>", gateEnvName(defaultGate), 1))
		}
	}
	return out
}

// nearestEnv returns the known variable closest to name by edit distance.
func (c *Config) nearestEnv(name string) string {
	return nearest(name, c.knownEnv())
}

// nearest returns the candidate closest to s by edit distance (the first
// on a tie).
func nearest(s string, candidates []string) string {
	best, bestD := "", -1
	for _, cand := range candidates {
		if d := editDistance(s, cand); bestD < 0 || d < bestD {
			best, bestD = cand, d
		}
	}
	return best
}

// maxCompared bounds the length editDistance compares, so that a hostile
// name cannot make it quadratic in megabytes.
const maxCompared = 128

// editDistance is the Levenshtein distance of a and b (each cut to
// maxCompared bytes).
func editDistance(a, b string) int {
	if len(a) > maxCompared {
		a = a[:maxCompared]
	}
	if len(b) > maxCompared {
		b = b[:maxCompared]
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// splitList splits a comma-separated environment value, dropping blanks.
func splitList(v string) []string {
	var out []string
	for _, o := range strings.Split(v, ",") {
		if o = strings.TrimSpace(o); o != "" {
			out = append(out, o)
		}
	}
	return out
}

func parseInt(v string) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil {
		return 0, fmt.Errorf("want a whole number such as 100, not %s", quote(v))
	}
	return n, nil
}

func parseBool(v string) (bool, error) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "true", "1", "yes", "on":
		return true, nil
	case "false", "0", "no", "off":
		return false, nil
	}
	return false, fmt.Errorf("want true or false, not %s", quote(v))
}

// quote quotes a value for an error message, cut to 40 bytes.
func quote(v string) string {
	if len(v) > 40 {
		return strconv.Quote(v[:40]) + "..."
	}
	return strconv.Quote(v)
}

func gateEnvName(name string) string {
	return strings.NewReplacer("-", "_", ".", "_").Replace(strings.ToUpper(name))
}

// historyRetention is history_retention for session.Options: -1 when it is
// 0 (history off: nothing written, nothing pruned).
func (c *Config) historyRetention() time.Duration {
	if c.HistoryRetention == nil || *c.HistoryRetention == 0 {
		return -1
	}
	return time.Duration(*c.HistoryRetention)
}

func (c *Config) fillDefaults() {
	if c.Listen == "" {
		c.Listen = defaultListen
	}
	if c.BasePath == "" {
		c.BasePath = defaultBasePath
	}
	c.BasePath = strings.TrimRight(c.BasePath, "/")
	if c.Database == "" {
		c.Database = defaultDatabase
	}
	if c.UpdateInterval == "" {
		c.UpdateInterval = defaultUpdateInterval
	}
	if c.TokenTTL == 0 {
		c.TokenTTL = Duration(defaultTokenTTL)
	}
	if c.HistoryRetention == nil {
		d := Duration(session.DefaultHistoryRetention)
		c.HistoryRetention = &d
	}
	if c.BroadcastInterval == 0 {
		c.BroadcastInterval = Duration(defaultBroadcastInterval)
	}
	if len(c.Protect) == 0 {
		c.Protect = []string{"/"}
	}
	if c.LogLevel == "" {
		c.LogLevel = "info"
	}
	if c.Demo == nil {
		on := true
		c.Demo = &on
	}
	if c.UpstreamTimeout == 0 {
		c.UpstreamTimeout = Duration(defaultUpstreamTimeout)
	}
	if c.MaxConnsPerIP == nil {
		n := defaultMaxConnsPerIP
		c.MaxConnsPerIP = &n
	}
	if c.RateLimit.PerSecond == nil {
		f := defaultRatePerSecond
		c.RateLimit.PerSecond = &f
	}
	if c.RateLimit.Burst == 0 {
		c.RateLimit.Burst = defaultRateBurst
	}
	if c.Websocket.MaxConnections == nil {
		n := defaultMaxSockets
		c.Websocket.MaxConnections = &n
	}
	if c.Websocket.MaxPerClient == nil {
		n := defaultMaxSocketsPerClient
		c.Websocket.MaxPerClient = &n
	}
	if c.Webhooks == nil {
		c.Webhooks = []WebhookConfig{}
	}
	if len(c.Gates) == 0 {
		c.Gates = map[string]GateConfig{defaultGate: {}}
	}
	for name, g := range c.Gates {
		if g.ActiveLimit == nil {
			n := int64(defaultActiveLimit)
			g.ActiveLimit = &n
		}
		if g.ActiveTimeout == 0 {
			g.ActiveTimeout = Duration(defaultActiveTimeout)
		}
		if g.WaitingTimeout == 0 {
			g.WaitingTimeout = Duration(defaultWaitingTimeout)
		}
		if g.ClaimTimeout == nil {
			d := Duration(defaultClaimTimeout)
			g.ClaimTimeout = &d
		}
		if g.ReleaseOnDisconnect == nil {
			var d Duration
			if c.DemoServed() {
				d = Duration(demoReleaseOnDisconnect)
			}
			g.ReleaseOnDisconnect = &d
		}
		if g.Mode == "" {
			g.Mode = string(session.ModeOpen)
		}
		c.Gates[name] = g
	}
}

// Validate checks every key and returns the first problem, naming the key.
func (c Config) Validate() error {
	bad := func(key, format string, args ...any) error {
		return fmt.Errorf("config: %s: %s", key, fmt.Sprintf(format, args...))
	}
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		return bad("listen", "%q is not host:port (for example \"127.0.0.1:8080\")", c.Listen)
	}
	if c.BasePath == "" || !strings.HasPrefix(c.BasePath, "/") || strings.ContainsAny(c.BasePath, "?#* ") {
		return bad("base_path", "%q must be a path such as \"/anteroom\", not \"/\"", c.BasePath)
	}
	if strings.TrimSpace(c.Database) == "" {
		return bad("database", "must name a file or a postgres:// URL")
	}
	if _, err := cronjobs.ParseSchedule(c.UpdateInterval); err != nil {
		return bad("update_interval", "%v", err)
	}
	if c.Secret != "" && len(c.Secret) < minSecretLength {
		return bad("secret", "must be at least %d characters (or empty to generate one)", minSecretLength)
	}
	if c.AdminToken != "" && len(c.AdminToken) < minAdminTokenLength {
		return bad("admin_token", "must be at least %d characters (or empty: /metrics open, admin off)", minAdminTokenLength)
	}
	if c.SecretPrevious != "" && len(c.SecretPrevious) < minSecretLength {
		return bad("secret_previous", "must be at least %d characters (or empty: no rotation)", minSecretLength)
	}
	if time.Duration(c.TokenTTL) < minTokenTTL {
		return bad("token_ttl", "must be at least %v (default %v)", minTokenTTL, defaultTokenTTL)
	}
	if r := time.Duration(*c.HistoryRetention); r != 0 && (r < minHistoryRetention || r > maxHistoryRetention) {
		return bad("history_retention", "must be 0 (no history) or from %v to %v (default %v)", minHistoryRetention, maxHistoryRetention, session.DefaultHistoryRetention)
	}
	if c.Upstream != "" {
		u, err := url.Parse(c.Upstream)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return bad("upstream", "%q must be an absolute http or https URL such as \"http://127.0.0.1:3000\"", c.Upstream)
		}
	}
	for key, list := range map[string][]string{"protect": c.Protect, "bypass": c.Bypass} {
		for i, p := range list {
			if !strings.HasPrefix(p, "/") {
				return bad(fmt.Sprintf("%s[%d]", key, i), "%q must be a path prefix starting with '/'", p)
			}
			if strings.HasPrefix(p, c.BasePath+"/") || p == c.BasePath {
				return bad(fmt.Sprintf("%s[%d]", key, i), "%q lies under base_path %q, which anteroom serves itself", p, c.BasePath)
			}
		}
	}
	if c.UpstreamTimeout < 0 {
		return bad("upstream_timeout", "must be a positive duration such as \"30s\"")
	}
	if n := c.MaxConnsPerIP; n != nil && *n < 0 {
		return bad("max_conns_per_ip", "must not be negative (0: no cap)")
	}
	for i, k := range c.APIKeys {
		if len(k) < minAPIKeyLength {
			return bad(fmt.Sprintf("api_keys[%d]", i), "must be at least %d characters", minAPIKeyLength)
		}
	}
	if time.Duration(c.BroadcastInterval) < 0 {
		return bad("broadcast_interval", "must not be negative")
	}
	for i, o := range c.AllowedOrigins {
		if strings.TrimSpace(o) == "" {
			return bad(fmt.Sprintf("allowed_origins[%d]", i), "must not be empty")
		}
	}
	if r := c.RateLimit.PerSecond; r != nil && (math.IsNaN(*r) || math.IsInf(*r, 0) || *r < 0) {
		return bad("rate_limit.per_second", "must be a finite number, 0 or more (0 turns the limit off)")
	}
	if c.RateLimit.Burst < 0 {
		return bad("rate_limit.burst", "must not be negative")
	}
	if n := c.Websocket.MaxConnections; n != nil && *n < 0 {
		return bad("websocket.max_connections", "must not be negative (0: no cap)")
	}
	if n := c.Websocket.MaxPerClient; n != nil && *n < 0 {
		return bad("websocket.max_per_client", "must not be negative (0: no cap)")
	}
	if _, err := c.TrustedNetworks(); err != nil {
		return err
	}
	if _, err := parseLogLevel(c.LogLevel); err != nil {
		return bad("log_level", "%v", err)
	}
	if c.PublicURL != "" {
		u, err := url.Parse(c.PublicURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil {
			return bad("public_url", "%q must be an origin such as \"https://shop.example.com\" (no path)", c.PublicURL)
		}
	}
	if err := validateWebhooks(c.Webhooks); err != nil {
		return err
	}
	if len(c.Gates) == 0 {
		return bad("gates", "configure at least one gate")
	}
	envNames := map[string]string{}
	for _, name := range sortedKeys(c.Gates) {
		if other, clash := envNames[gateEnvName(name)]; clash {
			return bad("gates", "%v", gateEnvClash(other, name))
		}
		envNames[gateEnvName(name)] = name
	}
	for _, name := range sortedKeys(c.Gates) {
		g := c.Gates[name]
		key := "gates." + name
		if !session.ValidGateName(name) {
			return bad(key, "gate names are 1-64 characters of a-z, A-Z, 0-9, '-', '_' or '.'")
		}
		if g.ActiveLimit == nil || *g.ActiveLimit < 0 {
			return bad(key+".active_limit", "must be a whole number, 0 or more")
		}
		if g.ActiveTimeout <= 0 {
			return bad(key+".active_timeout", "must be a positive duration such as \"5m\"")
		}
		if g.WaitingTimeout <= 0 {
			return bad(key+".waiting_timeout", "must be a positive duration such as \"5m\"")
		}
		if g.ClaimTimeout != nil && (*g.ClaimTimeout < 0 || time.Duration(*g.ClaimTimeout) > session.MaxWindow) {
			return bad(key+".claim_timeout", "must not be negative (0 turns the claim window off) nor past %v", session.MaxWindow)
		}
		if g.ReleaseOnDisconnect != nil && (*g.ReleaseOnDisconnect < 0 || time.Duration(*g.ReleaseOnDisconnect) > session.MaxWindow) {
			return bad(key+".release_on_disconnect", "must not be negative (0 turns it off) nor past %v", session.MaxWindow)
		}
		if m := session.Mode(g.Mode); !m.Valid() {
			return bad(key+".mode", "%s: want open, queue_all or reject", quote(g.Mode))
		}
		if g.NewUsersPerMinute < 0 || g.NewUsersPerMinute > session.MaxNewUsersPerMinute {
			return bad(key+".new_users_per_minute", "must be 0 (no pacing) or a positive number of admissions per minute")
		}
		if _, err := sessionEvents(name, g.Events); err != nil {
			return err
		}
		if d := time.Duration(g.AdmissionToken.TTL); d != 0 && (d < time.Second || d > maxAdmissionTTL) {
			return bad(key+".admission_token.ttl", "must be 0 (no admission tokens) or from 1s to %v, such as \"5m\"", maxAdmissionTTL)
		}
		if g.NotifyClaimTimeout < 0 || time.Duration(g.NotifyClaimTimeout) > session.MaxWindow {
			return bad(key+".notify_claim_timeout", "must be a duration such as \"15m\", at most %v", session.MaxWindow)
		}
	}
	return nil
}

// wideNetworks returns those of nets wider than an IPv4 /8 or an IPv6 /32
// ("0.0.0.0/0"): every address in them may set X-Forwarded-For and is
// exempt from max_conns_per_ip, so per-client limits become the client's
// word. Worth a warning at start.
func wideNetworks(nets []*net.IPNet) []string {
	var out []string
	for _, n := range nets {
		if ones, bits := n.Mask.Size(); ones < bits/4 {
			out = append(out, n.String())
		}
	}
	return out
}

// TrustedNetworks parses trusted_proxies: CIDRs ("10.0.0.0/8") or single
// addresses ("127.0.0.1"). It returns an error naming the bad entry.
func (c Config) TrustedNetworks() ([]*net.IPNet, error) {
	var out []*net.IPNet
	for i, p := range c.TrustedProxies {
		p = strings.TrimSpace(p)
		if !strings.Contains(p, "/") {
			ip := net.ParseIP(p)
			if ip == nil {
				return nil, fmt.Errorf("config: trusted_proxies[%d]: %q is neither an IP address nor a CIDR", i, p)
			}
			bits := 32
			if ip.To4() == nil {
				bits = 128
			}
			p = fmt.Sprintf("%s/%d", p, bits)
		}
		_, n, err := net.ParseCIDR(p)
		if err != nil {
			return nil, fmt.Errorf("config: trusted_proxies[%d]: %q is neither an IP address nor a CIDR", i, c.TrustedProxies[i])
		}
		out = append(out, n)
	}
	return out, nil
}

// DemoServed reports whether the demo app is served: demo is on (the
// default) and no upstream is set. Defaults must have been filled.
func (c Config) DemoServed() bool {
	return c.Upstream == "" && (c.Demo == nil || *c.Demo)
}

// SessionGates returns the gates as the session package wants them, sorted
// by name.
func (c Config) SessionGates() []session.GateConfig {
	out := make([]session.GateConfig, 0, len(c.Gates))
	for _, name := range sortedKeys(c.Gates) {
		g := c.Gates[name]
		out = append(out, session.GateConfig{
			Name:               name,
			ActiveLimit:        *g.ActiveLimit,
			ActiveTimeout:      time.Duration(g.ActiveTimeout),
			WaitingTimeout:     time.Duration(g.WaitingTimeout),
			Mode:               session.Mode(g.Mode),
			NewUsersPerMinute:  g.NewUsersPerMinute,
			NotifyClaimTimeout: time.Duration(g.NotifyClaimTimeout),
			AdmissionTTL:       time.Duration(g.AdmissionToken.TTL).Truncate(time.Second),
		})
		if g.ClaimTimeout != nil {
			out[len(out)-1].ClaimTimeout = time.Duration(*g.ClaimTimeout)
		}
		if g.ReleaseOnDisconnect != nil {
			out[len(out)-1].ReleaseOnDisconnect = time.Duration(*g.ReleaseOnDisconnect)
		}
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
