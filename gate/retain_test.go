package gate_test

import (
	"context"
	"net/http"
	"net/url"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/gate"
)

// A client that pads its socket's request (the session's token in the
// query or the cookie, beside junk up to the server's 64 KB header limit)
// must not pin the padding for as long as the socket is open: what the
// sidecar keeps of an open socket is its own copy, never a piece of the
// request. The heap per open socket is compared with the same sessions'
// sockets on plain requests, in the same run; the padded ones go first, so
// that nothing the plain ones left (a presence not yet flushed) could stand
// in for a padded one's.
func TestAPaddedSocketRequestIsNotKept(t *testing.T) {
	const sockets, pad = 24, 48 << 10
	junk := strings.Repeat("x", pad)
	for _, tc := range []struct {
		name   string
		query  func(tok, padding string) string
		cookie func(tok, padding string) string
	}{
		{"token in the query", func(tok, padding string) string {
			q := "?gate=default&session=" + url.QueryEscape(tok)
			if padding != "" {
				q += "&pad=" + padding
			}
			return q
		}, nil},
		{"token in the cookie", func(string, string) string { return "?gate=default" }, func(tok, padding string) string {
			c := gate.CookieName + "=" + tok
			if padding != "" {
				c = "pad=" + padding + "; " + c
			}
			return c
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, 1)
			toks := make([]string, sockets)
			for i := range toks {
				toks[i] = h.join(t, newClient(t)).body["token"].(string)
			}
			perSocket := func(padding string) float64 {
				t.Helper()
				before := liveHeap()
				conns := make([]*websocket.Conn, sockets)
				for i, tok := range toks {
					var header http.Header
					if tc.cookie != nil {
						header = http.Header{"Cookie": {tc.cookie(tok, padding)}}
					}
					conns[i] = dialWith(t, h, tc.query(tok, padding), header)
					for range 2 { // the session's view and the gate's
						m := read(t, conns[i])
						require.Contains(t, []string{"session", "global"}, m.Type)
					}
				}
				after := liveHeap()
				for _, c := range conns {
					require.NoError(t, c.Close(websocket.StatusNormalClosure, ""))
				}
				require.Eventually(t, func() bool { return h.hub.Stats().Subscribers == 0 }, 10*time.Second, 5*time.Millisecond)
				return (float64(after) - float64(before)) / sockets
			}
			padded := perSocket(junk)
			plain := perSocket("")
			t.Logf("heap per open socket (server and client): padded %.0f B, plain %.0f B", padded, plain)
			assert.Less(t, padded-plain, float64(pad)/4, "an open socket keeps its request's padding")
		})
	}
}

// dialWith opens a websocket to the harness with the request headers given.
func dialWith(t *testing.T, h *harness, query string, header http.Header) *websocket.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(h.url, "http")+base+"/ws"+query, &websocket.DialOptions{HTTPHeader: header})
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.CloseNow() })
	return conn
}

// liveHeap is the heap's live bytes after two collections (the second
// empties the sync.Pools' victim caches).
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
