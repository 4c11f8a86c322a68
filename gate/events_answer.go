package gate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/anteroomhq/anteroom/gate/wire"
	"github.com/anteroomhq/anteroom/session"
)

// The snippet's answer to GET {base}/api/events?positions=0 is outside the
// per-IP limit, so it is encoded once per session.PublishedEvents (a new
// one comes with every change of the gate's events, and when the clock
// crosses a started event's end, which changes its phase), once also
// when many requests find it stale at the same time (they wait for the
// first one's encoding), and each request writes the cached bytes around
// the server's clock, the one part of the answer that changes with every
// request. The bytes are what
// c.JSON writes (encoding/json, a newline after, indented for ?pretty).
//
// The full answer (each started event's whole pre-queue) is cached the
// same way, in a cache of its own: it spends from the per-IP limit, but
// encoded per request it was a copy of the pre-queue per request, held
// for as long as the client took to read it, and a client that stopped
// reading held it for as long as its connection lived (about 540 KB per
// request at 50,000 waiters, 1.4 MB indented). Cached, every request
// writes the same bytes. The indented form is built at its first use
// (?pretty), once per answer: it is about twice the compact one.

// echoIndent is the indentation of c.JSON under ?pretty (echo's
// defaultIndent).
const echoIndent = "  "

// valueJSON is the Content-Type c.JSON sets, shared (see valueNoStore).
var valueJSON = []string{echo.MIMEApplicationJSON}

// aroundNow is an answer split around the value of its "now": head ends
// with the member's name and colon, tail starts after the value.
type aroundNow struct{ head, tail []byte }

// eventsAnswer is the answer for one PublishedEvents of a gate, compact,
// and indented once asked for. Never written once built, but for indented,
// written once by indent.
type eventsAnswer struct {
	compact aroundNow
	// gateJSON and nowJSON are the gate's name and the time as encoded in
	// compact: indent splits the indented form where compact was split.
	gateJSON, nowJSON []byte

	indentOnce sync.Once
	indented   aroundNow
	indentErr  error
}

// pretty returns the indented answer, building it at the first call. An
// error (the compact answer does not indent as expected) is returned to
// every call.
func (a *eventsAnswer) pretty() (aroundNow, error) {
	a.indentOnce.Do(func() {
		compact := make([]byte, 0, len(a.compact.head)+len(a.nowJSON)+len(a.compact.tail))
		compact = append(append(append(compact, a.compact.head...), a.nowJSON...), a.compact.tail...)
		var indented bytes.Buffer
		indented.Grow(2 * len(compact))
		if err := json.Indent(&indented, compact, "", echoIndent); err != nil {
			a.indentErr = fmt.Errorf("gate: indenting the events answer: %w", err)
			return
		}
		a.indented, a.indentErr = splitAtNow(indented.Bytes(), "{\n"+echoIndent+`"gate": `+string(a.gateJSON)+",\n"+echoIndent+`"now": `, a.nowJSON)
	})
	return a.indented, a.indentErr
}

// eventsEncodeWait is how long a request waits for the encoding another
// request is running of the same view before it encodes in its place:
// far above an encoding's time (well under a millisecond with the most
// events a gate keeps), so that it only takes over from one stalled.
const eventsEncodeWait = 100 * time.Millisecond

// eventsFlightTries is how many times a request tries to put its own
// encoding in the cache (each time another request's got there first)
// before it encodes for itself alone.
const eventsFlightTries = 4

// eventsFlight is the cache's entry for one PublishedEvents of a gate,
// from the moment a request starts encoding its answer: requests for the
// same view that find it wait for that encoding instead of running their
// own.
type eventsFlight struct {
	// view is what it encodes; holding it keeps its address from being
	// reused while the entry is cached.
	view *session.PublishedEvents
	// ans is the answer, set before done is closed; nil until then, and
	// for good when the encoding failed.
	ans  atomic.Pointer[eventsAnswer]
	done chan struct{} // closed when the encoding ended, well or not
}

// eventsAnswers caches the snippet's answer of each gate, or the full
// one (full), by name, one entry per gate the Waitlist knows: an entry serves while the gate's
// PublishedEvents is the one it was encoded from. The requests that miss
// at once (the first ones after a change) encode once: the first puts
// its eventsFlight in the cache and encodes, the others wait for it
// (eventsEncodeWait at most, then one of them encodes in its place; a
// request waits on at most eventsFlightTries such encodings, then encodes
// for itself alone). No lock is held while encoding or waiting. An entry of another view is
// replaced at the next request.
type eventsAnswers struct {
	// full: the answers cached are the full ones, with each started
	// event's positions.
	full bool
	// writeTimeout is Options.WriteTimeout: each piece of an answer is
	// written within it (writeInTime).
	writeTimeout time.Duration
	byGate       sync.Map // gate name → *eventsFlight

	// Test seams (export_test.go), nil or zero in production: missed is
	// called by a request that finds no answer of its view, encoding
	// before each encoding of an answer (a test counts or stalls them;
	// its error fails the encoding); wait replaces eventsEncodeWait.
	missed   func(gate string)
	encoding func(gate string) error
	wait     time.Duration
}

// forget drops the gate's entry (the gate is unknown, maybe removed).
func (a *eventsAnswers) forget(gate string) { a.byGate.Delete(gate) }

// write answers c with the cached answer for view of gate at now (an
// instant of view's span), encoding it when the cache holds another view
// and no other request is encoding this one.
// ok is false, with nothing written, when the answer is one only c.JSON
// writes (encoding/json refuses a time, or the answer is not laid out as
// expected): the caller answers through c.JSON. err is the response
// writer's.
func (a *eventsAnswers) write(c echo.Context, gate string, view *session.PublishedEvents, now time.Time) (ok bool, err error) {
	ans := a.answer(gate, view, now)
	if ans == nil {
		return false, nil
	}
	parts := ans.compact
	if pretty(c) { // as c.JSON decides
		if parts, err = ans.pretty(); err != nil {
			return false, nil
		}
	}
	bp := joinBufs.Get().(*[]byte)
	defer joinBufs.Put(bp)
	b := append((*bp)[:0], parts.head...)
	b = append(b, '"')
	b, err = now.UTC().AppendText(b) // what Time.MarshalJSON writes between its quotes
	if err != nil {
		return false, nil
	}
	b = append(b, '"')
	*bp = b
	h := c.Response().Header()
	h["Content-Type"] = valueJSON
	h.Set(echo.HeaderContentLength, strconv.Itoa(len(b)+len(parts.tail)))
	if err := c.Blob(http.StatusOK, echo.MIMEApplicationJSON, b); err != nil {
		return true, err
	}
	return true, writeInTime(c.Response(), parts.tail, a.writeTimeout)
}

// answer returns the answer for view of gate at now: the cached one; else
// the one another request is encoding, waited for; else its own, which
// it puts in the cache for the others. nil when the encoding it waited
// for or ran failed: the caller answers through c.JSON.
func (a *eventsAnswers) answer(gate string, view *session.PublishedEvents, now time.Time) *eventsAnswer {
	cur, _ := a.byGate.Load(gate)
	f, _ := cur.(*eventsFlight)
	if f != nil && f.view == view {
		if ans := f.ans.Load(); ans != nil {
			return ans
		}
	}
	if a.missed != nil {
		a.missed(gate)
	}
	// The cache keeps the gate's name as long as the gate's events stay as
	// they are: a copy, not the request's ?gate= (a piece of its line).
	// sync.Map's stores put the key given in place of the one it holds.
	gate = strings.Clone(gate)
	for range eventsFlightTries {
		if f != nil && f.view == view {
			if ans, ended := a.await(f); ended {
				return ans
			}
			// Stalled: this request encodes in its place.
		}
		mine := &eventsFlight{view: view, done: make(chan struct{})}
		var won bool
		if cur == nil {
			_, loaded := a.byGate.LoadOrStore(gate, mine)
			won = !loaded
		} else {
			won = a.byGate.CompareAndSwap(gate, cur, mine)
		}
		if won {
			return a.fly(gate, mine, now)
		}
		cur, _ = a.byGate.Load(gate)
		f, _ = cur.(*eventsFlight)
	}
	ans, err := a.encode(gate, view, now)
	if err != nil {
		return nil
	}
	return ans
}

// await waits for f's encoding to end, eventsEncodeWait at most (a.wait
// when set). ended is false when it did not end in time; ans is f's
// answer, nil when its encoding failed.
func (a *eventsAnswers) await(f *eventsFlight) (ans *eventsAnswer, ended bool) {
	select {
	case <-f.done:
		return f.ans.Load(), true
	default:
	}
	wait := a.wait
	if wait <= 0 {
		wait = eventsEncodeWait
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-f.done:
		return f.ans.Load(), true
	case <-t.C:
		return nil, false
	}
}

// fly encodes the answer of f (the cache's entry of gate) at now, for
// this request and those waiting on f, and ends f however the encoding
// ends: one that failed (or panicked) leaves f out of the cache, so that
// the next request encodes again.
func (a *eventsAnswers) fly(gate string, f *eventsFlight, now time.Time) *eventsAnswer {
	defer func() {
		if f.ans.Load() == nil {
			a.byGate.CompareAndDelete(gate, f)
		}
		close(f.done)
	}()
	ans, err := a.encode(gate, f.view, now)
	if err != nil {
		return nil
	}
	f.ans.Store(ans)
	return ans
}

// encode is encodeEventsAnswer behind the test seam.
func (a *eventsAnswers) encode(gate string, view *session.PublishedEvents, now time.Time) (*eventsAnswer, error) {
	if a.encoding != nil {
		if err := a.encoding(gate); err != nil {
			return nil, err
		}
	}
	return encodeEventsAnswer(gate, view, now, a.full)
}

// encodeEventsAnswer encodes the answer for view of gate at now, the full
// one when full, as c.JSON writes it (json.Encoder: encoding/json's bytes
// and a newline; indented by json.Indent, at its first use), split around
// the value of "now". Errors: encoding/json's, wrapped, or one saying the
// answer does not start with the gate and the time.
func encodeEventsAnswer(gate string, view *session.PublishedEvents, now time.Time, full bool) (*eventsAnswer, error) {
	compact, err := json.Marshal(publicEvents(gate, view, now, full))
	if err != nil {
		return nil, fmt.Errorf("gate: encoding the events of gate %q: %w", gate, err)
	}
	compact = append(compact, '\n')
	gateJSON, err := json.Marshal(gate)
	if err != nil {
		return nil, fmt.Errorf("gate: encoding the gate name %q: %w", gate, err)
	}
	nowJSON, err := now.UTC().MarshalJSON()
	if err != nil {
		return nil, fmt.Errorf("gate: encoding the time of the events of gate %q: %w", gate, err)
	}
	ans := &eventsAnswer{gateJSON: gateJSON, nowJSON: nowJSON}
	if ans.compact, err = splitAtNow(compact, `{"gate":`+string(gateJSON)+`,"now":`, nowJSON); err != nil {
		return nil, err
	}
	return ans, nil
}

// splitAtNow splits answer into what precedes the value of "now" (head)
// and what follows it. Errors: one naming what the answer does not start
// with.
func splitAtNow(answer []byte, head string, now []byte) (aroundNow, error) {
	if !bytes.HasPrefix(answer, []byte(head)) || !bytes.HasPrefix(answer[len(head):], now) {
		return aroundNow{}, fmt.Errorf("gate: the events answer does not start with %q and the time %s", head, now)
	}
	return aroundNow{head: answer[:len(head):len(head)], tail: answer[len(head)+len(now):]}, nil
}

// publicEvents is the answer for view of gate at now; full carries each
// started event's positions (the whole pre-queue).
func publicEvents(gate string, view *session.PublishedEvents, now time.Time, full bool) wire.EventsView {
	v := wire.EventsView{Gate: gate, Now: now.UTC(), Events: make([]wire.EventView, 0, len(view.Events))}
	for _, ev := range view.Events {
		// The positions are never written once stored: encoded as they
		// are, never copied (ev is a copy of the event, not of them).
		positions := ev.Positions
		ev.Positions = nil
		e := wire.NewEventView(ev, v.Now)
		if full && ev.Phase == session.EventStarted { // as NewEventView publishes them
			e.Positions = positions
		}
		v.Events = append(v.Events, e)
	}
	return v
}
