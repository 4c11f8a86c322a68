package main

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/anteroomhq/anteroom/gate/token"
)

// paced calls fn for the i-th event at start + i/rate (open loop, from
// workers goroutines) until d has passed, and returns how many ran. When fn
// is slower than the rate, events start late, never get dropped.
func paced(ctx context.Context, rate int, d time.Duration, workers int, fn func(due time.Time) error) (int64, error) {
	start := time.Now()
	end := start.Add(d)
	step := time.Second / time.Duration(rate)
	var next, ran atomic.Int64
	var firstErr atomic.Pointer[error]
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for ctx.Err() == nil && firstErr.Load() == nil {
				i := next.Add(1) - 1
				due := start.Add(time.Duration(i) * step)
				if !due.Before(end) {
					return
				}
				if wait := time.Until(due); wait > 0 {
					time.Sleep(wait)
				}
				if err := fn(due); err != nil {
					firstErr.CompareAndSwap(nil, &err)
					return
				}
				ran.Add(1)
			}
		})
	}
	wg.Wait()
	if p := firstErr.Load(); p != nil {
		return ran.Load(), *p
	}
	return ran.Load(), ctx.Err()
}

func (b *bench) storm(ctx context.Context) ([]Result, error) {
	dir, cleanup, err := tempDir("storm")
	if err != nil {
		return nil, err
	}
	defer cleanup()
	in, err := startInstance(ctx, instanceConfig{dir: dir, limit: 1000, interval: b.cfg.interval, cron: true})
	if err != nil {
		return nil, err
	}
	defer in.Close()

	// One subscriber over a real socket counts the global messages it gets.
	ws, err := dialWS(ctx, in.addr, basePath+"/ws?gate="+gateName, nil)
	if err != nil {
		return nil, err
	}
	defer ws.Close()
	var received atomic.Int64
	go func() {
		for {
			p, err := ws.next()
			if err != nil {
				return
			}
			if bytes.HasPrefix(p, globalPrefix) {
				received.Add(1)
			}
		}
	}()
	if err := waitFor(ctx, 10*time.Second, func() bool { return received.Load() > 0 }); err != nil {
		return nil, fmt.Errorf("no initial global message: %w", err)
	}
	sleepCtx(ctx, 2*b.cfg.interval)
	enc0, recv0 := in.hub.Stats().GlobalsEncoded, received.Load()

	start := time.Now()
	joins, err := paced(ctx, b.cfg.stormRate, b.cfg.stormDuration, 128, func(time.Time) error {
		_, err := in.wl.Join(ctx, gateName, token.NewID())
		return err
	})
	if err != nil {
		return nil, err
	}
	elapsed := time.Since(start)
	sleepCtx(ctx, b.cfg.interval+200*time.Millisecond) // the trailing message
	enc := float64(in.hub.Stats().GlobalsEncoded - enc0)
	recv := float64(received.Load() - recv0)

	// One per interval, plus the leading edge and the trailing message.
	allowed := math.Ceil(float64(elapsed)/float64(b.cfg.interval)) + 1
	target := fmt.Sprintf("<= %.0f (1/%s)", allowed, b.cfg.interval)
	note := fmt.Sprintf("%d joins in %.2f s = %.0f/s (offered %d/s); allowed = ceil(elapsed/interval) + the leading edge",
		joins, elapsed.Seconds(), float64(joins)/elapsed.Seconds(), b.cfg.stormRate)
	return []Result{
		Result{Metric: "global messages encoded (hub)", Value: enc, Check: checkValueMax, Want: allowed, Target: target,
			Note: note + "; baseline: joins"}.withBaseline(float64(joins)),
		Result{Metric: "global messages received (1 socket)", Value: recv, Check: checkValueMax, Want: allowed, Target: target,
			Note: "baseline: joins"}.withBaseline(float64(joins)),
	}, nil
}
