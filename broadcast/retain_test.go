package broadcast

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session/sessiontest"
)

// A socket's Subscription may be cut from its request (a client address
// read from a header), and the hub keeps what it needs of it for as long
// as the socket is open: copies only (register's promise), the count of a
// client's sockets (MaxConnectionsPerClient) included, whose map entry is
// written again by every socket of the client (a map assignment puts the
// key given in place of the one it holds).
func TestTheHubKeepsNoRequestMemoryOfASubscription(t *testing.T) {
	h := newHub(t, Options{MaxConnectionsPerClient: 4})
	clients := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sub := Subscription{Gate: "g", Global: view("g", 1)}
		sub.Client = <-clients
		if err := h.Handoff(w, r, sub); err != nil {
			t.Errorf("handoff: %v", err)
		}
	}))
	t.Cleanup(srv.Close)
	dial := func(client string) *websocket.Conn {
		clients <- client
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http"), nil)
		require.NoError(t, err)
		read(t, c)
		return c
	}
	first := dial(strings.Clone("10.0.0.1"))
	defer first.CloseNow()

	sessiontest.RequireFreed(t, "10.0.0.1", func(client string) func() { // the address is the request's tail
		second := dial(client)
		return func() {
			defer second.CloseNow()
			h.clientsMu.Lock()
			n := h.clients["10.0.0.1"]
			h.clientsMu.Unlock()
			require.Equal(t, 2, n, "both sockets counted")
		}
	}, "the hub still holds the request through the client of an open socket")
}
