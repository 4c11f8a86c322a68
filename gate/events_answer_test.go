package gate_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/gate"
	"github.com/anteroomhq/anteroom/gate/gatetest"
	"github.com/anteroomhq/anteroom/gate/wire"
	"github.com/anteroomhq/anteroom/session"
)

// referenceEvents is what GET /api/events answered before the snippet's
// answer was cached: c.JSON (a json.Encoder, indented by two spaces under
// ?pretty) of the gate's events seen at now, each started event's
// positions left out unless full.
func referenceEvents(t testing.TB, gate string, evs []session.ScheduledEvent, now time.Time, full, pretty bool) []byte {
	t.Helper()
	v := wire.EventsView{Gate: gate, Now: now.UTC(), Events: make([]wire.EventView, 0, len(evs))}
	for _, ev := range evs {
		e := wire.NewEventView(ev, v.Now)
		if !full {
			e.Positions = nil
		}
		v.Events = append(v.Events, e)
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	if pretty {
		enc.SetIndent("", "  ")
	}
	require.NoError(t, enc.Encode(v))
	return b.Bytes()
}

// serveEvents asks sc's handler for GET {base}/api/events with query.
func serveEvents(sc *gatetest.Sidecar, query string) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	sc.Handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, base+"/api/events"+query, nil))
	return rec
}

// eventsQueries are the ways of asking for a gate's events: the snippet's
// answer compact and indented (c.JSON's ?pretty, wherever it is, with or
// without a value), and the full answer (cached in a cache of its own).
var eventsQueries = []struct {
	name         string
	query        string // %s: the gate
	full, pretty bool
}{
	{"snippet", "?gate=%s&positions=0", false, false},
	{"snippet, again (cached)", "?positions=0&gate=%s", false, false},
	{"snippet, pretty", "?gate=%s&positions=0&pretty", false, true},
	{"snippet, pretty first, with a value", "?pretty=no&gate=%s&positions=0", false, true},
	{"snippet, pretty only as a value", "?gate=%s&positions=0&x=pretty", false, false},
	{"snippet, pretty first of two positions", "?gate=%s&positions=0&positions=1&pretty", false, true},
	{"full", "?gate=%s", true, false},
	{"full, pretty", "?gate=%s&positions=1&pretty", true, true},
}

// checkEventsAnswers asks for each gate's events every way and compares
// the answers, bytes and headers, with the reference built from memory
// and the clock; a removed gate is a 404.
func checkEventsAnswers(t *testing.T, sc *gatetest.Sidecar, gates ...string) {
	t.Helper()
	now := sc.Clock.Now()
	for _, g := range gates {
		evs, err := sc.Waitlist.Events(g)
		for _, q := range eventsQueries {
			rec := serveEvents(sc, fmt.Sprintf(q.query, g))
			if errors.Is(err, session.ErrUnknownGate) {
				assert.Equal(t, http.StatusNotFound, rec.Code, "%s: %s", g, q.name)
				continue
			}
			require.NoError(t, err)
			require.Equal(t, http.StatusOK, rec.Code, "%s: %s: %s", g, q.name, rec.Body)
			want := referenceEvents(t, g, evs, now, q.full, q.pretty)
			assert.Equal(t, string(want), rec.Body.String(), "%s: %s", g, q.name)
			h := rec.Header()
			assert.Equal(t, "application/json", h.Get("Content-Type"), q.name)
			assert.Equal(t, "no-store", h.Get("Cache-Control"), "%s: the answer carries the server's clock", q.name)
			assert.Equal(t, "nosniff", h.Get("X-Content-Type-Options"), q.name)
			assert.Empty(t, h.Values("ETag"), q.name)
			assert.Empty(t, h.Values("Last-Modified"), q.name)
			if n := h.Get("Content-Length"); n != "" {
				assert.Equal(t, strconv.Itoa(rec.Body.Len()), n, q.name)
			}
		}
	}
}

// TestEventsAnswerIsTheEncodersInEveryState: the snippet's answer, cached
// per change of a gate's published events, is byte for byte what the
// encoder wrote per request, in every state of the events (none,
// scheduled, pre-queue, drawn, first come, ended with no change in memory,
// the clock going back), changed by the admin API, for several gates, a
// gate removed and added again, and with the most events a gate keeps;
// also when only the clock moved (its "now" is written per request).
func TestEventsAnswerIsTheEncodersInEveryState(t *testing.T) {
	h := newAdminHarness(t, adminToken, nil)
	sc := h.sc
	start := gatetest.Start
	admin := func(method, path, body string, want int) func(t *testing.T) {
		return func(t *testing.T) {
			code, resp, _ := h.do(method, path, adminToken, body)
			require.Equal(t, want, code, resp)
		}
	}
	event := func(id string, prequeue, starts, ends time.Duration, extra string) string {
		b := `{"id":"` + id + `","prequeueAt":"` + rfc(start.Add(prequeue)) + `","startsAt":"` + rfc(start.Add(starts)) + `"`
		if ends != 0 {
			b += `,"endsAt":"` + rfc(start.Add(ends)) + `"`
		}
		return b + extra + `}`
	}
	at := func(d time.Duration) func(t *testing.T) { return func(*testing.T) { sc.Clock.Set(start.Add(d)) } }
	sweep := func(t *testing.T) { require.NoError(t, sc.Waitlist.Sweep(t.Context())) }
	join := func(n int) func(t *testing.T) {
		return func(t *testing.T) {
			for i := range n {
				_, err := sc.Waitlist.Join(t.Context(), "default", fmt.Sprintf("waiter-%d-%d", sc.Clock.Now().Unix(), i))
				require.NoError(t, err)
			}
		}
	}
	steps := []struct {
		name string
		acts []func(t *testing.T)
	}{
		{"no events", nil},
		{"a gate added at runtime", []func(*testing.T){admin("POST", "gates", `{"name":"launch","activeLimit":1}`, 201)}},
		{"scheduled: a lottery with an end and overrides, a first-come event", []func(*testing.T){
			admin("POST", "gates/default/events", event("drop", time.Minute, 2*time.Minute, time.Hour, `,"shuffle":true,"activeLimit":2,"newUsersPerMinute":60`), 201),
			admin("POST", "gates/vip/events", event("queue", time.Minute, 2*time.Minute, 0, `,"shuffle":false`), 201),
			admin("POST", "gates/launch/events", event("later", 3*time.Hour, 4*time.Hour, 5*time.Hour, ``), 201),
		}},
		{"only the clock moved", []func(*testing.T){at(time.Second)}},
		{"replaced", []func(*testing.T){admin("PUT", "gates/default/events/drop", event("drop", time.Minute, 2*time.Minute, 90*time.Minute, `,"shuffle":true,"activeLimit":3`), 200)}},
		{"the pre-queue's time, before the transition", []func(*testing.T){at(time.Minute)}},
		{"pre-queues open", []func(*testing.T){sweep, join(5)}},
		{"drawn and started", []func(*testing.T){at(2 * time.Minute), sweep}},
		{"a nanosecond before the end", []func(*testing.T){at(90*time.Minute - time.Nanosecond)}},
		{"ended: the clock crossed the end, memory did not change", []func(*testing.T){at(90 * time.Minute)}},
		{"the clock went back", []func(*testing.T){at(89 * time.Minute)}},
		{"ended again, and a new event", []func(*testing.T){at(100 * time.Minute), admin("POST", "gates/default/events", event("next", 2*time.Hour, 3*time.Hour, 0, ``), 201)}},
		{"a started event removed", []func(*testing.T){admin("DELETE", "gates/default/events/drop", "", 204)}},
		{"a gate removed", []func(*testing.T){admin("DELETE", "gates/launch", "", 204)}},
		{"and added again, without its events", []func(*testing.T){admin("POST", "gates", `{"name":"launch","activeLimit":1}`, 201)}},
		{"and given new ones", []func(*testing.T){admin("POST", "gates/launch/events", event("again", 3*time.Hour, 4*time.Hour, 0, `,"shuffle":true`), 201)}},
		{"the most events, in every phase", []func(*testing.T){func(t *testing.T) { scheduleEvents(t, sc, "vip", session.MaxEventsPerGate-1) }}},
		{"far later: every end passed", []func(*testing.T){at(400 * 24 * time.Hour)}},
	}
	for _, step := range steps {
		t.Run(step.name, func(t *testing.T) {
			for _, act := range step.acts {
				act(t)
			}
			checkEventsAnswers(t, sc, "default", "vip", "launch")
			sc.Clock.Advance(time.Nanosecond) // the same events: cached, at another time
			checkEventsAnswers(t, sc, "default", "vip", "launch")
		})
	}
	evs, err := sc.Waitlist.Events("vip")
	require.NoError(t, err)
	phases := map[string]int{}
	for _, e := range evs {
		phases[string(e.PhaseAt(sc.Clock.Now()))]++
	}
	assert.Len(t, evs, session.MaxEventsPerGate)
	assert.Len(t, phases, 4, "scheduled, prequeue, started and ended: %v", phases)
}

// eventsState is what one gate's answer was made of at one step: the
// gate's events (nil slice and known false once the gate is removed) and
// the clock.
type eventsState struct {
	known  bool
	events []session.ScheduledEvent
	now    time.Time
}

// TestEventsAnswerUnderConcurrentChanges: requests for the snippet's
// answer, flooding while the events change (added, replaced, removed,
// drawn; a gate removed and added again) and the clock crosses an event's
// end back and forth, each get what the encoder wrote for the gate's
// events at one instant of the request and the clock at one instant of
// it: never an answer older than the request.
func TestEventsAnswerUnderConcurrentChanges(t *testing.T) {
	sc := gatetest.StartSidecar(t, gatetest.Options{Gates: []session.GateConfig{gatetest.Gate("default", 1), gatetest.Gate("vip", 1)}})
	ctx := t.Context()
	w := sc.Waitlist
	start := gatetest.Start
	gates := []string{"default", "vip"}

	// states[k][gate] is the state after the k-th change; version is how
	// many are recorded.
	var (
		mu      sync.Mutex
		states  []map[string]eventsState
		version atomic.Int64
	)
	record := func() {
		st := map[string]eventsState{}
		for _, g := range gates {
			evs, err := w.Events(g)
			if errors.Is(err, session.ErrUnknownGate) {
				st[g] = eventsState{now: sc.Clock.Now()}
				continue
			}
			require.NoError(t, err)
			st[g] = eventsState{known: true, events: evs, now: sc.Clock.Now()}
		}
		mu.Lock()
		states = append(states, st)
		mu.Unlock()
		version.Add(1)
	}
	record()

	type answer struct {
		before, after int64 // version before and after the request
		gate          string
		pretty        bool
		code          int
		body          []byte
	}
	stop := make(chan struct{})
	var (
		readers sync.WaitGroup
		served  atomic.Int64
	)
	answers := make([][]answer, 4)
	for k := range answers {
		readers.Add(1)
		go func() {
			defer readers.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				a := answer{gate: gates[i%2], pretty: i%5 == 0}
				q := "?positions=0&gate=" + a.gate
				if a.pretty {
					q += "&pretty"
				}
				a.before = version.Load()
				rec := serveEvents(sc, q)
				a.after = version.Load()
				a.code, a.body = rec.Code, rec.Body.Bytes()
				answers[k] = append(answers[k], a)
				served.Add(1)
			}
		}()
	}

	// The changes, each one change of a gate's events or of the clock.
	i64 := func(v int64) *int64 { return &v }
	ev := func(gate, id string, prequeue, starts, ends time.Duration) session.ScheduledEvent {
		e := session.ScheduledEvent{Gate: gate, ID: id, PrequeueAt: start.Add(prequeue), StartsAt: start.Add(starts), Shuffle: gate == "default", ActiveLimit: i64(3)}
		if ends != 0 {
			e.EndsAt = start.Add(ends)
		}
		return e
	}
	add := func(e session.ScheduledEvent) func() error {
		return func() error { _, err := w.AddEvent(ctx, e); return err }
	}
	at := func(d time.Duration) func() error { return func() error { sc.Clock.Set(start.Add(d)); return nil } }
	sweep := func() error { return w.Sweep(ctx) }
	changes := []func() error{
		add(ev("default", "a", time.Minute, 2*time.Minute, 3*time.Minute)),
		add(ev("vip", "b", time.Minute, 2*time.Minute, 0)),
		func() error {
			e := ev("default", "a", time.Minute, 2*time.Minute, 3*time.Minute)
			e.ActiveLimit = nil
			_, err := w.ReplaceEvent(ctx, e)
			return err
		},
		at(time.Minute), sweep,
		func() error { _, err := w.Join(ctx, "default", "waiter-1"); return err },
		at(2 * time.Minute), sweep,
	}
	for range 5 { // across the end of a, back and forth
		changes = append(changes, at(3*time.Minute-time.Nanosecond), at(3*time.Minute), at(3*time.Minute+time.Second), at(3*time.Minute-time.Second))
	}
	changes = append(changes, at(4*time.Minute),
		add(ev("default", "c", time.Hour, 2*time.Hour, 0)),
		func() error { return w.RemoveEvent(ctx, "default", "a") },
		func() error { return w.RemoveEvent(ctx, "vip", "b") },
		func() error { return w.RemoveGate(ctx, "vip") },
		func() error { return w.AddGate(ctx, gatetest.Gate("vip", 1)) },
		add(ev("vip", "d", time.Hour, 2*time.Hour, 3*time.Hour)),
	)
	for i := range 20 {
		id := fmt.Sprintf("x%d", i)
		changes = append(changes, add(ev("vip", id, time.Duration(3+i)*time.Hour, time.Duration(3+i)*time.Hour+time.Minute, 0)),
			at(4*time.Minute+time.Duration(i)*time.Second))
		if i%2 == 1 {
			changes = append(changes, func() error { return w.RemoveEvent(ctx, "vip", id) })
		}
	}
	for _, change := range changes {
		for next := served.Load() + 8; served.Load() < next; { // requests between the changes
			runtime.Gosched()
		}
		require.NoError(t, change())
		record()
	}
	close(stop)
	readers.Wait()

	// Every answer is the reference of the gate's events of one state
	// during the request with the clock of one state during it: the
	// request began in state before-1 (or in state before, its change not
	// yet recorded) and ended at the latest in state after.
	type refKey struct {
		events, clock int64
		gate          string
		pretty        bool
	}
	refs := map[refKey][]byte{}
	reference := func(k refKey) []byte {
		if b, ok := refs[k]; ok {
			return b
		}
		refs[k] = referenceEvents(t, k.gate, states[k.events][k.gate].events, states[k.clock][k.gate].now, false, k.pretty)
		return refs[k]
	}
	n := 0
	for _, list := range answers {
		for _, a := range list {
			n++
			lo, hi := a.before-1, min(a.after, int64(len(states))-1)
			matched := false
			for i := lo; i <= hi && !matched; i++ {
				evs := states[i][a.gate]
				if !evs.known {
					matched = a.code == http.StatusNotFound
					continue
				}
				for j := lo; j <= hi && !matched; j++ {
					matched = a.code == http.StatusOK && bytes.Equal(a.body, reference(refKey{i, j, a.gate, a.pretty}))
				}
			}
			if !assert.True(t, matched, "%s (pretty %v) between states %d and %d: %d %s", a.gate, a.pretty, lo, hi, a.code, a.body) {
				return
			}
		}
	}
	t.Logf("%d answers over %d states", n, len(states))
	assert.Greater(t, n, len(states))
}

// sidecarServer is the gate.Server behind sc's handler.
func sidecarServer(t *testing.T, sc *gatetest.Sidecar) *gate.Server {
	t.Helper()
	srv, ok := sc.Handler.(*gate.Server)
	require.True(t, ok, "the sidecar's handler is not wrapped")
	return srv
}

// TestEventsAnswerEncodedOnceByConcurrentMisses: after each change of a
// gate's published events, N requests that all find the cache stale at
// once (the first encoding is held until every one of them has missed)
// encode the answer once, and each gets the encoder's bytes for its own
// way of asking; the requests after that are answered from the cache.
func TestEventsAnswerEncodedOnceByConcurrentMisses(t *testing.T) {
	const n = 32
	sc := gatetest.StartSidecar(t, gatetest.Options{Gates: []session.GateConfig{gatetest.Gate("default", 1), gatetest.Gate("vip", 1)}})
	ctx := t.Context()
	w := sc.Waitlist
	start := gatetest.Start
	var (
		encodes atomic.Int64
		misses  = make(chan string, 4*n)
		release chan struct{} // closed once the step's requests all missed
	)
	sidecarServer(t, sc).SetEventsAnswerSeams(gate.EventsAnswerSeams{
		Missed: func(g string) { misses <- g },
		Encoding: func(string) error {
			encodes.Add(1)
			<-release
			return nil
		},
		// Longer than any starved moment of this machine: one takeover
		// would count a second encoding.
		Wait: time.Minute,
	})
	drop := session.ScheduledEvent{Gate: "default", ID: "drop", PrequeueAt: start.Add(time.Minute), StartsAt: start.Add(2 * time.Minute),
		EndsAt: start.Add(time.Hour), Shuffle: true}
	at := func(when time.Time) func(t *testing.T) { return func(*testing.T) { sc.Clock.Set(when) } }
	for _, tc := range []struct {
		name   string
		gate   string
		change func(t *testing.T)
	}{
		{"the first requests, no events", "default", func(*testing.T) {}},
		{"an event added", "default", func(t *testing.T) {
			_, err := w.AddEvent(ctx, drop)
			require.NoError(t, err)
		}},
		{"replaced", "default", func(t *testing.T) {
			next := drop
			next.Shuffle = false
			_, err := w.ReplaceEvent(ctx, next)
			require.NoError(t, err)
		}},
		{"the pre-queue opened", "default", func(t *testing.T) {
			sc.Clock.Set(drop.PrequeueAt)
			require.NoError(t, w.Sweep(ctx))
			for i := range 3 {
				_, err := w.Join(ctx, "default", fmt.Sprintf("waiter-%d", i))
				require.NoError(t, err)
			}
		}},
		{"drawn and started", "default", func(t *testing.T) {
			sc.Clock.Set(drop.StartsAt)
			require.NoError(t, w.Sweep(ctx))
		}},
		{"the clock crossed its end", "default", at(drop.EndsAt)},
		{"the clock went back", "default", at(drop.EndsAt.Add(-time.Second))},
		{"removed", "default", func(t *testing.T) { require.NoError(t, w.RemoveEvent(ctx, "default", "drop")) }},
		{"another gate's first requests", "vip", func(*testing.T) {}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			encodes.Store(0)
			release = make(chan struct{})
			tc.change(t)
			now := sc.Clock.Now()
			evs, err := w.Events(tc.gate)
			require.NoError(t, err)
			query := func(i int) (string, bool) {
				if i%3 == 0 {
					return "?gate=" + tc.gate + "&positions=0&pretty", true
				}
				return "?positions=0&gate=" + tc.gate, false
			}
			recs := make([]*httptest.ResponseRecorder, n)
			var wg sync.WaitGroup
			for i := range n {
				q, _ := query(i)
				wg.Go(func() { recs[i] = serveEvents(sc, q) })
			}
			timeout := time.After(30 * time.Second) // a guard against a hang, not a wait
			for range n {
				select {
				case g := <-misses:
					assert.Equal(t, tc.gate, g)
				case <-timeout:
					close(release)
					t.Fatalf("%d requests, not all of them missed", n)
				}
			}
			close(release)
			wg.Wait()
			assert.Equal(t, int64(1), encodes.Load(), "%d concurrent misses encode once", n)
			for i, rec := range recs {
				_, pretty := query(i)
				require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
				assert.Equal(t, string(referenceEvents(t, tc.gate, evs, now, false, pretty)), rec.Body.String(), "request %d", i)
			}
			for i := range 4 {
				q, pretty := query(i)
				rec := serveEvents(sc, q)
				assert.Equal(t, string(referenceEvents(t, tc.gate, evs, now, false, pretty)), rec.Body.String(), "afterwards, %d", i)
			}
			assert.Equal(t, int64(1), encodes.Load(), "afterwards: from the cache")
			assert.Empty(t, misses, "afterwards: no misses")
		})
	}
}

// TestEventsAnswerAfterAStalledOrFailedEncoding: the requests waiting for
// another's encoding are not held by it for ever. When it fails, each is
// still answered with the encoder's bytes (through c.JSON), and a later
// request encodes again into the cache; when it stalls, one of them
// encodes in its place once it waited long enough, and all the others
// are answered while the stalled one still hangs.
func TestEventsAnswerAfterAStalledOrFailedEncoding(t *testing.T) {
	const n = 16
	for _, tc := range []struct {
		name string
		// stall: the first encoding hangs until every other request is
		// answered; else it fails once every request missed.
		stall bool
		wait  time.Duration // how long a request waits for another's encoding
	}{
		{"the first encoding fails", false, time.Minute},
		{"the first encoding stalls", true, 20 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc := gatetest.StartSidecar(t, gatetest.Options{Gates: []session.GateConfig{gatetest.Gate("default", 1)}})
			_, err := sc.Waitlist.AddEvent(t.Context(), session.ScheduledEvent{Gate: "default", ID: "drop",
				PrequeueAt: gatetest.Start.Add(time.Minute), StartsAt: gatetest.Start.Add(2 * time.Minute), Shuffle: true})
			require.NoError(t, err)
			var encodes atomic.Int64
			misses := make(chan string, 4*n)
			allMissed, unstall := make(chan struct{}), make(chan struct{})
			missedAll, unstalled := sync.OnceFunc(func() { close(allMissed) }), sync.OnceFunc(func() { close(unstall) })
			sidecarServer(t, sc).SetEventsAnswerSeams(gate.EventsAnswerSeams{
				Missed: func(g string) { misses <- g },
				Encoding: func(string) error {
					if encodes.Add(1) > 1 {
						return nil
					}
					if tc.stall {
						<-unstall
						return nil
					}
					<-allMissed
					return errors.New("the encoding failed")
				},
				Wait: tc.wait,
			})
			evs, err := sc.Waitlist.Events("default")
			require.NoError(t, err)
			now := sc.Clock.Now()
			query := func(i int) (string, bool) {
				if i%2 == 0 {
					return "?gate=default&positions=0&pretty", true
				}
				return "?gate=default&positions=0", false
			}
			recs := make([]*httptest.ResponseRecorder, n)
			answered := make(chan int, n)
			var wg sync.WaitGroup
			for i := range n {
				q, _ := query(i)
				wg.Go(func() {
					recs[i] = serveEvents(sc, q)
					answered <- i
				})
			}
			timeout := time.After(30 * time.Second) // a guard against a hang, not a wait
			guard := func(what string) {
				t.Helper()
				missedAll()
				unstalled()
				t.Fatalf("no %s", what)
			}
			if !tc.stall {
				for range n {
					select {
					case <-misses:
					case <-timeout:
						guard("miss from every request")
					}
				}
				missedAll()
			}
			others := n
			if tc.stall {
				others = n - 1
			}
			for range others {
				select {
				case <-answered:
				case <-timeout:
					guard("answer to the requests not stalled")
				}
			}
			if tc.stall {
				assert.GreaterOrEqual(t, encodes.Load(), int64(2), "another request encoded in the stalled one's place")
				select {
				case i := <-answered:
					t.Errorf("request %d answered while the first encoding was still stalled: the %d others waited for it", i, n-1)
				default:
				}
				unstalled()
			}
			wg.Wait()
			for i, rec := range recs {
				_, pretty := query(i)
				require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
				assert.Equal(t, string(referenceEvents(t, "default", evs, now, false, pretty)), rec.Body.String(), "request %d", i)
			}

			// Afterwards the cache holds the answer (after a failure, the
			// next request put it there).
			for i := range 4 {
				q, pretty := query(i)
				assert.Equal(t, string(referenceEvents(t, "default", evs, now, false, pretty)), serveEvents(sc, q).Body.String())
			}
			cached := encodes.Load()
			assert.GreaterOrEqual(t, cached, int64(2))
			for i := range 4 {
				q, pretty := query(i)
				assert.Equal(t, string(referenceEvents(t, "default", evs, now, false, pretty)), serveEvents(sc, q).Body.String())
			}
			assert.Equal(t, cached, encodes.Load(), "from the cache")
		})
	}
}
