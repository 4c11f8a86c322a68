package main

import (
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session/postgres/pgtest"
)

// gates.<name>.admission_token.ttl: off by default, from the file and the
// environment, refused out of range naming the key.
func TestAdmissionTokenConfig(t *testing.T) {
	cfg, _, err := LoadConfig("", nil)
	require.NoError(t, err)
	assert.Empty(t, cfg.AdmissionTTLs())

	path := filepath.Join(t.TempDir(), "c.yaml")
	require.NoError(t, os.WriteFile(path, []byte("gates:\n  sale:\n    admission_token:\n      ttl: 3m\n  plain: {}\n"), 0o600))
	cfg, _, err = LoadConfig(path, nil)
	require.NoError(t, err)
	assert.Equal(t, map[string]time.Duration{"sale": 3 * time.Minute}, cfg.AdmissionTTLs())

	cfg, _, err = LoadConfig(path, []string{"ANTEROOM_GATES_PLAIN_ADMISSION_TOKEN_TTL=90s"})
	require.NoError(t, err)
	assert.Equal(t, map[string]time.Duration{"sale": 3 * time.Minute, "plain": 90 * time.Second}, cfg.AdmissionTTLs())

	for env, want := range map[string]string{
		"ANTEROOM_GATES_DEFAULT_ADMISSION_TOKEN_TTL=-1m":  "gates.default.admission_token.ttl",
		"ANTEROOM_GATES_DEFAULT_ADMISSION_TOKEN_TTL=25h":  "gates.default.admission_token.ttl",
		"ANTEROOM_GATES_DEFAULT_ADMISSION_TOKEN_TTL=10ms": "gates.default.admission_token.ttl",
		"ANTEROOM_GATES_DEFAULT_ADMISSION_TOKEN_TTL=soon": "ANTEROOM_GATES_DEFAULT_ADMISSION_TOKEN_TTL",
	} {
		_, _, err := LoadConfig("", []string{env})
		assert.ErrorContains(t, err, want, env)
	}
	for doc, want := range map[string]string{
		"gates:\n  d:\n    admission_token: 5m\n":             "gates.d.admission_token",
		"gates:\n  d:\n    admission_token:\n      tll: 5m\n": `unknown key "gates.d.admission_token.tll"`,
	} {
		_, err := ParseConfig([]byte(doc))
		assert.ErrorContains(t, err, want, doc)
	}
}

// The sidecar issues admission tokens at a configured gate only, publishes
// its JWKS, and keeps its keys and the redeemed jtis across a restart.
func TestRunAdmissionTokensAcrossRestarts(t *testing.T) {
	db := filepath.Join(t.TempDir(), "anteroom.db")
	const key = "checkout-api-key-0123456789"
	env := []string{"ANTEROOM_DATABASE=" + db, "ANTEROOM_GATES_DEFAULT_ADMISSION_TOKEN_TTL=5m", "ANTEROOM_API_KEYS=" + key}
	r := start(t, env)
	post := func(addr, path, body string, headers ...string) (int, map[string]any) {
		req, err := http.NewRequest(http.MethodPost, "http://"+addr+path, strings.NewReader(body))
		require.NoError(t, err)
		for i := 0; i+1 < len(headers); i += 2 {
			req.Header.Set(headers[i], headers[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		var v map[string]any
		require.NoError(t, json.Unmarshal(b, &v), "%s", b)
		return resp.StatusCode, v
	}
	kidOf := func(jwt string) string {
		h, err := base64.RawURLEncoding.DecodeString(strings.Split(jwt, ".")[0])
		require.NoError(t, err)
		var m map[string]string
		require.NoError(t, json.Unmarshal(h, &m))
		return m["kid"]
	}
	status, v := post(r.addr, "/anteroom/api/join", "")
	require.Equal(t, http.StatusOK, status)
	adm, _ := v["admission"].(string)
	require.NotEmpty(t, adm)
	status, jwks := getJSON(t, "http://"+r.addr+"/anteroom/.well-known/jwks.json")
	require.Equal(t, http.StatusOK, status)
	require.Len(t, jwks["keys"], 1)

	status, _ = post(r.addr, "/anteroom/api/redeem", `{"token":"`+adm+`"}`, "X-Anteroom-Key", key)
	require.Equal(t, http.StatusOK, status)
	require.NoError(t, r.stop())

	r2 := start(t, env)
	status, body := post(r2.addr, "/anteroom/api/redeem", `{"token":"`+adm+`"}`, "X-Anteroom-Key", key)
	assert.Equal(t, http.StatusConflict, status, "redeemed before the restart: %v", body)
	_, again := getJSON(t, "http://"+r2.addr+"/anteroom/.well-known/jwks.json")
	assert.Equal(t, jwks, again, "the keys are kept in the database")
	status, v = post(r2.addr, "/anteroom/api/join", "")
	require.Equal(t, http.StatusOK, status)
	assert.Equal(t, kidOf(adm), kidOf(v["admission"].(string)), "signed with the same key")

	// A sidecar without admission tokens serves no JWKS and no redeem.
	require.NoError(t, r2.stop())
	r3 := start(t, []string{"ANTEROOM_DATABASE=" + db})
	status, _ = getJSON(t, "http://"+r3.addr+"/anteroom/.well-known/jwks.json")
	assert.Equal(t, http.StatusNotFound, status)
	status, v = post(r3.addr, "/anteroom/api/join", "")
	require.Equal(t, http.StatusOK, status)
	assert.NotContains(t, v, "admission")
}

// Two sidecars on one Postgres database: the same keys, and 100 concurrent
// redeems of one jti spread over both answer exactly one 200.
func TestRedeemOnceAcrossPostgresInstances(t *testing.T) {
	url := pgtest.DB(t)
	const key = "checkout-api-key-0123456789"
	env := []string{"ANTEROOM_DATABASE=" + url, "ANTEROOM_GATES_DEFAULT_ADMISSION_TOKEN_TTL=5m", "ANTEROOM_API_KEYS=" + key}
	a, b := start(t, env), start(t, env)
	_, ka := getJSON(t, "http://"+a.addr+"/anteroom/.well-known/jwks.json")
	_, kb := getJSON(t, "http://"+b.addr+"/anteroom/.well-known/jwks.json")
	assert.Equal(t, ka, kb, "one keyring for every instance")

	resp, err := http.Post("http://"+a.addr+"/anteroom/api/join", "application/json", nil)
	require.NoError(t, err)
	var v map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&v))
	resp.Body.Close()
	adm, _ := v["admission"].(string)
	require.NotEmpty(t, adm)

	var wg sync.WaitGroup
	var mu sync.Mutex
	statuses := map[int]int{}
	start := make(chan struct{})
	for i := range 100 {
		addr := a.addr
		if i%2 == 1 {
			addr = b.addr
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			req, err := http.NewRequest(http.MethodPost, "http://"+addr+"/anteroom/api/redeem", strings.NewReader(`{"token":"`+adm+`"}`))
			if !assert.NoError(t, err) {
				return
			}
			req.Header.Set("X-Anteroom-Key", key)
			resp, err := http.DefaultClient.Do(req)
			if !assert.NoError(t, err) {
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			mu.Lock()
			statuses[resp.StatusCode]++
			mu.Unlock()
		}()
	}
	close(start)
	wg.Wait()
	assert.Equal(t, map[int]int{http.StatusOK: 1, http.StatusConflict: 99}, statuses)
}
