package broadcast

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The binary runs its HTTP server with ReadTimeout and WriteTimeout against
// slow clients; a websocket must not die when they pass (net/http clears the
// connection's deadlines on hijack, and nothing here may set them again).
func TestSocketsOutliveTheServersRequestTimeouts(t *testing.T) {
	for _, handoff := range []bool{false, true} {
		t.Run(map[bool]string{false: "Serve", true: "Handoff"}[handoff], func(t *testing.T) {
			h := newHub(t, Options{Interval: time.Millisecond})
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				sub := Subscription{Gate: "g", Global: view("g", 1)}
				if handoff {
					_ = h.Handoff(w, r, sub)
				} else {
					_ = h.Serve(w, r, sub)
				}
			}))
			const timeout = 300 * time.Millisecond
			srv.Config.ReadTimeout = timeout
			srv.Config.WriteTimeout = timeout
			srv.Start()
			t.Cleanup(srv.Close)

			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http")+"/ws", nil)
			require.NoError(t, err)
			defer c.CloseNow()
			first := read(t, c)
			require.EqualValues(t, 1, first.Waiting)

			// Network deadlines run on the real clock: wait them out.
			time.Sleep(3 * timeout)
			h.PublishGlobal(view("g", 2))
			assert.EqualValues(t, 2, read(t, c).Waiting, "the socket is still open past the server's timeouts")
		})
	}
}
