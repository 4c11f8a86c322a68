package main

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Attacks on the configuration found by a review, kept as tests: each
// failed before its fix.

// A claim window or a grace past the year is refused: its deadline, stored
// in Unix nanoseconds, wrapped around into the past (2100000h was stored as
// 1681) and every promoted session was purged at once.
func TestConfigRefusesWindowsPastAYear(t *testing.T) {
	for _, tc := range []struct{ key, value string }{
		{"claim_timeout", "2100000h"},
		{"notify_claim_timeout", "2562047h"},
		{"release_on_disconnect", "9000h"},
	} {
		t.Run(tc.key, func(t *testing.T) {
			_, _, err := LoadConfig(writeConfig(t, "gates:\n  default:\n    "+tc.key+": "+tc.value+"\n"), nil)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.key)
			_, _, err = LoadConfig(writeConfig(t, "gates:\n  default:\n    "+tc.key+": 8760h\n"), nil)
			assert.NoError(t, err, "a year is still fine")
		})
	}
}

// A top-level setting's value from the environment with white space at an
// end or a control character is refused: "…/anteroom.db\n" (a ConfigMap
// made --from-file) opened a new, empty database and lost every session.
func TestEnvValuesWithANewlineAreRefused(t *testing.T) {
	for _, kv := range []string{
		"ANTEROOM_DATABASE=/var/lib/anteroom/anteroom.db\n",
		"ANTEROOM_ADMIN_TOKEN=" + "0123456789abcdef0123456789abcde\n",
		"ANTEROOM_LISTEN= 127.0.0.1:8080",
		"ANTEROOM_BASE_PATH=/ante\troom",
		"ANTEROOM_SECRET=0123456789abcdef0123456789abcdef\r",
	} {
		_, _, err := LoadConfig("", []string{kv})
		require.Error(t, err, "%q", kv)
		assert.Contains(t, err.Error(), kv[:len("ANTEROOM_")+4], "the error names the variable")
	}
	cfg, _, err := LoadConfig("", []string{"ANTEROOM_DATABASE=/var/lib/anteroom/anteroom.db"})
	require.NoError(t, err)
	assert.Equal(t, "/var/lib/anteroom/anteroom.db", cfg.Database)
	// Lists (their items are trimmed) and JSON (a block scalar in a compose
	// file ends in a newline) are left alone.
	cfg, _, err = LoadConfig("", []string{
		"ANTEROOM_ALLOWED_ORIGINS=https://a.example, https://b.example\n",
		"ANTEROOM_WEBHOOKS=[\n  {\"url\": \"https://hooks.example/anteroom\", \"events\": [\"promoted\"], \"secret\": \"0123456789abcdef0123456789abcdef\"}\n]\n",
	})
	require.NoError(t, err)
	assert.Equal(t, []string{"https://a.example", "https://b.example"}, cfg.AllowedOrigins)
	require.Len(t, cfg.Webhooks, 1)
}

// A gate's variable whose field ends another field's name
// (_NOTIFY_CLAIM_TIMEOUT, _CLAIM_TIMEOUT) goes to the configured gate:
// before, ANTEROOM_GATES_SHOP_NOTIFY_CLAIM_TIMEOUT made a new gate "shop"
// instead of setting gate shop_notify's claim_timeout.
func TestGateEnvGoesToTheConfiguredGate(t *testing.T) {
	cfg, _, err := LoadConfig(writeConfig(t, "gates:\n  shop_notify: {active_limit: 5}\n"),
		[]string{"ANTEROOM_GATES_SHOP_NOTIFY_CLAIM_TIMEOUT=5s"})
	require.NoError(t, err)
	assert.Equal(t, []string{"shop_notify"}, sortedKeys(cfg.Gates), "no gate is made")
	require.NotNil(t, cfg.Gates["shop_notify"].ClaimTimeout)
	assert.Equal(t, 5*time.Second, time.Duration(*cfg.Gates["shop_notify"].ClaimTimeout))

	// With no such gate configured, the longer field, as before.
	cfg, _, err = LoadConfig(writeConfig(t, "gates:\n  shop: {active_limit: 5}\n"),
		[]string{"ANTEROOM_GATES_SHOP_NOTIFY_CLAIM_TIMEOUT=5s"})
	require.NoError(t, err)
	assert.Equal(t, []string{"shop"}, sortedKeys(cfg.Gates))
	assert.Equal(t, 5*time.Second, time.Duration(cfg.Gates["shop"].NotifyClaimTimeout))

	// Both gates configured: the variable could be either's, and is refused.
	_, _, err = LoadConfig(writeConfig(t, "gates:\n  shop: {active_limit: 5}\n  shop_notify: {active_limit: 5}\n"),
		[]string{"ANTEROOM_GATES_SHOP_NOTIFY_CLAIM_TIMEOUT=5s"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "ANTEROOM_GATES_SHOP_NOTIFY_CLAIM_TIMEOUT")
}

// A cron spec of a date that never comes is refused: the update would never
// run again after the first.
func TestConfigRefusesAScheduleThatNeverRuns(t *testing.T) {
	for _, spec := range []string{"0 0 30 2 *", "0 0 31 4 *"} {
		_, _, err := LoadConfig(writeConfig(t, "update_interval: \""+spec+"\"\n"), nil)
		require.Error(t, err, spec)
		assert.Contains(t, err.Error(), "never runs")
	}
	_, _, err := LoadConfig(writeConfig(t, "update_interval: \"0 0 29 2 *\"\n"), nil)
	assert.NoError(t, err, "a leap day comes")
}

// trusted_proxies wider than an IPv4 /8 or an IPv6 /32 is warned about at
// start: every client in it is believed about its own address.
func TestWideTrustedNetworks(t *testing.T) {
	var nets []*net.IPNet
	for _, c := range []string{"0.0.0.0/0", "10.0.0.0/8", "127.0.0.1/32", "::/0", "2001:db8::/32", "100.0.0.0/7"} {
		_, n, err := net.ParseCIDR(c)
		require.NoError(t, err)
		nets = append(nets, n)
	}
	assert.Equal(t, []string{"0.0.0.0/0", "::/0", "100.0.0.0/7"}, wideNetworks(nets))
}

// A file whose aliases expand it enormously is refused before checkNode
// follows them: 31 KB of aliases to aliases took 3.5 s of CPU before
// yaml's own guard said no.
func TestConfigRefusesAnAliasBomb(t *testing.T) {
	var b strings.Builder
	b.WriteString("gates:\n  g0: &g\n    events: [&e {id: x}")
	for range 1999 {
		b.WriteString(", *e")
	}
	b.WriteString("]\n")
	for i := 1; i < 2000; i++ {
		fmt.Fprintf(&b, "  g%d: *g\n", i)
	}
	_, err := ParseConfig([]byte(b.String()))
	require.Error(t, err)
	// Refused by the count of the expansion (linear in the file), not by
	// yaml's guard after checkNode walked it ("excessive aliasing").
	assert.Contains(t, err.Error(), "aliases expand it")

	// A few aliases, as people use them, are fine.
	_, err = ParseConfig([]byte("gates:\n  a: &base {active_limit: 5}\n  b: *base\n"))
	assert.NoError(t, err)
}
