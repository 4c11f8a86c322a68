package broadcast

import (
	"time"

	"testing"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMaxConnectionsPerClient(t *testing.T) {
	h := newHub(t, Options{MaxConnectionsPerClient: 2})
	ts := newTestServer(t, h, nil)
	ts.handoff.Store(true)
	a1 := ts.dial(t, "gate=g&client=10.0.0.1", nil)
	read(t, a1)
	read(t, ts.dial(t, "gate=g&client=10.0.0.1", nil))
	require.NoError(t, ts.nextErr(t))
	require.NoError(t, ts.nextErr(t))

	// The third socket from the same address is refused with a clear reason...
	code, reason := readClose(t, ts.dial(t, "gate=g&client=10.0.0.1", nil))
	assert.Equal(t, websocket.StatusTryAgainLater, code)
	assert.Equal(t, reasonTooManyClient, reason)
	assert.ErrorIs(t, ts.nextErr(t), ErrTooManyConnections)

	// ...while other addresses are served, and so is the first one again
	// once one of its sockets is gone.
	read(t, ts.dial(t, "gate=g&client=10.0.0.2", nil))
	require.NoError(t, ts.nextErr(t))
	require.NoError(t, a1.Close(websocket.StatusNormalClosure, ""))
	require.Eventually(t, func() bool {
		h.clientsMu.Lock()
		defer h.clientsMu.Unlock()
		return h.clients["10.0.0.1"] == 1
	}, 10*time.Second, time.Millisecond)
	read(t, ts.dial(t, "gate=g&client=10.0.0.1", nil))
	require.NoError(t, ts.nextErr(t))
	assert.EqualValues(t, 1, h.Stats().Rejected)
	assert.EqualValues(t, 3, h.Stats().Subscribers)
}
