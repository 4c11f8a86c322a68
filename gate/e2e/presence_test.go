package e2e

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/anteroomhq/anteroom/session"
)

// kill crashes the tabs' renderers (Page.crash) at once, as browsers that
// die or are killed: no pagehide, no leave; the browser drops the pages'
// sockets. The renderer dies before it answers: the calls are not waited
// for beyond a moment.
func kill(users ...*user) {
	var wg sync.WaitGroup
	for _, u := range users {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(u.ctx, 300*time.Millisecond)
			defer cancel()
			_, _ = chromedp.Call(ctx, page.Crash, cdp.Empty{})
		})
	}
	wg.Wait()
}

// waitSockets waits until the hub serves exactly n sockets: the server has
// seen the others close.
func (s *sidecar) waitSockets(t *testing.T, n int64) {
	t.Helper()
	eventually(t, "the hub to serve exactly the sockets of the live tabs", func() bool { return s.hub.Stats().Subscribers == n })
	// The hub counts a socket out just before it ends its presence, in the
	// same goroutine without blocking: give that a moment.
	time.Sleep(200 * time.Millisecond)
}

// Hiding a tab is no departure (issue 10): a waiter whose tab stays hidden
// for twice waiting_timeout sends no leave, keeps its socket and its place.
// Where the browser killed the socket in the background, the waiter asks for
// its status and reconnects on return, and keeps its place too.
func TestHiddenTabKeepsItsPlace(t *testing.T) {
	const waitingTimeout = 3 * time.Second
	srv := startSidecar(t, session.GateConfig{
		Name: "default", ActiveLimit: 1,
		ActiveTimeout: time.Minute, WaitingTimeout: waitingTimeout,
	})
	b := newBrowser(t)
	admitted := b.newUser(t, "admitted")
	admitted.open(srv.url + "/")
	admitted.waitFor("being let in", admittedJS)
	hidden, behind := b.newUser(t, "hidden"), b.newUser(t, "behind")
	hidden.open(srv.url + "/")
	hidden.waitFor("place 1 of 1", placeIs("Your place: 1 of 1"))
	behind.open(srv.url + "/")
	behind.waitFor("place 2 of 2", placeIs("Your place: 2 of 2"))
	hidden.waitFor("place 1 of 2 and its socket open", socketOpenJS+` && `+placeIs("Your place: 1 of 2"))
	hiddenID := evalJS[string](hidden, `window.anteroom.view.session`)
	pos := evalJS[int64](hidden, `window.anteroom.view.position`)
	keeps := func(when string) {
		t.Helper()
		s, ok := srv.session(t, hiddenID)
		if !ok || s.Status != session.StatusWaiting || s.Position != pos {
			t.Fatalf("%s: the hidden waiter's session = %+v (exists %v); want waiting at position %d", when, s, ok, pos)
		}
	}

	// 1. Hidden for twice waiting_timeout (the cron tick runs every second).
	evalJS[int](hidden, setVisibility+`('hidden')`)
	hiddenAt := time.Now()
	time.Sleep(2 * waitingTimeout)
	keeps("hidden for twice waiting_timeout")
	if n := srv.requests(basePath + "/api/leave"); n != 0 {
		t.Errorf("hiding a tab sent %d leave requests; it is no departure", n)
	}
	if n := evalJS[int](hidden, `window.__e2e.sockets.length`); n != 1 {
		t.Errorf("the hidden tab opened %d sockets, want 1: its socket did not stay open", n)
	}
	hidden.waitFor("still place 1 of 2 while hidden", `document.visibilityState === 'hidden' && `+placeIs("Your place: 1 of 2"))
	behind.waitFor("still place 2 of 2", placeIs("Your place: 2 of 2"))
	evalJS[int](hidden, setVisibility+`('visible')`)
	hidden.waitFor("place 1 of 2 when shown again", placeIs("Your place: 1 of 2"))
	t.Logf("hidden for %v with waiting_timeout %v: place kept", time.Since(hiddenAt).Round(100*time.Millisecond), waitingTimeout)

	// 2. Hidden again, and the browser kills the socket in the background
	// and refuses new ones. On return: a status call and a new socket.
	statusBefore := srv.requests(basePath + "/api/status")
	evalJS[int](hidden, setVisibility+`('hidden')`)
	evalJS[int](hidden, `(() => { window.__e2e.blockWS = true; window.__e2e.sockets.forEach((s) => s.close()); return 1; })()`)
	srv.waitSockets(t, 2) // the admitted tab's and the one behind
	opened := evalJS[int](hidden, `window.__e2e.sockets.length`)
	evalJS[int](hidden, `window.__e2e.blockWS = false, 1`)
	evalJS[int](hidden, setVisibility+`('visible')`)
	hidden.waitFor("a new socket after the return", `window.__e2e.sockets.length > `+itoa(opened)+` && `+socketOpenJS)
	eventually(t, "a status call on return", func() bool { return srv.requests(basePath+"/api/status") > statusBefore })
	hidden.waitFor("place 1 of 2 after the return", placeIs("Your place: 1 of 2"))
	keeps("back after the socket was killed")
	if n := srv.requests(basePath + "/api/leave"); n != 0 {
		t.Errorf("%d leave requests; nobody left", n)
	}
	for _, u := range []*user{admitted, hidden, behind} {
		u.requireNoProblems()
	}
}

// The place is the server's exact count, and the hint "some ahead of you
// left" shows only when people ahead left: not for the waiter before the
// one who left.
func TestPlaceIsExactWhenSomeoneAheadLeaves(t *testing.T) {
	srv := startSidecar(t, session.GateConfig{Name: "default", ActiveLimit: 1, ActiveTimeout: time.Minute, WaitingTimeout: time.Minute})
	b := newBrowser(t)
	admitted := b.newUser(t, "admitted")
	admitted.open(srv.url + "/")
	admitted.waitFor("being let in", admittedJS)
	var w [3]*user
	for i, name := range []string{"first", "middle", "last"} {
		w[i] = b.newUser(t, name)
		w[i].open(srv.url + "/")
		w[i].waitFor("its place", placeIs("Your place: "+itoa(i+1)+" of "+itoa(i+1)))
	}
	const hint = `document.getElementById('anteroom-hint').textContent`
	if err := srv.waitlist.Release(context.Background(), "default", evalJS[string](w[1], `window.anteroom.view.session`)); err != nil {
		t.Fatal(err)
	}
	w[2].waitFor("place 2 of 2 with the hint", placeIs("Your place: 2 of 2")+` && `+hint+` === 'Some people ahead of you left the line.'`)
	w[0].waitFor("place 1 of 2 without the hint", placeIs("Your place: 1 of 2")+` && `+hint+` === ''`)
	for _, u := range w {
		u.requireNoProblems()
	}
}

// A browser that dies without a word (killed, crashed: no pagehide, no
// leave) is purged waiting_timeout after its socket closed; one promoted
// after it died never claims its slot, which passes to the next waiter
// after claim_timeout.
func TestKilledBrowserIsPurgedAndItsPromotionTakenBack(t *testing.T) {
	const waitingTimeout, claimTimeout = 3 * time.Second, 2 * time.Second
	srv := startSidecar(t, session.GateConfig{
		Name: "default", ActiveLimit: 1, ActiveTimeout: time.Minute,
		WaitingTimeout: waitingTimeout, ClaimTimeout: claimTimeout,
	})
	b := newBrowser(t)
	admitted := b.newUser(t, "admitted")
	admitted.open(srv.url + "/")
	admitted.waitFor("being let in", admittedJS)
	// In line: dead1 (will be promoted after it died), next, dead2.
	dead1, next, dead2 := b.newUser(t, "dead1"), b.newUser(t, "next"), b.newUser(t, "dead2")
	for i, u := range []*user{dead1, next, dead2} {
		u.open(srv.url + "/")
		u.waitFor("its place and its socket", socketOpenJS+` && `+placeIs("Your place: "+itoa(i+1)+" of "+itoa(i+1)))
	}
	ids := map[*user]string{}
	for _, u := range []*user{admitted, dead1, next, dead2} {
		ids[u] = evalJS[string](u, `window.anteroom.view.session`)
	}
	admitted.waitFor("its socket open", socketOpenJS)
	srv.waitSockets(t, 4)

	killedAt := time.Now()
	kill(dead1, dead2)
	srv.waitSockets(t, 2)

	// The slot frees: dead1 is promoted, unclaimed; after claim_timeout the
	// slot passes to next, whose open socket claims it.
	releasedAt := time.Now()
	if err := srv.waitlist.Release(context.Background(), "default", ids[admitted]); err != nil {
		t.Fatal(err)
	}
	if s, ok := srv.session(t, ids[dead1]); !ok || s.Status != session.StatusActive || s.ClaimDeadline.IsZero() {
		t.Fatalf("dead1 = %+v (exists %v); want promoted and unclaimed", s, ok)
	}
	eventually(t, "next to be let in", func() bool {
		s, ok := srv.session(t, ids[next])
		return ok && s.Status == session.StatusActive
	})
	if since := time.Since(releasedAt); since < claimTimeout {
		t.Errorf("next was let in %v after the slot freed, before dead1's claim_timeout (%v) ran out", since, claimTimeout)
	} else {
		t.Logf("next was let in %v after the slot freed (claim_timeout %v)", since.Round(10*time.Millisecond), claimTimeout)
	}
	if _, ok := srv.session(t, ids[dead1]); ok {
		t.Errorf("dead1's unclaimed promotion was not taken back")
	}
	next.waitFor("being let in without a reload", admittedJS)
	// Its claim is in memory at once, in the row after the next flush.
	eventually(t, "next's claim of its promotion", func() bool {
		s, ok := srv.session(t, ids[next])
		return ok && s.Status == session.StatusActive && s.ClaimDeadline.IsZero()
	})

	// dead2 waited with no sign of life: purged after waiting_timeout.
	if _, ok := srv.session(t, ids[dead2]); !ok && time.Since(killedAt) < waitingTimeout {
		t.Fatalf("dead2 was purged before waiting_timeout ran out")
	}
	eventually(t, "dead2 to be purged", func() bool { _, ok := srv.session(t, ids[dead2]); return !ok })
	if since := time.Since(killedAt); since < waitingTimeout {
		t.Errorf("dead2 was purged %v after it died, before waiting_timeout (%v)", since, waitingTimeout)
	} else {
		t.Logf("dead2 was purged %v after it died (waiting_timeout %v)", since.Round(10*time.Millisecond), waitingTimeout)
	}
	if n := srv.requests(basePath + "/api/leave"); n != 0 {
		t.Errorf("%d leave requests: the killed tabs were not killed silently", n)
	}
	// The row is gone from the store when the purge commits; the gate's
	// view follows once the commit listener has run (a reader of the store
	// is no caller of that commit, so it may see the row gone first).
	eventually(t, "the global view to show next active and nobody waiting", func() bool {
		g, err := srv.waitlist.Global("default")
		return err == nil && g.Active == 1 && g.Waiting == 0
	})
	next.requireNoProblems()
}

// With release_on_disconnect, closing the only tab of an active session
// frees its slot after the grace: the next waiter is let in within the
// grace plus a second, without any release or leave request.
func TestReleaseOnDisconnectAdmitsTheNextWaiter(t *testing.T) {
	const grace = time.Second
	srv := startSidecar(t, session.GateConfig{
		Name: "default", ActiveLimit: 1, ActiveTimeout: time.Minute, WaitingTimeout: time.Minute,
		ClaimTimeout: time.Minute, ReleaseOnDisconnect: grace,
	})
	b := newBrowser(t)
	admitted, waiter := b.newUser(t, "admitted"), b.newUser(t, "waiter")
	admitted.open(srv.url + "/")
	admitted.waitFor("being let in, its socket open", admittedJS+` && `+socketOpenJS)
	waiter.open(srv.url + "/")
	waiter.waitFor("place 1 of 1", placeIs("Your place: 1 of 1"))
	waiterID := evalJS[string](waiter, `window.anteroom.view.session`)
	// Only the snippet's socket keeps the admitted session: the host app's
	// requests (initScript) stop.
	evalJS[int](admitted, `(clearInterval(window.__e2e.keepalive), 1)`)
	time.Sleep(100 * time.Millisecond) // let a request in flight land

	closedAt := time.Now()
	admitted.close()
	eventually(t, "the waiter to be let in", func() bool {
		s, ok := srv.session(t, waiterID)
		return ok && s.Status == session.StatusActive
	})
	took := time.Since(closedAt)
	if took < grace {
		t.Errorf("the waiter was let in %v after the tab closed, inside the grace (%v)", took, grace)
	}
	if took > grace+time.Second {
		t.Errorf("the waiter was let in %v after the tab closed, later than the grace (%v) plus a second", took, grace)
	}
	t.Logf("the waiter was let in %v after the only tab of the active session closed (grace %v)", took.Round(10*time.Millisecond), grace)
	waiter.waitFor("being let in without a reload", admittedJS)
	for _, path := range []string{"/api/release", "/api/leave"} {
		if n := srv.requests(basePath + path); n != 0 {
			t.Errorf("%d requests to %s: the slot must be freed by the disconnect alone", n, path)
		}
	}
	waiter.requireNoProblems()
}

// placeCase is one input of session.GlobalView.EstimatePlace and its result.
type placeCase struct {
	G    session.GlobalView `json:"g"`
	P    int64              `json:"p"`
	Want int64              `json:"want"`
}

// placeCases are the table of session's TestEstimatePlace, consistent
// bucket layouts as the server builds them over random lines, and random
// (inconsistent) layouts: the snippet must agree on all of them.
func placeCases() []placeCase {
	var cases []placeCase
	add := func(g session.GlobalView, positions ...int64) {
		for _, p := range positions {
			cases = append(cases, placeCase{G: g, P: p, Want: g.EstimatePlace(p)})
		}
	}
	// The table of session/rules_test.go: waiters at 10, 11, 14, 20, 21, 22.
	for _, b := range [][]int64{nil, {0, 3, 10, 3}, {0, 1, 1, 1, 4, 1, 10, 1, 11, 1, 12, 1}, {0, 6}} {
		add(session.GlobalView{FirstWaitingPosition: 10, LastWaitingPosition: 22, Waiting: 6, Buckets: b}, 9, 10, 11, 14, 20, 21, 22, 23)
	}
	rng := rand.New(rand.NewPCG(10, 2026))
	// Lines of waiters with gaps (people who left), bucketed as the server
	// does: every bucket starts at a waiter, counts up to the next start.
	for range 150 {
		first := rng.Int64N(1_000_000_000)
		var positions []int64
		for p, n := first, 1+rng.IntN(400); len(positions) < n; p += 1 + rng.Int64N(1+rng.Int64N(50)) {
			positions = append(positions, p)
		}
		last := positions[len(positions)-1]
		var buckets []int64
		if rng.IntN(10) > 0 {
			size := 1 + rng.IntN(40)
			for i := 0; i < len(positions); {
				n := min(len(positions)-i, max(1, size+rng.IntN(size+1)-size/2))
				buckets = append(buckets, positions[i]-first, int64(n))
				i += n
			}
		}
		g := session.GlobalView{FirstWaitingPosition: first, LastWaitingPosition: last, Waiting: int64(len(positions)), Buckets: buckets}
		for range 12 {
			add(g, positions[rng.IntN(len(positions))])
		}
		add(g, first-1, first, last, last+1, first+rng.Int64N(last-first+1))
	}
	// Anything: the arithmetic must agree on malformed views too.
	for range 300 {
		g := session.GlobalView{FirstWaitingPosition: rng.Int64N(40) - 5, Waiting: rng.Int64N(30) - 2}
		g.LastWaitingPosition = g.FirstWaitingPosition + rng.Int64N(60) - 5
		for range rng.IntN(13) {
			g.Buckets = append(g.Buckets, rng.Int64N(70)-5)
		}
		for range 5 {
			add(g, g.FirstWaitingPosition+rng.Int64N(70)-5)
		}
	}
	return cases
}

// The snippet's place arithmetic (window.anteroom.estimatePlace, what it
// shows between the server's exact places) equals
// session.GlobalView.EstimatePlace on every case.
func TestSnippetPlaceArithmeticEqualsTheServers(t *testing.T) {
	cases := placeCases()
	in, err := json.Marshal(cases)
	if err != nil {
		t.Fatal(err)
	}
	f := startFakeSidecar(t)
	b := newBrowser(t)
	u := b.newUser(t, "arithmetic")
	u.open(f.url + "/page")
	got := evalJS[[]int64](u, `(`+string(in)+`).map((c) => window.anteroom.estimatePlace(c.g, c.p))`)
	if len(got) != len(cases) {
		t.Fatalf("%d results for %d cases", len(got), len(cases))
	}
	bad := 0
	for i, c := range cases {
		if got[i] != c.Want {
			if bad++; bad <= 10 {
				t.Errorf("estimatePlace(%+v, %d) = %d in the snippet, %d in session", c.G, c.P, got[i], c.Want)
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d cases differ", bad, len(cases))
	}
	t.Logf("%d cases agree", len(cases))
}

func itoa(i int) string { return strconv.Itoa(i) }

// A waiter whose browser refuses websockets polls the status as told by
// Retry-After, which stays under a quarter of claim_timeout: promoted, it
// claims its slot by its next poll, well before the claim window ends
// (with the usual 5s it would lose it).
func TestPollingWaiterClaimsInTime(t *testing.T) {
	const claimTimeout = 4 * time.Second
	srv := startSidecar(t, session.GateConfig{
		Name: "default", ActiveLimit: 1, ActiveTimeout: time.Minute,
		WaitingTimeout: time.Minute, ClaimTimeout: claimTimeout,
	})
	b := newBrowser(t)
	admitted, poller := b.newUser(t, "admitted"), b.newUser(t, "poller")
	admitted.open(srv.url + "/")
	admitted.waitFor("being let in", admittedJS)
	poller.open(srv.url + "/")
	poller.waitFor("place 1 of 1", placeIs("Your place: 1 of 1"))
	// Behind it, one who would get the slot if the poller lost it.
	behind := b.newUser(t, "behind")
	behind.open(srv.url + "/")
	behind.waitFor("place 2 of 2", placeIs("Your place: 2 of 2"))
	evalJS[int](poller, `(() => { window.__e2e.blockWS = true; window.__e2e.sockets.forEach((s) => s.close()); return 1; })()`)
	srv.waitSockets(t, 2) // the admitted tab's and the one behind
	id := evalJS[string](poller, `window.anteroom.view.session`)
	pos := evalJS[int64](poller, `window.anteroom.view.position`)
	polls := srv.requests(basePath + "/api/status")
	eventually(t, "the poller to poll", func() bool { return srv.requests(basePath+"/api/status") >= polls+2 })

	if err := srv.waitlist.Release(context.Background(), "default", evalJS[string](admitted, `window.anteroom.view.session`)); err != nil {
		t.Fatal(err)
	}
	poller.waitFor("being let in by a poll", admittedJS)
	eventually(t, "the poller's claim", func() bool {
		s, ok := srv.session(t, id)
		return ok && s.Status == session.StatusActive && s.ClaimDeadline.IsZero()
	})
	if s, _ := srv.session(t, id); s.Position != pos {
		t.Errorf("the poller is at position %d, want %d: it lost its promotion and joined again", s.Position, pos)
	}
	behind.waitFor("still waiting, now first", placeIs("Your place: 1 of 1"))
	if n := evalJS[int](poller, `window.__e2e.sockets.filter((s) => s.readyState === 1).length`); n != 0 {
		t.Fatalf("the poller has %d open sockets: the claim proves nothing about polling", n)
	}
	poller.requireNoProblems()
}
