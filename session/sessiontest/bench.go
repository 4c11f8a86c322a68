package sessiontest

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anteroomhq/anteroom/session"
)

// RunStoreBenchmarks runs the benchmarks every session.Store is measured
// with. Each reports a rate (joins/s, rows/s, ...) beside ns/op.
func RunStoreBenchmarks(b *testing.B, open Opener) {
	b.Run("JoinParallel", func(b *testing.B) { benchJoin(b, open, false) })
	b.Run("WaitlistJoinParallel", func(b *testing.B) { benchJoin(b, open, true) })
	b.Run("JoinSerial", func(b *testing.B) { benchJoinSerial(b, open) })
	b.Run("GetParallel", func(b *testing.B) { benchGet(b, open) })
	b.Run("Touch1000", func(b *testing.B) { benchTouch(b, open) })
	b.Run("UpdatePurge2000", func(b *testing.B) { benchUpdatePurge(b, open) })
	b.Run("UpdateIdle20000", func(b *testing.B) { benchUpdateIdle(b, open) })
}

// benchParallelism is goroutines per GOMAXPROCS in parallel benchmarks: many
// concurrent callers, as behind an HTTP server.
const benchParallelism = 32

// fill joins n sessions named prefix+i from concurrent goroutines.
func fill(tb testing.TB, s session.Store, cfg session.GateConfig, prefix string, n int, now time.Time) {
	tb.Helper()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(n) {
					return
				}
				if _, err := s.Join(tb.Context(), cfg, prefix+strconv.FormatInt(i, 10), now); err != nil {
					tb.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if tb.Failed() {
		tb.FailNow()
	}
}

func benchJoin(b *testing.B, open Opener, viaWaitlist bool) {
	h := newHarness(b, open)
	cfg := GateConfig(gateName, 1000)
	var w *session.Waitlist
	if viaWaitlist {
		w = h.waitlist(cfg)
	}
	var n atomic.Int64
	tc, counted := h.store.(TransactionCounter)
	var txs int64
	if counted {
		txs = tc.Transactions()
	}
	b.SetParallelism(benchParallelism)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			id := "b" + strconv.FormatInt(n.Add(1), 10)
			var err error
			if w != nil {
				_, err = w.Join(h.ctx, gateName, id)
			} else {
				_, err = h.store.Join(h.ctx, cfg, id, h.clock.Now())
			}
			if err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "joins/s")
	if counted {
		b.ReportMetric(float64(b.N)/float64(max(1, tc.Transactions()-txs)), "joins/tx")
	}
}

func benchJoinSerial(b *testing.B, open Opener) {
	h := newHarness(b, open)
	cfg := GateConfig(gateName, 1000)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if _, err := h.store.Join(h.ctx, cfg, "s"+strconv.Itoa(i), h.clock.Now()); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "joins/s")
}

func benchGet(b *testing.B, open Opener) {
	h := newHarness(b, open)
	cfg := GateConfig(gateName, 100)
	const n = 1000
	fill(b, h.store, cfg, "g", n, h.clock.Now())
	var i atomic.Int64
	// A request's context, which can be cancelled (h.ctx cannot).
	ctx, cancel := context.WithCancel(h.ctx)
	defer cancel()
	b.SetParallelism(benchParallelism)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			id := "g" + strconv.FormatInt(i.Add(1)%n, 10)
			if _, err := h.store.Get(ctx, gateName, id); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "gets/s")
}

func benchTouch(b *testing.B, open Opener) {
	h := newHarness(b, open)
	const n = 1000
	cfg := GateConfig(gateName, n)
	fill(b, h.store, cfg, "t", n, h.clock.Now())
	touches := make([]session.Touch, n)
	for i := range touches {
		touches[i].ID = "t" + strconv.Itoa(i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		la := Epoch.Add(time.Duration(i+1) * time.Second)
		for j := range touches {
			touches[j].LastActive = la
		}
		if err := h.store.Touch(h.ctx, gateName, touches); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "touches/s")
}

// benchUpdatePurge times ticks that each purge 1000 stale active and 1000
// stale waiting sessions, in chunks of session.DefaultUpdateChunk rows (what
// the Waitlist asks for by default).
func benchUpdatePurge(b *testing.B, open Opener) {
	h := newHarness(b, open)
	const n = 1000
	cfg := GateConfig(gateName, n)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		prefix := "u" + strconv.Itoa(i) + "-"
		now := h.clock.Now()
		fill(b, h.store, cfg, prefix+"a", n, now) // n active
		fill(b, h.store, cfg, prefix+"w", n, now) // n waiting
		for j := range n {
			if _, err := h.store.Leave(h.ctx, cfg, prefix+"w"+strconv.Itoa(j), now); err != nil {
				b.Fatal(err)
			}
		}
		now = h.clock.Advance(cfg.ActiveTimeout + time.Second)
		b.StartTimer()
		r, err := h.store.Update(h.ctx, cfg, now, session.DefaultUpdateChunk)
		if err != nil {
			b.Fatal(err)
		}
		if r.PurgedActive != n || r.PurgedWaiting != n {
			b.Fatalf("update purged %d active and %d waiting, want %d each", r.PurgedActive, r.PurgedWaiting, n)
		}
	}
	b.ReportMetric(float64(b.N*2*n)/b.Elapsed().Seconds(), "rows/s")
}

// benchUpdateIdle times a tick over a long line with nothing to do: the cost
// every gate pays every tick.
func benchUpdateIdle(b *testing.B, open Opener) {
	h := newHarness(b, open)
	cfg := GateConfig(gateName, 100)
	fill(b, h.store, cfg, "i", 20000, h.clock.Now())
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		r, err := h.store.Update(h.ctx, cfg, h.clock.Now(), session.DefaultUpdateChunk)
		if err != nil {
			b.Fatal(err)
		}
		if r.PurgedActive+r.PurgedWaiting+r.Promoted != 0 {
			b.Fatalf("idle update did something: %+v", r)
		}
	}
}
