package main

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/broadcast/wsframe"
)

// BenchmarkClientRead sends one global-sized message to each of 500
// sockets per op and waits until all are read, by the old loop (next:
// bufio reads, the second finding the socket empty) or by readLoop (one
// recvmsg per arrival). The figure is the process's CPU per message; the
// sending side's writes are in both.
func BenchmarkClientRead(b *testing.B) {
	for _, mode := range []string{"next", "readLoop"} {
		b.Run(mode, func(b *testing.B) {
			const n = 500
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(b, err)
			defer ln.Close()
			srv := make(chan net.Conn, n)
			go func() {
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					br := bufio.NewReader(c)
					if req, err := http.ReadRequest(br); err == nil {
						_ = req.Body.Close()
						_, _ = io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\n\r\n")
					}
					srv <- c
				}
			}()
			var count atomic.Int64
			var conns []net.Conn
			for range n {
				ws, err := dialWS(context.Background(), ln.Addr().String(), "/", nil)
				require.NoError(b, err)
				defer ws.Close()
				conns = append(conns, <-srv)
				if mode == "next" {
					go func() {
						for {
							if _, err := ws.next(); err != nil {
								return
							}
							_ = time.Now()
							count.Add(1)
						}
					}()
				} else {
					go func() {
						_ = ws.readLoop(func([]byte, int64, int64) { count.Add(1) })
					}()
				}
			}
			for _, c := range conns {
				defer c.Close()
			}
			frame := wsframe.Text([]byte(`{"type":"global","gate":"default",` + strings.Repeat(`"x":1,`, 30) + `"waiting":1}`))
			b.ResetTimer()
			cpu0 := cpuTime()
			for i := range b.N {
				for _, c := range conns {
					_, _ = c.Write(frame)
				}
				want := int64(i+1) * n
				for count.Load() < want {
					time.Sleep(20 * time.Microsecond)
				}
			}
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N*n), "cpu-ns/msg")
		})
	}
}
