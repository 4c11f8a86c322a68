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
	Listen            string                `yaml:"listen"`
	BasePath          string                `yaml:"base_path"`
	Database          string                `yaml:"database"`
	UpdateInterval    string                `yaml:"update_interval"`
	Secret            string                `yaml:"secret"`
	SecretPrevious    string                `yaml:"secret_previous"`
	TokenTTL          Duration              `yaml:"token_ttl"`
	Upstream          string                `yaml:"upstream"`
	Protect           []string              `yaml:"protect"`
	Bypass            []string              `yaml:"bypass"`
	APIKeys           []string              `yaml:"api_keys"`
	BroadcastInterval Duration              `yaml:"broadcast_interval"`
	AllowedOrigins    []string              `yaml:"allowed_origins"`
	LogLevel          string                `yaml:"log_level"`
	RateLimit         RateLimitConfig       `yaml:"rate_limit"`
	TrustedProxies    []string              `yaml:"trusted_proxies"`
	Websocket         WebsocketConfig       `yaml:"websocket"`
	Gates             map[string]GateConfig `yaml:"gates"`
}

// GateConfig is one gate's section of the configuration.
type GateConfig struct {
	ActiveLimit    *int64   `yaml:"active_limit"`
	ActiveTimeout  Duration `yaml:"active_timeout"`
	WaitingTimeout Duration `yaml:"waiting_timeout"`
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

// UnmarshalYAML parses a Go duration string.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	var s string
	if err := n.Decode(&s); err != nil {
		return fmt.Errorf("line %d: want a duration such as \"5m\"", n.Line)
	}
	v, err := parseDuration(s)
	if err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	*d = Duration(v)
	return nil
}

func parseDuration(s string) (time.Duration, error) {
	v, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration such as \"5m\" or \"250ms\"", s)
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
	defaultWaitingTimeout      = time.Minute
	minSecretLength            = 32
	minAPIKeyLength            = 16
	defaultRatePerSecond       = 5.0
	defaultRateBurst           = 20
	defaultMaxSockets          = 10000
	defaultMaxSocketsPerClient = 100
)

// LoadConfig reads the YAML file at path (none when path is empty), applies
// the environment overrides from environ (KEY=VALUE pairs, as os.Environ),
// fills defaults and validates. Errors name the key and the problem.
func LoadConfig(path string, environ []string) (Config, error) {
	var cfg Config
	if path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return Config{}, fmt.Errorf("config: %w", err)
		}
		if cfg, err = ParseConfig(data); err != nil {
			return Config{}, fmt.Errorf("config %s: %w", path, err)
		}
	}
	if err := cfg.applyEnv(environ); err != nil {
		return Config{}, err
	}
	cfg.fillDefaults()
	if err := cfg.Validate(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// ParseConfig decodes YAML strictly: an unknown key is an error. It neither
// fills defaults nor validates.
func ParseConfig(data []byte) (Config, error) {
	var cfg Config
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&cfg); err != nil && !errors.Is(err, io.EOF) {
		return Config{}, err
	}
	return cfg, nil
}

const envPrefix = "ANTEROOM_"

// applyEnv applies ANTEROOM_* overrides: ANTEROOM_LISTEN, ANTEROOM_BASE_PATH,
// ANTEROOM_DATABASE, ANTEROOM_UPDATE_INTERVAL, ANTEROOM_SECRET,
// ANTEROOM_UPSTREAM, ANTEROOM_PROTECT, ANTEROOM_BYPASS, ANTEROOM_API_KEYS,
// ANTEROOM_BROADCAST_INTERVAL, ANTEROOM_ALLOWED_ORIGINS (lists
// comma-separated), ANTEROOM_LOG_LEVEL, and per gate
// ANTEROOM_GATES_<NAME>_ACTIVE_LIMIT / _ACTIVE_TIMEOUT / _WAITING_TIMEOUT,
// where <NAME> is the gate's name in upper case with '-' and '.' as '_'.
// A gate named only in the environment is created.
func (c *Config) applyEnv(environ []string) error {
	vars := map[string]string{}
	for _, kv := range environ {
		k, v, ok := strings.Cut(kv, "=")
		if ok && strings.HasPrefix(k, envPrefix) {
			vars[k] = v
		}
	}
	keys := make([]string, 0, len(vars))
	for k := range vars {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := vars[k]
		var err error
		switch k {
		case "ANTEROOM_LISTEN":
			c.Listen = v
		case "ANTEROOM_BASE_PATH":
			c.BasePath = v
		case "ANTEROOM_DATABASE":
			c.Database = v
		case "ANTEROOM_UPDATE_INTERVAL":
			c.UpdateInterval = v
		case "ANTEROOM_SECRET":
			c.Secret = v
		case "ANTEROOM_SECRET_PREVIOUS":
			c.SecretPrevious = v
		case "ANTEROOM_TOKEN_TTL":
			var d time.Duration
			d, err = parseDuration(v)
			c.TokenTTL = Duration(d)
		case "ANTEROOM_UPSTREAM":
			c.Upstream = v
		case "ANTEROOM_LOG_LEVEL":
			c.LogLevel = v
		case "ANTEROOM_ALLOWED_ORIGINS":
			c.AllowedOrigins = splitList(v)
		case "ANTEROOM_PROTECT":
			c.Protect = splitList(v)
		case "ANTEROOM_BYPASS":
			c.Bypass = splitList(v)
		case "ANTEROOM_API_KEYS":
			c.APIKeys = splitList(v)
		case "ANTEROOM_WEBSOCKET_MAX_CONNECTIONS", "ANTEROOM_WEBSOCKET_MAX_PER_CLIENT":
			var n int
			if n, err = strconv.Atoi(strings.TrimSpace(v)); err != nil {
				err = fmt.Errorf("%q is not a whole number", v)
			}
			if k == "ANTEROOM_WEBSOCKET_MAX_CONNECTIONS" {
				c.Websocket.MaxConnections = &n
			} else {
				c.Websocket.MaxPerClient = &n
			}
		case "ANTEROOM_TRUSTED_PROXIES":
			c.TrustedProxies = splitList(v)
		case "ANTEROOM_RATE_LIMIT_PER_SECOND":
			var f float64
			if f, err = strconv.ParseFloat(strings.TrimSpace(v), 64); err != nil {
				err = fmt.Errorf("%q is not a number", v)
			}
			c.RateLimit.PerSecond = &f
		case "ANTEROOM_RATE_LIMIT_BURST":
			if c.RateLimit.Burst, err = strconv.Atoi(strings.TrimSpace(v)); err != nil {
				err = fmt.Errorf("%q is not a whole number", v)
			}
		case "ANTEROOM_BROADCAST_INTERVAL":
			var d time.Duration
			d, err = parseDuration(v)
			c.BroadcastInterval = Duration(d)
		default:
			if strings.HasPrefix(k, "ANTEROOM_GATES_") {
				err = c.applyGateEnv(strings.TrimPrefix(k, "ANTEROOM_GATES_"), v)
			} else {
				err = errors.New("unknown variable")
			}
		}
		if err != nil {
			return fmt.Errorf("config: environment %s: %w", k, err)
		}
	}
	return nil
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

func (c *Config) applyGateEnv(rest, v string) error {
	var field string
	for _, f := range []string{"_ACTIVE_LIMIT", "_ACTIVE_TIMEOUT", "_WAITING_TIMEOUT"} {
		if strings.HasSuffix(rest, f) && len(rest) > len(f) {
			field = f
			break
		}
	}
	if field == "" {
		return errors.New("want ANTEROOM_GATES_<NAME>_ACTIVE_LIMIT, _ACTIVE_TIMEOUT or _WAITING_TIMEOUT")
	}
	envName := strings.TrimSuffix(rest, field)
	name := ""
	for n := range c.Gates {
		if gateEnvName(n) == envName {
			name = n
		}
	}
	if name == "" {
		name = strings.ToLower(envName)
	}
	if c.Gates == nil {
		c.Gates = map[string]GateConfig{}
	}
	g := c.Gates[name]
	switch field {
	case "_ACTIVE_LIMIT":
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil {
			return fmt.Errorf("%q is not a whole number", v)
		}
		g.ActiveLimit = &n
	case "_ACTIVE_TIMEOUT", "_WAITING_TIMEOUT":
		d, err := parseDuration(v)
		if err != nil {
			return err
		}
		if field == "_ACTIVE_TIMEOUT" {
			g.ActiveTimeout = Duration(d)
		} else {
			g.WaitingTimeout = Duration(d)
		}
	}
	c.Gates[name] = g
	return nil
}

func gateEnvName(name string) string {
	return strings.NewReplacer("-", "_", ".", "_").Replace(strings.ToUpper(name))
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
	if c.BroadcastInterval == 0 {
		c.BroadcastInterval = Duration(defaultBroadcastInterval)
	}
	if len(c.Protect) == 0 {
		c.Protect = []string{"/"}
	}
	if c.LogLevel == "" {
		c.LogLevel = "info"
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
		return bad("database", "must name a file")
	}
	if _, err := cronjobs.ParseSchedule(c.UpdateInterval); err != nil {
		return bad("update_interval", "%v", err)
	}
	if c.Secret != "" && len(c.Secret) < minSecretLength {
		return bad("secret", "must be at least %d characters (or empty to generate one)", minSecretLength)
	}
	if c.SecretPrevious != "" && len(c.SecretPrevious) < minSecretLength {
		return bad("secret_previous", "must be at least %d characters (or empty: no rotation)", minSecretLength)
	}
	if time.Duration(c.TokenTTL) < minTokenTTL {
		return bad("token_ttl", "must be at least %v (default %v)", minTokenTTL, defaultTokenTTL)
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
	if len(c.Gates) == 0 {
		return bad("gates", "configure at least one gate")
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
			return bad(key+".waiting_timeout", "must be a positive duration such as \"1m\"")
		}
	}
	return nil
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

// SessionGates returns the gates as the session package wants them, sorted
// by name.
func (c Config) SessionGates() []session.GateConfig {
	out := make([]session.GateConfig, 0, len(c.Gates))
	for _, name := range sortedKeys(c.Gates) {
		g := c.Gates[name]
		out = append(out, session.GateConfig{
			Name:           name,
			ActiveLimit:    *g.ActiveLimit,
			ActiveTimeout:  time.Duration(g.ActiveTimeout),
			WaitingTimeout: time.Duration(g.WaitingTimeout),
		})
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
