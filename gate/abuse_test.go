package gate_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// While one client floods oversized bodies and talks on a receive-only
// socket, everyone else is served: joins succeed and live updates arrive.
func TestAbuseDoesNotDisturbOthers(t *testing.T) {
	h := newHarness(t, 1)
	h.join(t, newClient(t)) // takes the slot: later joiners wait
	bystander := dial(t, h, "?gate=default")
	require.EqualValues(t, 0, read(t, bystander).Waiting)

	attacker := dial(t, h, "?gate=default")
	read(t, attacker)

	var wg sync.WaitGroup
	huge := `{"gate":"` + strings.Repeat("a", 1<<20) + `"}`
	statuses := make([]int, 16)
	for i := range statuses {
		wg.Add(1)
		go func() {
			defer wg.Done()
			statuses[i] = do(t, newClient(t), http.MethodPost, h.url+base+"/api/join", "application/json", huge).status
		}()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, attacker.Write(ctx, websocket.MessageText, []byte(strings.Repeat("x", 4096))))

	// Meanwhile a bystander joins and the other bystander socket sees it.
	r := h.join(t, newClient(t))
	assert.Equal(t, "waiting", r.body["status"])
	for {
		m := read(t, bystander)
		if m.Waiting == 1 {
			break
		}
	}
	wg.Wait()
	for _, s := range statuses {
		assert.Equal(t, http.StatusRequestEntityTooLarge, s)
	}
	_, _, err := attacker.Read(ctx)
	assert.Equal(t, websocket.StatusPolicyViolation, websocket.CloseStatus(err), "the talking socket is closed: %v", err)
	global, err := h.waitlist.Global("default")
	require.NoError(t, err)
	assert.EqualValues(t, 1, global.Waiting, "refused joins changed nothing")
}
