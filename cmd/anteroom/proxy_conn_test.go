package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// shortReadTimeout makes the server's read timeout short for one test.
func shortReadTimeout(t *testing.T, d time.Duration) {
	saved := defaultTimeouts
	defaultTimeouts.read = d
	t.Cleanup(func() { defaultTimeouts = saved })
}

// proxyApp is an app with an upload route, a websocket echo, and a route
// that never answers.
func proxyApp(t *testing.T) *httptest.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("/upload", func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		fmt.Fprintf(w, "app read %d bytes, err=%v", len(b), err)
	})
	mux.HandleFunc("/echo", func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		for {
			typ, data, err := c.Read(r.Context())
			if err != nil {
				return
			}
			if err := c.Write(r.Context(), typ, data); err != nil {
				return
			}
		}
	})
	mux.HandleFunc("/hang", func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "page") })
	app := httptest.NewServer(mux)
	t.Cleanup(app.Close)
	return app
}

// startProxy runs the program in reverse-proxy mode in front of app and
// returns its address and the cookie of an admitted session.
func startProxy(t *testing.T, app string, env ...string) (string, string) {
	r := start(t, append([]string{
		"ANTEROOM_DATABASE=" + filepath.Join(t.TempDir(), "anteroom.db"),
		"ANTEROOM_UPSTREAM=" + app,
	}, env...))
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	c := &http.Client{Jar: jar, Timeout: 10 * time.Second}
	req, err := http.NewRequest(http.MethodGet, "http://"+r.addr+"/", nil)
	require.NoError(t, err)
	req.Header.Set("Accept", "text/html")
	resp, err := c.Do(req)
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	cookies := jar.Cookies(&url.URL{Scheme: "http", Host: r.addr})
	require.Len(t, cookies, 1)
	return r.addr, cookies[0].Name + "=" + cookies[0].Value
}

// A request body that stops arriving is cut off in reverse-proxy mode too,
// on proxied paths and on the sidecar's own; websockets through the proxy
// outlive the read timeout.
func TestReverseProxyModeBoundsStalledBodiesNotWebsockets(t *testing.T) {
	const readTimeout = time.Second
	shortReadTimeout(t, readTimeout)
	addr, cookie := startProxy(t, proxyApp(t).URL)

	for _, path := range []string{"/upload", "/anteroom/api/join"} {
		conn, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		_, err = fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: %s\r\nCookie: %s\r\nContent-Length: 100\r\n\r\nonly a part", path, addr, cookie)
		require.NoError(t, err)
		// Generous: only a server that never gives up fails this.
		require.NoError(t, conn.SetReadDeadline(time.Now().Add(15*time.Second)))
		_, err = io.ReadAll(conn) // an error answer and/or the close
		var ne net.Error
		assert.False(t, errors.As(err, &ne) && ne.Timeout(), "%s: the stalled body held the connection", path)
		_ = conn.Close()
	}

	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, "ws://"+addr+"/echo", &websocket.DialOptions{HTTPHeader: http.Header{"Cookie": {cookie}}})
	require.NoError(t, err)
	defer ws.CloseNow()
	time.Sleep(2 * readTimeout) // quiet for longer than the read timeout
	require.NoError(t, ws.Write(ctx, websocket.MessageText, []byte("still here")))
	_, data, err := ws.Read(ctx)
	require.NoError(t, err, "the websocket outlived the read timeout")
	assert.Equal(t, "still here", string(data))
}

// The write timeout reaches the gate: a client that asks for a large
// answer and stops reading is cut off once it passes, instead of holding
// the connection (its goroutine, buffers and upstream connection) for as
// long as it likes; the answer is larger than what the kernel's buffers
// on loopback take.
func TestAClientThatStopsReadingIsCutOff(t *testing.T) {
	const writeTimeout = 300 * time.Millisecond
	saved := defaultTimeouts
	defaultTimeouts.write = writeTimeout
	t.Cleanup(func() { defaultTimeouts = saved })
	const size = 64 << 20
	big := strings.Repeat("x", size)
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, big) }))
	t.Cleanup(app.Close)
	addr, cookie := startProxy(t, app.URL)

	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer conn.Close()
	_, err = fmt.Fprintf(conn, "GET /big HTTP/1.1\r\nHost: %s\r\nCookie: %s\r\nConnection: close\r\n\r\n", addr, cookie)
	require.NoError(t, err)
	// Network deadlines run on the real clock: stop reading for well
	// over the write timeout, then take what the server still sends.
	time.Sleep(10 * writeTimeout)
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(30*time.Second)))
	n, err := io.Copy(io.Discard, conn)
	var ne net.Error
	require.False(t, errors.As(err, &ne) && ne.Timeout(), "the server neither sent the rest nor closed")
	assert.Less(t, n, int64(size), "the server waited for a client that stopped reading, then sent it all")
}

// upstream_timeout reaches the proxy: an app that does not answer gives 504.
func TestUpstreamTimeoutIsWired(t *testing.T) {
	addr, cookie := startProxy(t, proxyApp(t).URL, "ANTEROOM_UPSTREAM_TIMEOUT=300ms")
	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer conn.Close()
	_, err = fmt.Fprintf(conn, "GET /hang HTTP/1.1\r\nHost: %s\r\nCookie: %s\r\nAccept: application/json\r\n\r\n", addr, cookie)
	require.NoError(t, err)
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(15*time.Second)))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err, "the proxy waited for the app for longer than upstream_timeout")
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	assert.Equal(t, http.StatusGatewayTimeout, resp.StatusCode)
	assert.True(t, strings.Contains(string(body), `"upstream_timeout"`), string(body))
}

// A keep-alive connection's next request may come long after its last
// answer. net/http answers a malformed one itself (400) before any
// handler runs, so no new write deadline is set for it: the deadline the
// gate set for the previous answer must not cut it (net/http clears a
// connection's write deadline once an answer is finished; this holds the
// sidecar to it). With and without the per-IP cap, whose connections are
// wrapped.
func TestAnIdleConnectionKeepsNoWriteDeadline(t *testing.T) {
	const writeTimeout = 200 * time.Millisecond
	saved := defaultTimeouts
	defaultTimeouts.write = writeTimeout
	t.Cleanup(func() { defaultTimeouts = saved })
	for _, tc := range []struct {
		name string
		env  []string
	}{
		{"with the per-IP cap", nil},
		{"without it", []string{"ANTEROOM_MAX_CONNS_PER_IP=0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := start(t, append([]string{"ANTEROOM_DATABASE=" + filepath.Join(t.TempDir(), "a.db")}, tc.env...))
			conn, err := net.Dial("tcp", r.addr)
			require.NoError(t, err)
			defer conn.Close()
			require.NoError(t, conn.SetReadDeadline(time.Now().Add(15*time.Second)))
			br := bufio.NewReader(conn)
			_, err = io.WriteString(conn, "GET /anteroom/api/global HTTP/1.1\r\nHost: x\r\n\r\n") // an answer of the gate's
			require.NoError(t, err)
			resp, err := http.ReadResponse(br, nil)
			require.NoError(t, err)
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			require.Equal(t, http.StatusOK, resp.StatusCode)

			time.Sleep(3 * writeTimeout) // network deadlines run on the real clock
			_, err = io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: x\r\nNot a header line\r\n\r\n")
			require.NoError(t, err)
			resp, err = http.ReadResponse(br, nil)
			require.NoError(t, err, "net/http's answer to the malformed request was lost")
			_ = resp.Body.Close()
			assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
		})
	}
}
