package gate_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/gate"
)

// silentApp accepts connections and never answers; it closes them when the
// test ends.
func silentApp(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return "http://" + ln.Addr().String()
}

// An app that accepts and never answers gets 504 after the upstream
// timeout instead of hanging the client: a page for a browser, the JSON
// error for anything else.
func TestProxyAnswers504WhenTheUpstreamDoesNotAnswer(t *testing.T) {
	h := newHarnessWith(t, 1, func(o *gate.Options) {
		o.Proxy = gate.ProxyOptions{Upstream: mustParse(t, silentApp(t)), ResponseHeaderTimeout: 200 * time.Millisecond}
	})
	c := newClient(t) // its timeout (10 s) fails the test if the proxy hangs
	r := do(t, c, http.MethodGet, h.url+"/slow", "", "", "Accept", acceptHTML)
	assert.Equal(t, http.StatusGatewayTimeout, r.status)
	assert.Contains(t, r.header.Get("Content-Type"), "text/html")
	assert.Contains(t, r.raw, "Gateway Timeout")
	assert.NotEmpty(t, r.header.Get("Content-Security-Policy"))

	r = do(t, c, http.MethodPost, h.url+"/api/slow", "application/json", `{}`, "Accept", "application/json")
	requireError(t, r, http.StatusGatewayTimeout, "upstream_timeout")
}

// A request body that stops arriving is cut off after the body timeout
// (408), while one that keeps arriving, slowly, for longer than that gets
// through whole.
func TestProxyBoundsStalledRequestBodiesButNotSlowOnes(t *testing.T) {
	var mu sync.Mutex
	var got []string
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, fmt.Sprintf("%s err=%v", b, err))
		mu.Unlock()
		fmt.Fprintf(w, "app read %d bytes", len(b))
	}))
	t.Cleanup(app.Close)
	const idle = 2 * time.Second
	h := newHarnessWith(t, 1, func(o *gate.Options) {
		o.Proxy = gate.ProxyOptions{Upstream: mustParse(t, app.URL), BodyIdleTimeout: idle}
	})
	c := newClient(t)
	require.Contains(t, do(t, c, http.MethodGet, h.url+"/", "", "", "Accept", acceptHTML).raw, "app read 0 bytes")
	cookie := cookieOf(t, c, mustParse(t, h.url))
	addr := strings.TrimPrefix(h.url, "http://")

	post := func(t *testing.T, send func(net.Conn)) (*http.Response, string) {
		conn, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		defer conn.Close()
		_, err = fmt.Fprintf(conn, "POST /upload HTTP/1.1\r\nHost: %s\r\nCookie: %s\r\nContent-Type: text/plain\r\nContent-Length: 15\r\n\r\n", addr, cookie)
		require.NoError(t, err)
		send(conn)
		// Generous: only a server that never gives up makes this fail.
		require.NoError(t, conn.SetReadDeadline(time.Now().Add(15*time.Second)))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatal("the stalled body held the connection")
		}
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		return resp, string(body)
	}

	t.Run("stalled", func(t *testing.T) {
		resp, body := post(t, func(c net.Conn) { _, _ = io.WriteString(c, "abc") })
		assert.Equal(t, http.StatusRequestTimeout, resp.StatusCode, body)
		assert.Contains(t, body, `"code":"request_timeout"`)
	})
	t.Run("slow but steady", func(t *testing.T) {
		resp, body := post(t, func(c net.Conn) {
			for _, b := range "0123456789abcde" { // one byte every tenth of the idle bound, for 1.5 × it
				time.Sleep(idle / 10)
				_, _ = io.WriteString(c, string(b))
			}
		})
		assert.Equal(t, http.StatusOK, resp.StatusCode, body)
		assert.Equal(t, "app read 15 bytes", body)
	})
	mu.Lock()
	defer mu.Unlock()
	assert.Contains(t, got, "0123456789abcde err=<nil>")
	for _, g := range got {
		assert.NotContains(t, g, "abc err=<nil>", "the app never took the cut-off body for a whole one")
	}
}
