package main

import (
	"bufio"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSlowClientsAreCutOffWhileOthersAreServed(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") })
	srv := newHTTPServer(ok, slog.New(slog.DiscardHandler), serverTimeouts{readHeader: 300 * time.Millisecond, read: time.Second, idle: time.Second})
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	addr := ln.Addr().String()

	// Slowloris: a few connections that send half a request and stall.
	var stalled []net.Conn
	for range 20 {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		_, err = io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\nX-Slow: ")
		require.NoError(t, err)
		stalled = append(stalled, c)
	}
	// Everyone else is served meanwhile.
	for range 5 {
		resp, err := http.Get("http://" + addr + "/")
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.Equal(t, "ok", string(body))
	}
	// The stalled connections are closed by the server: reading ends (EOF or
	// a 408) instead of hanging; the bound here is generous on purpose.
	for _, c := range stalled {
		require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
		_, err := bufio.NewReader(c).ReadString('\n')
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatal("the server never closed a stalled connection")
		}
	}
}
