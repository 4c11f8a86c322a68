// Package cronjobs runs the waitlist's periodic update on a robfig/cron
// schedule: purge stale sessions, promote waiters. Jobs call the session
// service only.
package cronjobs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/anteroomhq/anteroom/session"
)

// Updater is what a tick calls: *session.Waitlist satisfies it.
type Updater interface {
	Update(ctx context.Context) ([]session.UpdateReport, error)
}

// ParseSchedule accepts either a Go duration ("1m", "1s", "250ms": every that
// long, at least one second apart) or a cron spec (five fields, or a
// descriptor such as "@hourly" or "@every 30s"). It returns an error naming
// the problem when spec is neither.
func ParseSchedule(spec string) (cron.Schedule, error) {
	spec = strings.TrimSpace(spec)
	if spec == "" {
		return nil, errors.New("empty schedule: want a duration such as \"1m\" or a cron spec such as \"*/5 * * * *\"")
	}
	if d, err := time.ParseDuration(spec); err == nil {
		if d <= 0 {
			return nil, fmt.Errorf("duration %q: must be positive", spec)
		}
		if d < time.Second {
			return nil, fmt.Errorf("duration %q: the shortest interval is 1s", spec)
		}
		return cron.Every(d), nil
	}
	sched, err := cron.ParseStandard(spec)
	if err != nil {
		return nil, fmt.Errorf("%q is neither a duration nor a cron spec: %w", spec, err)
	}
	// A spec of a date that never comes ("0 0 30 2 *") parses, and the
	// update would never run again: the library finds no time to run it.
	if sched.Next(time.Now()).IsZero() {
		return nil, fmt.Errorf("cron spec %q never runs (a date that does not exist?)", spec)
	}
	return sched, nil
}

// Scheduler runs the update job on a schedule. Create it with Start.
type Scheduler struct {
	cron    *cron.Cron
	updater Updater
	log     *slog.Logger
	timeout time.Duration
	ctx     context.Context
	cancel  context.CancelFunc
}

// Options tune a Scheduler.
type Options struct {
	// Logger receives a line per tick. Default slog.Default().
	Logger *slog.Logger
	// Timeout bounds one tick. Default 10 minutes.
	Timeout time.Duration
}

// Start schedules the update job and starts running it. Overlapping ticks
// are skipped (SkipIfStillRunning) and a panic in a tick is logged and
// recovered. Stop it with Stop.
func Start(updater Updater, schedule cron.Schedule, opts Options) *Scheduler {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 10 * time.Minute
	}
	s := &Scheduler{updater: updater, log: opts.Logger, timeout: opts.Timeout}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	logger := cronLogger{opts.Logger}
	// Recover must sit inside SkipIfStillRunning: cron v3.0.1's
	// SkipIfStillRunning hands its token back without a defer, so a panic
	// passing through it would skip every later tick for good.
	s.cron = cron.New(cron.WithLogger(logger), cron.WithChain(cron.SkipIfStillRunning(logger), cron.Recover(logger)))
	s.cron.Schedule(schedule, cron.FuncJob(s.tick))
	s.cron.Start()
	return s
}

// RunOnce runs one update now, outside the schedule, and logs it like a tick.
// It returns the updater's error.
func (s *Scheduler) RunOnce(ctx context.Context) error {
	return RunUpdate(ctx, s.updater, s.log)
}

// Stop stops scheduling, cancels a running tick's context and waits for it to
// end or for ctx to be done, whichever comes first. It returns ctx.Err() when
// ctx ended the wait.
func (s *Scheduler) Stop(ctx context.Context) error {
	done := s.cron.Stop()
	s.cancel()
	select {
	case <-done.Done():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *Scheduler) tick() {
	ctx, cancel := context.WithTimeout(s.ctx, s.timeout)
	defer cancel()
	_ = RunUpdate(ctx, s.updater, s.log)
}

// RunUpdate calls updater.Update once and logs, per gate, what it purged and
// promoted (Info when anything changed, Debug otherwise; Error on failure).
// It returns the updater's error.
func RunUpdate(ctx context.Context, updater Updater, log *slog.Logger) error {
	start := time.Now()
	reports, err := updater.Update(ctx)
	for _, r := range reports {
		level := slog.LevelDebug
		if r.PurgedWaiting+r.PurgedActive+r.Promoted > 0 {
			level = slog.LevelInfo
		}
		log.Log(ctx, level, "anteroom: update",
			"gate", r.Gate,
			"purged_waiting", r.PurgedWaiting,
			"purged_active", r.PurgedActive,
			"promoted", r.Promoted,
			"transactions", r.Transactions,
			"duration", r.Duration)
	}
	if err != nil {
		log.Error("anteroom: update failed", "err", err, "duration", time.Since(start))
	}
	return err
}

// cronLogger adapts slog to cron.Logger; cron's own chatter goes to Debug.
type cronLogger struct{ log *slog.Logger }

func (l cronLogger) Info(msg string, keysAndValues ...any) {
	l.log.Debug("cron: "+msg, keysAndValues...)
}

func (l cronLogger) Error(err error, msg string, keysAndValues ...any) {
	l.log.Error("cron: "+msg, append([]any{"err", err}, keysAndValues...)...)
}
