package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/anteroomhq/anteroom/gate"
	"github.com/anteroomhq/anteroom/session"
)

// The dashboard shows the wait figures of GET gates: p50 and p90 of the
// time from join to admission (hidden while nobody was admitted) and the
// abandon rate.
func TestDashboardShowsWaitFigures(t *testing.T) {
	srv := startSidecarWith(t, session.GateConfig{
		Name: "default", ActiveLimit: 1,
		ActiveTimeout: 5 * time.Minute, WaitingTimeout: 5 * time.Minute,
	}, func(o *gate.Options) { o.AdminToken = dashboardToken })

	op := openDashboard(t, newBrowser(t), srv)
	stat := func(label string) string {
		return `[...document.querySelectorAll('section[data-gate="default"] dl.stats > div')].find((d) => d.querySelector('dt').textContent === '` + label + `')`
	}
	op.waitFor("no wait figures before any admission, the abandon rate at 0", card(`dl.stats`)+` !== null && `+stat("Wait p50")+`.hidden && `+stat("Wait p90")+`.hidden
  && !`+stat("Abandons / min")+`.hidden && `+stat("Abandons / min")+`.querySelector('dd').textContent === '0'`)

	first, st := joinHTTP(t, srv)
	if st != session.StatusActive {
		t.Fatalf("first join: %s, want active", st)
	}
	if _, st := joinHTTP(t, srv); st != session.StatusWaiting {
		t.Fatalf("second join: %s, want waiting", st)
	}
	time.Sleep(1500 * time.Millisecond) // the waiter's time in line
	if err := srv.waitlist.Release(context.Background(), "default", strings.SplitN(first, ".", 2)[0]); err != nil {
		t.Fatal(err)
	}
	// Two admissions: one at once (0 s), one after about 1.5 s.
	op.waitFor("p50 of 0 s and p90 of about 1.5 s shown", `!`+stat("Wait p50")+`.hidden
  && `+stat("Wait p50")+`.querySelector('dd').textContent === '0 s'
  && /^1\.[4-7] s$/.test(`+stat("Wait p90")+`.querySelector('dd').textContent)`)
	writePNG(t, screenshotDir(t), "dashboard-waits.png", fullScreenshot(op))
	op.requireNoProblems()
}
