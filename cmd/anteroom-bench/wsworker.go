package main

import (
	"bufio"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/anteroomhq/anteroom/gate/token"
)

// wsWorkerConfig is the -ws-worker mode: a process of its own holding one
// instance's share of pg-fanout's sockets (each process may hold 20,000
// files here).
type wsWorkerConfig struct {
	run        bool
	addr       string
	n          int
	prefix     string
	secretHex  string
	ips        int
	cpuProfile string
}

// wsWorker opens n websockets to addr, each naming the session prefix<i>
// (signed with the secret), from 127.0.0.2... It prints readyPrefix once
// every socket has its first global message, then obeys its input, a line
// at a time:
//
//	arm <bytes>   answers "armed", then "got <last> <median> <closed> <klast>
//	              <kmedian> <kfirst> <cpu>" once every socket received a
//	              global message containing <bytes>: unix ns of the last and
//	              the median read by this process (-1 after 60 s), the
//	              sockets closed, unix ns of the kernel's reception of the
//	              last, median and first (0 when the platform gives none),
//	              and the microseconds of CPU this process used from the arm
//
// It stops when its input closes.
func wsWorker(wc wsWorkerConfig, in io.Reader, out io.Writer) error {
	raiseFileLimit()
	stopProfile, err := startCPUProfile(wc.cpuProfile)
	if err != nil {
		return err
	}
	defer stopProfile()
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
	ctx := context.Background()
	var f fanSockets
	defer f.close()
	if err := f.open(ctx, wc.addr, signer, wc.prefix, wc.n, wc.ips, 32); err != nil {
		return err
	}
	if err := f.waitInitial(ctx, 120*time.Second); err != nil {
		return err
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
		m := &fanMark{data: []byte(arg), recv: make([]atomic.Int64, wc.n), kern: make([]atomic.Int64, wc.n), n: int64(wc.n), done: make(chan struct{})}
		f.current.Store(m)
		cpu0 := cpuTime()
		say("armed")
		select {
		case <-m.done:
			cpu := cpuTime() - cpu0
			read, kern := make([]int64, wc.n), make([]int64, wc.n)
			for i := range m.recv {
				read[i], kern[i] = m.recv[i].Load(), m.kern[i].Load()
			}
			slices.Sort(read)
			slices.Sort(kern)
			if kern[0] == 0 { // some read without a stamp: report none
				clear(kern)
			}
			say("got %d %d %d %d %d %d %d", read[wc.n-1], read[wc.n/2], f.closed.Load(), kern[wc.n-1], kern[wc.n/2], kern[0], cpu.Microseconds())
		case <-time.After(60 * time.Second):
			say("got -1 -1 %d (%d of %d)", f.closed.Load(), m.got.Load(), wc.n)
		}
		f.current.Store(nil)
	}
	return sc.Err()
}
