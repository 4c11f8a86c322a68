package e2e

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/anteroomhq/anteroom/session"
)

// JavaScript conditions on the demo page (static/demo.html + anteroom.js).
const (
	// admittedJS: let in, no overlay, the protected content came from the
	// server, and the host-app refresh (initScript) is being answered 200.
	admittedJS = `window.anteroom && window.anteroom.state === 'active'
  && !document.getElementById('anteroom-overlay')
  && !document.documentElement.classList.contains('anteroom-lock')
  && /^You are in/.test(document.getElementById('demo-content').textContent)
  && window.__e2e.lastCheck === 200`
	// stillOutsideJS: waiting, and the demo never got the protected content.
	stillOutsideJS = `window.anteroom.state === 'waiting' && window.__e2e.activeEvents === 0
  && /^Waiting for a slot/.test(document.getElementById('demo-content').textContent)`
	secretStatusJS = `fetch('/demo/api/secret', { credentials: 'same-origin', cache: 'no-store' }).then((r) => r.status)`
)

// placeIs: the overlay is shown with exactly this place text.
func placeIs(text string) string {
	return `window.anteroom && window.anteroom.state === 'waiting'
  && !!document.getElementById('anteroom-overlay')
  && (document.getElementById('anteroom-place') || {}).textContent === ` + strconv.Quote(text)
}

// TestWaitingLineInTheBrowser is the acceptance check of issue #3: with
// active_limit 2, two visitors get in, the next two wait and see their place
// live, and when an admitted visitor closes the tab the first waiter is let
// in without a reload while the other moves up.
func TestWaitingLineInTheBrowser(t *testing.T) {
	start := time.Now()
	srv := startSidecar(t, session.GateConfig{
		Name: "default", ActiveLimit: 2,
		ActiveTimeout: 3 * time.Second, WaitingTimeout: 3 * time.Second,
	})
	b := newBrowser(t)

	// 1. Two visitors, each with its own cookie jar, get in at once.
	first, second := b.newUser(t, "first"), b.newUser(t, "second")
	for _, u := range []*user{first, second} {
		u.open(srv.url + "/")
		u.waitFor("being let in at once with the protected content", admittedJS)
	}
	firstID := evalJS[string](first, `window.anteroom.view.session`)
	if secondID := evalJS[string](second, `window.anteroom.view.session`); firstID == "" || firstID == secondID {
		t.Fatalf("the two browser contexts share a session (%q, %q): cookies are not isolated", firstID, secondID)
	}

	// 2. A third waits: overlay, "1 of 1", and the protected route refuses it.
	third := b.newUser(t, "third")
	third.open(srv.url + "/")
	third.waitVisible("anteroom-overlay")
	third.waitFor("place 1 of 1", placeIs("Your place: 1 of 1"))
	third.waitFor("no protected content while waiting", stillOutsideJS)
	if status := evalJS[int](third, secretStatusJS); status != 403 {
		t.Errorf("third: GET /demo/api/secret while waiting = %d, want 403", status)
	}

	// 3. A fourth waits behind it; the third's total follows live.
	fourth := b.newUser(t, "fourth")
	fourth.open(srv.url + "/")
	fourth.waitVisible("anteroom-overlay")
	fourth.waitFor("place 2 of 2", placeIs("Your place: 2 of 2"))
	third.waitFor("place 1 of 2 after the fourth joined", placeIs("Your place: 1 of 2"))

	// 5. The screenshot of the waiting overlay (the README shows it).
	saveScreenshot(t, fourth.screenshot())

	// 4. The first closes its tab. An active session sends nothing on
	// pagehide; with the tab gone nothing refreshes it, so it expires after
	// active_timeout and the next tick promotes the third, live.
	for _, u := range []*user{third, fourth} {
		evalJS[int](u, `window.__marker = 1`)
	}
	closed := time.Now()
	first.close()
	third.waitFor("being let in without a reload, anteroom:active fired once",
		`window.__marker === 1 && window.__e2e.activeEvents === 1 && `+admittedJS)
	promoted := time.Since(closed)
	fourth.waitFor("place 1 of 1 after the third was let in",
		`window.__marker === 1 && window.__e2e.activeEvents === 0 && `+placeIs("Your place: 1 of 1"))
	// The first's last refresh was at most one keepalive (0.5s) before the
	// close: it cannot expire sooner than 2.5s after it.
	if promoted < 2500*time.Millisecond {
		t.Errorf("the third was let in %v after the first closed its tab, before the first's active_timeout (3s) ran out", promoted)
	}
	t.Logf("the third was let in %v after the first closed its tab (active_timeout 3s, tick 1s)", promoted.Round(10*time.Millisecond))

	// The first's session is gone, the second was never disturbed.
	if _, ok := srv.session(t, firstID); ok {
		t.Errorf("the first's session %s still exists after its expiry", firstID)
	}
	second.waitFor("still let in", admittedJS)
	if g, err := srv.waitlist.Global("default"); err != nil || g.Active != 2 || g.Waiting != 1 {
		t.Errorf("global view = %+v, %v; want active 2, waiting 1", g, err)
	}
	for _, u := range []*user{second, third, fourth} {
		u.requireNoProblems()
	}
	t.Logf("scenario took %v", time.Since(start).Round(10*time.Millisecond))
}

// saveScreenshot keeps the waiting overlay's screenshot in the test's temp
// dir, and with ANTEROOM_UPDATE_SCREENSHOT=1 in docs/waiting-overlay.png
// (the README shows it), so that CI does not dirty the checkout.
func saveScreenshot(t *testing.T, png []byte) {
	t.Helper()
	tmp := filepath.Join(t.TempDir(), "waiting-overlay.png")
	if err := os.WriteFile(tmp, png, 0o644); err != nil {
		t.Fatal(err)
	}
	if os.Getenv("ANTEROOM_UPDATE_SCREENSHOT") != "1" {
		return
	}
	root := filepath.Join("..", "..") // the test runs in gate/e2e
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("repository root not found from the working directory: %v", errors.Unwrap(err))
	}
	dir := filepath.Join(root, "docs")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "waiting-overlay.png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
	abs, _ := filepath.Abs(filepath.Join(dir, "waiting-overlay.png"))
	t.Logf("wrote %s", abs)
}
