package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/anteroomhq/anteroom/gate/token"
)

// wsWorkerConfig is the -ws-worker mode: a process of its own holding one
// instance's share of pg-fanout's sockets (each process may hold 20,000
// files here).
type wsWorkerConfig struct {
	run       bool
	addr      string
	n         int
	prefix    string
	secretHex string
	ips       int
}

// wsWorker opens n websockets to addr, each naming the session prefix<i>
// (signed with the secret), from 127.0.0.2... It prints readyPrefix once
// every socket has its first global message, then obeys its input, a line
// at a time:
//
//	arm <bytes>   answers "armed", then "got <last> <median> <closed>" once
//	              every socket received a global message containing <bytes>
//	              (unix ns of the last and the median reception; -1 after 60 s)
//
// It stops when its input closes.
func wsWorker(wc wsWorkerConfig, in io.Reader, out io.Writer) error {
	raiseFileLimit()
	if wc.n <= 0 || wc.addr == "" {
		return errors.New("-ws-addr and -ws-n are required")
	}
	secret, err := hex.DecodeString(wc.secretHex)
	if err != nil {
		return fmt.Errorf("-serve-secret: %w", err)
	}
	signer, err := token.NewSigner(secret)
	if err != nil {
		return err
	}
	ips := max(wc.ips, 1)
	ctx := context.Background()
	var current atomic.Pointer[fanMark]
	var initial, closed atomic.Int64
	clients := make([]*wsClient, wc.n)
	var mu sync.Mutex
	defer func() {
		mu.Lock()
		for _, c := range clients {
			if c != nil {
				_ = c.Close()
			}
		}
		mu.Unlock()
	}()
	reader := func(i int, ws *wsClient) {
		first := true
		for {
			p, err := ws.next()
			if err != nil {
				closed.Add(1)
				return
			}
			if !bytes.HasPrefix(p, globalPrefix) {
				continue
			}
			if first {
				first = false
				initial.Add(1)
			}
			if m := current.Load(); m != nil && bytes.Contains(p, m.data) && m.recv[i].CompareAndSwap(0, time.Now().UnixNano()) {
				if m.got.Add(1) == m.n {
					close(m.done)
				}
			}
		}
	}
	var next atomic.Int64
	var dialErr atomic.Pointer[error]
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= wc.n || dialErr.Load() != nil {
					return
				}
				tok, err := signer.Sign(wc.prefix + strconv.Itoa(i))
				if err != nil {
					dialErr.CompareAndSwap(nil, &err)
					return
				}
				path := basePath + "/ws?gate=" + gateName + "&session=" + tok
				local := &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(2+i%ips))}
				ws, err := dialWS(ctx, wc.addr, path, local)
				if errors.Is(err, syscall.EADDRNOTAVAIL) {
					ws, err = dialWS(ctx, wc.addr, path, nil)
				}
				if err != nil {
					err = fmt.Errorf("socket %d: %w", i, err)
					dialErr.CompareAndSwap(nil, &err)
					return
				}
				mu.Lock()
				clients[i] = ws
				mu.Unlock()
				go reader(i, ws)
			}
		})
	}
	wg.Wait()
	if p := dialErr.Load(); p != nil {
		return *p
	}
	if err := waitFor(ctx, 120*time.Second, func() bool { return initial.Load() >= int64(wc.n) }); err != nil {
		return fmt.Errorf("initial global messages: %d of %d sockets got one (%d closed): %w", initial.Load(), wc.n, closed.Load(), err)
	}
	var wmu sync.Mutex
	say := func(format string, args ...any) {
		wmu.Lock()
		defer wmu.Unlock()
		fmt.Fprintf(out, format+"\n", args...)
	}
	say("%s%d", readyPrefix, wc.n)
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		cmd, arg, _ := strings.Cut(sc.Text(), " ")
		if cmd != "arm" {
			return fmt.Errorf("unknown command %q", sc.Text())
		}
		m := &fanMark{data: []byte(arg), recv: make([]atomic.Int64, wc.n), n: int64(wc.n), done: make(chan struct{})}
		current.Store(m)
		say("armed")
		select {
		case <-m.done:
			lat := make([]int64, wc.n)
			for i := range m.recv {
				lat[i] = m.recv[i].Load()
			}
			slices.Sort(lat)
			say("got %d %d %d", lat[wc.n-1], lat[wc.n/2], closed.Load())
		case <-time.After(60 * time.Second):
			say("got -1 -1 %d (%d of %d)", closed.Load(), m.got.Load(), wc.n)
		}
		current.Store(nil)
	}
	return sc.Err()
}
