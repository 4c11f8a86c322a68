package webhook_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/gate/webhook"
	"github.com/anteroomhq/anteroom/session"
	"github.com/anteroomhq/anteroom/session/sessiontest"
	"github.com/anteroomhq/anteroom/session/sqlite"
)

const secret = "0123456789abcdef-receiver-secret"

// received is one request a test receiver got.
type received struct {
	header http.Header
	body   []byte
}

// receiver records every request and answers with answer(n), n counting
// from 1.
type receiver struct {
	mu     sync.Mutex
	got    []received
	answer func(n int, w http.ResponseWriter)
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	rc.mu.Lock()
	rc.got = append(rc.got, received{header: r.Header.Clone(), body: body})
	n := len(rc.got)
	rc.mu.Unlock()
	rc.answer(n, w)
}

func (rc *receiver) requests() []received {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]received(nil), rc.got...)
}

// verify checks a delivery's signature the way a receiver would, written
// out here rather than with webhook.Verify.
func verify(t *testing.T, r received) {
	t.Helper()
	h := r.header.Get("X-Anteroom-Signature")
	parts := strings.Split(h, ",")
	require.Len(t, parts, 2, h)
	ts, ok := strings.CutPrefix(parts[0], "t=")
	require.True(t, ok, h)
	sig, ok := strings.CutPrefix(parts[1], "v1=")
	require.True(t, ok, h)
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(ts + "." + string(r.body)))
	assert.Equal(t, hex.EncodeToString(m.Sum(nil)), sig, "signature")
	_, err := strconv.ParseInt(ts, 10, 64)
	assert.NoError(t, err)
	// The package's own Verify agrees, and refuses a changed body.
	sec, _ := strconv.ParseInt(ts, 10, 64)
	assert.NoError(t, webhook.Verify([]byte(secret), h, r.body, time.Unix(sec, 0), time.Minute))
	assert.Error(t, webhook.Verify([]byte(secret), h, append([]byte(" "), r.body...), time.Unix(sec, 0), time.Minute))
	assert.Error(t, webhook.Verify([]byte("another-secret-of-16+"), h, r.body, time.Unix(sec, 0), time.Minute))
	assert.Error(t, webhook.Verify([]byte(secret), h, r.body, time.Unix(sec, 0).Add(time.Hour), time.Minute), "replayed late")
}

// fixture is a real SQLite store with a Waitlist, and a deliverer for one
// endpoint, driven by hand (RunOnce) on a fake clock.
type fixture struct {
	store *sqlite.Store
	wl    *session.Waitlist
	cfg   session.GateConfig
	clock *sessiontest.Clock
	d     *webhook.Deliverer
	logs  *sessiontest.LogBuffer
}

func newFixture(t *testing.T, url string, events []string, tweak func(*webhook.Options)) *fixture {
	t.Helper()
	f := &fixture{clock: sessiontest.NewClock(time.Now()), logs: &sessiontest.LogBuffer{}}
	var err error
	f.store, err = sqlite.Open(filepath.Join(t.TempDir(), "a.db"), sqlite.Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = f.store.Close() })
	o := webhook.Options{
		Store:       f.store,
		Endpoints:   []webhook.Endpoint{{URL: url, Events: events, Secret: []byte(secret)}},
		Now:         f.clock.Now,
		BaseBackoff: time.Second,
		MaxBackoff:  time.Minute,
		Timeout:     5 * time.Second,
		Logger:      slog.New(slog.NewTextHandler(f.logs, nil)),
	}
	if tweak != nil {
		tweak(&o)
	}
	f.d, err = webhook.New(o)
	require.NoError(t, err)
	r, err := f.d.Routing()
	require.NoError(t, err)
	f.store.SetOutbox(r)
	f.cfg = sessiontest.GateConfig("default", 1)
	f.wl, err = session.New(context.Background(), f.store, []session.GateConfig{f.cfg}, session.Options{Clock: f.clock, TouchInterval: -1, SweepInterval: -1})
	require.NoError(t, err)
	t.Cleanup(func() { _ = f.wl.Close() })
	return f
}

// promote makes one promotion: a joins (active), b waits, a is released.
func (f *fixture) promote(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	_, err := f.wl.Join(ctx, "default", "a")
	require.NoError(t, err)
	_, err = f.wl.Join(ctx, "default", "b")
	require.NoError(t, err)
	require.NoError(t, f.wl.Release(ctx, "default", "a"))
}

// A receiver that fails the first attempts: the row is retried with
// backoff, with the same idempotency key and body each time, until one is
// acknowledged; then never again.
func TestRetriedUntilAcknowledged(t *testing.T) {
	rc := &receiver{answer: func(n int, w http.ResponseWriter) {
		if n <= 2 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}}
	srv := httptest.NewServer(rc)
	defer srv.Close()
	f := newFixture(t, srv.URL+"/hooks?token=x", []string{session.WebhookPromoted}, nil)
	f.promote(t)
	ctx := context.Background()

	for attempt := 1; attempt <= 3; attempt++ {
		require.Equal(t, 1, f.d.RunOnce(ctx), "attempt %d", attempt)
		// Not due again before its backoff.
		assert.Equal(t, 0, f.d.RunOnce(ctx))
		f.clock.Advance(2 * time.Minute)
	}
	assert.Equal(t, 0, f.d.RunOnce(ctx), "acknowledged: never sent again")

	got := rc.requests()
	require.Len(t, got, 3)
	key := got[0].header.Get("Idempotency-Key")
	require.NotEmpty(t, key)
	for i, r := range got {
		assert.Equal(t, key, r.header.Get("Idempotency-Key"), "stable across retries")
		assert.Equal(t, key, r.header.Get("X-Anteroom-Delivery"))
		assert.Equal(t, strconv.Itoa(i+1), r.header.Get("X-Anteroom-Attempt"))
		assert.Equal(t, "promoted", r.header.Get("X-Anteroom-Event"))
		assert.Equal(t, "application/json", r.header.Get("Content-Type"))
		verify(t, r)
		var dl webhook.Delivery
		require.NoError(t, json.Unmarshal(r.body, &dl))
		assert.Equal(t, key, dl.ID)
		assert.Equal(t, "promoted", dl.Event)
		assert.Equal(t, "default", dl.Gate)
		var data session.OutboxData
		require.NoError(t, json.Unmarshal(dl.Data, &data))
		assert.Equal(t, "b", data.Session)
		assert.Empty(t, dl.ClaimURL, "not a notify session")
	}
	assert.Equal(t, webhook.Stats{Delivered: 1, Failed: 2}, f.d.Stats())
	c, err := f.store.OutboxCounts(ctx)
	require.NoError(t, err)
	assert.Equal(t, session.OutboxCounts{Delivered: 1}, c)
	assert.NotContains(t, f.logs.String(), "token=x", "the URL's query is not logged")
}

// The backoff grows and is capped, with jitter: each wait lies in the upper
// half of min(base·2^(n-1), cap).
func TestBackoff(t *testing.T) {
	rc := &receiver{answer: func(int, http.ResponseWriter) {}}
	rc.answer = func(_ int, w http.ResponseWriter) { w.WriteHeader(500) }
	srv := httptest.NewServer(rc)
	defer srv.Close()
	f := newFixture(t, srv.URL, []string{session.WebhookPromoted}, func(o *webhook.Options) { o.MaxAttempts = 100 })
	f.promote(t)
	ctx := context.Background()
	for n := 1; n <= 9; n++ {
		require.Equal(t, 1, f.d.RunOnce(ctx), "attempt %d", n)
		want := time.Second << (n - 1)
		if want > time.Minute {
			want = time.Minute
		}
		// Due neither before half of it, but by all of it.
		f.clock.Advance(want/2 - time.Millisecond)
		assert.Equal(t, 0, f.d.RunOnce(ctx), "attempt %d: early", n)
		f.clock.Advance(want/2 + time.Millisecond)
	}
}

// A receiver that never succeeds: dead-lettered after MaxAttempts, kept in
// the outbox, counted and logged; and past MaxAge at once.
func TestDeadLetter(t *testing.T) {
	rc := &receiver{answer: func(_ int, w http.ResponseWriter) { w.WriteHeader(500) }}
	srv := httptest.NewServer(rc)
	defer srv.Close()
	f := newFixture(t, srv.URL, []string{session.WebhookPromoted, session.WebhookReleased}, func(o *webhook.Options) { o.MaxAttempts = 3 })
	f.promote(t) // released a, promoted b: two rows
	ctx := context.Background()
	for range 3 {
		require.Equal(t, 2, f.d.RunOnce(ctx))
		f.clock.Advance(2 * time.Minute)
	}
	assert.Equal(t, 0, f.d.RunOnce(ctx))
	c, err := f.store.OutboxCounts(ctx)
	require.NoError(t, err)
	assert.Equal(t, session.OutboxCounts{Dead: 2}, c)
	assert.Equal(t, int64(2), f.d.Stats().Dead)
	assert.Contains(t, f.logs.String(), "dead-lettered")

	// Past MaxAge, the first failure is the last.
	f.clock.Advance(25 * time.Hour)
	require.NoError(t, f.wl.Release(ctx, "default", "b"))
	require.Equal(t, 1, f.d.RunOnce(ctx))
	c, err = f.store.OutboxCounts(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(3), c.Dead)
}

// Only http and https endpoints, with a host; a secret of 16+ bytes; known
// events.
func TestRefusesBadEndpoints(t *testing.T) {
	store, err := sqlite.Open(filepath.Join(t.TempDir(), "a.db"), sqlite.Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	defer store.Close()
	ok := webhook.Endpoint{URL: "https://app.example/hooks", Events: []string{"promoted"}, Secret: []byte(secret)}
	for _, tc := range []struct {
		name string
		edit func(e *webhook.Endpoint)
	}{
		{"file", func(e *webhook.Endpoint) { e.URL = "file:///etc/passwd" }},
		{"gopher", func(e *webhook.Endpoint) { e.URL = "gopher://127.0.0.1:6379/_FLUSHALL" }},
		{"ftp", func(e *webhook.Endpoint) { e.URL = "ftp://example.com/x" }},
		{"javascript", func(e *webhook.Endpoint) { e.URL = "javascript:alert(1)" }},
		{"relative", func(e *webhook.Endpoint) { e.URL = "/hooks" }},
		{"no host", func(e *webhook.Endpoint) { e.URL = "http:///hooks" }},
		{"user info", func(e *webhook.Endpoint) { e.URL = "https://user:pw@app.example/" }},
		{"short secret", func(e *webhook.Endpoint) { e.Secret = []byte("short") }},
		{"unknown event", func(e *webhook.Endpoint) { e.Events = []string{"joined"} }},
		{"no events", func(e *webhook.Endpoint) { e.Events = nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := ok
			tc.edit(&e)
			_, err := webhook.New(webhook.Options{Store: store, Endpoints: []webhook.Endpoint{e}})
			assert.Error(t, err)
		})
	}
	_, err = webhook.New(webhook.Options{Store: store, Endpoints: []webhook.Endpoint{ok, ok}})
	assert.Error(t, err, "the same URL twice")
	_, err = webhook.New(webhook.Options{Store: store, Endpoints: []webhook.Endpoint{ok}})
	assert.NoError(t, err)
}

// A hostile receiver: an endless answer is read up to a bound (and counts
// as delivered by its status); a redirect is not followed (a failed
// attempt); one that never answers times out.
func TestHostileReceivers(t *testing.T) {
	var redirected atomic.Int32
	target := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { redirected.Add(1) }))
	defer target.Close()
	hang := make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("/endless", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(200)
		chunk := []byte(strings.Repeat("x", 32<<10))
		for range 10000 { // 320 MB if it were all read
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	})
	mux.HandleFunc("/redirect", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.URL, http.StatusTemporaryRedirect)
	})
	mux.HandleFunc("/hang", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-hang:
		case <-r.Context().Done():
		}
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	defer close(hang) // before the server's Close, which waits for the handler
	for _, tc := range []struct {
		path      string
		delivered bool
	}{
		{"/endless", true},
		{"/redirect", false},
		{"/hang", false},
	} {
		t.Run(tc.path, func(t *testing.T) {
			f := newFixture(t, srv.URL+tc.path, []string{session.WebhookPromoted}, func(o *webhook.Options) { o.Timeout = 300 * time.Millisecond })
			f.promote(t)
			require.Equal(t, 1, f.d.RunOnce(context.Background()))
			st := f.d.Stats()
			if tc.delivered {
				assert.Equal(t, webhook.Stats{Delivered: 1}, st)
			} else {
				assert.Equal(t, webhook.Stats{Failed: 1}, st)
			}
		})
	}
	assert.Zero(t, redirected.Load(), "the redirect was not followed")
}

// A slow receiver never slows joins: while the receiver holds the first
// delivery, joins, releases and promotions (whose rows queue in the outbox)
// all complete; the rows are delivered once the receiver answers.
func TestSlowReceiverDoesNotBlockJoins(t *testing.T) {
	release := make(chan struct{})
	var blocked atomic.Bool
	rc := &receiver{answer: func(n int, w http.ResponseWriter) {
		if n == 1 {
			blocked.Store(true)
			select {
			case <-release:
			case <-time.After(time.Minute): // the brief's sleeping receiver, held until the joins are done (5 s was too short for 300 joins under the race detector on a loaded machine)
			}
		}
		w.WriteHeader(200)
	}}
	srv := httptest.NewServer(rc)
	defer srv.Close()
	f := newFixture(t, srv.URL, []string{session.WebhookPromoted, session.WebhookReleased}, func(o *webhook.Options) {
		o.Now = time.Now
		o.Workers = 1
		o.Timeout = 30 * time.Second
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { f.d.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	f.promote(t)
	for !blocked.Load() { // bounded by the test's timeout
		f.d.Kick()
		time.Sleep(5 * time.Millisecond)
	}
	const joins = 300
	for i := range joins {
		id := fmt.Sprint("j", i)
		_, err := f.wl.Join(context.Background(), "default", id)
		require.NoError(t, err)
		if i%3 == 0 {
			require.NoError(t, f.wl.Release(context.Background(), "default", id))
		}
	}
	select {
	case <-release:
	default:
	}
	assert.True(t, blocked.Load())
	assert.Len(t, rc.requests(), 1, "every join completed while the receiver still held the first delivery")
	c, err := f.store.OutboxCounts(context.Background())
	require.NoError(t, err)
	assert.Greater(t, c.Pending, int64(joins/3), "the rows of the promotions and releases wait in the outbox")
	close(release)
	for range 2000 { // bounded: they are delivered once it answers
		if c, _ := f.store.OutboxCounts(context.Background()); c.Pending == 0 {
			break
		}
		f.d.Kick()
		time.Sleep(5 * time.Millisecond)
	}
	c, err = f.store.OutboxCounts(context.Background())
	require.NoError(t, err)
	assert.Zero(t, c.Pending)
}

// event.started is enqueued by name (Waitlist.EnqueueWebhook, the hook of
// scheduled events), once per dedup key, and delivered like any other.
func TestEventStartedEnqueued(t *testing.T) {
	rc := &receiver{answer: func(_ int, w http.ResponseWriter) { w.WriteHeader(200) }}
	srv := httptest.NewServer(rc)
	defer srv.Close()
	f := newFixture(t, srv.URL, []string{session.WebhookEventStarted}, nil)
	ctx := context.Background()
	data := map[string]any{"event": "launch", "startsAt": "2026-03-01T12:00:00Z"}
	require.NoError(t, f.wl.EnqueueWebhook(ctx, "default", session.WebhookEventStarted, "launch@default", data))
	require.NoError(t, f.wl.EnqueueWebhook(ctx, "default", session.WebhookEventStarted, "launch@default", data), "again: deduplicated")
	assert.ErrorIs(t, f.wl.EnqueueWebhook(ctx, "default", "joined", "", data), session.ErrInvalidArgument)
	assert.ErrorIs(t, f.wl.EnqueueWebhook(ctx, "nope", session.WebhookEventStarted, "", data), session.ErrUnknownGate)
	assert.ErrorIs(t, f.wl.EnqueueWebhook(ctx, "default", session.WebhookEventStarted, "", func() {}), session.ErrInvalidArgument)
	f.promote(t) // not subscribed: no row
	require.Equal(t, 1, f.d.RunOnce(ctx))
	assert.Equal(t, 0, f.d.RunOnce(ctx))
	got := rc.requests()
	require.Len(t, got, 1)
	verify(t, got[0])
	var dl webhook.Delivery
	require.NoError(t, json.Unmarshal(got[0].body, &dl))
	assert.Equal(t, "event.started", dl.Event)
	assert.JSONEq(t, `{"event":"launch","startsAt":"2026-03-01T12:00:00Z"}`, string(dl.Data))
}
