package main

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// token_ttl and secret_previous: defaults, environment, and refusals that
// name the key.
func TestTokenTTLAndPreviousSecretConfig(t *testing.T) {
	long := strings.Repeat("p", 32)
	cfg, _, err := LoadConfig("", nil)
	require.NoError(t, err)
	assert.Equal(t, 24*time.Hour, time.Duration(cfg.TokenTTL))
	assert.Empty(t, cfg.SecretPrevious)

	cfg, _, err = LoadConfig("", []string{"ANTEROOM_TOKEN_TTL=2h", "ANTEROOM_SECRET_PREVIOUS=" + long})
	require.NoError(t, err)
	assert.Equal(t, 2*time.Hour, time.Duration(cfg.TokenTTL))
	assert.Equal(t, long, cfg.SecretPrevious)

	for env, want := range map[string]string{
		"ANTEROOM_TOKEN_TTL=30s":         "token_ttl",
		"ANTEROOM_TOKEN_TTL=-1h":         "token_ttl",
		"ANTEROOM_TOKEN_TTL=soon":        "ANTEROOM_TOKEN_TTL",
		"ANTEROOM_SECRET_PREVIOUS=short": "secret_previous",
	} {
		_, _, err := LoadConfig("", []string{env})
		assert.ErrorContains(t, err, want, env)
	}
}
