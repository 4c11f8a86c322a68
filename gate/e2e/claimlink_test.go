package e2e

import (
	"context"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"

	"github.com/anteroomhq/anteroom/gate"
	"github.com/anteroomhq/anteroom/gate/token"
	"github.com/anteroomhq/anteroom/session"
)

// TestClaimLinkInTheBrowser: a called-back person opens the claim link of
// the promoted webhook in a real browser. Its GET shows the claim page
// (claiming nothing, as a link scanner's fetch must not), and the page
// never posts by itself: the person's click posts the ticket once, which
// claims the slot, sets the cookie and lands on the link's next with no
// Referer; without JavaScript the button's form does the same. A used
// link is refused in a sentence. Screenshots of the page, desktop and
// mobile, and of the refusal.
func TestClaimLinkInTheBrowser(t *testing.T) {
	var signer *token.Signer
	srv := startSidecarWith(t, session.GateConfig{Name: "default", ActiveLimit: 1, ActiveTimeout: 5 * time.Minute,
		WaitingTimeout: 5 * time.Minute, ClaimTimeout: time.Minute, NotifyClaimTimeout: 15 * time.Minute},
		func(o *gate.Options) { signer = o.Signer })
	ctx := context.Background()
	b := newBrowser(t)
	dir := screenshotDir(t)

	// promote makes id a called-back waiter behind holder and releases
	// holder; it returns id's claim link, leading to /healthz?landed=<id>.
	promote := func(holder, id string) string {
		t.Helper()
		if _, err := srv.waitlist.Join(ctx, "default", id); err != nil {
			t.Fatal(err)
		}
		if _, err := srv.waitlist.SetNotify(ctx, "default", id, true); err != nil {
			t.Fatal(err)
		}
		if err := srv.waitlist.Release(ctx, "default", holder); err != nil {
			t.Fatal(err)
		}
		s, ok := srv.session(t, id)
		if !ok || s.Status != session.StatusActive || s.ClaimDeadline.IsZero() {
			t.Fatalf("%s = %+v (exists %v), want promoted and unclaimed", id, s, ok)
		}
		link, err := gate.BuildClaimURL(signer, srv.url, basePath, "default", id, s.ClaimDeadline)
		if err != nil {
			t.Fatal(err)
		}
		return link + "&next=" + url.QueryEscape("/healthz?landed="+id)
	}
	unclaimed := func(id string) bool {
		s, ok := srv.session(t, id)
		return ok && s.Status == session.StatusActive && !s.ClaimDeadline.IsZero()
	}
	claimed := func(id string) bool {
		s, ok := srv.session(t, id)
		return ok && s.Status == session.StatusActive && s.ClaimDeadline.IsZero()
	}
	if _, err := srv.waitlist.Join(ctx, "default", "in"); err != nil {
		t.Fatal(err)
	}

	// Without JavaScript: the page stays, claims nothing; its button claims.
	link := promote("in", "b")
	noJS := b.newUser(t, "no-js")
	noJS.call("disable scripts", func(ctx context.Context) error {
		_, err := chromedp.Call(ctx, emulation.SetScriptExecutionDisabled, emulation.SetScriptExecutionDisabledParams{Value: true})
		return err
	})
	noJS.open(link)
	noJS.waitVisible("claim-button")
	writePNG(t, dir, "claim-page.png", noJS.screenshot())
	noJS.call("mobile viewport", func(ctx context.Context) error {
		return chromedp.Do(ctx, chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2), chromedp.EmulateMobile))
	})
	writePNG(t, dir, "claim-page-mobile.png", noJS.screenshot())
	if !unclaimed("b") {
		t.Fatalf("showing the claim page claimed the slot")
	}
	claimsBefore := srv.requests(basePath + "/claim")
	noJS.call("click the button", func(ctx context.Context) error {
		return chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#claim-button")))
	})
	eventually(t, "the button's claim", func() bool { return claimed("b") })
	if n := srv.requests(basePath+"/claim") - claimsBefore; n != 1 {
		t.Errorf("%d claim requests after the click, want 1", n)
	}
	waitAcrossReloads(t, noJS, "landing on next", `location.pathname === '/healthz' && location.search === '?landed=b'`)
	if ref := evalJS[string](noJS, `document.referrer`); ref != "" {
		t.Errorf("the page the link leads to got Referer %q, want none", ref)
	}
	noJS.requireNoProblems()

	// With JavaScript: the page claims nothing by itself (a scanner that
	// runs pages claims nothing either); the person's click, even a double
	// one, posts once.
	link = promote("b", "c")
	person := b.newUser(t, "person")
	claimsBefore = srv.requests(basePath + "/claim")
	person.open(link)
	person.waitVisible("claim-button")
	// The page's script has run (its submit handler is in place) and had
	// every chance to post: it must not have.
	if got := evalJS[string](person, `new Promise((done) => setTimeout(() => done(document.readyState), 300))`); got != "complete" {
		t.Fatalf("document.readyState = %q", got)
	}
	if !unclaimed("c") {
		t.Fatalf("the page claimed the slot without the person's click")
	}
	if n := srv.requests(basePath+"/claim") - claimsBefore; n != 1 {
		t.Errorf("%d requests of the claim path before the click, want 1 (the page's GET)", n)
	}
	person.call("double-click the button", func(ctx context.Context) error {
		return chromedp.Do(ctx, chromedp.DoubleClick(chromedp.CSS("#claim-button")))
	})
	waitAcrossReloads(t, person, "landing on next", `location.pathname === '/healthz' && location.search === '?landed=c'`)
	if !claimed("c") {
		t.Fatalf("the click did not claim the slot")
	}
	if n := srv.requests(basePath+"/claim") - claimsBefore; n != 2 {
		t.Errorf("%d requests of the claim path, want 2 (the page's GET, one POST)", n)
	}
	if ref := evalJS[string](person, `document.referrer`); ref != "" {
		t.Errorf("the page the link leads to got Referer %q, want none", ref)
	}
	// The browser holds the session now: its status names c.
	if got := evalJS[string](person, `fetch('`+basePath+`/api/status?gate=default', {credentials: 'same-origin'}).then((r) => r.json()).then((v) => v.session + ':' + v.status)`); got != "c:active" {
		t.Errorf("status in the browser = %q, want c:active", got)
	}
	// Back to the claim page: it shows again, and its POST is refused in a
	// sentence on the page.
	person.open(link)
	person.waitVisible("claim-button")
	person.call("click the used link's button", func(ctx context.Context) error {
		return chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#claim-button")))
	})
	waitAcrossReloads(t, person, "the refusal", `document.getElementById('claim-text').textContent.includes('used already')`)
	writePNG(t, dir, "claim-page-used.png", person.screenshot())
	person.requireNoProblems()
}

// TestClaimLinkRefusedInTheBrowser: a called-back person opens the claim
// link of their mail too late, or a link their mail client mangled. The
// browser (its own Accept, as it navigates) shows a page in the claim
// page's look under the same status as the JSON error: what happened in
// a sentence, and a button on (to the waiting page, or to the link's
// next), which leaves without a Referer and without the ticket. A fetch()
// of the same link still gets the wire contract's JSON. Screenshots of
// the expired link's page, desktop, mobile and dark, and of the mangled
// one's.
func TestClaimLinkRefusedInTheBrowser(t *testing.T) {
	secret := []byte(strings.Repeat("e", token.MinSecretLength))
	signer, err := token.NewSigner(secret)
	if err != nil {
		t.Fatal(err)
	}
	srv := startSidecarWith(t, session.GateConfig{Name: "default", ActiveLimit: 1, ActiveTimeout: 5 * time.Minute,
		WaitingTimeout: 5 * time.Minute, ClaimTimeout: time.Minute, NotifyClaimTimeout: 15 * time.Minute},
		func(o *gate.Options) { o.Signer = signer })
	b := newBrowser(t)
	dir := screenshotDir(t)

	// The link of a promotion whose claim window closed a minute ago,
	// signed under the sidecar's secret when it was mailed.
	mailed, err := token.NewSignerWithOptions(secret, token.Options{Now: func() time.Time { return time.Now().Add(-time.Hour) }})
	if err != nil {
		t.Fatal(err)
	}
	expired, err := gate.BuildClaimURL(mailed, srv.url, basePath, "default", "b", time.Now().Add(-time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	ticket := func(link string) string {
		u, err := url.Parse(link)
		if err != nil {
			t.Fatal(err)
		}
		return u.Query().Get("ticket")
	}(expired)

	person := b.newUser(t, "person")
	person.open(expired)
	person.waitVisible("claim-next")
	if got := evalJS[string](person, `document.title`); got != "Link expired" {
		t.Errorf("title %q, want Link expired", got)
	}
	text := evalJS[string](person, `document.body.innerText`)
	for _, want := range []string{"This link has expired", "The time to use it has run out", "Join the line again to get a new place.", "Join the line again"} {
		if !strings.Contains(text, want) {
			t.Errorf("the page does not say %q; it says:\n%s", want, text)
		}
	}
	if html := evalJS[string](person, `document.documentElement.outerHTML`); strings.Contains(html, ticket) || strings.Contains(html, "ticket") || strings.Contains(html, `"error"`) {
		t.Errorf("the page holds the ticket or the JSON error:\n%s", html)
	}
	if got := evalJS[string](person, `document.getElementById('claim-next').href`); got != srv.url+basePath+"/?gate=default" {
		t.Errorf("the button leads to %q, want the waiting page", got)
	}
	// Shown as the claim page's card: centred, its button the claim
	// page's, nothing spilling out of the viewport.
	layout := func() string {
		return evalJS[string](person, `(() => {
  const card = document.getElementById('claim-card').getBoundingClientRect();
  const a = getComputedStyle(document.getElementById('claim-next'));
  const problems = [];
  if (document.documentElement.scrollWidth > innerWidth) problems.push('scrolls sideways: ' + document.documentElement.scrollWidth + ' > ' + innerWidth);
  if (Math.abs(card.left + card.width / 2 - innerWidth / 2) > 2) problems.push('card not centred');
  if (card.bottom > innerHeight) problems.push('card below the fold');
  if (a.backgroundColor !== 'rgb(37, 99, 235)' || a.textDecorationLine !== 'none') problems.push('button ' + a.backgroundColor + ' ' + a.textDecorationLine);
  const gap = document.getElementById('claim-next').getBoundingClientRect().top - document.getElementById('claim-advice').getBoundingClientRect().bottom;
  if (gap < 12) problems.push('the button crowds the text: ' + gap + 'px');
  return problems.join('; ');
})()`)
	}
	if p := layout(); p != "" {
		t.Errorf("desktop layout: %s", p)
	}
	writePNG(t, dir, "claim-refused-expired.png", person.screenshot())
	person.call("mobile viewport", func(ctx context.Context) error {
		return chromedp.Do(ctx, chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2), chromedp.EmulateMobile))
	})
	if p := layout(); p != "" {
		t.Errorf("mobile layout: %s", p)
	}
	writePNG(t, dir, "claim-refused-expired-mobile.png", person.screenshot())
	person.call("dark mode", func(ctx context.Context) error {
		_, err := chromedp.Call(ctx, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
			Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: "dark"}},
		})
		return err
	})
	writePNG(t, dir, "claim-refused-expired-mobile-dark.png", person.screenshot())

	// The same link fetched by script (an API client) is the JSON error.
	if got := evalJS[string](person, `fetch(`+strconv.Quote(expired)+`).then((r) => r.status + ' ' + r.headers.get('content-type') + ' ' + r.headers.get('referrer-policy'))`); got != "401 application/json no-referrer" {
		t.Errorf("fetch() of the link: %q, want the JSON error", got)
	}

	// The button: on to the waiting page, which lets the person in line
	// again, with no Referer (the page's URL holds the ticket).
	person.call("click the button", func(ctx context.Context) error {
		return chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#claim-next")))
	})
	waitAcrossReloads(t, person, "the waiting page", `location.pathname === '`+basePath+`/' && !!window.anteroom`)
	if ref := evalJS[string](person, `document.referrer`); ref != "" {
		t.Errorf("the waiting page got Referer %q, want none", ref)
	}
	person.requireNoProblems()

	// A link a mail client cut short, with a next: not valid, and the
	// button leads to next.
	mangled := b.newUser(t, "mangled")
	valid, err := gate.BuildClaimURL(signer, srv.url, basePath, "default", "c", time.Now().Add(15*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	mangled.open(valid[:len(valid)-12] + "&next=" + url.QueryEscape("/healthz?from=claim"))
	mangled.waitVisible("claim-next")
	text = evalJS[string](mangled, `document.body.innerText`)
	for _, want := range []string{"This link is not valid", "cut short or changed", "Continue to the site"} {
		if !strings.Contains(text, want) {
			t.Errorf("the page does not say %q; it says:\n%s", want, text)
		}
	}
	if got := evalJS[string](mangled, `document.getElementById('claim-next').href`); got != srv.url+"/healthz?from=claim" {
		t.Errorf("the button leads to %q, want the link's next", got)
	}
	writePNG(t, dir, "claim-refused-invalid.png", mangled.screenshot())
	mangled.requireNoProblems()
}
