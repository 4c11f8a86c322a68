package gate_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
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

	// The flooders run off the test goroutine: they only record what they
	// got, and the test goroutine asserts on it after wg.Wait (require's
	// FailNow must not be called from another goroutine).
	var wg sync.WaitGroup
	huge := `{"gate":"` + strings.Repeat("a", 1<<20) + `"}`
	statuses := make([]int, 16)
	errs := make([]error, len(statuses))
	for i := range statuses {
		wg.Add(1)
		go func() {
			defer wg.Done()
			statuses[i], errs[i] = postStatus(h.url+base+"/api/join", huge)
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
	for i, s := range statuses {
		require.NoError(t, errs[i], "flooder %d", i)
		assert.Equal(t, http.StatusRequestEntityTooLarge, s, "flooder %d", i)
	}
	// The attacker's socket is closed for talking; global messages published
	// before the close (the bystander's join above) may come first.
	err := readUntilClosed(ctx, attacker)
	assert.Equal(t, websocket.StatusPolicyViolation, websocket.CloseStatus(err), "the talking socket is closed: %v", err)
	global, err := h.waitlist.Global("default")
	require.NoError(t, err)
	assert.EqualValues(t, 1, global.Waiting, "refused joins changed nothing")
}

// postStatus posts body as JSON with a fresh client and returns the status.
// It never calls into testing.T, so it is safe off the test goroutine.
func postStatus(url, body string) (int, error) {
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, err
}

// readUntilClosed reads conn until it ends and returns the error that ended
// it. Global messages before the end are skipped; any other message is an
// error of its own.
func readUntilClosed(ctx context.Context, conn *websocket.Conn) error {
	for {
		_, data, err := conn.Read(ctx)
		if err != nil {
			return err
		}
		var m wsMessage
		if err := json.Unmarshal(data, &m); err != nil || m.Type != "global" {
			return fmt.Errorf("unexpected message before the close: %q", data)
		}
	}
}
