package main

import (
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The admin token turns on the admin API; a limit changed through it
// survives a restart and wins over the configuration, and the log says so.
func TestRunAdminAPI(t *testing.T) {
	db := filepath.Join(t.TempDir(), "anteroom.db")
	token := strings.Repeat("a", 40)
	env := []string{"ANTEROOM_DATABASE=" + db, "ANTEROOM_GATES_DEFAULT_ACTIVE_LIMIT=1"}
	admin := func(addr, method, path, body string) (int, map[string]any) {
		t.Helper()
		req, err := http.NewRequest(method, "http://"+addr+"/anteroom/admin/api/"+path, strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		var v map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&v)
		return resp.StatusCode, v
	}

	r := start(t, env)
	code, _ := admin(r.addr, http.MethodGet, "gates", "")
	assert.Equal(t, http.StatusNotFound, code, "no token configured: the admin API is off")
	require.NoError(t, r.stop())

	env = append(env, "ANTEROOM_ADMIN_TOKEN="+token)
	r = start(t, env)
	code, g := admin(r.addr, http.MethodPatch, "gates/default", `{"activeLimit":7,"mode":"queue_all"}`)
	require.Equal(t, http.StatusOK, code, g)
	require.NoError(t, r.stop())

	r = start(t, env)
	code, g = admin(r.addr, http.MethodGet, "gates/default", "")
	require.Equal(t, http.StatusOK, code)
	assert.Equal(t, float64(7), g["limit"], "the runtime setting wins over the environment's 1")
	assert.Equal(t, "queue_all", g["mode"])
	assert.Equal(t, "runtime", g["settingsSource"])
	assert.Contains(t, r.log.String(), "win over the config file")
	code, g = admin(r.addr, http.MethodDelete, "gates/default/settings", "")
	require.Equal(t, http.StatusOK, code)
	assert.Equal(t, float64(1), g["limit"])
}
