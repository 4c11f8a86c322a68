package e2e

import (
	"context"
	"net/url"
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
