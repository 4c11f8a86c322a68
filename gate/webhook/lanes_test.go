package webhook_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/gate/webhook"
	"github.com/anteroomhq/anteroom/session"
)

// promotions makes n promotions (n promoted rows per endpoint that wants
// them), one release each.
func (f *fixture) promotions(t *testing.T, n int) {
	t.Helper()
	ctx := context.Background()
	_, err := f.wl.Join(ctx, "default", "p0")
	require.NoError(t, err)
	for i := 1; i <= n; i++ {
		_, err := f.wl.Join(ctx, "default", fmt.Sprint("p", i))
		require.NoError(t, err)
		require.NoError(t, f.wl.Release(ctx, "default", fmt.Sprint("p", i-1)))
	}
}

// A receiver that never answers holds up no other: each endpoint's rows
// are claimed and delivered apart, so the healthy endpoint gets all of its
// rows while every worker of the hung one waits out its long timeout; and
// the rows the hung lane claimed stay leased while they wait their turn,
// so another instance of a shared store does not send them meanwhile.
func TestHungReceiverHoldsUpNoOther(t *testing.T) {
	hang := make(chan struct{})
	var hung atomic.Int64
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hung.Add(1)
		select {
		case <-hang:
		case <-r.Context().Done():
		}
	}))
	defer slow.Close()
	defer close(hang)
	fast := &receiver{answer: func(_ int, w http.ResponseWriter) { w.WriteHeader(http.StatusNoContent) }}
	fastSrv := httptest.NewServer(fast)
	defer fastSrv.Close()

	const n, workers = 32, 2
	promoted := []string{session.WebhookPromoted}
	f := newFixture(t, fastSrv.URL, promoted, func(o *webhook.Options) {
		o.Now = time.Now
		o.Timeout = time.Hour // every attempt to the hung receiver outlasts the test
		o.Workers = workers
		o.Endpoints = []webhook.Endpoint{
			{URL: slow.URL, Events: promoted, Secret: []byte(secret)}, // its rows come first
			{URL: fastSrv.URL, Events: promoted, Secret: []byte(secret)},
		}
	})
	f.promotions(t, n)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { f.d.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	for range 2000 { // bounded: 10 s
		if len(fast.requests()) >= n && hung.Load() >= workers {
			break
		}
		f.d.Kick()
		time.Sleep(5 * time.Millisecond)
	}
	assert.Len(t, fast.requests(), n, "the healthy endpoint got every row while the other hung")
	assert.Equal(t, int64(workers), hung.Load(), "the hung endpoint holds its workers, no more")

	// The hung lane holds only the rows it is delivering, under their
	// lease: the others are free for another instance of a shared store,
	// and none of those it holds is handed out again.
	slowName := webhook.Endpoint{URL: slow.URL}.Name()
	rest, err := f.store.ClaimOutbox(context.Background(), session.OutboxTargets{Only: slowName}, time.Now(), 2*time.Hour, 2*n)
	require.NoError(t, err)
	assert.Len(t, rest, n-workers, "only the rows under delivery are leased")
	again, err := f.store.ClaimOutbox(context.Background(), session.OutboxTargets{Only: slowName}, time.Now().Add(time.Hour), time.Minute, 2*n)
	require.NoError(t, err)
	assert.Empty(t, again, "a row under delivery was handed out again within its attempt's time")
}

// countingOutbox counts the claims of the store it wraps.
type countingOutbox struct {
	session.OutboxStore
	claims atomic.Int64
}

func (c *countingOutbox) ClaimOutbox(ctx context.Context, which session.OutboxTargets, now time.Time, lease time.Duration, n int) ([]session.OutboxMessage, error) {
	c.claims.Add(1)
	return c.OutboxStore.ClaimOutbox(ctx, which, now, lease, n)
}

// A backlog is claimed many rows per transaction, as many as there are
// idle workers up to Batch, not a row at a time: each claim is a write on
// the store's one writer, beside joins.
func TestBacklogIsClaimedInBatches(t *testing.T) {
	ok := &receiver{answer: func(_ int, w http.ResponseWriter) { w.WriteHeader(http.StatusNoContent) }}
	srv := httptest.NewServer(ok)
	defer srv.Close()
	var counting *countingOutbox
	f := newFixture(t, srv.URL, []string{session.WebhookPromoted}, func(o *webhook.Options) {
		counting = &countingOutbox{OutboxStore: o.Store}
		o.Store = counting
		o.Now = time.Now
		o.Poll = time.Hour // no poll: what runs is the start and its batches
		o.Workers, o.Batch = 64, 32
	})
	const n = 64
	f.promotions(t, n)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { f.d.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	for range 2000 { // bounded: 10 s
		if len(ok.requests()) >= n {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	require.Len(t, ok.requests(), n)
	// The endpoint's lane: 32 and 32 at once (64 idle workers), then an
	// empty claim; the lane of removed endpoints: one empty claim.
	assert.LessOrEqual(t, counting.claims.Load(), int64(4), "claims for %d rows", n)
}

// The rows of an endpoint no longer in the configuration are dead-lettered
// (kept, counted, logged), and never sent to another endpoint.
func TestRowsOfARemovedEndpointAreDeadLettered(t *testing.T) {
	old := &receiver{answer: func(_ int, w http.ResponseWriter) { w.WriteHeader(http.StatusNoContent) }}
	oldSrv := httptest.NewServer(old)
	defer oldSrv.Close()
	f := newFixture(t, oldSrv.URL, []string{session.WebhookPromoted}, nil)
	f.promotions(t, 3)

	now := &receiver{answer: func(_ int, w http.ResponseWriter) { w.WriteHeader(http.StatusNoContent) }}
	nowSrv := httptest.NewServer(now)
	defer nowSrv.Close()
	d, err := webhook.New(webhook.Options{
		Store:     f.store,
		Endpoints: []webhook.Endpoint{{URL: nowSrv.URL, Events: []string{session.WebhookPromoted}, Secret: []byte(secret)}},
		Now:       f.clock.Now,
		Logger:    slog.New(slog.NewTextHandler(f.logs, nil)),
	})
	require.NoError(t, err)
	ctx := context.Background()
	require.Equal(t, 3, d.RunOnce(ctx))
	assert.Equal(t, 0, d.RunOnce(ctx))
	c, err := f.store.OutboxCounts(ctx)
	require.NoError(t, err)
	assert.Equal(t, session.OutboxCounts{Dead: 3}, c)
	assert.Equal(t, webhook.Stats{Dead: 3}, d.Stats())
	assert.Contains(t, f.logs.String(), "no endpoint configured")
	assert.Empty(t, old.requests())
	assert.Empty(t, now.requests())
}

// A lane's rows do not wait for one slow attempt: while the first row's
// attempt hangs, a row that comes later is delivered by an idle worker.
func TestOneSlowAttemptHoldsUpNoOtherRow(t *testing.T) {
	hold := make(chan struct{})
	rc := &receiver{answer: func(n int, w http.ResponseWriter) {
		if n == 1 {
			<-hold
		}
		w.WriteHeader(http.StatusNoContent)
	}}
	srv := httptest.NewServer(rc)
	defer srv.Close()
	defer close(hold) // before Close, which waits for the held request
	f := newFixture(t, srv.URL, []string{session.WebhookPromoted}, func(o *webhook.Options) {
		o.Now = time.Now
		o.Workers = 4
		o.Timeout = time.Hour
	})
	f.promotions(t, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { f.d.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	for i := 0; len(rc.requests()) < 1 && i < 2000; i++ { // bounded: 10 s
		time.Sleep(5 * time.Millisecond)
	}
	require.Len(t, rc.requests(), 1, "the first row's attempt started")
	f.promotions2(t, "late")
	for i := 0; len(rc.requests()) < 2 && i < 2000; i++ {
		f.d.Kick()
		time.Sleep(5 * time.Millisecond)
	}
	assert.Len(t, rc.requests(), 2, "the later row was sent while the first attempt still hung")
}

// promotions2 makes one more promotion, of a session named tag.
func (f *fixture) promotions2(t *testing.T, tag string) {
	t.Helper()
	ctx := context.Background()
	rows, err := f.store.Rows(ctx, "default")
	require.NoError(t, err)
	var active string
	for _, r := range rows {
		if r.Status == session.StatusActive {
			active = r.ID
		}
	}
	require.NotEmpty(t, active)
	_, err = f.wl.Join(ctx, "default", tag)
	require.NoError(t, err)
	require.NoError(t, f.wl.Release(ctx, "default", active))
}

// A deliverer that stops gives back the rows it claimed and did not start:
// the next process sends them at once, as first attempts, instead of
// waiting out their lease.
func TestStoppingGivesBackTheRowsNotStarted(t *testing.T) {
	hold := make(chan struct{})
	var once sync.Once
	started := make(chan struct{})
	rc := &receiver{answer: func(n int, w http.ResponseWriter) {
		if n == 1 {
			once.Do(func() { close(started) })
			<-hold
		}
		w.WriteHeader(http.StatusNoContent)
	}}
	srv := httptest.NewServer(rc)
	defer srv.Close()
	promoted := []string{session.WebhookPromoted}
	f := newFixture(t, srv.URL, promoted, func(o *webhook.Options) {
		o.Now = time.Now
		o.Workers, o.Batch = 1, 8
	})
	f.promotions(t, 8)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { f.d.Run(ctx); close(done) }()
	<-started
	cancel() // SIGTERM: the attempt under way is cut
	close(hold)
	<-done

	msgs, err := f.store.ClaimOutbox(context.Background(), session.OutboxTargets{}, time.Now(), time.Minute, 10)
	require.NoError(t, err)
	assert.Len(t, msgs, 7, "the seven rows never started are due again at once")
	for _, m := range msgs {
		assert.Zero(t, m.Attempts, "row %d: given back, not counted as an attempt", m.ID)
	}
}

// An attempt that takes longer than the time to record an answer is still
// recorded: the recording's time counts from the attempt's end. (It
// counted from its start, so a receiver answering after 5 s was posted
// again after every lease, and one that hung was never counted, backed
// off or dead-lettered.) It takes a little over 5 s of real time.
func TestASlowAttemptIsRecorded(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out the recording's timeout")
	}
	rc := &receiver{answer: func(_ int, w http.ResponseWriter) {
		time.Sleep(5*time.Second + 300*time.Millisecond)
		w.WriteHeader(http.StatusNoContent)
	}}
	srv := httptest.NewServer(rc)
	defer srv.Close()
	f := newFixture(t, srv.URL, []string{session.WebhookPromoted}, func(o *webhook.Options) {
		o.Now = time.Now
		o.Timeout = 10 * time.Second
	})
	f.promotions(t, 1)
	require.Equal(t, 1, f.d.RunOnce(context.Background()))
	c, err := f.store.OutboxCounts(context.Background())
	require.NoError(t, err)
	assert.Equal(t, session.OutboxCounts{Delivered: 1}, c, "delivered within Timeout: recorded, not left to be sent again")
	assert.NotContains(t, f.logs.String(), "not recorded")
}

// RunOnce stopped mid-batch gives back the rows it did not start, as Run
// does: none is counted as a failed attempt it never made.
func TestRunOnceStoppedGivesBackTheRest(t *testing.T) {
	started := make(chan struct{}, 16)
	rc := &receiver{answer: func(_ int, w http.ResponseWriter) {
		started <- struct{}{}
		time.Sleep(200 * time.Millisecond)
		w.WriteHeader(http.StatusNoContent)
	}}
	srv := httptest.NewServer(rc)
	defer srv.Close()
	f := newFixture(t, srv.URL, []string{session.WebhookPromoted}, func(o *webhook.Options) {
		o.Now = time.Now
		o.Workers, o.Batch = 1, 8
	})
	f.promotions(t, 8)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-started; cancel() }()
	require.Equal(t, 8, f.d.RunOnce(ctx))
	msgs, err := f.store.ClaimOutbox(context.Background(), session.OutboxTargets{}, time.Now().Add(time.Hour), time.Minute, 10)
	require.NoError(t, err)
	counted := 0
	for _, m := range msgs {
		if m.Attempts > 0 {
			counted++
		}
	}
	assert.LessOrEqual(t, counted, 1, "only the attempt under way (cut) counts; rows never posted: %d counted", counted)
	assert.GreaterOrEqual(t, len(msgs), 7, "the rows not started are due again")
}
