package main

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestConfigEvents(t *testing.T) {
	yaml := `gates:
  default:
    active_limit: 10
    events:
      - id: "launch"
        prequeue_at: "2030-12-01T17:50:00Z"
        starts_at: "2030-12-01T18:00:00+00:00"
        ends_at: "2030-12-01T20:00:00Z"
        shuffle: true
        active_limit: 500
        new_users_per_minute: 6000
`
	cfg, _, err := LoadConfig(writeConfig(t, yaml), nil)
	require.NoError(t, err)
	evs := cfg.SessionEvents()
	require.Len(t, evs, 1)
	e := evs[0]
	assert.Equal(t, "default", e.Gate)
	assert.Equal(t, "launch", e.ID)
	assert.True(t, e.PrequeueAt.Equal(time.Date(2030, 12, 1, 17, 50, 0, 0, time.UTC)))
	assert.True(t, e.StartsAt.Equal(time.Date(2030, 12, 1, 18, 0, 0, 0, time.UTC)))
	assert.True(t, e.EndsAt.Equal(time.Date(2030, 12, 1, 20, 0, 0, 0, time.UTC)))
	assert.True(t, e.Shuffle)
	require.NotNil(t, e.ActiveLimit)
	assert.Equal(t, int64(500), *e.ActiveLimit)
	assert.Equal(t, int64(6000), *e.NewUsersPerMinute)

	// The environment holds the same list as JSON, and replaces the file's.
	cfg, _, err = LoadConfig(writeConfig(t, yaml), []string{`ANTEROOM_GATES_DEFAULT_EVENTS=[{"id":"env","prequeue_at":"2030-01-01T00:00:00Z","starts_at":"2030-01-01T00:10:00Z"}]`})
	require.NoError(t, err)
	evs = cfg.SessionEvents()
	require.Len(t, evs, 1)
	assert.Equal(t, "env", evs[0].ID)
	assert.False(t, evs[0].Shuffle)
}

func TestConfigEventErrorsNameTheKey(t *testing.T) {
	ev := func(fields string) string {
		return "gates:\n  default:\n    events:\n      - {" + fields + "}\n"
	}
	for _, tc := range []struct {
		name, yaml, wantErr string
		env                 []string
	}{
		{name: "no id", yaml: ev(`prequeue_at: "2030-01-01T00:00:00Z", starts_at: "2030-01-01T00:10:00Z"`), wantErr: "gates.default.events[0].id"},
		{name: "bad time", yaml: ev(`id: a, prequeue_at: "tomorrow", starts_at: "2030-01-01T00:10:00Z"`), wantErr: `gates.default.events[0].prequeue_at: want an RFC 3339 time such as "2026-12-01T18:00:00Z", not "tomorrow"`},
		{name: "no start", yaml: ev(`id: a, prequeue_at: "2030-01-01T00:00:00Z"`), wantErr: "gates.default.events[0].starts_at: required"},
		{name: "start before pre-queue", yaml: ev(`id: a, prequeue_at: "2030-01-01T00:10:00Z", starts_at: "2030-01-01T00:00:00Z"`), wantErr: "startsAt must be after prequeueAt"},
		{name: "huge limit", yaml: ev(`id: a, prequeue_at: "2030-01-01T00:00:00Z", starts_at: "2030-01-01T00:10:00Z", active_limit: 9223372036854775807`), wantErr: "activeLimit must be 0 to"},
		{name: "unknown field", yaml: ev(`id: a, seed: "00"`), wantErr: `unknown key "gates.default.events[0].seed"`},
		{name: "twice", yaml: "gates:\n  default:\n    events:\n      - {id: a, prequeue_at: \"2030-01-01T00:00:00Z\", starts_at: \"2030-01-01T00:10:00Z\"}\n      - {id: a, prequeue_at: \"2030-02-01T00:00:00Z\", starts_at: \"2030-02-01T00:10:00Z\"}\n", wantErr: `gates.default.events[1].id: "a" appears twice`},
		{name: "env not JSON", yaml: "", env: []string{"ANTEROOM_GATES_DEFAULT_EVENTS=launch"}, wantErr: "environment ANTEROOM_GATES_DEFAULT_EVENTS: want a JSON list"},
		{name: "env unknown field", yaml: "", env: []string{`ANTEROOM_GATES_DEFAULT_EVENTS=[{"id":"a","seed":"00"}]`}, wantErr: "environment ANTEROOM_GATES_DEFAULT_EVENTS: want a JSON list"},
	} {
		path := ""
		if tc.yaml != "" {
			path = writeConfig(t, tc.yaml)
		}
		_, _, err := LoadConfig(path, tc.env)
		require.Error(t, err, tc.name)
		assert.Contains(t, err.Error(), tc.wantErr, tc.name)
	}
}

// The configured events reach the running sidecar (main.go's wiring):
// GET {base}/api/events shows them, with a commitment and no seed.
func TestRunPublishesConfiguredEvents(t *testing.T) {
	db := filepath.Join(t.TempDir(), "anteroom.db")
	r := start(t, []string{"ANTEROOM_DATABASE=" + db,
		`ANTEROOM_GATES_DEFAULT_EVENTS=[{"id":"launch","prequeue_at":"2099-01-01T00:00:00Z","starts_at":"2099-01-01T00:10:00Z","shuffle":true}]`})
	code, body := getJSON(t, "http://"+r.addr+"/anteroom/api/events?gate=default")
	require.Equal(t, 200, code, body)
	evs, _ := body["events"].([]any)
	require.Len(t, evs, 1, body)
	ev, _ := evs[0].(map[string]any)
	assert.Equal(t, "launch", ev["id"])
	assert.Equal(t, "scheduled", ev["phase"])
	assert.Len(t, ev["commitment"], 64)
	assert.NotContains(t, ev, "seed")
}
