package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// The fan-out's baseline: a server that does only the kernel's work. A
// plain TCP listener whose connections get, on a trigger, the same encoded
// websocket frame bytes as the hub's global message, written by
// 2×GOMAXPROCS goroutines taking the connections in chunks of
// rawFanChunk (as the hub's writers take its subscribers), with plain
// conn.Write: no handshake, no subscriber bookkeeping, no encoding.

// rawFanChunk is how many connections one writer takes at a time (the
// hub's fanoutBatch).
const rawFanChunk = 128

// rawFanInitial is the frame every connection gets when accepted, so that
// the clients' readers count it as their first global message.
var rawFanInitial = wsTextFrame([]byte(`{"type":"global","baseline":true}`))

// wsTextFrame encodes p as one unmasked websocket text frame, as a server
// sends it.
func wsTextFrame(p []byte) []byte {
	var f []byte
	switch n := len(p); {
	case n < 126:
		f = []byte{0x81, byte(n)}
	case n < 1<<16:
		f = []byte{0x81, 126, byte(n >> 8), byte(n)}
	default:
		f = []byte{0x81, 127, 0, 0, 0, 0, byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}
	}
	return append(f, p...)
}

// rawFanServer holds the baseline's connections.
type rawFanServer struct {
	mu    sync.Mutex
	conns []net.Conn
}

func (s *rawFanServer) accept(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		_, _ = c.Write(rawFanInitial)
		s.mu.Lock()
		s.conns = append(s.conns, c)
		s.mu.Unlock()
	}
}

// write sends frame to every connection with 2×GOMAXPROCS goroutines taking
// chunks of connections, and returns how many writes failed.
func (s *rawFanServer) write(frame []byte) int64 {
	s.mu.Lock()
	conns := s.conns
	s.mu.Unlock()
	var next, failed atomic.Int64
	var wg sync.WaitGroup
	for range 2 * runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for {
				i := int(next.Add(rawFanChunk) - rawFanChunk)
				if i >= len(conns) {
					return
				}
				for _, c := range conns[i:min(i+rawFanChunk, len(conns))] {
					if _, err := c.Write(frame); err != nil {
						failed.Add(1)
					}
				}
			}
		})
	}
	wg.Wait()
	return failed.Load()
}

// closeAll closes every connection (the server side first, so that the
// clients' ports are not left in TIME_WAIT).
func (s *rawFanServer) closeAll() {
	s.mu.Lock()
	conns := s.conns
	s.conns = nil
	s.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
}

func (s *rawFanServer) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// handler is the control face: GET /count, POST /write (the body is the
// frame), POST /close.
func (s *rawFanServer) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /count", func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]int{"conns": s.count()})
	})
	mux.HandleFunc("POST /write", func(w http.ResponseWriter, r *http.Request) {
		frame, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil || len(frame) == 0 {
			http.Error(w, "no frame", http.StatusBadRequest)
			return
		}
		if failed := s.write(frame); failed > 0 {
			http.Error(w, fmt.Sprintf("%d writes failed", failed), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("POST /close", func(w http.ResponseWriter, _ *http.Request) {
		s.closeAll()
		w.WriteHeader(http.StatusNoContent)
	})
	return mux
}

// serveRawFan is the -serve-rawfan mode: the baseline server in a process
// of its own. It prints readyPrefix, the data address and the control
// address on out, and serves until SIGTERM, SIGINT or its stdin closes.
func serveRawFan(out io.Writer) error {
	raiseFileLimit()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	data, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	ctl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		_ = data.Close()
		return err
	}
	s := &rawFanServer{}
	go s.accept(data)
	hs := &http.Server{Handler: s.handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.Serve(ctl) }()
	fmt.Fprintf(out, "%s%s %s\n", readyPrefix, data.Addr(), ctl.Addr())
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		stop()
	}()
	<-ctx.Done()
	_ = data.Close()
	_ = hs.Close()
	s.closeAll()
	return nil
}

// rawFanChild is the parent's handle on a -serve-rawfan child.
type rawFanChild struct {
	data, ctl string
	stop      func()
}

// startRawFan starts the baseline server child, the same way as the
// other children (this binary, dying with its parent, stopping when its
// stdin closes).
func (b *bench) startRawFan(ctx context.Context) (*rawFanChild, error) {
	c, line, err := b.startChild(ctx, []string{"-serve-rawfan", "-interval=" + b.cfg.interval.String()})
	if err != nil {
		return nil, err
	}
	data, ctl, ok := strings.Cut(line, " ")
	if !ok {
		c.stop()
		return nil, fmt.Errorf("raw fan-out child: ready line %q", line)
	}
	return &rawFanChild{data: data, ctl: ctl, stop: c.stop}, nil
}

// post sends a control request and wants 204.
func (c *rawFanChild) post(path string, body []byte) error {
	resp, err := http.Post("http://"+c.ctl+path, "application/octet-stream", strings.NewReader(string(body)))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("raw fan-out child %s: %s: %s", path, resp.Status, msg)
	}
	return nil
}

// waitConns waits until the child holds n connections.
func (c *rawFanChild) waitConns(ctx context.Context, n int, timeout time.Duration) error {
	var got struct{ Conns int }
	err := waitFor(ctx, timeout, func() bool {
		return getJSON(c.ctl, "/count", &got) == nil && got.Conns >= n
	})
	if err != nil {
		return fmt.Errorf("raw fan-out child holds %d of %d connections: %w", got.Conns, n, err)
	}
	return nil
}

// dialFrames connects to the baseline's listener: a wsClient without a
// handshake, whose reader parses the frames the baseline writes.
func dialFrames(ctx context.Context, addr string, local net.Addr) (*wsClient, error) {
	c, err := dialStamped(ctx, addr, local)
	if err != nil {
		return nil, err
	}
	return &wsClient{c: c, br: bufio.NewReaderSize(c, 1024)}, nil
}
