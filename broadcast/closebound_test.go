package broadcast

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/broadcast/wsframe"
)

// A client that announces a huge data message and goes quiet used to hold
// the library's close handshake for ever: it discards the announced payload
// without a deadline. The hub now bounds the reads of every close it starts
// (closeHandshakeTimeout, shortened here).

// shortCloseHandshakes shortens closeHandshakeTimeout for the test.
func shortCloseHandshakes(t *testing.T) {
	old := closeHandshakeTimeout
	closeHandshakeTimeout = 300 * time.Millisecond
	t.Cleanup(func() { closeHandshakeTimeout = old })
}

// sendHugeDataHeader writes only the header of a masked text frame that
// announces length payload bytes, and none of the payload.
func (c *rawClient) sendHugeDataHeader(length uint64) error {
	hdr := []byte{0x81, 0x80 | 127, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	binary.BigEndian.PutUint64(hdr[2:10], length)
	_, _ = rand.Read(hdr[10:14])
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_, err := c.nc.Write(hdr)
	return err
}

// closesWithin runs h.Close and fails the test when it has not returned
// within d (it then closes conns so that the test can end).
func closesWithin(t *testing.T, h *Hub, d time.Duration, conns ...*rawClient) {
	t.Helper()
	closed := make(chan struct{})
	go func() { _ = h.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(d):
		for _, c := range conns {
			_ = c.nc.Close()
		}
		<-closed
		t.Fatalf("Hub.Close still waiting %v later for a socket that announced a data frame and went quiet", d)
	}
}

// A served socket: the hub closes it for its data message (policy
// violation), and Hub.Close (a process's shutdown) does not wait for it.
func TestCloseOfAQuietHugeMessageIsBounded(t *testing.T) {
	shortCloseHandshakes(t)
	h := New(Options{Logger: quietLogger()})
	ts := newTestServer(t, h, nil)
	c := dialRaw(t, ts, "gate=g", 0)
	op, _, err := c.read() // the initial global
	require.NoError(t, err)
	require.Equal(t, wsframe.OpText, op)
	require.NoError(t, c.sendHugeDataHeader(1<<40))
	for { // the hub's policy-violation close arrives
		op, p, err := c.read()
		require.NoError(t, err)
		if op == wsframe.OpClose {
			require.EqualValues(t, websocket.StatusPolicyViolation, binary.BigEndian.Uint16(p))
			break
		}
	}
	closesWithin(t, h, 10*time.Second, c)
}

// Sockets refused over the per-client cap, whose client then goes quiet
// inside a huge message, used to keep their place in MaxConnections for ever
// (no pinger watches a refused socket): one client took the whole global
// cap and a newcomer from elsewhere was refused.
func TestRefusedSocketsLeaveTheGlobalCap(t *testing.T) {
	shortCloseHandshakes(t)
	h := newHub(t, Options{MaxConnections: 5, MaxConnectionsPerClient: 1, WriteTimeout: time.Second, PingInterval: time.Second})
	ts := newTestServer(t, h, nil)
	ts.handoff.Store(true)
	a := ts.dial(t, "gate=g&client=10.6.6.6", nil) // served
	go func() {                                    // reads, and so answers pings, until the test ends
		for {
			if _, _, err := a.Read(context.Background()); err != nil {
				return
			}
		}
	}()
	require.NoError(t, ts.nextErr(t))
	for range 4 { // each over the client's cap: refused, then held open
		r := dialRaw(t, ts, "gate=g&client=10.6.6.6", 0)
		require.NoError(t, r.sendHugeDataHeader(1<<40))
	}
	require.Eventually(t, func() bool { return h.conns.Load() == 1 }, 10*time.Second, 20*time.Millisecond,
		"the refused sockets still count: %d", h.conns.Load())
	c, _, err := websocket.Dial(t.Context(), ts.wsURL("gate=g&client=10.0.0.1"), nil)
	require.NoError(t, err)
	defer c.CloseNow()
	typ, _, err := c.Read(t.Context())
	require.NoError(t, err, "the newcomer was closed: %v", websocket.CloseStatus(err))
	assert.Equal(t, websocket.MessageText, typ)
	assert.EqualValues(t, 2, h.Stats().Subscribers)
}

// A refused socket in that state does not hold Hub.Close either.
func TestRefusedQuietSocketDoesNotHoldClose(t *testing.T) {
	shortCloseHandshakes(t)
	h := New(Options{Logger: quietLogger(), MaxConnectionsPerClient: 1})
	ts := newTestServer(t, h, nil)
	ts.handoff.Store(true)
	a := dialRaw(t, ts, "gate=g&client=10.6.6.6", 0) // served
	require.NoError(t, ts.nextErr(t))
	r := dialRaw(t, ts, "gate=g&client=10.6.6.6", 0) // over the cap: refused
	require.NoError(t, r.sendHugeDataHeader(1<<40))
	require.ErrorIs(t, ts.nextErr(t), ErrTooManyConnections)
	closesWithin(t, h, 10*time.Second, a, r)
}
