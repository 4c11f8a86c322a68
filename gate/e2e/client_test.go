package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/anteroomhq/anteroom/session"
	"github.com/anteroomhq/anteroom/static"
)

// fakeSidecar serves the real snippet on a page and answers its API calls
// with views the test chooses, recording every request: what the snippet
// sends, and what it shows for a given view, without a real line.
type fakeSidecar struct {
	url   string
	rate  atomic.Value // float64: admittedPerMinute of the next answers
	place atomic.Int64 // the exact place of the next answers; 0: none

	mu   sync.Mutex
	reqs []fakeRequest
}

type fakeRequest struct {
	method, url, auth string
}

const fakeToken = "s1.4102444800.fake-mac-of-the-test-sidecar"

func startFakeSidecar(t *testing.T) *fakeSidecar {
	f := &fakeSidecar{}
	f.rate.Store(0.0)
	view := func() map[string]any {
		v := map[string]any{"gate": "default", "firstWaitingPosition": 2, "lastWaitingPosition": 5, "waiting": 4,
			"active": 1, "limit": 1, "admittedPerMinute": f.rate.Load().(float64), "session": "s1", "status": "waiting", "position": 3}
		if p := f.place.Load(); p > 0 {
			v["place"] = p
		}
		return v
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/page", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, `<!doctype html><html lang="en"><head><title>app</title>
<script src="/anteroom/anteroom.js"></script></head><body><main><a href="/elsewhere" id="behind">a link behind the overlay</a></main></body></html>`)
	})
	mux.HandleFunc("/anteroom/anteroom.js", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", static.SnippetContentType)
		_, _ = w.Write(static.Snippet())
	})
	mux.HandleFunc("/anteroom/api/join", func(w http.ResponseWriter, r *http.Request) {
		v := view()
		v["token"] = fakeToken
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(v)
	})
	mux.HandleFunc("/anteroom/api/status", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Retry-After", "1")
		_ = json.NewEncoder(w).Encode(view())
	})
	mux.HandleFunc("/anteroom/api/ticket", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"ticket":"4102444800.s1.ticket-mac","purpose":"ws","gate":"default","expiresIn":60}`)
	})
	mux.HandleFunc("/anteroom/api/leave", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	// No websocket: the snippet falls back to polling status.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.reqs = append(f.reqs, fakeRequest{method: r.Method, url: r.URL.String(), auth: r.Header.Get("Authorization")})
		f.mu.Unlock()
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	f.url = srv.URL
	return f
}

func (f *fakeSidecar) requests() []fakeRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]fakeRequest(nil), f.reqs...)
}

// count returns how many requests went to path.
func (f *fakeSidecar) count(path string) int {
	n := 0
	for _, r := range f.requests() {
		if strings.HasPrefix(r.url, path) {
			n++
		}
	}
	return n
}

// The snippet sends the token in the Authorization header on every API call
// once it has one, and never in a URL: the websocket gets a ticket, the
// departure (pagehide) a keepalive fetch with the header. It shows an estimated wait
// only with evidence (3 admissions in the five-minute window, a rate of at
// least 0.6/min): not after a single admission (0.2/min).
func TestSnippetTokenInHeadersOnlyAndETAWithEvidence(t *testing.T) {
	f := startFakeSidecar(t)
	f.rate.Store(0.2) // one admission in five minutes
	b := newBrowser(t)
	u := b.newUser(t, "waiter")
	u.open(f.url + "/page")
	u.waitFor("the overlay with the place", placeIs("Your place: 2 of 4"))
	eventually(t, "status polls after the websocket failed", func() bool { return f.count("/anteroom/api/status") >= 2 })
	if hint := evalJS[string](u, `document.getElementById('anteroom-hint').textContent`); strings.Contains(hint, "Estimated") {
		t.Errorf("an estimated wait after a single admission: %q", hint)
	}

	f.rate.Store(0.6) // three admissions in five minutes: evidence
	// Place 2 at 0.6/min: 3.3 min, shown as a range of +-20% rounded outwards.
	u.waitFor("an estimated wait once there is evidence",
		`document.getElementById('anteroom-hint').textContent === 'Estimated wait: 2\u20134 min'`)

	// A big move says why, in one line.
	const hint = `document.getElementById('anteroom-hint').textContent`
	for _, step := range []struct {
		rate float64
		want string
	}{
		{1.5, "Estimated wait: 1\u20132 min More people were let in lately."},
		{0.6, "Estimated wait: 2\u20134 min Fewer people were let in over the last minutes."},
		{3, "Estimated wait: less than a minute More people were let in lately."},
	} {
		f.rate.Store(step.rate)
		u.waitFor(fmt.Sprintf("the estimate at %v/min", step.rate), hint+` === '`+step.want+`'`)
	}
	// The server's exact place wins over the bound from the positions, and
	// says that people ahead left.
	f.place.Store(1)
	u.waitFor("the exact place", placeIs("Your place: 1 of 4")+` && `+hint+`.startsWith('Some people ahead of you left the line. Estimated wait: less than a minute')`)

	// The departure (pagehide) goes out with the header too.
	evalJS[int](u, `(() => {
  window.dispatchEvent(new PageTransitionEvent('pagehide', { persisted: false }));
  return 1;
})()`)
	eventually(t, "the leave request", func() bool { return f.count("/anteroom/api/leave") >= 1 })

	seenTicket := false
	for _, r := range f.requests() {
		if strings.Contains(r.url, "session=") || strings.Contains(r.url, "fake-mac") {
			t.Errorf("the token in a URL: %s %s", r.method, r.url)
		}
		if strings.HasPrefix(r.url, "/anteroom/ws") && strings.Contains(r.url, "ticket=4102444800.s1.ticket-mac") {
			seenTicket = true
		}
		api := strings.HasPrefix(r.url, "/anteroom/api/")
		if api && !strings.HasPrefix(r.url, "/anteroom/api/join") && r.auth != "Bearer "+fakeToken {
			t.Errorf("%s %s without the token in Authorization (got %q)", r.method, r.url, r.auth)
		}
	}
	if !seenTicket {
		t.Errorf("the websocket was never opened with the ticket; requests: %+v", f.requests())
	}
	u.requireNoProblems()
}

// While the overlay is up, the page behind it is inert: Tab never reaches
// its link, and clicks do not either. Once let in, the page is live again.
func TestOverlayKeepsFocusAndTheBackgroundIsInert(t *testing.T) {
	srv := startSidecar(t, session.GateConfig{Name: "default", ActiveLimit: 1, ActiveTimeout: time.Minute, WaitingTimeout: time.Minute})
	b := newBrowser(t)
	first := b.newUser(t, "first")
	first.open(srv.url + "/")
	first.waitFor("being let in", admittedJS)

	waiter := b.newUser(t, "waiter")
	waiter.open(srv.url + "/")
	waiter.waitFor("the overlay", placeIs("Your place: 1 of 1"))
	if !evalJS[bool](waiter, `document.querySelector('main').inert === true`) {
		t.Errorf("the page behind the overlay is not inert")
	}
	if !evalJS[bool](waiter, `!!document.querySelector('main a[href]')`) {
		t.Fatal("the demo page has no link behind the overlay: the Tab check would prove nothing")
	}
	for i := range 6 {
		waiter.call("press Tab", func(ctx context.Context) error { return chromedp.Do(ctx, chromedp.KeyEvent(kb.Tab)) })
		where := evalJS[string](waiter, `(() => {
  const a = document.activeElement;
  if (!a || a === document.body) return 'body';
  return document.getElementById('anteroom-overlay').contains(a) ? 'overlay' : 'behind: ' + a.outerHTML.slice(0, 80);
})()`)
		if strings.HasPrefix(where, "behind") {
			t.Fatalf("Tab %d moved the focus behind the overlay: %s", i+1, where)
		}
	}

	// Let in: the overlay goes, the page behind it is live again.
	if err := srv.waitlist.Release(context.Background(), "default", evalJS[string](first, `window.anteroom.view.session`)); err != nil {
		t.Fatal(err)
	}
	waiter.waitFor("being let in, the page live again", `window.anteroom.state === 'active'
  && !document.getElementById('anteroom-overlay') && document.querySelector('main').inert === false`)
	waiter.requireNoProblems()
}

// screenshotDir is where the screenshots of the pages go: the test's temp
// dir, or $ANTEROOM_SCREENSHOT_DIR to look at them.
func screenshotDir(t *testing.T) string {
	if d := os.Getenv("ANTEROOM_SCREENSHOT_DIR"); d != "" {
		return d
	}
	return t.TempDir()
}

// The waiting page at {base}/ is one card with one heading: the snippet's
// card stands in for the page's (no text of the page peeks around it), and
// once let in, the page's card says so, styled, with the way in.
func TestWaitingPageIsOneCard(t *testing.T) {
	srv := startSidecar(t, session.GateConfig{Name: "default", ActiveLimit: 1, ActiveTimeout: time.Minute, WaitingTimeout: time.Minute})
	b := newBrowser(t)
	dir := screenshotDir(t)
	first := b.newUser(t, "first")
	first.open(srv.url + "/")
	first.waitFor("being let in", admittedJS)

	waiter := b.newUser(t, "waiter")
	waiter.open(srv.url + basePath + "/")
	waiter.waitFor("the waiting card", `window.anteroom && window.anteroom.state === 'waiting'
  && (document.getElementById('anteroom-place') || {}).textContent === 'Your place: 1 of 1'`)
	headings := evalJS[[]string](waiter, `Array.from(document.querySelectorAll('h1,h2,h3')).filter((h) => h.offsetParent !== null).map((h) => h.textContent)`)
	if len(headings) != 1 || headings[0] != "You are in line" {
		t.Errorf("visible headings on the waiting page = %q, want just \"You are in line\"", headings)
	}
	if title := evalJS[string](waiter, `document.title`); title != "You are in line" {
		t.Errorf("page title %q, want \"You are in line\"", title)
	}
	if evalJS[bool](waiter, `!!document.getElementById('anteroom-overlay')`) {
		t.Errorf("the waiting page puts an overlay over its own text")
	}
	if n := evalJS[int](waiter, `document.querySelectorAll('.anteroom-card, .card').length`); n != 1 {
		t.Errorf("%d cards on the waiting page, want 1", n)
	}
	if txt := evalJS[string](waiter, `document.body.innerText`); strings.Contains(txt, "This site is busy") {
		t.Errorf("the page's own text shows beside the snippet's card: %q", txt)
	}
	writePNG(t, dir, "waiting-page.png", waiter.screenshot())

	// Admitted: the page reloads, is let in at once, and its card says so.
	if err := srv.waitlist.Release(context.Background(), "default", evalJS[string](first, `window.anteroom.view.session`)); err != nil {
		t.Fatal(err)
	}
	waitAcrossReloads(t, waiter, "the admitted card", `!!(window.anteroom && window.anteroom.state === 'active'
  && (document.getElementById('waiting-title') || {}).textContent === "You're in!"
  && document.getElementById('waiting-continue') && !document.getElementById('waiting-continue').hidden)`)
	color := evalJS[string](waiter, `getComputedStyle(document.getElementById('waiting-title')).color`)
	if color != "rgb(21, 128, 61)" {
		t.Errorf("the admitted heading is not styled (color %s)", color)
	}
	if n := evalJS[int](waiter, `document.querySelectorAll('h1,h2').length`); n != 1 {
		t.Errorf("%d headings once admitted, want 1", n)
	}
	time.Sleep(500 * time.Millisecond) // let the fade finish before the picture
	writePNG(t, dir, "waiting-page-admitted.png", waiter.screenshot())
	waiter.requireNoProblems()
}

// The overlay's admitted state, held before it fades for a look and a
// screenshot: one "You're in!", styled.
func TestOverlayAdmittedState(t *testing.T) {
	srv := startSidecar(t, session.GateConfig{Name: "default", ActiveLimit: 1, ActiveTimeout: time.Minute, WaitingTimeout: time.Minute})
	b := newBrowser(t)
	dir := screenshotDir(t)
	first := b.newUser(t, "first")
	first.open(srv.url + "/")
	first.waitFor("being let in", admittedJS)
	waiter := b.newUser(t, "waiter")
	waiter.open(srv.url + "/")
	waiter.waitFor("the overlay", placeIs("Your place: 1 of 1"))
	writePNG(t, dir, "demo-overlay.png", waiter.screenshot())

	// Hold the overlay when it is about to go, to see the admitted card.
	evalJS[int](waiter, `(() => {
  const cl = DOMTokenList.prototype.add;
  window.__held = false;
  DOMTokenList.prototype.add = function (...names) {
    if (names.includes('anteroom-done')) { window.__held = true; return; }
    return cl.apply(this, names);
  };
  return 1;
})()`)
	if err := srv.waitlist.Release(context.Background(), "default", evalJS[string](first, `window.anteroom.view.session`)); err != nil {
		t.Fatal(err)
	}
	waiter.waitFor("the admitted overlay", `window.__held === true && document.getElementById('anteroom-title').textContent === "You're in!"`)
	color := evalJS[string](waiter, `getComputedStyle(document.getElementById('anteroom-title')).color`)
	if color != "rgb(21, 128, 61)" {
		t.Errorf("the admitted heading is not styled (color %s)", color)
	}
	if vis := evalJS[bool](waiter, `document.getElementById('anteroom-place').getBoundingClientRect().height > 2`); vis {
		t.Errorf("\"You're in!\" shows twice (title and place)")
	}
	writePNG(t, dir, "demo-admitted.png", waiter.screenshot())
}

func writePNG(t *testing.T, dir, name string, png []byte) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot %s", filepath.Join(dir, name))
}

// waitAcrossReloads is waitFor for a page that navigates meanwhile (the
// waiting page reloads once admitted): it evaluates expr until it is true,
// taking a failed evaluation (the page going away) as not yet.
func waitAcrossReloads(t *testing.T, u *user, what, expr string) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		ctx, cancel := context.WithTimeout(u.ctx, 5*time.Second)
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](expr))
		cancel()
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: waiting for %s (across reloads): last error %v\n  page: %s", u.name, what, err, u.state())
		}
		time.Sleep(100 * time.Millisecond)
	}
}
