package e2e

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/anteroomhq/anteroom/broadcast"
	"github.com/anteroomhq/anteroom/gate"
	"github.com/anteroomhq/anteroom/gate/gatetest"
	"github.com/anteroomhq/anteroom/session"
	"github.com/anteroomhq/anteroom/session/sessiontest"
)

// shiftableClockScript runs before the page's scripts: Date.now() gains an
// offset the test moves with window.__shiftClock(ms), so the page's clock
// follows the sidecar's fake one (the countdown is on the server's clock
// plus the time elapsed in the page).
const shiftableClockScript = `(() => {
  const real = Date.now.bind(Date);
  let off = 0;
  Date.now = () => real() + off;
  window.__shiftClock = (ms) => { off += ms; return off; };
})();`

// What the card shows (anteroom.js's ids), and the visible text of the page.
const (
	countdownJS = `((document.getElementById('anteroom-countdown') || {}).textContent || '')`
	placeJS     = `((document.getElementById('anteroom-place') || {}).textContent || '')`
	hintJS      = `((document.getElementById('anteroom-hint') || {}).textContent || '')`
	titleJS     = `((document.getElementById('anteroom-title') || {}).textContent || '')`
	visibleJS   = `document.body.innerText`
)

var countdownRE = regexp.MustCompile(`^The line opens in (\d+):(\d\d)$`)

// secondsLeft reads the card's countdown (m:ss), failing when it is not one.
func secondsLeft(t *testing.T, u *user) int {
	t.Helper()
	text := evalJS[string](u, countdownJS)
	m := countdownRE.FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("%s: countdown %q, want %q", u.name, text, countdownRE)
	}
	min, _ := strconv.Atoi(m[1])
	sec, _ := strconv.Atoi(m[2])
	return min*60 + sec
}

// TestPrequeueShowsOnlyWhatIsTrue: during a scheduled event's pre-queue the
// waiting page (the snippet's card in #waiting) and the snippet's overlay
// on a host page (the demo) count down to the start on the server's clock,
// every second. In a shuffled pre-queue they show no place (places are
// drawn at the start) but how many are in the draw; in a first-come one,
// the real place. Once the draw is published they show the real place,
// live. The sidecar runs on a fake clock and the pages' clocks are moved
// with it, so the start happens when the test says.
func TestPrequeueShowsOnlyWhatIsTrue(t *testing.T) {
	for _, tc := range []struct {
		name    string
		shuffle bool
	}{
		{"lottery", true},
		{"first come first served", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const lead = 10 * time.Minute
			ctx := context.Background()
			logs := &sessiontest.LogBuffer{}
			dumpOnFailure(t, "sidecar log", logs)
			var mu sync.Mutex
			var queries []string // of GET /api/events
			sc := gatetest.StartSidecar(t, gatetest.Options{
				Gates:  []session.GateConfig{{Name: "default", ActiveLimit: 1, ActiveTimeout: time.Hour, WaitingTimeout: time.Hour}},
				Hub:    broadcast.Options{Interval: 100 * time.Millisecond},
				Gate:   func(o *gate.Options) { o.Demo = true },
				Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo})),
				Wrap: func(h http.Handler) http.Handler {
					return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
						if r.URL.Path == basePath+"/api/events" {
							mu.Lock()
							queries = append(queries, r.URL.RawQuery)
							mu.Unlock()
						}
						h.ServeHTTP(w, r)
					})
				},
			})
			w := sc.Waitlist
			join := func(id string, want session.Status) {
				t.Helper()
				v, err := w.Join(ctx, "default", id)
				if err != nil || v.Status != want {
					t.Fatalf("join %s: %+v, %v; want %s", id, v, err, want)
				}
			}
			// One active session holds the only slot for the whole test, one
			// waits from before the pre-queue (it keeps its place, ahead).
			join("holder", session.StatusActive)
			join("early", session.StatusWaiting)
			now := sc.Clock.Now()
			if _, err := w.AddEvent(ctx, session.ScheduledEvent{Gate: "default", ID: "launch",
				PrequeueAt: now.Add(-time.Second), StartsAt: now.Add(lead), Shuffle: tc.shuffle}); err != nil {
				t.Fatal(err)
			}
			if err := w.Sweep(ctx); err != nil {
				t.Fatal(err)
			}
			for i := 1; i <= 5; i++ {
				join(fmt.Sprintf("pre%d", i), session.StatusWaiting)
			}

			b := newBrowser(t)
			pg, overlay := b.newUser(t, "waiting page"), b.newUser(t, "overlay")
			users := []*user{pg, overlay}
			for _, u := range users {
				u.call("clock", func(ctx context.Context) error {
					_, err := chromedp.Call(ctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: shiftableClockScript})
					return err
				})
			}
			pg.open(sc.URL + basePath + "/")
			pg.waitFor("the card with a countdown", countdownJS+` !== ''`)
			overlay.open(sc.URL + "/")
			overlay.waitVisible("anteroom-overlay")
			overlay.waitFor("the overlay with a countdown", countdownJS+` !== ''`)
			// 7 in the pre-queue (5 + these two), 8 waiting with "early".
			pg.waitFor("both browsers counted", `window.anteroom.view.waiting === 8`)
			overlay.waitFor("both browsers counted", `window.anteroom.view.waiting === 8`)

			exact := func(u *user) int64 {
				t.Helper()
				id := evalJS[string](u, `window.anteroom.view.session`)
				v, err := w.Status(ctx, "default", id)
				if err != nil || v.Status != session.StatusWaiting || v.Place < 1 {
					t.Fatalf("%s: status of %q: %+v, %v", u.name, id, v, err)
				}
				return v.Place
			}
			for _, u := range users {
				// The countdown is on the server's clock, and goes down each second.
				first := secondsLeft(t, u)
				if first > int(lead/time.Second) || first < int(lead/time.Second)-60 {
					t.Errorf("%s: countdown at %ds, want just under %v", u.name, first, lead)
				}
				u.waitFor("the countdown to tick", countdownJS+` !== `+strconv.Quote(evalJS[string](u, countdownJS)))
				if next := secondsLeft(t, u); next >= first || next < first-5 {
					t.Errorf("%s: countdown went from %ds to %ds, want a second or so less", u.name, first, next)
				}
				text := evalJS[string](u, visibleJS)
				if tc.shuffle {
					if strings.Contains(text, "Your place") || strings.Contains(text, "place:") {
						t.Errorf("%s: a place is shown before the draw:\n%s", u.name, text)
					}
					for _, want := range []string{"You're in the draw", "drawn at random", "In the draw so far: 7.", "Ahead of the draw (already waiting): 1."} {
						if !strings.Contains(text, want) {
							t.Errorf("%s: %q is not shown:\n%s", u.name, want, text)
						}
					}
				} else {
					want := fmt.Sprintf("Your place: %d of 8", exact(u))
					if got := evalJS[string](u, placeJS); got != want {
						t.Errorf("%s: place %q, want %q (the real one)", u.name, got, want)
					}
					if strings.Contains(text, "draw") {
						t.Errorf("%s: a draw is mentioned without a lottery:\n%s", u.name, text)
					}
				}
				if strings.Contains(text, "Estimated wait") {
					t.Errorf("%s: a wait is estimated although nobody is let in before the start:\n%s", u.name, text)
				}
				u.requireNoProblems()
			}
			if tc.shuffle {
				commit := evalJS[string](pg, `document.getElementById('event-commitment').textContent`)
				if ev, _ := w.Events("default"); !strings.Contains(commit, ev[0].Commitment()) {
					t.Errorf("the waiting page shows %q, not the commitment %s", commit, ev[0].Commitment())
				}
			}
			shoot(t, pg, "page-"+slug(tc.name)+"-prequeue")
			shoot(t, overlay, "overlay-"+slug(tc.name)+"-prequeue")

			// The pages reach the start with the sidecar's clock, which stops a
			// millisecond short of it: not started yet, so still no place in a
			// lottery while the pages ask for the events again.
			sc.Clock.Advance(lead - time.Millisecond)
			for _, u := range users {
				evalJS[float64](u, `window.__shiftClock(`+strconv.FormatInt(lead.Milliseconds(), 10)+`)`)
				u.waitFor("the opening", countdownJS+` === 'Opening\u2026'`)
				if tc.shuffle && strings.Contains(evalJS[string](u, visibleJS), "Your place") {
					t.Errorf("%s: a place is shown at the start before the draw", u.name)
				}
			}
			shoot(t, overlay, "overlay-"+slug(tc.name)+"-opening")

			// The start: the draw (if any) is stored and published.
			sc.Clock.Advance(time.Second)
			if err := w.Sweep(ctx); err != nil {
				t.Fatal(err)
			}
			if ev, _ := w.Events("default"); ev[0].Phase != session.EventStarted {
				t.Fatalf("the event is %s after the start, want started", ev[0].Phase)
			}
			for _, u := range users {
				want := fmt.Sprintf("Your place: %d of 8", exact(u))
				u.waitFor("the real place after the start", placeJS+` === `+strconv.Quote(want)+` && `+countdownJS+` === ''`)
				hint, title := evalJS[string](u, hintJS), evalJS[string](u, titleJS)
				if title != "You are in line" {
					t.Errorf("%s: title %q after the start", u.name, title)
				}
				if drawn := strings.Contains(hint, "Places were drawn at random."); drawn != tc.shuffle {
					t.Errorf("%s: hint %q after the start (shuffled: %v)", u.name, hint, tc.shuffle)
				}
				u.requireNoProblems()
			}
			if tc.shuffle {
				if seed := evalJS[string](pg, `document.getElementById('event-commitment').textContent`); !strings.Contains(seed, "Seed: ") {
					t.Errorf("the waiting page does not show the seed after the draw: %q", seed)
				}
			}
			shoot(t, pg, "page-"+slug(tc.name)+"-started")
			shoot(t, overlay, "overlay-"+slug(tc.name)+"-started")
			// Everyone asks at the start: never for the whole pre-queue.
			mu.Lock()
			defer mu.Unlock()
			if len(queries) < 4 {
				t.Errorf("GET /api/events asked %d times, want at least twice per page", len(queries))
			}
			for _, q := range queries {
				if !strings.Contains(q, "positions=0") {
					t.Errorf("GET /api/events?%s: without positions=0", q)
				}
			}
		})
	}
}

func slug(s string) string { return strings.ReplaceAll(s, " ", "-") }

// shoot saves screenshots of u's page at desktop and mobile widths into
// $ANTEROOM_SCREENSHOTS (for a person to look at; nothing is compared), or
// does nothing without it.
func shoot(t *testing.T, u *user, name string) {
	t.Helper()
	dir := os.Getenv("ANTEROOM_SCREENSHOTS")
	if dir == "" {
		return
	}
	for _, vp := range []struct {
		name          string
		width, height int64
		mobile, dark  bool
	}{{"desktop", 1280, 800, false, false}, {"mobile", 360, 740, true, false}, {"mobile-dark", 360, 740, true, true}} {
		u.call("viewport", func(ctx context.Context) error {
			opts := []chromedp.EmulateViewportOption{}
			if vp.mobile {
				opts = append(opts, chromedp.EmulateScale(2), chromedp.EmulateMobile)
			}
			scheme := "light"
			if vp.dark {
				scheme = "dark"
			}
			if _, err := chromedp.Call(ctx, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
				Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: scheme}},
			}); err != nil {
				return err
			}
			return chromedp.Do(ctx, chromedp.EmulateViewport(vp.width, vp.height, opts...))
		})
		time.Sleep(300 * time.Millisecond) // layout and the next tick
		if err := os.WriteFile(filepath.Join(dir, name+"-"+vp.name+".png"), u.screenshot(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	u.call("viewport", func(ctx context.Context) error {
		if _, err := chromedp.Call(ctx, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
			Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: "light"}},
		}); err != nil {
			return err
		}
		return chromedp.Do(ctx, chromedp.EmulateViewport(960, 600))
	})
}

// TestPlaceShownWhenEventsFail: the card shows the place from the join
// answer (which says whether the session is in a lottery's pre-queue, where
// it has none); an events endpoint that fails does not hide it, and the
// events are asked for again, spaced out.
func TestPlaceShownWhenEventsFail(t *testing.T) {
	var mu sync.Mutex
	calls := 0
	sc := gatetest.StartSidecar(t, gatetest.Options{
		Gates: []session.GateConfig{{Name: "default", ActiveLimit: 1, ActiveTimeout: time.Hour, WaitingTimeout: time.Hour}},
		Gate:  func(o *gate.Options) { o.Demo = true },
		Wrap: func(h http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == basePath+"/api/events" {
					mu.Lock()
					calls++
					mu.Unlock()
					http.Error(w, `{"error":{"code":"unavailable","message":"down"}}`, http.StatusServiceUnavailable)
					return
				}
				h.ServeHTTP(w, r)
			})
		},
	})
	if _, err := sc.Waitlist.Join(context.Background(), "default", "holder"); err != nil {
		t.Fatal(err)
	}
	b := newBrowser(t)
	u := b.newUser(t, "visitor")
	u.open(sc.URL + "/")
	u.waitFor("the place although the events fail", placeIs("Your place: 1 of 1")+` && `+countdownJS+` === ''`)
	eventually(t, "the events asked for again", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return calls >= 2
	})
}
