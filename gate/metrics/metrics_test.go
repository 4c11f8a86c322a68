package metrics_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/broadcast"
	"github.com/anteroomhq/anteroom/gate"
	"github.com/anteroomhq/anteroom/gate/metrics"
	"github.com/anteroomhq/anteroom/gate/token"
	"github.com/anteroomhq/anteroom/session"
	"github.com/anteroomhq/anteroom/session/sessiontest"
	"github.com/anteroomhq/anteroom/session/sqlite"
)

const adminToken = "an-admin-token-of-at-least-32-characters"

// sidecar is the real stack wired as cmd/anteroom wires it: SQLite, the
// hub, the Waitlist on a fake clock, the metrics and the gate on loopback.
type sidecar struct {
	url      string
	clock    *sessiontest.Clock
	waitlist *session.Waitlist
	hub      *broadcast.Hub
	signer   *token.Signer
}

func startSidecar(t *testing.T, cfg session.GateConfig, adjust func(*gate.Options)) *sidecar {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	hub := broadcast.New(broadcast.Options{Interval: time.Millisecond, Logger: log})
	t.Cleanup(func() { _ = hub.Close() })
	m := metrics.New(metrics.Options{Hub: hub})
	store, err := sqlite.Open(filepath.Join(t.TempDir(), "a.db"), sqlite.Options{Logger: log, OnCommit: m.ObserveStoreCommit})
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Close() })
	clock := sessiontest.NewClock(sessiontest.Epoch)
	w, err := session.New(context.Background(), store, []session.GateConfig{cfg}, session.Options{
		Clock: clock, Publisher: hub, Logger: log, TouchInterval: -1, SweepInterval: -1,
		Observer: m.ObserveCommit, UpdateObserver: m.ObserveUpdate,
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = w.Close() })
	m.SetWaitlist(w)
	signer, err := token.NewSigner([]byte(strings.Repeat("k", token.MinSecretLength)))
	require.NoError(t, err)
	opts := gate.Options{BasePath: "/anteroom", Waitlist: w, Signer: signer, Hub: hub, Logger: log,
		Metrics: m.Handler(), AdminToken: adminToken}
	if adjust != nil {
		adjust(&opts)
	}
	h, err := gate.New(opts)
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(func() { _ = hub.Close(); srv.Close() })
	return &sidecar{url: srv.URL, clock: clock, waitlist: w, hub: hub, signer: signer}
}

func (s *sidecar) join(t *testing.T) string {
	t.Helper()
	resp, err := http.Post(s.url+"/anteroom/api/join", "application/json", nil)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var v struct {
		Session string `json:"session"`
		Token   string `json:"token"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&v))
	return v.Token
}

// scrape gets /metrics with the given Authorization header value.
func (s *sidecar) scrape(t *testing.T, auth string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, s.url+"/anteroom/metrics", nil)
	require.NoError(t, err)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, body
}

// parse reads the exposition with the official text parser.
func parse(t *testing.T, body []byte) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.LegacyValidation)
	mfs, err := p.TextToMetricFamilies(bytes.NewReader(body))
	require.NoError(t, err)
	return mfs
}

// sample returns the metric of family name whose labels are exactly
// labels (name=value pairs), failing when there is none.
func sample(t *testing.T, mfs map[string]*dto.MetricFamily, name string, labels ...string) *dto.Metric {
	t.Helper()
	mf, ok := mfs[name]
	require.True(t, ok, "no metric family %s", name)
	want := map[string]string{}
	for i := 0; i+1 < len(labels); i += 2 {
		want[labels[i]] = labels[i+1]
	}
	for _, m := range mf.GetMetric() {
		got := map[string]string{}
		for _, l := range m.GetLabel() {
			got[l.GetName()] = l.GetValue()
		}
		if assert.ObjectsAreEqual(want, got) {
			return m
		}
	}
	require.Failf(t, "no sample", "%s%v", name, want)
	return nil
}

func value(t *testing.T, mfs map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	t.Helper()
	m := sample(t, mfs, name, labels...)
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	}
	require.Failf(t, "not a counter or gauge", "%s", name)
	return 0
}

// After real joins, a promotion, purges and a websocket, /metrics says so,
// in a format the official parser reads and names the linter accepts.
func TestMetricsAfterRealTraffic(t *testing.T) {
	cfg := session.GateConfig{Name: "default", ActiveLimit: 1, ActiveTimeout: 5 * time.Minute, WaitingTimeout: time.Minute}
	s := startSidecar(t, cfg, nil)
	ctx := context.Background()

	first := s.join(t)  // admitted at once
	second := s.join(t) // waits
	s.join(t)           // waits, then goes silent
	_ = second

	// 30 s later the first releases: the second is promoted after 30 s in line.
	s.clock.Advance(30 * time.Second)
	req, err := http.NewRequest(http.MethodPost, s.url+"/anteroom/api/release", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+first)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusNoContent, resp.StatusCode)

	// A websocket, then the third is gone past the waiting timeout.
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(s.url, "http")+"/anteroom/ws?gate=default", nil)
	require.NoError(t, err)
	defer c.CloseNow()
	require.Eventually(t, func() bool { return s.hub.Stats().Subscribers == 1 }, 5*time.Second, time.Millisecond)
	s.clock.Advance(cfg.WaitingTimeout + time.Second)
	require.NoError(t, s.waitlist.ValidateSessionAndRefreshLastActive("default", sessionID(t, s, second)))
	_, err = s.waitlist.Update(ctx)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return s.hub.Broadcasts()["default"] >= 1 }, 5*time.Second, time.Millisecond)

	resp, body := s.scrape(t, "Bearer "+adminToken)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	assert.Contains(t, resp.Header.Get("Content-Type"), "text/plain")
	mfs := parse(t, body)

	assert.Equal(t, 3.0, value(t, mfs, "anteroom_joins_total", "gate", "default"))
	assert.Equal(t, 1.0, value(t, mfs, "anteroom_admissions_total", "gate", "default", "how", "direct"))
	assert.Equal(t, 1.0, value(t, mfs, "anteroom_admissions_total", "gate", "default", "how", "promoted"))
	assert.Equal(t, 1.0, value(t, mfs, "anteroom_purges_total", "gate", "default", "reason", "released"))
	assert.Equal(t, 1.0, value(t, mfs, "anteroom_purges_total", "gate", "default", "reason", "gone"))
	assert.Equal(t, 0.0, value(t, mfs, "anteroom_purges_total", "gate", "default", "reason", "idle"))
	assert.Equal(t, 0.0, value(t, mfs, "anteroom_purges_total", "gate", "default", "reason", "unclaimed"))
	assert.Equal(t, 1.0, value(t, mfs, "anteroom_active_sessions", "gate", "default"))
	assert.Equal(t, 0.0, value(t, mfs, "anteroom_waiting_sessions", "gate", "default"))
	assert.Equal(t, 1.0, value(t, mfs, "anteroom_active_limit", "gate", "default"))
	assert.Equal(t, 1.0, value(t, mfs, "anteroom_websocket_connections"))
	// A coalesced broadcast may still be on its way (the trailing edge):
	// scrape again, on this goroutine, until the counter and the hub agree.
	agree := false
	for deadline := time.Now().Add(5 * time.Second); !agree && time.Now().Before(deadline); {
		_, body := s.scrape(t, "Bearer "+adminToken)
		hubCount := s.hub.Broadcasts()["default"]
		got := value(t, parse(t, body), "anteroom_broadcasts_total", "gate", "default")
		agree = hubCount > 0 && got == float64(hubCount) && hubCount == s.hub.Broadcasts()["default"]
		if !agree {
			time.Sleep(50 * time.Millisecond)
		}
	}
	assert.True(t, agree, "anteroom_broadcasts_total follows the hub")

	wait := sample(t, mfs, "anteroom_wait_seconds", "gate", "default").GetHistogram()
	assert.Equal(t, uint64(1), wait.GetSampleCount())
	assert.Equal(t, 30.0, wait.GetSampleSum(), "join to promotion on the fake clock")
	upd := sample(t, mfs, "anteroom_update_duration_seconds", "gate", "default").GetHistogram()
	assert.Equal(t, uint64(1), upd.GetSampleCount())
	// A commit's two observations (batch size, then duration) are two
	// writes a scrape may fall between, when a background commit (a touch
	// flush) runs during it: scrape until a scrape falls outside one.
	commit := sample(t, mfs, "anteroom_store_commit_duration_seconds").GetHistogram()
	batch := sample(t, mfs, "anteroom_store_commit_batch_size").GetHistogram()
	for deadline := time.Now().Add(5 * time.Second); commit.GetSampleCount() != batch.GetSampleCount() && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
		_, body := s.scrape(t, "Bearer "+adminToken)
		again := parse(t, body)
		commit = sample(t, again, "anteroom_store_commit_duration_seconds").GetHistogram()
		batch = sample(t, again, "anteroom_store_commit_batch_size").GetHistogram()
	}
	assert.Positive(t, commit.GetSampleCount())
	assert.Equal(t, commit.GetSampleCount(), batch.GetSampleCount(), "one of each per transaction")
	assert.GreaterOrEqual(t, batch.GetSampleSum(), 4.0, "three joins, a release, a touch, an update")
	assert.Contains(t, mfs, "go_goroutines")
	assert.Contains(t, mfs, "process_resident_memory_bytes")

	// The README's Metrics table lists exactly the anteroom_ families.
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	require.NoError(t, err)
	_, section, ok := strings.Cut(string(readme), "\n## Metrics\n")
	require.True(t, ok, "README has a Metrics section")
	section, _, _ = strings.Cut(section, "\n## ")
	var listed, served []string
	for _, m := range regexp.MustCompile("(?m)^\\| `(anteroom_[a-z_]+)").FindAllStringSubmatch(section, -1) {
		listed = append(listed, m[1])
	}
	for name := range mfs {
		if strings.HasPrefix(name, "anteroom_") {
			served = append(served, name)
		}
	}
	assert.ElementsMatch(t, listed, served)

	// The names follow the Prometheus conventions.
	problems, err := promlint.New(bytes.NewReader(body)).Lint()
	require.NoError(t, err)
	for _, p := range problems {
		if strings.HasPrefix(p.Metric, "anteroom_") {
			t.Errorf("lint: %s: %s", p.Metric, p.Text)
		}
	}
}

// sessionID reads the session id out of a token, as the sidecar does.
func sessionID(t *testing.T, s *sidecar, tok string) string {
	t.Helper()
	id, ok := s.signer.Verify(tok)
	require.True(t, ok)
	return id
}

// With an admin token set, /metrics wants it; the answer to anyone else is
// the contract's 401 body and nothing of the metrics.
func TestMetricsWantTheAdminToken(t *testing.T) {
	s := startSidecar(t, session.GateConfig{Name: "default", ActiveLimit: 1, ActiveTimeout: time.Minute, WaitingTimeout: time.Minute}, nil)
	cases := []struct{ name, auth string }{
		{"none", ""},
		{"wrong", "Bearer " + strings.Repeat("x", len(adminToken))},
		{"prefix", "Bearer " + adminToken[:len(adminToken)-1]},
		{"longer", "Bearer " + adminToken + "x"},
		{"basic", "Basic " + adminToken},
		{"bare", adminToken},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := s.scrape(t, tc.auth)
			assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)
			assert.Equal(t, `Bearer realm="anteroom"`, resp.Header.Get("WWW-Authenticate"))
			var e struct {
				Error struct{ Code, Message string } `json:"error"`
			}
			require.NoError(t, json.Unmarshal(body, &e), string(body))
			assert.Equal(t, "admin_token_required", e.Error.Code)
			assert.NotContains(t, string(body), "anteroom_")
		})
	}
	resp, _ := s.scrape(t, "bearer "+adminToken) // the scheme in any case
	assert.Equal(t, http.StatusOK, resp.StatusCode)
}

// Without an admin token /metrics is open; without metrics it is 404.
func TestMetricsOpenWithoutTokenAndAbsentWithoutHandler(t *testing.T) {
	cfg := session.GateConfig{Name: "default", ActiveLimit: 1, ActiveTimeout: time.Minute, WaitingTimeout: time.Minute}
	open := startSidecar(t, cfg, func(o *gate.Options) { o.AdminToken = "" })
	resp, body := open.scrape(t, "")
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, 1.0, value(t, parse(t, body), "anteroom_active_limit", "gate", "default"))
	assert.Equal(t, "no-store", resp.Header.Get("Cache-Control"))

	off := startSidecar(t, cfg, func(o *gate.Options) { o.Metrics = nil })
	resp, _ = off.scrape(t, "Bearer "+adminToken)
	assert.Equal(t, http.StatusNotFound, resp.StatusCode)
}

// Before the Waitlist is set (start-up still loading) the scrape works and
// has no gate gauges; a departure a Store gave no reason is "unknown".
func TestMetricsBeforeWaitlistAndUnknownReason(t *testing.T) {
	m := metrics.New(metrics.Options{})
	m.ObserveCommit(session.Commit{Events: []session.Event{
		{Kind: session.EventDequeued, Session: session.Session{Gate: "g", ID: "a"}},
		{Kind: session.EventDeactivated, Session: session.Session{Gate: "g", ID: "b"}, Reason: session.PurgeReason(200)},
		{Kind: session.EventPromoted, Session: session.Session{Gate: "g", ID: "c", CreatedAt: sessiontest.Epoch, LastActive: sessiontest.Epoch.Add(-time.Second)}},
	}})
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	mfs := parse(t, rec.Body.Bytes())
	assert.NotContains(t, mfs, "anteroom_active_sessions")
	assert.NotContains(t, mfs, "anteroom_websocket_connections", "no hub")
	assert.Equal(t, 2.0, value(t, mfs, "anteroom_purges_total", "gate", "g", "reason", "unknown"))
	wait := sample(t, mfs, "anteroom_wait_seconds", "gate", "g").GetHistogram()
	assert.Equal(t, 0.0, wait.GetSampleSum(), "a clock that went back waits 0, never negative")
}
