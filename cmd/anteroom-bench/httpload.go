package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// rawConn is a minimal HTTP/1.1 keep-alive client connection: it writes
// prebuilt requests and parses just enough of each response (status,
// Content-Length or chunked body). It is much lighter than net/http's
// client, so that on a small machine the load measures the server more than
// the client.
type rawConn struct {
	c   net.Conn
	br  *bufio.Reader
	buf []byte
}

func dialRaw(ctx context.Context, addr string, local net.Addr) (*rawConn, error) {
	d := net.Dialer{LocalAddr: local, Timeout: 10 * time.Second}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return &rawConn{c: c, br: bufio.NewReaderSize(c, 4096)}, nil
}

func (rc *rawConn) Close() error { return rc.c.Close() }

// do sends req and returns the status and the body, which is valid until
// the next call.
func (rc *rawConn) do(req []byte) (int, []byte, error) {
	if _, err := rc.c.Write(req); err != nil {
		return 0, nil, err
	}
	return rc.readResponse()
}

func (rc *rawConn) readResponse() (int, []byte, error) {
	line, err := rc.br.ReadSlice('\n')
	if err != nil {
		return 0, nil, err
	}
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) {
		return 0, nil, fmt.Errorf("bad status line %q", line)
	}
	status, err := strconv.Atoi(string(line[9:12]))
	if err != nil {
		return 0, nil, fmt.Errorf("bad status line %q", line)
	}
	length, chunked := -1, false
	for {
		line, err = rc.br.ReadSlice('\n')
		if err != nil {
			return 0, nil, err
		}
		if len(line) <= 2 {
			break
		}
		k, v, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		v = bytes.TrimSpace(v)
		switch {
		case asciiEqualFold(k, "content-length"):
			if length, err = strconv.Atoi(string(v)); err != nil {
				return 0, nil, fmt.Errorf("bad content-length %q", v)
			}
		case asciiEqualFold(k, "transfer-encoding"):
			chunked = bytes.EqualFold(v, []byte("chunked"))
		}
	}
	rc.buf = rc.buf[:0]
	switch {
	case chunked:
		for {
			line, err = rc.br.ReadSlice('\n')
			if err != nil {
				return 0, nil, err
			}
			sz, _, _ := bytes.Cut(bytes.TrimSpace(line), []byte(";"))
			n, err := strconv.ParseInt(string(sz), 16, 32)
			if err != nil {
				return 0, nil, fmt.Errorf("bad chunk size %q", line)
			}
			if n == 0 {
				if _, err := rc.br.ReadSlice('\n'); err != nil { // trailer end
					return 0, nil, err
				}
				break
			}
			if rc.buf, err = readN(rc.br, rc.buf, int(n)+2); err != nil {
				return 0, nil, err
			}
			rc.buf = rc.buf[:len(rc.buf)-2]
		}
	case length > 0:
		if rc.buf, err = readN(rc.br, rc.buf, length); err != nil {
			return 0, nil, err
		}
	case length < 0 && status != 204 && status != 304 && status >= 200:
		return 0, nil, errors.New("response without length (not keep-alive)")
	}
	return status, rc.buf, nil
}

func readN(r io.Reader, buf []byte, n int) ([]byte, error) {
	start := len(buf)
	buf = slices.Grow(buf, n)[:start+n]
	_, err := io.ReadFull(r, buf[start:])
	return buf, err
}

func asciiEqualFold(b []byte, s string) bool {
	return len(b) == len(s) && bytes.EqualFold(b, []byte(s))
}

// httpLoad is a pool of keep-alive connections that runs closed-loop load.
type httpLoad struct {
	conns []*rawConn
	// cpu reads the CPU time a window's per-CPU rate is taken against; nil:
	// this process's (cpuTime). The HTTP scenarios whose server runs in a
	// child read the child's, so that the client's CPU is not counted.
	cpu func() (time.Duration, error)
}

func newHTTPLoad(ctx context.Context, addr string, n int) (*httpLoad, error) {
	l := &httpLoad{}
	for range n {
		c, err := dialRaw(ctx, addr, nil)
		if err != nil {
			l.Close()
			return nil, err
		}
		l.conns = append(l.conns, c)
	}
	return l, nil
}

func (l *httpLoad) Close() {
	for _, c := range l.conns {
		_ = c.Close()
	}
}

// request returns the request a worker sends as its i-th.
type requestFunc func(worker, i int) []byte

// checkFunc judges a response.
type checkFunc func(status int, body []byte) error

// run loads the server from every connection for warmup+window and returns
// the completed requests per second inside the window.
func (l *httpLoad) run(ctx context.Context, warmup, window time.Duration, req requestFunc, check checkFunc) (measure, error) {
	var done atomic.Int64
	var stop atomic.Bool
	var firstErr atomic.Pointer[error]
	var wg sync.WaitGroup
	for w, c := range l.conns {
		wg.Go(func() {
			for i := 0; !stop.Load(); i++ {
				status, body, err := c.do(req(w, i))
				if err == nil {
					err = check(status, body)
				}
				if err != nil {
					err = fmt.Errorf("connection %d: %w", w, err)
					firstErr.CompareAndSwap(nil, &err)
					stop.Store(true)
					return
				}
				done.Add(1)
			}
		})
	}
	cpu := l.cpu
	if cpu == nil {
		cpu = func() (time.Duration, error) { return cpuTime(), nil }
	}
	m, cpuErr := measureWindowCPU(ctx, warmup, window, done.Load, cpu)
	stop.Store(true)
	wg.Wait()
	if p := firstErr.Load(); p != nil {
		return measure{}, *p
	}
	if cpuErr != nil {
		return measure{}, cpuErr
	}
	return m, ctx.Err()
}

// measure is the rate of one measuring window: per second of wall clock,
// and per second of CPU time (user+system: this process's, or the server
// child's), which a shared machine's other load disturbs less.
type measure struct {
	rate   float64
	perCPU float64
}

// measureWindow lets the load warm up, then counts for window, against
// this process's CPU time.
func measureWindow(ctx context.Context, warmup, window time.Duration, count func() int64) measure {
	m, _ := measureWindowCPU(ctx, warmup, window, count, func() (time.Duration, error) { return cpuTime(), nil })
	return m
}

// measureWindowCPU is measureWindow against the CPU time cpu reads.
func measureWindowCPU(ctx context.Context, warmup, window time.Duration, count func() int64, cpu func() (time.Duration, error)) (measure, error) {
	sleepCtx(ctx, warmup)
	c0, err := cpu()
	if err != nil {
		return measure{}, err
	}
	n0, t0 := count(), time.Now()
	sleepCtx(ctx, window)
	n1, t1 := count(), time.Now()
	c1, err := cpu()
	if err != nil {
		return measure{}, err
	}
	m := measure{rate: float64(n1-n0) / t1.Sub(t0).Seconds()}
	if c1 > c0 {
		m.perCPU = float64(n1-n0) / (c1 - c0).Seconds()
	}
	return m, nil
}

// pairs are the interleaved windows of a baseline and a measured load.
type pairs struct{ base, val []measure }

func (p *pairs) add(base, val measure) {
	p.base = append(p.base, base)
	p.val = append(p.val, val)
}

// means returns the mean wall-clock rates.
func (p *pairs) means() (base, val float64) {
	for i := range p.base {
		base += p.base[i].rate
		val += p.val[i].rate
	}
	n := float64(len(p.base))
	return base / n, val / n
}

// spread describes the noise: the range of the per-round ratios, and the
// ratio of the rates per CPU-second.
func (p *pairs) spread() string {
	lo, hi := math.Inf(1), math.Inf(-1)
	var bc, vc float64
	for i := range p.base {
		if p.base[i].rate > 0 {
			r := p.val[i].rate / p.base[i].rate
			lo, hi = min(lo, r), max(hi, r)
		}
		bc += p.base[i].perCPU
		vc += p.val[i].perCPU
	}
	s := fmt.Sprintf("per-round ratio %.2f-%.2f over %d rounds", lo, hi, len(p.base))
	if bc > 0 && vc > 0 {
		s += fmt.Sprintf("; per process CPU-second %.0f vs %.0f (ratio %.2f)", vc/float64(len(p.val)), bc/float64(len(p.base)), vc/bc)
	}
	return s
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

func wantStatus(want int) checkFunc {
	return func(status int, body []byte) error {
		if status != want {
			return fmt.Errorf("status %d, want %d: %.200s", status, want, body)
		}
		return nil
	}
}
