package main

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

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

// A stored event and runtime settings that no longer decode (edited by
// hand, or written by a newer version before a rollback) do not stop the
// sidecar from starting: both are logged and left out, the gate runs on
// the configuration's settings, and the admin API clears them (the event
// deleted and scheduled again, the settings saved). Such an event used to
// make every start fail, with no way through the API to remove it.
func TestRunStartsOverDamagedStoredRows(t *testing.T) {
	db := filepath.Join(t.TempDir(), "anteroom.db")
	token := strings.Repeat("a", 40)
	env := []string{"ANTEROOM_DATABASE=" + db, "ANTEROOM_GATES_DEFAULT_ACTIVE_LIMIT=1", "ANTEROOM_ADMIN_TOKEN=" + token}
	admin := func(addr, method, path, body string) (int, any) {
		t.Helper()
		req, err := http.NewRequest(method, "http://"+addr+"/anteroom/admin/api/"+path, strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		var v any
		_ = json.NewDecoder(resp.Body).Decode(&v)
		return resp.StatusCode, v
	}
	now := time.Now().UTC()
	event := func(id string, at time.Duration) string {
		return fmt.Sprintf(`{"id":%q,"prequeueAt":%q,"startsAt":%q}`, id,
			now.Add(at).Format(time.RFC3339), now.Add(at+time.Hour).Format(time.RFC3339))
	}
	ids := func(addr string) []string {
		t.Helper()
		code, v := admin(addr, http.MethodGet, "gates/default/events", "")
		require.Equal(t, http.StatusOK, code, v)
		var out []string
		for _, e := range v.(map[string]any)["events"].([]any) {
			out = append(out, e.(map[string]any)["id"].(string))
		}
		return out
	}

	r := start(t, env)
	for _, body := range []string{event("keep", time.Hour), event("bad", 3*time.Hour)} {
		code, v := admin(r.addr, http.MethodPost, "gates/default/events", body)
		require.Equal(t, http.StatusCreated, code, v)
	}
	code, v := admin(r.addr, http.MethodPatch, "gates/default", `{"activeLimit":7}`)
	require.Equal(t, http.StatusOK, code, v)
	require.NoError(t, r.stop())

	raw, err := sql.Open("sqlite", db)
	require.NoError(t, err)
	for _, q := range []string{
		`UPDATE meta SET value = '{"phase":"paused"}' WHERE key = 'gate_events/default/bad'`,
		`UPDATE meta SET value = '{"activeLimit":7,"shiny":"new"}' WHERE key = 'gate_settings/default'`,
	} {
		res, err := raw.Exec(q)
		require.NoError(t, err, q)
		n, err := res.RowsAffected()
		require.NoError(t, err)
		require.Equal(t, int64(1), n, q)
	}
	require.NoError(t, raw.Close())

	r = start(t, env)
	status, body := getJSON(t, "http://"+r.addr+"/readyz")
	require.Equal(t, http.StatusOK, status, body)
	assert.Equal(t, []string{"keep"}, ids(r.addr), "the damaged event is left out")
	code, v = admin(r.addr, http.MethodGet, "gates/default", "")
	require.Equal(t, http.StatusOK, code, v)
	assert.Equal(t, float64(1), v.(map[string]any)["limit"], "the configuration's limit, not the damaged row's")
	assert.Equal(t, "file", v.(map[string]any)["settingsSource"])
	assert.Equal(t, "queue_all", v.(map[string]any)["mode"], "held by the damaged event")
	damaged := v.(map[string]any)["damagedEvents"].([]any)
	require.Len(t, damaged, 1)
	assert.Equal(t, "bad", damaged[0].(map[string]any)["id"])
	assert.Equal(t, true, damaged[0].(map[string]any)["holds"])
	assert.Contains(t, damaged[0].(map[string]any)["error"], "paused")
	assert.Contains(t, r.log.String(), "stored event is damaged")
	assert.Contains(t, r.log.String(), "stored runtime settings are damaged")

	join := func(cookie string) (string, string) {
		t.Helper()
		v, set := postJoin(t, r.addr, cookie)
		if set != "" {
			cookie = set
		}
		return v["status"].(string), cookie
	}
	joined, first := join("")
	assert.Equal(t, "waiting", joined, "the damaged event may be an open pre-queue: the gate admits nobody new")

	code, v = admin(r.addr, http.MethodPost, "gates/default/events", event("bad", 3*time.Hour))
	assert.Equal(t, http.StatusConflict, code, "its id is taken by the damaged row: %v", v)
	assert.Contains(t, fmt.Sprint(v), "event_locked")
	code, _ = admin(r.addr, http.MethodDelete, "gates/default/events/bad", "")
	require.Equal(t, http.StatusNoContent, code)
	require.Eventually(t, func() bool { status, _ := join(first); return status == "active" }, 20*time.Second, 100*time.Millisecond,
		"deleted: the update lets the waiter in")
	code, v = admin(r.addr, http.MethodGet, "gates/default", "")
	require.Equal(t, http.StatusOK, code, v)
	assert.Equal(t, []any{}, v.(map[string]any)["damagedEvents"])
	assert.Equal(t, "open", v.(map[string]any)["mode"])
	code, v = admin(r.addr, http.MethodPost, "gates/default/events", event("bad", 3*time.Hour))
	require.Equal(t, http.StatusCreated, code, v)
	code, v = admin(r.addr, http.MethodPatch, "gates/default", `{"activeLimit":5}`)
	require.Equal(t, http.StatusOK, code, v)
	require.NoError(t, r.stop())

	r = start(t, env)
	assert.Equal(t, []string{"keep", "bad"}, ids(r.addr))
	code, v = admin(r.addr, http.MethodGet, "gates/default", "")
	require.Equal(t, http.StatusOK, code, v)
	assert.Equal(t, float64(5), v.(map[string]any)["limit"], "the saved settings replaced the damaged row")
}
