package gate_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/gate"
	"github.com/anteroomhq/anteroom/gate/gatetest"
	"github.com/anteroomhq/anteroom/gate/wire"
	"github.com/anteroomhq/anteroom/session"
)

// startedLottery starts a sidecar whose gate "default" had a shuffled
// event with n sessions in its pre-queue, drawn; rl is its rate limit.
func startedLottery(t testing.TB, n int, rl gate.RateLimitOptions) *gatetest.Sidecar {
	t.Helper()
	return startedLotteryWith(t, n, func(o *gate.Options) { o.RateLimit = rl })
}

// startedLotteryWith is startedLottery with the gate's options set by
// configure.
func startedLotteryWith(t testing.TB, n int, configure func(*gate.Options)) *gatetest.Sidecar {
	t.Helper()
	_, loopback, err := net.ParseCIDR("127.0.0.0/8")
	require.NoError(t, err)
	sc := gatetest.StartSidecar(t, gatetest.Options{
		Gates: []session.GateConfig{gatetest.Gate("default", 1)},
		Gate: func(o *gate.Options) {
			o.TrustedProxies = []*net.IPNet{loopback}
			configure(o)
		},
	})
	ctx := context.Background()
	w := sc.Waitlist
	_, err = w.Join(ctx, "default", "holder")
	require.NoError(t, err)
	now := sc.Clock.Now()
	_, err = w.AddEvent(ctx, session.ScheduledEvent{Gate: "default", ID: "launch",
		PrequeueAt: now.Add(-time.Second), StartsAt: now.Add(time.Minute), Shuffle: true})
	require.NoError(t, err)
	require.NoError(t, w.Sweep(ctx))
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for k := range 32 { // bounded: 32 joiners, so that joins share transactions
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := k; i < n; i += 32 {
				if _, err := w.Join(ctx, "default", fmt.Sprintf("pre-%d", i)); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	require.NoError(t, <-errs)
	sc.Clock.Advance(time.Minute)
	require.NoError(t, w.Sweep(ctx))
	evs, err := w.Events("default")
	require.NoError(t, err)
	require.Equal(t, session.EventStarted, evs[0].Phase)
	require.Len(t, evs[0].Positions, n)
	return sc
}

// scheduleEvents gives gate n events (at most session.MaxEventsPerGate
// with the ones it has) in every phase and kind, on the sidecar's fake
// clock: ten minutes apart from the clock's time on, each with a
// five-minute pre-queue; every third ends a minute after its start, every
// other one is a lottery, some override the limit or the pacing. The first
// half is taken through its start (two sessions join each pre-queue), the
// next one is left with its pre-queue open and the rest scheduled; the
// clock is left at that pre-queue's opening, past the ends of the ended
// ones. It returns the events' start times.
func scheduleEvents(t testing.TB, sc *gatetest.Sidecar, gate string, n int) []time.Time {
	t.Helper()
	ctx := context.Background()
	w := sc.Waitlist
	from := sc.Clock.Now().Add(time.Minute)
	starts := make([]time.Time, n)
	for i := range n {
		limit, pace := int64(i+1), int64(60*(i+1))
		ev := session.ScheduledEvent{Gate: gate, ID: fmt.Sprintf("ev-%02d", i),
			PrequeueAt: from.Add(time.Duration(i) * 10 * time.Minute), Shuffle: i%2 == 0}
		ev.StartsAt = ev.PrequeueAt.Add(5 * time.Minute)
		if i%3 == 0 {
			ev.EndsAt = ev.StartsAt.Add(time.Minute)
		}
		if i%4 == 0 {
			ev.ActiveLimit = &limit
		}
		if i%5 == 0 {
			ev.NewUsersPerMinute = &pace
		}
		_, err := w.AddEvent(ctx, ev)
		require.NoError(t, err)
		starts[i] = ev.StartsAt
	}
	for i := range n/2 + 1 {
		sc.Clock.Set(starts[i].Add(-5 * time.Minute))
		require.NoError(t, w.Sweep(ctx))
		if i == n/2 {
			break
		}
		for k := range 2 {
			_, err := w.Join(ctx, gate, fmt.Sprintf("%s-%02d-%d", gate, i, k))
			require.NoError(t, err)
		}
		sc.Clock.Set(starts[i])
		require.NoError(t, w.Sweep(ctx))
	}
	return starts
}

// TestEventsAreNotRateLimitedPerAddress: at an event's start every visitor
// behind one NAT asks for GET /api/events?positions=0 at once. That answer
// is read from memory, so it is outside the per-IP limit of the client API
// (like /check): a flood of it from one address is answered, while that
// address's joins are limited as before, and the full answer (the whole
// pre-queue, which grows with the line) still spends from the limit.
func TestEventsAreNotRateLimitedPerAddress(t *testing.T) {
	sc := startedLottery(t, 3, gate.RateLimitOptions{PerSecond: 0.01, Burst: 3})
	nat := "203.0.113.9"
	get := func(query, ip string) (int, http.Header) {
		req, err := http.NewRequest(http.MethodGet, sc.URL+base+"/api/events?gate=default"+query, nil)
		if query == "unknown gate" {
			req, err = http.NewRequest(http.MethodGet, sc.URL+base+"/api/events?gate=nope&positions=0", nil)
		}
		require.NoError(t, err)
		req.Header.Set("X-Forwarded-For", ip)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode, resp.Header
	}
	// The flood from one address: 1,000 requests, 16 at a time.
	const flood, workers = 1000, 16
	codes := make([]int, flood)
	var wg sync.WaitGroup
	for k := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := k; i < flood; i += workers {
				codes[i], _ = get("&positions=0", nat)
			}
		}()
	}
	wg.Wait()
	for i, c := range codes {
		require.Equal(t, http.StatusOK, c, "request %d of the flood", i)
	}
	_, h := get("&positions=0", nat)
	assert.Equal(t, "no-store", h.Get("Cache-Control"), "the answer carries the server's clock")

	// Joins from that address are limited as before: the burst, then 429.
	join := func(ip string) int {
		return do(t, newClient(t), http.MethodPost, sc.URL+base+"/api/join", "", "", "X-Forwarded-For", ip).status
	}
	for i := range 3 {
		assert.Equal(t, http.StatusOK, join(nat), "join %d within the burst", i)
	}
	assert.Equal(t, http.StatusTooManyRequests, join(nat))
	// The full answer spends from the same budget: refused now...
	code, h := get("", nat)
	assert.Equal(t, http.StatusTooManyRequests, code)
	assert.NotEmpty(t, h.Get("Retry-After"))
	code, _ = get("&positions=1", nat)
	assert.Equal(t, http.StatusTooManyRequests, code, "any value but 0 is the full answer")
	// ...while the snippet's answer is still served, and other addresses get both.
	code, _ = get("&positions=0", nat)
	assert.Equal(t, http.StatusOK, code)
	code, _ = get("", "198.51.100.4")
	assert.Equal(t, http.StatusOK, code)
	// An unknown gate is refused without being limited or remembered.
	for range 20 {
		code, _ = get("unknown gate", nat)
		assert.Equal(t, http.StatusNotFound, code)
	}
}

// TestEventsAnswerNeverTouchesTheStoreAndDoesNotGrowWithTheLine: the
// snippet's answer costs the same after a draw of 20,000 as of 3 (the
// positions are neither copied nor encoded), and it is answered from
// memory, also with the store closed.
func TestEventsAnswerNeverTouchesTheStoreAndDoesNotGrowWithTheLine(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a pre-queue of 20,000")
	}
	perRequest := func(sc *gatetest.Sidecar) (bytes uint64, body []byte) {
		const n = 50
		serve := func() *httptest.ResponseRecorder {
			rec := httptest.NewRecorder()
			sc.Handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, base+"/api/events?positions=0&gate=default", nil))
			require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
			return rec
		}
		body = serve().Body.Bytes()
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for range n {
			serve()
		}
		runtime.ReadMemStats(&after)
		return (after.TotalAlloc - before.TotalAlloc) / n, body
	}
	small, smallBody := perRequest(startedLottery(t, 3, gate.RateLimitOptions{}))
	big := startedLottery(t, 20000, gate.RateLimitOptions{})
	large, largeBody := perRequest(big)
	// 20,000 positions are 160 KB as int64s, more as JSON: a copy or an
	// encoding of them shows. Allow for noise of other goroutines.
	assert.Less(t, large, small+16<<10, "bytes allocated per answer: %d with 3 in the draw, %d with 20,000", small, large)
	assert.Less(t, len(largeBody), len(smallBody)+64, "the answer does not carry the pre-queue")

	// The full answer does carry it, once per request, unchanged.
	rec := httptest.NewRecorder()
	big.Handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, base+"/api/events?gate=default", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	var v wire.EventsView
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &v))
	evs, err := big.Waitlist.Events("default")
	require.NoError(t, err)
	assert.Equal(t, evs[0].Positions, v.Events[0].Positions)

	// Memory only: with the store closed the answer is the same.
	require.NoError(t, big.Store.Close())
	for range 100 {
		rec := httptest.NewRecorder()
		big.Handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, base+"/api/events?positions=0&gate=default", nil))
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
		assert.JSONEq(t, string(largeBody), rec.Body.String())
	}
}

// discardWriter is the ResponseWriter of BenchmarkEvents: a fresh header
// map per answer, as net/http's, and the body counted, not kept (a
// recorder's buffer, grown per answer, would be most of the cost of a
// large answer, and a connection writes the same bytes whatever made
// them).
type discardWriter struct {
	header http.Header
	code   int
	n      int
}

func (w *discardWriter) Header() http.Header { return w.header }

func (w *discardWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
}

func (w *discardWriter) Write(b []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	w.n += len(b)
	return len(b), nil
}

// BenchmarkEvents measures GET /api/events after a draw of 20,000: the
// snippet's answer (positions=0) beside /healthz in the same run, and the
// full answer, which carries the pre-queue; and the snippet's answer for a
// gate with the most events a gate keeps, in every phase
// (events-64-positions=0).
func BenchmarkEvents(b *testing.B) {
	sc := startedLottery(b, 20000, gate.RateLimitOptions{})
	many := gatetest.StartSidecar(b, gatetest.Options{Gates: []session.GateConfig{gatetest.Gate("default", 1)}})
	scheduleEvents(b, many, "default", session.MaxEventsPerGate)
	run := func(b *testing.B, sc *gatetest.Sidecar, path string) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			req := httptest.NewRequest(http.MethodGet, path, nil)
			for pb.Next() {
				w := &discardWriter{header: http.Header{}}
				sc.Handler.ServeHTTP(w, req)
				if w.code != http.StatusOK || w.n == 0 {
					b.Fatalf("%s: %d, %d bytes", path, w.code, w.n)
				}
			}
		})
	}
	b.Run("healthz", func(b *testing.B) { run(b, sc, "/healthz") })
	b.Run("events-positions=0", func(b *testing.B) { run(b, sc, base+"/api/events?positions=0&gate=default") })
	b.Run("events-64-positions=0", func(b *testing.B) { run(b, many, base+"/api/events?positions=0&gate=default") })
	b.Run("events-full", func(b *testing.B) { run(b, sc, base+"/api/events?gate=default") })
}
