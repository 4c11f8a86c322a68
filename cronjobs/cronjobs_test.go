package cronjobs_test

import (
	"bytes"
	"context"
	"errors"
	"github.com/anteroomhq/anteroom/session/sessiontest"
	"log/slog"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/cronjobs"
	"github.com/anteroomhq/anteroom/session"
)

func TestParseSchedule(t *testing.T) {
	from := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		spec    string
		next    time.Time
		wantErr string
	}{
		{spec: "1m", next: from.Add(time.Minute)},
		{spec: "1s", next: from.Add(time.Second)},
		{spec: " 90s ", next: from.Add(90 * time.Second)},
		{spec: "*/5 * * * *", next: from.Add(5 * time.Minute)},
		{spec: "@every 30s", next: from.Add(30 * time.Second)},
		{spec: "@hourly", next: from.Add(time.Hour)},
		{spec: "", wantErr: "empty schedule"},
		{spec: "-1m", wantErr: "must be positive"},
		{spec: "500ms", wantErr: "shortest interval is 1s"},
		{spec: "every minute", wantErr: "neither a duration nor a cron spec"},
		{spec: "61 * * * *", wantErr: "neither a duration nor a cron spec"},
	}
	for _, tt := range tests {
		t.Run(tt.spec, func(t *testing.T) {
			sched, err := cronjobs.ParseSchedule(tt.spec)
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.next, sched.Next(from))
		})
	}
}

type fakeUpdater struct {
	calls   atomic.Int64
	reports []session.UpdateReport
	err     error
	panics  bool
	block   chan struct{}
}

func (f *fakeUpdater) Update(ctx context.Context) ([]session.UpdateReport, error) {
	f.calls.Add(1)
	if f.panics {
		panic("boom")
	}
	if f.block != nil {
		select {
		case <-f.block:
		case <-ctx.Done():
		}
	}
	return f.reports, f.err
}

func newLogger(buf *sessiontest.LogBuffer) *slog.Logger {
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func TestRunUpdateLogsWhatEachGatePurgedAndPromoted(t *testing.T) {
	var buf sessiontest.LogBuffer
	u := &fakeUpdater{reports: []session.UpdateReport{
		{Gate: "default", PurgedWaiting: 3, PurgedActive: 2, Promoted: 4, Transactions: 3},
		{Gate: "quiet"},
	}}
	require.NoError(t, cronjobs.RunUpdate(context.Background(), u, newLogger(&buf)))
	out := buf.String()
	assert.Contains(t, out, "level=INFO msg=\"anteroom: update\" gate=default purged_waiting=3 purged_active=2 promoted=4 transactions=3")
	assert.Contains(t, out, "level=DEBUG msg=\"anteroom: update\" gate=quiet purged_waiting=0")
}

func TestRunUpdateReportsFailure(t *testing.T) {
	var buf sessiontest.LogBuffer
	u := &fakeUpdater{err: errors.New("disk full")}
	err := cronjobs.RunUpdate(context.Background(), u, newLogger(&buf))
	require.ErrorContains(t, err, "disk full")
	assert.Contains(t, buf.String(), "level=ERROR msg=\"anteroom: update failed\" err=\"disk full\"")
}

// everyFewMillis fires 5ms after each previous run, so the test sees ticks
// without sleeping for a whole second.
type everyFewMillis struct{}

func (everyFewMillis) Next(t time.Time) time.Time { return t.Add(5 * time.Millisecond) }

func TestSchedulerTicksAndStops(t *testing.T) {
	var buf sessiontest.LogBuffer
	u := &fakeUpdater{reports: []session.UpdateReport{{Gate: "default", Promoted: 1}}}
	s := cronjobs.Start(u, everyFewMillis{}, cronjobs.Options{Logger: newLogger(&buf)})
	require.Eventually(t, func() bool { return u.calls.Load() >= 3 }, 5*time.Second, time.Millisecond)
	require.NoError(t, s.Stop(context.Background()))
	after := u.calls.Load()
	// No tick starts after Stop returned: cron's run loop is gone. Check over
	// a few would-be periods by forcing a context switch, not by timing.
	for range 100 {
		runtime.Gosched()
	}
	assert.Equal(t, after, u.calls.Load())
	assert.Contains(t, buf.String(), "promoted=1")
}

func TestSchedulerRecoversFromPanics(t *testing.T) {
	var buf sessiontest.LogBuffer
	u := &fakeUpdater{panics: true}
	s := cronjobs.Start(u, everyFewMillis{}, cronjobs.Options{Logger: newLogger(&buf)})
	require.Eventually(t, func() bool { return u.calls.Load() >= 3 }, 5*time.Second, time.Millisecond,
		"the job keeps running after a panic")
	require.NoError(t, s.Stop(context.Background()))
	assert.Contains(t, buf.String(), "panic")
}

func TestSchedulerSkipsOverlappingTicks(t *testing.T) {
	var buf sessiontest.LogBuffer
	u := &fakeUpdater{block: make(chan struct{})}
	s := cronjobs.Start(u, everyFewMillis{}, cronjobs.Options{Logger: newLogger(&buf)})
	require.Eventually(t, func() bool { return bytes.Contains([]byte(buf.String()), []byte("skip")) }, 5*time.Second, time.Millisecond,
		"a tick that finds the previous one running is skipped")
	assert.Equal(t, int64(1), u.calls.Load(), "only the first tick ran while it was blocked")
	close(u.block)
	require.NoError(t, s.Stop(context.Background()))
}

func TestStopCancelsARunningTick(t *testing.T) {
	u := &fakeUpdater{block: make(chan struct{})} // never closed: only ctx ends it
	s := cronjobs.Start(u, everyFewMillis{}, cronjobs.Options{Logger: slog.New(slog.DiscardHandler)})
	require.Eventually(t, func() bool { return u.calls.Load() >= 1 }, 5*time.Second, time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, s.Stop(ctx), "Stop cancels the tick's context and waits for it")
}
