package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/anteroomhq/anteroom/gate"
	"github.com/anteroomhq/anteroom/session"
)

const dashboardToken = "dashboard-e2e-token-0123456789abcdef" // 36 characters

// joinHTTP joins the default gate over the client API, as a browser
// without the snippet would, and returns the signed token and the status.
func joinHTTP(t *testing.T, srv *sidecar) (tok string, status session.Status) {
	t.Helper()
	resp, err := http.Post(srv.url+basePath+"/api/join", "application/json", strings.NewReader(`{"gate":"default"}`))
	if err != nil {
		t.Fatalf("join: %v", err)
	}
	defer resp.Body.Close()
	var v struct {
		Token  string         `json:"token"`
		Status session.Status `json:"status"`
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("join: HTTP %d", resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil || v.Token == "" {
		t.Fatalf("join: decoding the answer: %v (token %q)", err, v.Token)
	}
	return v.Token, v.Status
}

// statusOf returns the status of the session named by the signed token tok,
// from the waitlist (no HTTP: polling the client API would run into its
// rate limit).
func statusOf(t *testing.T, srv *sidecar, tok string) session.Status {
	t.Helper()
	v, err := srv.waitlist.Status(context.Background(), "default", strings.SplitN(tok, ".", 2)[0])
	if err != nil {
		t.Fatalf("status: %v", err)
	}
	return v.Status
}

// card is a JavaScript expression for an element of the default gate's card.
func card(sel string) string {
	return `document.querySelector('section[data-gate="default"] ` + sel + `')`
}

// text is a JavaScript expression for the text of an element of the
// default gate's card ("" while there is none).
func text(sel string) string {
	return `((` + card(sel) + ` || {}).textContent || '')`
}

// setControl types value into the control of field on the dashboard and
// presses its Set button, as an operator would.
func setControl(u *user, field, value string) {
	u.t.Helper()
	form := `section[data-gate="default"] form[data-field="` + field + `"]`
	u.call("set "+field+" to "+value, func(ctx context.Context) error {
		if field == "mode" {
			return chromedp.Do(ctx,
				chromedp.SetValue(chromedp.CSS(form+" select"), value),
				chromedp.Click(chromedp.CSS(form+" button")))
		}
		return chromedp.Do(ctx,
			chromedp.SetValue(chromedp.CSS(form+" input"), ""),
			chromedp.SendKeys(chromedp.CSS(form+" input"), value),
			chromedp.Click(chromedp.CSS(form+" button")))
	})
}

// The operator's dashboard, in the browser: the token is asked for (a
// wrong one is refused visibly), the gate's state shows live, raising the
// limit in the page promotes the waiter, queue_all in the page makes a
// newcomer wait although a slot is free, and a lowered limit is explained.
func TestDashboardSteersTheGate(t *testing.T) {
	srv := startSidecarWith(t, session.GateConfig{
		Name: "default", ActiveLimit: 1,
		ActiveTimeout: 5 * time.Minute, WaitingTimeout: 5 * time.Minute,
	}, func(o *gate.Options) { o.AdminToken = dashboardToken })
	first, st := joinHTTP(t, srv)
	if st != session.StatusActive {
		t.Fatalf("first join: %s, want active", st)
	}
	waiter, st := joinHTTP(t, srv)
	if st != session.StatusWaiting {
		t.Fatalf("second join: %s, want waiting", st)
	}

	b := newBrowser(t)
	op := b.newUser(t, "operator")
	op.open(srv.url + basePath + "/admin/")
	op.waitVisible("token")

	// A wrong token: 401, asked again, with the reason.
	login := func(tok string) {
		op.call("enter the token", func(ctx context.Context) error {
			return chromedp.Do(ctx,
				chromedp.SendKeys(chromedp.CSS("#token"), tok),
				chromedp.Click(chromedp.CSS(`#login button[type="submit"]`)))
		})
	}
	login(strings.Repeat("x", len(dashboardToken)))
	op.waitFor("the refused token asked for again", `!document.getElementById('login').hidden
  && /refused \(401\)/.test(document.getElementById('login-why').textContent)
  && sessionStorage.getItem('anteroom.adminToken') === null`)

	login(dashboardToken)
	op.waitFor("the gate shown: 1 of 1 active, 1 waiting", text(`.barlabel`)+`.startsWith('Active 1 of 1')
  && `+text(`dl.stats dd`)+` === '1'
  && `+text(`.mode`)+` === 'open'`)
	if got := evalJS[string](op, `sessionStorage.getItem('anteroom.adminToken')`); got != dashboardToken {
		t.Errorf("sessionStorage token = %q, want the admin token", got)
	}

	// Live over the websocket feed, not polling: once the feed is open the
	// page stops asking GET gates, and a change made elsewhere (not by the
	// page) still shows.
	op.waitFor("the feed open", `document.getElementById('live').dataset.via === 'feed'
  && /^live/.test(document.getElementById('live').textContent)`)
	gets := `performance.getEntriesByType('resource').filter((e) => e.name.endsWith('/admin/api/gates')).length`
	before := evalJS[int](op, gets)
	cfg0, _ := srv.waitlist.GateConfig("default")
	cfg0.NewUsersPerMinute = 6000
	if _, err := srv.waitlist.SetGateConfig(context.Background(), cfg0); err != nil {
		t.Fatal(err)
	}
	op.waitFor("a change made elsewhere pushed", `document.querySelector('section[data-gate="default"] form[data-field="newUsersPerMinute"] input').value === '6000'`)
	time.Sleep(2500 * time.Millisecond) // two poll periods: a state that must not change
	if after := evalJS[int](op, gets); after != before {
		t.Errorf("the page asked GET gates %d more times with the feed open, want none", after-before)
	}
	cfg0.NewUsersPerMinute = 0
	if _, err := srv.waitlist.SetGateConfig(context.Background(), cfg0); err != nil {
		t.Fatal(err)
	}
	op.waitFor("the change back pushed", `document.querySelector('section[data-gate="default"] form[data-field="newUsersPerMinute"] input').value === '0'`)

	// An edit not set yet is not overwritten by the polls; Escape drops it.
	limitInput := `section[data-gate="default"] form[data-field="activeLimit"] input`
	op.call("type 7 into the limit", func(ctx context.Context) error {
		return chromedp.Do(ctx, chromedp.SetValue(chromedp.CSS(limitInput), ""), chromedp.SendKeys(chromedp.CSS(limitInput), "7"))
	})
	time.Sleep(1500 * time.Millisecond) // a poll or two redraw the card
	if !evalJS[bool](op, `document.activeElement === document.querySelector('`+limitInput+`')`) {
		t.Errorf("a poll took the focus away from the limit field being edited")
	}
	op.call("blur", func(ctx context.Context) error {
		return chromedp.Do(ctx, chromedp.Blur(chromedp.CSS(limitInput)))
	})
	time.Sleep(1500 * time.Millisecond) // a poll or two: the edit must stay (a state that must not change)
	if v := evalJS[string](op, `document.querySelector('`+limitInput+`').value`); v != "7" {
		t.Errorf("the unsent edit became %q after a poll, want 7", v)
	}
	op.call("Escape", func(ctx context.Context) error {
		return chromedp.Do(ctx, chromedp.SendKeys(chromedp.CSS(limitInput), kb.Escape))
	})
	op.waitFor("the limit field back to the gate's 1", `document.querySelector('`+limitInput+`').value === '1'`)
	if cfg, _ := srv.waitlist.GateConfig("default"); cfg.ActiveLimit != 1 {
		t.Fatalf("activeLimit = %d after an edit dropped with Escape, want 1", cfg.ActiveLimit)
	}

	// A refused change is shown, and changes nothing.
	setControl(op, "newUsersPerMinute", "9999999999999")
	op.waitFor("the refusal shown", `/could not set new users per minute: invalid_argument: newUsersPerMinute/.test(document.getElementById('error').textContent)`)
	if cfg, _ := srv.waitlist.GateConfig("default"); cfg.NewUsersPerMinute != 0 {
		t.Fatalf("newUsersPerMinute = %d after a refused change, want 0", cfg.NewUsersPerMinute)
	}
	setControl(op, "newUsersPerMinute", "0")
	op.waitFor("the error gone after a good change", `document.getElementById('error').textContent === ''`)

	// Raise the limit in the page: the waiter is promoted at once.
	setControl(op, "activeLimit", "2")
	eventually(t, "the waiter promoted", func() bool { return statusOf(t, srv, waiter) == session.StatusActive })
	op.waitFor("2 of 2 active, nobody waiting, the change announced", text(`.barlabel`)+`.startsWith('Active 2 of 2')
  && `+text(`dl.stats dd`)+` === '0' && document.getElementById('error').textContent === ''
  && /limit set to 2/.test(document.getElementById('status').textContent)`)

	// Free a slot, then queue_all in the page: a newcomer waits although a
	// slot is free.
	firstID := strings.SplitN(first, ".", 2)[0]
	if err := srv.waitlist.Release(context.Background(), "default", firstID); err != nil {
		t.Fatal(err)
	}
	op.waitFor("1 of 2 active", text(`.barlabel`)+`.startsWith('Active 1 of 2')`)
	setControl(op, "mode", "queue_all")
	op.waitFor("queue_all shown and explained", text(`.mode`)+` === 'queue_all'
  && /everyone new waits/.test(`+text(`.note`)+`)`)
	cfg, err := srv.waitlist.GateConfig("default")
	if err != nil || cfg.Mode != session.ModeQueueAll {
		t.Fatalf("mode after the page set it = %q (%v), want queue_all", cfg.Mode, err)
	}
	newcomer, st := joinHTTP(t, srv)
	if st != session.StatusWaiting {
		t.Fatalf("newcomer in queue_all with a free slot: %s, want waiting", st)
	}
	op.waitFor("the newcomer shown waiting", text(`dl.stats dd`)+` === '1'`)

	// Back to open in the page: the newcomer takes the free slot.
	setControl(op, "mode", "open")
	eventually(t, "the newcomer admitted after reopening", func() bool { return statusOf(t, srv, newcomer) == session.StatusActive })

	// Lower the limit below active: the page says nobody new gets in.
	setControl(op, "activeLimit", "1")
	op.waitFor("the over-limit note", `/Nobody new is admitted until active falls below it/.test(`+text(`.note`)+`)
  && `+card(`.bar`)+`.classList.contains('over')`)
	// A line builds up behind the lowered limit: the chart shows it.
	for i := 1; i <= 4; i++ {
		if _, st := joinHTTP(t, srv); st != session.StatusWaiting {
			t.Fatalf("newcomer %d over the limit: %s, want waiting", i, st)
		}
		op.waitFor("the line growing", text(`dl.stats dd`)+` === '`+strconv.Itoa(i)+`'`)
	}
	// Wait for the samples to be saved (every fifth poll).
	op.waitFor("the chart saved", `(JSON.parse(sessionStorage.getItem('anteroom.adminSamples') || '{}').default || []).length >= 3`)
	n := evalJS[int](op, `JSON.parse(sessionStorage.getItem('anteroom.adminSamples')).default.length`)
	if got := evalJS[int](op, card(`polyline`)+`.getAttribute('points').split(' ').length`); got < n {
		t.Errorf("the line-length chart has %d points, want one per poll (at least %d)", got, n)
	}
	writePNG(t, screenshotDir(t), "dashboard.png", fullScreenshot(op))

	// A reload keeps the token and the chart (sessionStorage): no second
	// login, and the line's history is still drawn.
	op.open(srv.url + basePath + "/admin/")
	op.waitFor("the gate shown again without a login, its chart kept", `document.getElementById('login').hidden
  && `+text(`.barlabel`)+`.startsWith('Active 2 of 1')
  && `+card(`polyline`)+`.getAttribute('points').split(' ').length >= `+strconv.Itoa(n))
	op.requireNoProblems()
}

// openDashboard opens the sidecar's dashboard in b as the operator and
// enters the admin token (dashboardToken).
func openDashboard(t *testing.T, b *browser, srv *sidecar) *user {
	t.Helper()
	op := b.newUser(t, "operator")
	op.open(srv.url + basePath + "/admin/")
	op.waitVisible("token")
	op.call("enter the token", func(ctx context.Context) error {
		return chromedp.Do(ctx,
			chromedp.SendKeys(chromedp.CSS("#token"), dashboardToken),
			chromedp.Click(chromedp.CSS(`#login button[type="submit"]`)))
	})
	return op
}

func fullScreenshot(u *user) []byte {
	u.t.Helper()
	var png []byte
	u.call("full screenshot", func(ctx context.Context) error {
		var err error
		png, err = chromedp.Run(ctx, chromedp.FullScreenshot(100))
		return err
	})
	return png
}
