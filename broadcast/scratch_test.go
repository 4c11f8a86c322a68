package broadcast

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/gate/wire"
	"github.com/anteroomhq/anteroom/session"
)

// The session message's pooled scratch (sessionScratch): its bytes are
// those the hub wrote before it (json.Marshal's, in a fresh frame) for
// every view, whatever the scratch held; nothing keeps them once the write
// returns; and sockets written at once each get their own message.

// marshalFrame is a session message as the hub framed it before the
// scratch: json.Marshal of the sanitized view (nil when it fails) in a
// fresh text frame.
func marshalFrame(v session.SessionView) []byte { return textFrame(marshalPayload(v)) }

// marshalPayload is the payload of marshalFrame.
func marshalPayload(v session.SessionView) []byte {
	sanitize(&v.GlobalView)
	b, _ := json.Marshal(wire.SessionMessage{Type: wire.MessageSession, SessionView: v})
	return b
}

func TestSessionScratchFramesEveryViewAsMarshalDid(t *testing.T) {
	deadline := time.Date(2031, 2, 3, 4, 5, 6, 789, time.FixedZone("X", 5*3600+1800))
	far := time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC) // time.Time.MarshalJSON refuses it
	many := make([]int64, 0, 2*6000)
	for i := range int64(6000) {
		many = append(many, i*1_000_003, math.MaxInt64-i)
	}
	base := session.SessionView{GlobalView: view("g", 5), Session: "s", Status: session.StatusWaiting, Position: 101}
	with := func(f func(v *session.SessionView)) session.SessionView {
		v := base
		f(&v)
		return v
	}
	tests := []struct {
		name string
		v    session.SessionView
	}{
		{"empty", session.SessionView{}},
		{"plain", base},
		{"HTML characters", with(func(v *session.SessionView) {
			v.Gate, v.Session, v.Admission = `<script>&'"`, "a<b>&c", "x.y<z>"
		})},
		{"line and paragraph separators, controls, non-ASCII", with(func(v *session.SessionView) {
			v.Session, v.Lane, v.Status = "a\u2028b\u2029c", "\x00\x01\t\n\x7f", "é☃😀"
		})},
		{"invalid UTF-8", with(func(v *session.SessionView) {
			v.Gate, v.Session, v.Admission, v.Lane = "\xff\xfe", "a\xc3(", "\xed\xa0\x80", "\xf0\x9f\x98"
		})},
		{"NaN rate", with(func(v *session.SessionView) { v.AdmittedPerMinute = math.NaN() })},
		{"infinite rate", with(func(v *session.SessionView) { v.AdmittedPerMinute = math.Inf(1) })},
		{"negative infinite rate", with(func(v *session.SessionView) { v.AdmittedPerMinute = math.Inf(-1) })},
		{"rates in exponent form", with(func(v *session.SessionView) {
			v.AdmittedPerMinute, v.ClaimWindow = 1e-7, 1e21
		})},
		{"negative zero", with(func(v *session.SessionView) { v.AdmittedPerMinute = math.Copysign(0, -1) })},
		{"every optional field", with(func(v *session.SessionView) {
			v.Place, v.ClaimDeadline, v.ClaimWindow, v.Admission, v.Notify, v.Lane = 3, &deadline, 30.5, "tok", true, "priority"
			v.Buckets = []int64{0, 2, 3, 3}
			v.Priority = &session.LaneView{FirstWaitingPosition: 1, LastWaitingPosition: 9, Waiting: 4, Buckets: []int64{0, 4}}
		})},
		{"extreme integers", with(func(v *session.SessionView) {
			v.Position, v.FirstWaitingPosition, v.Waiting = math.MinInt64, math.MaxInt64, -1
		})},
		// Marshal fails on these (the hub then sent an empty frame): the
		// scratch must give the same, not a piece of what it held.
		{"NaN claim window", with(func(v *session.SessionView) { v.ClaimWindow = math.NaN() })},
		{"claim deadline past year 9999", with(func(v *session.SessionView) { v.ClaimDeadline = &far })},
		{"a payload over 64 KB", with(func(v *session.SessionView) { v.Buckets = many })},
	}
	sc := newSessionScratch()
	check := func(t *testing.T, v session.SessionView) {
		before := v
		got := sc.frameOf(&v)
		require.Equal(t, string(marshalFrame(v)), string(got))
		require.True(t, sameView(before, v), "frameOf does not change its argument")
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { check(t, tt.v) })
	}
	for i := len(tests) - 1; i >= 0; i-- { // again, each after another, the scratch warm
		t.Run(tests[i].name+" reused", func(t *testing.T) { check(t, tests[i].v) })
	}
}

// holdLink takes at most take bytes of each tryWrite (or fails every
// write) and keeps every byte it is given; writeBy waits for resume.
type holdLink struct {
	take   int
	fail   bool
	resume chan struct{}
	mu     sync.Mutex
	buf    bytes.Buffer
	closed atomic.Bool
}

func (l *holdLink) tryWrite(p []byte) (int, error) {
	if l.fail || l.closed.Load() {
		return 0, net.ErrClosed
	}
	n := min(l.take, len(p))
	l.mu.Lock()
	l.buf.Write(p[:n])
	l.mu.Unlock()
	if n < len(p) {
		return n, errWouldBlock
	}
	return n, nil
}

func (l *holdLink) writeBy(p []byte, deadline time.Time) error {
	select {
	case <-l.resume:
	case <-time.After(time.Until(deadline)):
		return fmt.Errorf("write: %w", os.ErrDeadlineExceeded)
	}
	l.mu.Lock()
	l.buf.Write(p)
	l.mu.Unlock()
	return nil
}

func (l *holdLink) clearDeadline() {}
func (l *holdLink) close()         { l.closed.Store(true) }
func (l *holdLink) boundReads()    {}

func (l *holdLink) bytes() []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return bytes.Clone(l.buf.Bytes())
}

func drained(s *subscriber) func() bool {
	return func() bool {
		s.wmu.Lock()
		defer s.wmu.Unlock()
		return !s.draining
	}
}

// A write keeps none of the caller's bytes once it returns (the scratch
// goes back to the pool then): what the socket did not take is copied to
// the pending bytes, whether it took all, part, none, was already being
// drained, or failed.
func TestWriteKeepsNoneOfItsArgument(t *testing.T) {
	first := marshalFrame(session.SessionView{GlobalView: view("g", 1), Session: "first"})
	tests := []struct {
		name     string
		take     int
		fail     bool
		draining bool // a write is being drained already
		want     writeResult
	}{
		{"taken whole", math.MaxInt, false, false, wrote},
		{"taken in part", 5, false, false, queued},
		{"not taken", 0, false, false, queued},
		{"behind a drain", 0, false, true, queued},
		{"failed", 0, true, false, failed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHub(t, Options{WriteTimeout: time.Minute})
			l := &holdLink{take: tt.take, fail: tt.fail, resume: make(chan struct{})}
			s := &subscriber{link: l}
			var want []byte
			if tt.draining {
				require.Equal(t, queued, h.write(s, bytes.Clone(first), true))
				want = append(want, first...)
			}
			p := marshalFrame(session.SessionView{GlobalView: view("g", 2), Session: "second"})
			if !tt.fail {
				want = append(want, p...)
			}
			require.Equal(t, tt.want, h.write(s, p, true))
			for i := range p { // the scratch, reused by another socket
				p[i] = 'X'
			}
			close(l.resume)
			require.Eventually(t, drained(s), 10*time.Second, time.Millisecond)
			assert.Equal(t, string(want), string(l.bytes()))
		})
	}
}

// The same through the mailbox and the pool: a session message the socket
// takes only part of arrives whole, though its scratch is back in the pool
// and reused (and scribbled over) before the drain writes the rest.
func TestSessionMessageOutlivesItsScratch(t *testing.T) {
	for _, take := range []int{0, 1, 7, 300} {
		t.Run(fmt.Sprint("the socket takes ", take), func(t *testing.T) {
			h := newHub(t, Options{WriteTimeout: time.Minute})
			l := &holdLink{take: take, resume: make(chan struct{})}
			s := &subscriber{link: l}
			v := session.SessionView{GlobalView: view("g", 3), Session: "mine", Admission: strings.Repeat("a", 400)}
			v.Buckets = []int64{0, 1, 1, 1, 2, 1}
			s.sess.Store(&v)
			h.service(s)
			var held []*sessionScratch
			for range 4 {
				sc := sessionScratches.Get().(*sessionScratch)
				other := session.SessionView{GlobalView: view("h", 9), Session: "other"}
				b := sc.frameOf(&other)
				for i := range b[:cap(b)] {
					b[:cap(b)][i] = 'X'
				}
				held = append(held, sc)
			}
			for _, sc := range held {
				putSessionScratch(sc)
			}
			close(l.resume)
			require.Eventually(t, drained(s), 10*time.Second, time.Millisecond)
			assert.Equal(t, string(marshalFrame(v)), string(l.bytes()))
		})
	}
}

// Sockets written at once by the hub's writers, each from a scratch of the
// pool: every socket gets only its own session messages, byte for byte
// (run with -race too).
func TestSessionMessagesOfManySocketsAtOnce(t *testing.T) {
	h := newHub(t, Options{Interval: time.Hour})
	const sockets, rounds, publishers = 48, 5, 6
	viewOf := func(i, round int) session.SessionView {
		v := session.SessionView{GlobalView: view("g", 10), Session: fmt.Sprint("s", i), Position: int64(1000*round + i),
			Admission: strings.Repeat(string(rune('a'+i%26)), 50*(i%7)+round)}
		for b := range (i + round) % 40 {
			v.Buckets = append(v.Buckets, int64(b), int64(i))
		}
		return v
	}
	payload := func(v session.SessionView) string { return string(marshalPayload(v)) }
	links := make([]*memLink, sockets)
	for i := range links {
		links[i] = newMemLink(false)
		require.NotNil(t, h.register(Subscription{Gate: "g", SessionID: fmt.Sprint("s", i), Global: view("g", 10)}, links[i], nil, nil))
	}
	var wg sync.WaitGroup
	for w := range publishers {
		wg.Go(func() {
			for round := range rounds {
				for i := w; i < sockets; i += publishers {
					h.PublishSession(viewOf(i, round))
				}
			}
		})
	}
	wg.Wait()
	for i, l := range links {
		mine := map[string]bool{}
		for round := range rounds {
			mine[payload(viewOf(i, round))] = true
		}
		last := payload(viewOf(i, rounds-1))
		for {
			var b []byte
			select {
			case b = <-l.got:
			case <-time.After(20 * time.Second):
				require.FailNow(t, "no last session message", "socket %d", i)
			}
			if decode(t, b).Type != "session" {
				continue
			}
			require.True(t, mine[string(b)], "socket %d got a message not its own: %s", i, b)
			if string(b) == last {
				break
			}
		}
	}
}

// A warm scratch allocates nothing but the message's one boxing for the
// encoder, where json.Marshal's result and a fresh frame were two more
// allocations of the whole message (about 2.6 KB with a full view's
// buckets) on every socket's opening.
func TestAWarmSessionScratchAllocatesOnlyTheBoxing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool and allocation counts vary")
	}
	buckets := make([]int64, 0, 2*session.MaxBuckets) // [offset, count] pairs
	for i := range int64(session.MaxBuckets) {
		buckets = append(buckets, i*1000, 1000)
	}
	long := session.SessionView{
		GlobalView: session.GlobalView{Gate: "default", FirstWaitingPosition: 1, LastWaitingPosition: 160000, Waiting: 160000,
			Active: 100, Limit: 100, AdmittedPerMinute: 12.5, Buckets: buckets},
		Session: "XkR2pN8QeW0aB7cD9fGh1i", Status: session.StatusWaiting, Position: 90210,
	}
	sc := newSessionScratch()
	require.Equal(t, string(marshalFrame(long)), string(sc.frameOf(&long)))
	require.Greater(t, len(sc.frame), 2000, "a full view's message is several KB")
	allocs := testing.AllocsPerRun(100, func() { sc.frameOf(&long) })
	require.LessOrEqual(t, allocs, 1.0, "a warm scratch allocates only the boxing")
}
