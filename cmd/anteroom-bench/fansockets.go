package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/anteroomhq/anteroom/gate/token"
)

// fanSockets is a set of websockets, each naming a waiting session, whose
// readers count the first global message of each socket and stamp the
// reception of the armed mark (fanMark): what the fan-out scenario and its
// per-instance client processes (wsworker.go) both measure.
type fanSockets struct {
	// raw: the sockets are plain connections to the raw fan-out baseline
	// (rawfan.go), no handshake and no session; the reader is the same.
	raw bool

	current         atomic.Pointer[fanMark]
	initial, closed atomic.Int64

	mu      sync.Mutex
	clients []*wsClient
}

// open dials n sockets to addr in parallel (dialers at once), the i-th naming
// session prefix+i and bound to 127.0.0.(2+i%ips) when that address exists.
// It returns the first dial error; the sockets opened stay in the set.
func (f *fanSockets) open(ctx context.Context, addr string, signer *token.Signer, prefix string, n, ips, dialers int) error {
	f.clients = make([]*wsClient, n)
	ips = max(ips, 1)
	var next atomic.Int64
	var dialErr atomic.Pointer[error]
	var wg sync.WaitGroup
	for range dialers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n || dialErr.Load() != nil || ctx.Err() != nil {
					return
				}
				dial := func(local net.Addr) (*wsClient, error) { return dialFrames(ctx, addr, local) }
				if !f.raw {
					tok, err := signer.Sign(prefix + strconv.Itoa(i))
					if err != nil {
						dialErr.CompareAndSwap(nil, &err)
						return
					}
					path := basePath + "/ws?gate=" + gateName + "&session=" + tok
					dial = func(local net.Addr) (*wsClient, error) { return dialWS(ctx, addr, path, local) }
				}
				local := &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(2+i%ips))}
				ws, err := dial(local)
				if errors.Is(err, syscall.EADDRNOTAVAIL) { // 127.0.0.x not configured (not Linux)
					ws, err = dial(nil)
				}
				if err != nil {
					err = fmt.Errorf("socket %d: %w", i, err)
					dialErr.CompareAndSwap(nil, &err)
					return
				}
				f.mu.Lock()
				f.clients[i] = ws
				f.mu.Unlock()
				go f.read(i, ws)
			}
		})
	}
	wg.Wait()
	if p := dialErr.Load(); p != nil {
		return *p
	}
	return nil
}

// read counts socket i's first global message and stamps the reception of
// the armed mark (when this process read it, and when the kernel received
// it where the platform says), until the socket ends.
func (f *fanSockets) read(i int, ws *wsClient) {
	first := true
	_ = ws.readLoop(func(p []byte, kernel, read int64) {
		if !bytes.HasPrefix(p, globalPrefix) {
			return
		}
		if first {
			first = false
			f.initial.Add(1)
		}
		if m := f.current.Load(); m != nil && bytes.Contains(p, m.data) && m.recv[i].CompareAndSwap(0, read) {
			if m.kern != nil {
				m.kern[i].Store(kernel)
			}
			if m.got.Add(1) == m.n {
				close(m.done)
			}
		}
	})
	f.closed.Add(1)
}

// waitInitial waits until every socket got its first global message.
func (f *fanSockets) waitInitial(ctx context.Context, timeout time.Duration) error {
	n := int64(len(f.clients))
	if err := waitFor(ctx, timeout, func() bool { return f.initial.Load() >= n }); err != nil {
		return fmt.Errorf("initial global messages: %d of %d sockets got one (%d closed): %w", f.initial.Load(), n, f.closed.Load(), err)
	}
	return nil
}

// close closes every socket opened.
func (f *fanSockets) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.clients {
		if c != nil {
			_ = c.Close()
		}
	}
}
