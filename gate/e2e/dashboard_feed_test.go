package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/anteroomhq/anteroom/gate"
	"github.com/anteroomhq/anteroom/session"
)

// openFeed opens the admin feed from Go, as another operator would: a
// ticket with the token, then the socket.
func openFeed(t *testing.T, srv *sidecar) *websocket.Conn {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, srv.url+basePath+"/admin/api/feed/ticket", nil)
	req.Header.Set("Authorization", "Bearer "+dashboardToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("feed ticket: %v", err)
	}
	defer resp.Body.Close()
	var tk struct {
		Ticket string `json:"ticket"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&tk) != nil {
		t.Fatalf("feed ticket: HTTP %d", resp.StatusCode)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.url, "http")+basePath+"/admin/api/feed?ticket="+url.QueryEscape(tk.Ticket), nil)
	if err != nil {
		t.Fatalf("feed: %v", err)
	}
	return c
}

// The dashboard falls back to polling while the feed is refused (here: every
// feed slot taken), shows changes all the same, and goes live over the feed
// again once one is free, then stops polling.
func TestDashboardFallsBackToPolling(t *testing.T) {
	srv := startSidecarWith(t, session.GateConfig{
		Name: "default", ActiveLimit: 1,
		ActiveTimeout: 5 * time.Minute, WaitingTimeout: 5 * time.Minute,
	}, func(o *gate.Options) {
		o.AdminToken = dashboardToken
		o.AdminRateLimit = gate.RateLimitOptions{PerSecond: 1000, Burst: 1000}
	})
	var held []*websocket.Conn
	for range 32 { // every feed slot of the process
		held = append(held, openFeed(t, srv))
	}
	defer func() {
		for _, c := range held {
			c.CloseNow()
		}
	}()

	op := openDashboard(t, newBrowser(t), srv)
	op.waitFor("polling, the feed refused", `document.getElementById('live').dataset.via === 'poll'
  && /polling/.test(document.getElementById('live').textContent)
  && `+text(`.barlabel`)+`.startsWith('Active 0 of 1')`)
	cfg, _ := srv.waitlist.GateConfig("default")
	cfg.ActiveLimit = 4
	if _, err := srv.waitlist.SetGateConfig(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	op.waitFor("a change shown by polling", text(`.barlabel`)+`.startsWith('Active 0 of 4')`)

	for _, c := range held {
		c.CloseNow()
	}
	held = nil
	op.waitFor("live over the feed again", `document.getElementById('live').dataset.via === 'feed'`)
	polls := srv.requests(basePath + "/admin/api/gates")
	time.Sleep(2500 * time.Millisecond) // two poll periods: a state that must not change
	if n := srv.requests(basePath + "/admin/api/gates"); n != polls {
		t.Errorf("%d polls of GET gates with the feed open, want none", n-polls)
	}
	cfg.ActiveLimit = 6
	if _, err := srv.waitlist.SetGateConfig(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	op.waitFor("a change pushed by the feed", text(`.barlabel`)+`.startsWith('Active 0 of 6')`)
}
