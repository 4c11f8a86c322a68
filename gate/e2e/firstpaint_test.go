package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/anteroomhq/anteroom/broadcast"
	"github.com/anteroomhq/anteroom/gate"
	"github.com/anteroomhq/anteroom/gate/gatetest"
	"github.com/anteroomhq/anteroom/session"
	"github.com/anteroomhq/anteroom/session/sessiontest"
)

// cardRecorderScript runs before the page's scripts: it records every
// distinct text the card's title and place ever showed, in order, in
// window.__cards ("title | place"), so that a test sees a wrong number that
// was shown only for a moment.
const cardRecorderScript = `(() => {
  const seen = window.__cards = [];
  const read = () => {
    const t = document.getElementById('anteroom-title'), p = document.getElementById('anteroom-place');
    if (!t || !p) return;
    const s = t.textContent + ' | ' + p.textContent;
    if (seen[seen.length - 1] !== s) seen.push(s);
  };
  new MutationObserver(read).observe(document, { subtree: true, childList: true, characterData: true });
})();`

// eventsGate holds GET /api/events until opened, so that a test sees what
// the card shows before that answer.
type eventsGate struct {
	mu     sync.Mutex
	open   chan struct{}
	closed bool
	asked  int
}

func newEventsGate() *eventsGate { return &eventsGate{open: make(chan struct{})} }

func (g *eventsGate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.closed {
		g.closed = true
		close(g.open)
	}
}

func (g *eventsGate) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == basePath+"/api/events" {
			g.mu.Lock()
			g.asked++
			g.mu.Unlock()
			select {
			case <-g.open:
			case <-r.Context().Done():
				return
			case <-time.After(waitTimeout + 10*time.Second): // never hang a broken test
			}
		}
		h.ServeHTTP(w, r)
	})
}

func (g *eventsGate) requests() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.asked
}

// prequeueSidecar: gate "default" with one active holder and one waiter
// from before an event's pre-queue, the pre-queue open (starting in lead)
// with five sessions in it; the sidecar's clock is fake.
func prequeueSidecar(t *testing.T, shuffle bool, lead time.Duration, wrap func(http.Handler) http.Handler) *gatetest.Sidecar {
	t.Helper()
	logs := &sessiontest.LogBuffer{}
	dumpOnFailure(t, "sidecar log", logs)
	sc := gatetest.StartSidecar(t, gatetest.Options{
		Gates:  []session.GateConfig{{Name: "default", ActiveLimit: 1, ActiveTimeout: time.Hour, WaitingTimeout: time.Hour}},
		Hub:    broadcast.Options{Interval: 100 * time.Millisecond},
		Gate:   func(o *gate.Options) { o.Demo = true },
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo})),
		Wrap:   wrap,
	})
	ctx := context.Background()
	w := sc.Waitlist
	for _, id := range []string{"holder", "early"} {
		if _, err := w.Join(ctx, "default", id); err != nil {
			t.Fatal(err)
		}
	}
	now := sc.Clock.Now()
	if _, err := w.AddEvent(ctx, session.ScheduledEvent{Gate: "default", ID: "launch",
		PrequeueAt: now.Add(-time.Second), StartsAt: now.Add(lead), Shuffle: shuffle}); err != nil {
		t.Fatal(err)
	}
	if err := w.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 5; i++ {
		if _, err := w.Join(ctx, "default", fmt.Sprintf("pre%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	return sc
}

// cards returns what the card showed so far (cardRecorderScript).
func cards(u *user) []string {
	u.t.Helper()
	var out []string
	if err := json.Unmarshal([]byte(evalJS[string](u, `JSON.stringify(window.__cards || [])`)), &out); err != nil {
		u.t.Fatal(err)
	}
	return out
}

func withScripts(t *testing.T, u *user, scripts ...string) {
	t.Helper()
	for _, s := range scripts {
		u.call("script", func(ctx context.Context) error {
			_, err := chromedp.Call(ctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: s})
			return err
		})
	}
}

// TestThePlaceComesWithTheJoin: the card shows what is true from the join
// answer alone, while GET /api/events has not answered (held here): in a
// first-come pre-queue the real place, in a shuffled one no place at all
// ("You're in the draw"). When the events answer, the countdown and the
// draw's count are added and nothing shown before changes; at no moment
// does the card show another number (every text it showed is recorded).
func TestThePlaceComesWithTheJoin(t *testing.T) {
	for _, tc := range []struct {
		name    string
		shuffle bool
	}{
		{"lottery", true},
		{"first come first served", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			hold := newEventsGate()
			t.Cleanup(hold.release)
			sc := prequeueSidecar(t, tc.shuffle, 10*time.Minute, hold.wrap)
			b := newBrowser(t)
			pg, overlay := b.newUser(t, "waiting page"), b.newUser(t, "overlay")
			users := []*user{pg, overlay}
			for _, u := range users {
				withScripts(t, u, shiftableClockScript, cardRecorderScript)
			}
			pg.open(sc.URL + basePath + "/")
			overlay.open(sc.URL + "/")
			exact := func(u *user) int64 {
				t.Helper()
				v, err := sc.Waitlist.Status(ctx, "default", evalJS[string](u, `window.anteroom.view.session`))
				if err != nil || v.Place < 1 {
					t.Fatalf("%s: status: %+v, %v", u.name, v, err)
				}
				return v.Place
			}
			for _, u := range users {
				u.waitFor("the card from the join", `window.anteroom && window.anteroom.state === 'waiting' && `+placeJS+` !== ''`)
				if hold.requests() == 0 {
					t.Fatalf("%s: GET /api/events was not asked for", u.name)
				}
				if tc.shuffle {
					if got, want := evalJS[string](u, titleJS), "You're in the draw"; got != want {
						t.Errorf("%s: title %q before the events answered, want %q", u.name, got, want)
					}
					if got, want := evalJS[string](u, placeJS), "Places in line are drawn at random at the start."; got != want {
						t.Errorf("%s: place %q before the events answered, want %q", u.name, got, want)
					}
				} else {
					want := fmt.Sprintf("Your place: %d of %d", exact(u), 8)
					u.waitFor("the real place", placeJS+` === `+strconv.Quote(want))
					if got := evalJS[string](u, titleJS); got != "You are in line" {
						t.Errorf("%s: title %q", u.name, got)
					}
				}
				if c := evalJS[string](u, countdownJS); c != "" {
					t.Errorf("%s: countdown %q before the events answered", u.name, c)
				}
				if text := evalJS[string](u, visibleJS); strings.Contains(text, "Estimated wait") {
					t.Errorf("%s: a wait estimated before the events said whether anyone is let in:\n%s", u.name, text)
				}
			}
			shoot(t, pg, "page-"+slug(tc.name)+"-before-events")
			shoot(t, overlay, "overlay-"+slug(tc.name)+"-before-events")

			hold.release()
			for _, u := range users {
				u.waitFor("the countdown", countdownJS+` !== ''`)
				if tc.shuffle {
					u.waitFor("the draw's count", hintJS+`.includes('In the draw so far: 7.')`)
				}
			}
			for _, u := range users {
				// The total grows as the other browser joins; the place never changes.
				want := regexp.MustCompile(`^You're in the draw \| Places in line are drawn at random at the start\.$`)
				if !tc.shuffle {
					want = regexp.MustCompile(fmt.Sprintf(`^You are in line \| Your place: %d of [78]$`, exact(u)))
				}
				got := cards(u)
				for _, c := range got {
					if !want.MatchString(c) {
						t.Errorf("%s: the card showed %q, want only %s; all it showed:\n  %s", u.name, c, want, strings.Join(got, "\n  "))
					}
				}
				if len(got) == 0 {
					t.Errorf("%s: nothing recorded", u.name)
				}
				u.requireNoProblems()
			}
			shoot(t, pg, "page-"+slug(tc.name)+"-prequeue")
			shoot(t, overlay, "overlay-"+slug(tc.name)+"-prequeue")
		})
	}
}

// TestALateLoaderIsToldThePlacesWereDrawn: a waiter in a lottery's
// pre-queue who loads the page again long after the draw (not watching at
// the start) sees the place the draw gave it with the hint that places
// were drawn at random, and the waiting page shows the seed to check it;
// a waiter from before the pre-queue, whose place was not drawn, gets no
// such hint. Both from the first paint: the card never showed another text.
func TestALateLoaderIsToldThePlacesWereDrawn(t *testing.T) {
	ctx := context.Background()
	const lead = 10 * time.Minute
	sc := prequeueSidecar(t, true, lead, nil)
	w := sc.Waitlist
	b := newBrowser(t)
	late := b.newUser(t, "late loader")
	withScripts(t, late, shiftableClockScript, cardRecorderScript)
	late.open(sc.URL + basePath + "/")
	late.waitFor("in the draw", titleJS+` === "You're in the draw"`)
	id := evalJS[string](late, `window.anteroom.view.session`)
	// Away from the page (another site) across the start.
	late.call("navigate away", func(ctx context.Context) error { return chromedp.Do(ctx, chromedp.Navigate("about:blank")) })
	sc.Clock.Advance(lead)
	if err := w.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	sc.Clock.Advance(5 * time.Minute) // long after the draw
	if evs, _ := w.Events("default"); evs[0].Phase != session.EventStarted {
		t.Fatalf("event %s, want started", evs[0].Phase)
	}
	v, err := w.Status(ctx, "default", id)
	if err != nil || v.Status != session.StatusWaiting {
		t.Fatalf("status of %s: %+v, %v", id, v, err)
	}
	want := fmt.Sprintf("Your place: %d of %d", v.Place, v.Waiting)

	late.open(sc.URL + basePath + "/")
	late.waitFor("the drawn place", placeJS+` === `+strconv.Quote(want))
	late.waitFor("the hint that places were drawn", hintJS+`.includes('Places were drawn at random.')`)
	late.waitFor("the seed on the page", `document.getElementById('event-commitment').textContent.includes('Seed: ')`)
	if got := cards(late); len(got) != 1 || got[0] != "You are in line | "+want {
		t.Errorf("the card showed %q, want only %q", got, "You are in line | "+want)
	}
	if title := evalJS[string](late, titleJS); title != "You are in line" {
		t.Errorf("title %q", title)
	}
	late.requireNoProblems()
	shoot(t, late, "page-lottery-loaded-after-the-draw")

	// The waiter from before the pre-queue: its place was not drawn.
	early := b.newUser(t, "early waiter")
	withScripts(t, early, shiftableClockScript)
	tok, err := sc.Signer.Sign("early")
	if err != nil {
		t.Fatal(err)
	}
	early.call("cookie", func(ctx context.Context) error { return chromedp.Do(ctx, chromedp.Navigate(sc.URL+"/healthz")) })
	evalJS[string](early, `document.cookie = 'anteroom_session=`+tok+`; path=/'`)
	early.open(sc.URL + basePath + "/")
	early.waitFor("its place", `/^Your place: 1 of \d+$/.test(`+placeJS+`)`)
	// Once the events answered (and a moment for the page to use them).
	early.waitFor("the events' answer", `performance.getEntriesByType('resource').some((e) => e.name.includes('/api/events'))`)
	if hint := evalJS[string](early, `new Promise((r) => setTimeout(() => r(`+hintJS+`), 200))`); strings.Contains(hint, "drawn") {
		t.Errorf("early waiter: hint %q, but its place was not drawn", hint)
	}
	early.requireNoProblems()
}
