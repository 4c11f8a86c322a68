package gate_test

import (
	"net/url"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A client that pads its socket's URL (the session's token in the query,
// beside up to the server's 64 KB header limit of junk) must not pin the
// padding for as long as the socket is open: what the sidecar keeps of an
// open socket is its own copy, never a piece of the request. The heap per
// open socket is compared with the same sessions' sockets on plain URLs,
// in the same run; the padded ones go first, so that nothing the plain ones
// left (a presence not yet flushed) could stand in for a padded one's.
func TestAPaddedSocketURLIsNotKept(t *testing.T) {
	h := newHarness(t, 1)
	const sockets, pad = 24, 48 << 10
	toks := make([]string, sockets)
	for i := range toks {
		toks[i] = url.QueryEscape(h.join(t, newClient(t)).body["token"].(string))
	}
	perSocket := func(padding string) float64 {
		t.Helper()
		before := liveHeap()
		conns := make([]*websocket.Conn, sockets)
		for i, tok := range toks {
			conns[i] = dial(t, h, "?gate=default&session="+tok+padding)
			for range 2 { // the session's view and the gate's
				read(t, conns[i])
			}
		}
		after := liveHeap()
		for _, c := range conns {
			require.NoError(t, c.Close(websocket.StatusNormalClosure, ""))
		}
		require.Eventually(t, func() bool { return h.hub.Stats().Subscribers == 0 }, 10*time.Second, 5*time.Millisecond)
		return (float64(after) - float64(before)) / sockets
	}
	padded := perSocket("&pad=" + strings.Repeat("x", pad))
	plain := perSocket("")
	t.Logf("heap per open socket (server and client): padded URL %.0f B, plain %.0f B", padded, plain)
	assert.Less(t, padded-plain, float64(pad)/4, "an open socket keeps its request's padding")
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
