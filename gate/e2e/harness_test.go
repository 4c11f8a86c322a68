package e2e

import (
	"context"
	"errors"
	"fmt"
	"github.com/anteroomhq/anteroom/session/sessiontest"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/anteroomhq/anteroom/broadcast"
	"github.com/anteroomhq/anteroom/cronjobs"
	"github.com/anteroomhq/anteroom/gate"
	"github.com/anteroomhq/anteroom/gate/gatetest"
	"github.com/anteroomhq/anteroom/session"
	"github.com/anteroomhq/anteroom/session/sqlite"
)

const (
	basePath = "/anteroom"
	// waitTimeout bounds every wait on the page. It is generous for a loaded
	// 2-core machine; the waits end as soon as the page gets there.
	waitTimeout = 30 * time.Second
	// opTimeout bounds one plain browser operation (navigate, evaluate).
	opTimeout = 30 * time.Second
)

// ---- the sidecar -------------------------------------------------------------

// sidecar is a real anteroom: SQLite file, cron update every second, hub,
// demo page, on 127.0.0.1 with the real clock (the browser runs in real time).
type sidecar struct {
	url      string
	store    *sqlite.Store
	waitlist *session.Waitlist
	hub      *broadcast.Hub
	logs     *sessiontest.LogBuffer

	mu    sync.Mutex
	paths map[string]int // requests served, by path
}

// requests returns how many requests the sidecar got for path.
func (s *sidecar) requests(path string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.paths[path]
}

func startSidecar(t *testing.T, cfg session.GateConfig) *sidecar {
	t.Helper()
	return startSidecarWith(t, cfg, nil)
}

// startSidecarWith is startSidecar with more gate options (configure may
// be nil).
func startSidecarWith(t *testing.T, cfg session.GateConfig, configure func(*gate.Options)) *sidecar {
	t.Helper()
	logs := &sessiontest.LogBuffer{}
	dumpOnFailure(t, "sidecar log", logs)
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	srv := &sidecar{logs: logs, paths: map[string]int{}}
	sc := gatetest.StartSidecar(t, gatetest.Options{
		Wrap: func(h http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				srv.mu.Lock()
				srv.paths[r.URL.Path]++
				srv.mu.Unlock()
				h.ServeHTTP(w, r)
			})
		},
		Gates:         []session.GateConfig{cfg},
		RealClock:     true,
		TouchInterval: time.Second,
		Hub:           broadcast.Options{Interval: 100 * time.Millisecond},
		Gate: func(o *gate.Options) {
			o.Demo = true
			if configure != nil {
				configure(o)
			}
		},
		Logger: log,
	})
	schedule, err := cronjobs.ParseSchedule("1s")
	if err != nil {
		t.Fatalf("cronjobs.ParseSchedule: %v", err)
	}
	sched := cronjobs.Start(sc.Waitlist, schedule, cronjobs.Options{Logger: log})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = sched.Stop(ctx)
	})
	srv.url, srv.store, srv.waitlist, srv.hub = sc.URL, sc.Store, sc.Waitlist, sc.Hub
	return srv
}

// session reads a session row straight from the store (LastActive included,
// which no view carries); ok is false when the session is gone.
func (s *sidecar) session(t *testing.T, id string) (session.Session, bool) {
	t.Helper()
	sess, err := s.store.Get(context.Background(), "default", id)
	if err != nil {
		if errors.Is(err, session.ErrNotFound) {
			return session.Session{}, false
		}
		t.Fatalf("store.Get(%s): %v", id, err)
	}
	return sess, true
}

// eventually polls cond (a server-side fact) until it holds or waitTimeout.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", waitTimeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ---- the browser ---------------------------------------------------------------

// findChromium returns the browser to drive, or skips (fails under CI).
func findChromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("ANTEROOM_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome-stable", "google-chrome", "chrome", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if p := "/usr/bin/chromium"; fileExists(p) {
		return p
	}
	const msg = "no Chromium found (looked for chromium, chromium-browser, google-chrome and $ANTEROOM_CHROMIUM): the browser end-to-end tests need one (Debian: apt-get install chromium)"
	if os.Getenv("CI") != "" {
		t.Fatal(msg + "; CI is set, and a skipped browser test in CI is a failed one")
	}
	t.Skip(msg)
	return ""
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

// browser is one headless Chromium process. Each user gets its own browser
// context in it (incognito-like: own cookie jar, own storage).
type browser struct {
	ctx context.Context
}

func newBrowser(t *testing.T) *browser {
	t.Helper()
	execPath := findChromium(t)
	output := &sessiontest.LogBuffer{}
	dumpOnFailure(t, "chromium output", output)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(execPath),
		chromedp.UserDataDir(t.TempDir()), // before the cancel below: removed after the browser exits
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-quic", true),
		chromedp.WindowSize(960, 600),
		chromedp.CombinedOutput(output),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc) // kills the process and waits for it
	ctx, cancel := chromedp.NewContext(allocCtx)
	t.Cleanup(func() {
		ctx, c := context.WithTimeout(ctx, 10*time.Second)
		defer c()
		_ = chromedp.Cancel(ctx) // graceful close; cancelAlloc kills what is left
		cancel()
	})
	// The first Run starts the browser; it must not run under a timeout.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting %s: %v\n%s", execPath, err, output.String())
	}
	return &browser{ctx: ctx}
}

// initScript runs in every page before its own scripts. It records the
// snippet's anteroom:active events, and once admitted plays the host app:
// its requests refresh the session (here through forward-auth, {base}/check,
// which calls validateSessionAndRefreshLastActive), so an open, admitted tab
// stays active and only a closed one runs into active_timeout.
// It also keeps every WebSocket the page opens in __e2e.sockets, and while
// __e2e.blockWS is set refuses new ones (the constructor throws): what a
// browser that kills background sockets does.
const initScript = `(() => {
  const e2e = window.__e2e = { activeEvents: 0, lastCheck: 0, sockets: [], blockWS: false };
  const NativeWS = window.WebSocket;
  window.WebSocket = class extends NativeWS {
    constructor(url, protocols) {
      if (e2e.blockWS) throw new DOMException('blocked by the test', 'SecurityError');
      super(url, protocols);
      e2e.sockets.push(this);
    }
  };
  document.addEventListener('anteroom:active', () => {
    e2e.activeEvents++;
    if (e2e.keepalive) return;
    const ping = () => fetch('` + basePath + `/check?gate=default', { credentials: 'same-origin', cache: 'no-store' })
      .then((r) => { e2e.lastCheck = r.status; }, () => { e2e.lastCheck = -1; });
    e2e.keepalive = setInterval(ping, 500);
    ping();
  });
})();`

// user is one visitor: a tab in its own browser context.
type user struct {
	t      *testing.T
	name   string
	ctx    context.Context
	cancel context.CancelFunc

	mu       sync.Mutex
	problems []string // uncaught exceptions, console errors and warnings
	console  []string
}

func (b *browser) newUser(t *testing.T, name string) *user {
	t.Helper()
	ctx, cancel := chromedp.NewContext(b.ctx, chromedp.WithNewBrowserContext())
	u := &user{t: t, name: name, ctx: ctx, cancel: cancel}
	t.Cleanup(u.close)
	t.Cleanup(func() {
		if t.Failed() {
			u.mu.Lock()
			defer u.mu.Unlock()
			t.Logf("%s: console:\n%s", name, strings.Join(u.console, "\n"))
		}
	})
	// Listen opens the tab (no timeout on this first use of ctx).
	if err := chromedp.Listen(ctx, u.record); err != nil {
		t.Fatalf("%s: opening a tab: %v", name, err)
	}
	u.call("setup", func(ctx context.Context) error {
		if _, err := chromedp.Call(ctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: initScript}); err != nil {
			return err
		}
		if _, err := chromedp.Call(ctx, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
			Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: "light"}},
		}); err != nil {
			return err
		}
		return chromedp.Do(ctx, chromedp.EmulateViewport(960, 600))
	})
	return u
}

// record runs on chromedp's read loop: quick, no commands.
func (u *user) record(ev any) {
	var line string
	problem := false
	switch ev := ev.(type) {
	case *runtime.EventExceptionThrown:
		d := ev.ExceptionDetails
		line = "uncaught: " + d.Text
		if d.Exception != nil {
			line += " " + d.Exception.Description
		}
		line += fmt.Sprintf(" (%s:%d)", d.URL, d.LineNumber+1)
		problem = true
	case *runtime.EventConsoleAPICalled:
		var args []string
		for _, a := range ev.Args {
			if a.Description != "" {
				args = append(args, a.Description)
			} else {
				args = append(args, string(a.Value))
			}
		}
		line = "console." + string(ev.Type) + ": " + strings.Join(args, " ")
		problem = ev.Type == runtime.ConsoleAPICalledTypeError || ev.Type == runtime.ConsoleAPICalledTypeWarning
	default:
		return
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	u.console = append(u.console, line)
	if problem {
		u.problems = append(u.problems, line)
	}
}

// requireNoProblems fails on any uncaught exception or console error/warning.
func (u *user) requireNoProblems() {
	u.t.Helper()
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.problems) > 0 {
		u.t.Errorf("%s: the page reported problems:\n%s", u.name, strings.Join(u.problems, "\n"))
	}
}

// close closes the tab and its browser context: pagehide fires, the
// snippet does what it does on departure.
func (u *user) close() {
	ctx, cancel := context.WithTimeout(u.ctx, 10*time.Second)
	defer cancel()
	_ = chromedp.Cancel(ctx)
	u.cancel()
}

// call runs f with a bounded context derived from the tab's, and fails the
// test on error.
func (u *user) call(what string, f func(ctx context.Context) error) {
	u.t.Helper()
	ctx, cancel := context.WithTimeout(u.ctx, opTimeout)
	defer cancel()
	if err := f(ctx); err != nil {
		u.t.Fatalf("%s: %s: %v", u.name, what, err)
	}
}

func (u *user) open(url string) {
	u.t.Helper()
	u.call("navigate to "+url, func(ctx context.Context) error { return chromedp.Do(ctx, chromedp.Navigate(url)) })
	// The scenarios start with the tabs visible, as they are for a user
	// looking at them (some hide them on purpose: setVisibility).
	if vis := evalJS[string](u, `document.visibilityState`); vis != "visible" {
		u.t.Fatalf("%s: document.visibilityState = %q, want visible", u.name, vis)
	}
}

// evalJS evaluates expr in the page (awaiting a promise) and decodes it.
func evalJS[T any](u *user, expr string) T {
	u.t.Helper()
	var v T
	u.call("evaluate "+expr, func(ctx context.Context) error {
		var err error
		v, err = chromedp.Run(ctx, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
		return err
	})
	return v
}

// waitFor waits until the JavaScript expression is truthy on the page. It
// fails the test after waitTimeout with the page's state.
func (u *user) waitFor(what, expr string) {
	u.t.Helper()
	ctx, cancel := context.WithTimeout(u.ctx, waitTimeout+10*time.Second)
	defer cancel()
	_, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](expr,
		chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(waitTimeout)))
	if err != nil {
		u.t.Fatalf("%s: waiting for %s: %v\n  condition: %s\n  page: %s", u.name, what, err, expr, u.state())
	}
}

// waitVisible waits until the element with the id is rendered.
func (u *user) waitVisible(id string) {
	u.t.Helper()
	ctx, cancel := context.WithTimeout(u.ctx, waitTimeout)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.ID(id))); err != nil {
		u.t.Fatalf("%s: waiting for #%s to be visible: %v\n  page: %s", u.name, id, err, u.state())
	}
}

// state describes the page for failure messages; it never fails.
func (u *user) state() string {
	ctx, cancel := context.WithTimeout(u.ctx, 5*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](`JSON.stringify({
  url: location.href,
  state: window.anteroom && window.anteroom.state,
  view: window.anteroom && window.anteroom.view,
  overlay: !!document.getElementById('anteroom-overlay'),
  place: (document.getElementById('anteroom-place') || {}).textContent,
  note: (document.getElementById('anteroom-note') || {}).textContent,
  content: (document.getElementById('demo-content') || {}).textContent,
  e2e: window.__e2e && { activeEvents: window.__e2e.activeEvents, lastCheck: window.__e2e.lastCheck },
  marker: window.__marker,
  visibility: document.visibilityState,
})`))
	if err != nil {
		return "(unreadable: " + err.Error() + ")"
	}
	return s
}

func (u *user) screenshot() []byte {
	u.t.Helper()
	var png []byte
	u.call("screenshot", func(ctx context.Context) error {
		var err error
		png, err = chromedp.Run(ctx, chromedp.CaptureScreenshot())
		return err
	})
	return png
}

// setVisibility is a JavaScript function: called with 'hidden' or
// 'visible', it overrides document.visibilityState and document.hidden and
// dispatches visibilitychange, which is what a page sees when its tab is
// switched away from or back to.
const setVisibility = `((v) => {
  window.__visibility = v;
  if (!window.__visibilityOverridden) {
    window.__visibilityOverridden = true;
    Object.defineProperty(document, 'visibilityState', { configurable: true, get: () => window.__visibility });
    Object.defineProperty(document, 'hidden', { configurable: true, get: () => window.__visibility === 'hidden' });
  }
  document.dispatchEvent(new Event('visibilitychange'));
  return 1;
})`

// socketOpenJS: the page has an open WebSocket.
const socketOpenJS = `window.__e2e.sockets.some((s) => s.readyState === 1)`

// ---- small things ----------------------------------------------------------------

// dumpOnFailure logs the tail of buf when the test failed. Registered
// before what writes to buf, it runs after that is stopped.
func dumpOnFailure(t *testing.T, name string, buf *sessiontest.LogBuffer) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		s := buf.String()
		const max = 16 << 10
		if len(s) > max {
			s = "..." + s[len(s)-max:]
		}
		t.Logf("%s:\n%s", name, s)
	})
}
