package broadcast

import (
	"errors"
	"os"
	"runtime"
	"sync"
	"time"
)

// The write side. No goroutine per socket writes: a few writer goroutines
// per hub (the pool) take batches of subscribers and write each one's
// mailbox with a non-blocking write of the pre-framed bytes. A socket that
// cannot take a write at once (its send buffer is full) keeps the rest in
// its pending bytes and gets a drain goroutine of its own, which waits at
// most WriteTimeout for the socket; meanwhile the pool skips it and its
// mailbox keeps only the newest message. So a slow socket never holds a
// writer, and never accumulates more than what one write left behind.

// fanoutBatch is how many subscribers one pool task writes.
const fanoutBatch = 128

// maxPending bounds the bytes a backed-up socket may owe. While a socket
// drains, the writers put nothing in its pending bytes (its mailbox keeps
// the newest message instead): only what one write left behind, and the
// control frames written meanwhile (pings, pongs, a close), are there.
const maxPending = 64 << 10

var errBacklog = errors.New("broadcast: socket backlog over its bound")

// pool is the hub's queue of write tasks, served by its writer goroutines.
type pool struct {
	mu     sync.Mutex
	cond   sync.Cond
	tasks  [][]*subscriber
	head   int
	closed bool
}

func (p *pool) init() { p.cond.L = &p.mu }

// submit queues tasks; it never blocks on sockets.
func (p *pool) submit(tasks ...[]*subscriber) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.tasks = append(p.tasks, tasks...)
	p.mu.Unlock()
	p.wake(len(tasks))
}

// submitFirst queues t ahead of the others: a session message does not
// wait behind a fan-out.
func (p *pool) submitFirst(t []*subscriber) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	if p.head > 0 {
		p.head--
		p.tasks[p.head] = t
	} else {
		p.tasks = append(p.tasks, nil)
		copy(p.tasks[1:], p.tasks)
		p.tasks[0] = t
	}
	p.mu.Unlock()
	p.wake(1)
}

func (p *pool) wake(tasks int) {
	if tasks == 1 {
		p.cond.Signal()
	} else {
		p.cond.Broadcast()
	}
}

// next waits for a task; false once the pool is closed.
func (p *pool) next() ([]*subscriber, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.head == len(p.tasks) && !p.closed {
		p.cond.Wait()
	}
	if p.closed {
		return nil, false
	}
	t := p.tasks[p.head]
	p.tasks[p.head] = nil
	p.head++
	if p.head == len(p.tasks) {
		p.tasks, p.head = p.tasks[:0], 0
	}
	return t, true
}

func (p *pool) close() {
	p.mu.Lock()
	p.closed = true
	p.tasks, p.head = nil, 0
	p.mu.Unlock()
	p.cond.Broadcast()
}

// writer is one of the pool's goroutines.
func (h *Hub) writer() {
	defer h.wg.Done()
	for {
		t, ok := h.pool.next()
		if !ok {
			return
		}
		for _, s := range t {
			h.service(s)
		}
		// A fan-out keeps every writer busy for a while: let the process's
		// other goroutines (HTTP requests) run between batches rather than
		// after a 10 ms preemption slice.
		runtime.Gosched()
	}
}

// service writes what s's mailbox holds, unless another goroutine is at it
// (that one looks at the mailbox again before it lets go) or the socket is
// backed up (its drain calls service when done).
func (h *Hub) service(s *subscriber) {
	if s.link == nil {
		return // in-memory subscriber
	}
	for s.busy.CompareAndSwap(false, true) {
		h.writeMailbox(s)
		s.busy.Store(false)
		if !s.owes() {
			return
		}
	}
}

// owes reports whether s's mailbox holds a message the socket can take now.
func (s *subscriber) owes() bool {
	if s.sess.Load() == nil && s.global.Load() == nil {
		return false
	}
	s.wmu.Lock()
	ok := !s.draining && s.werr == nil
	s.wmu.Unlock()
	return ok
}

// writeMailbox writes the session message, then the newest global. Called
// with s.busy held.
func (h *Hub) writeMailbox(s *subscriber) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.draining || s.werr != nil {
		return // the drain will call service; a failed socket is ending
	}
	if v := s.sess.Swap(nil); v != nil {
		sc := sessionScratches.Get().(*sessionScratch)
		r := h.writeLocked(s, sc.frameOf(v), true)
		putSessionScratch(sc)
		if r != wrote {
			return // the global waits in the mailbox until the session message is out
		}
	}
	if f := s.global.Swap(nil); f != nil {
		h.writeLocked(s, f.wire, true)
	}
}

type writeResult uint8

const (
	wrote  writeResult = iota // the socket took all of it
	queued                    // kept in s.pending for the drain
	failed                    // the socket failed; it is being closed
)

// write sends p, a whole frame, to s's socket; msg says whether it is a
// message (counted in Stats.Sent) or a control frame. It never waits on
// the socket.
func (h *Hub) write(s *subscriber, p []byte, msg bool) writeResult {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	return h.writeLocked(s, p, msg)
}

func (h *Hub) writeLocked(s *subscriber, p []byte, msg bool) writeResult {
	if s.werr != nil {
		return failed
	}
	if s.draining {
		if len(s.pending)+len(p) > maxPending {
			// Only control frames pile up here (the mailbox keeps one
			// message): a client that keeps pinging a socket it does not
			// read is closed as slow rather than buffered without end.
			s.werr = errBacklog
			h.fail(s, endSlow)
			return failed
		}
		s.pending = append(s.pending, p...)
		if msg {
			s.pendingMsgs++
		}
		return queued
	}
	n, err := s.link.tryWrite(p)
	switch {
	case err == nil:
		if msg {
			h.sent.Add(1)
		}
		return wrote
	case errors.Is(err, errWouldBlock):
		s.pending = append(s.pending[:0], p[n:]...)
		s.pendingMsgs = 0
		if msg {
			s.pendingMsgs = 1
		}
		s.draining = true
		go h.drain(s)
		return queued
	default:
		s.werr = err
		h.fail(s, endWriteErr)
		return failed
	}
}

// drain writes s's pending bytes, waiting at most WriteTimeout for the
// socket, then writes what the mailbox kept meanwhile. A socket that does
// not take them in time is closed as slow.
func (h *Hub) drain(s *subscriber) {
	deadline := time.Now().Add(h.opts.WriteTimeout)
	var spare []byte
	for {
		s.wmu.Lock()
		if len(s.pending) == 0 {
			s.link.clearDeadline()
			s.pending, s.pendingMsgs = nil, 0
			s.draining = false
			closeNow := s.closeDrained
			s.wmu.Unlock()
			if closeNow {
				s.link.close() // the library's close, held back until its last frame was out
				return
			}
			break
		}
		p, msgs := s.pending, s.pendingMsgs
		s.pending, s.pendingMsgs = spare[:0], 0
		s.wmu.Unlock()
		if err := s.link.writeBy(p, deadline); err != nil {
			s.wmu.Lock()
			s.werr = err
			s.pending, s.pendingMsgs = nil, 0
			s.wmu.Unlock()
			end := endWriteErr
			if errors.Is(err, os.ErrDeadlineExceeded) {
				end = endSlow
			}
			h.fail(s, end)
			return
		}
		h.sent.Add(msgs)
		spare = p
	}
	h.service(s)
}

// fail records why the hub ends s (the first reason wins) and closes its
// stream, which ends the socket's reader. It never blocks, so it is safe
// from any goroutine, the reader's included.
func (h *Hub) fail(s *subscriber, why endReason) {
	s.end.CompareAndSwap(0, uint32(why))
	if s.link != nil {
		s.link.close()
	}
}

// pinger pings every socket every PingInterval and closes, as slow, those
// whose pong is WriteTimeout late. One goroutine per hub; each socket is
// pinged on its own schedule (from when it was registered), like a ticker
// per socket would.
func (h *Hub) pinger() {
	defer h.wg.Done()
	tick := min(h.opts.PingInterval, h.opts.WriteTimeout) / 4
	tick = max(tick, time.Millisecond)
	t := time.NewTicker(tick)
	defer t.Stop()
	var gates []*gate
	var ping, slow []*subscriber
	for {
		select {
		case <-h.done:
			return
		case <-t.C:
		}
		gates = gates[:0]
		h.mu.Lock()
		for _, g := range h.gates {
			gates = append(gates, g)
		}
		h.mu.Unlock()
		now := time.Now().UnixNano()
		late := int64(h.opts.WriteTimeout)
		for _, g := range gates {
			ping, slow = ping[:0], slow[:0]
			g.subsMu.Lock()
			for _, s := range g.subs {
				if s.link == nil {
					continue
				}
				if sent := s.pingSent.Load(); sent != 0 {
					if now-sent > late {
						slow = append(slow, s)
					}
				} else if now >= s.nextPing {
					s.nextPing = now + int64(h.opts.PingInterval)
					ping = append(ping, s)
				}
			}
			g.subsMu.Unlock()
			for _, s := range slow {
				h.fail(s, endSlow)
			}
			for _, s := range ping {
				s.pingSent.Store(now)
				h.write(s, pingFrame, false)
			}
		}
		clear(ping[:cap(ping)])
		clear(slow[:cap(slow)])
	}
}

// closeAfterDrain is the library's close of s's socket. When a drain is
// writing s's pending bytes (the library's own close frame may be among
// them: over TLS every write is drained), the drain closes the socket once
// they are out, instead of now, which would drop them; and so that a
// socket that takes nothing is not held open until WriteTimeout, it is
// closed after grace whatever the drain's progress. It reports whether it
// deferred the close.
func (s *subscriber) closeAfterDrain(grace time.Duration) bool {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if !s.draining || s.werr != nil {
		return false
	}
	if !s.closeDrained {
		s.closeDrained = true
		time.AfterFunc(grace, s.link.close)
	}
	return true
}

// closeGrace bounds how long the library's close of a socket waits for the
// bytes owed to it.
const closeGrace = time.Second
