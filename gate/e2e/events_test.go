package e2e

import (
	"context"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/anteroomhq/anteroom/session"
)

// TestWaitingPageCountsDownToAnEvent: while a scheduled event's pre-queue is
// open, the waiting page shows a countdown to its start on the server's
// clock, with the lottery's commitment; at the start the waiter is admitted
// by the draw, without reloading by hand.
func TestWaitingPageCountsDownToAnEvent(t *testing.T) {
	srv := startSidecar(t, session.GateConfig{Name: "default", ActiveLimit: 1, ActiveTimeout: time.Minute, WaitingTimeout: time.Minute})
	now := time.Now()
	ev, err := srv.waitlist.AddEvent(context.Background(), session.ScheduledEvent{Gate: "default", ID: "launch",
		PrequeueAt: now.Add(-time.Second), StartsAt: now.Add(8 * time.Second), Shuffle: true})
	if err != nil {
		t.Fatal(err)
	}
	b := newBrowser(t)
	u := b.newUser(t, "early")
	u.open(srv.url + basePath + "/")
	u.waitFor("the countdown", `!document.getElementById('event').hidden
  && /^The line opens in 0:0[0-9]$/.test(document.getElementById('anteroom-countdown').textContent)`)
	if got := evalJS[string](u, `document.getElementById('anteroom-title').textContent`); got != "You're in the draw" {
		t.Errorf("title %q, want \"You're in the draw\"", got)
	}
	commit := evalJS[string](u, `document.getElementById('event-commitment').textContent`)
	if !regexp.MustCompile(ev.Commitment()).MatchString(commit) {
		t.Errorf("the page shows %q, not the commitment %s", commit, ev.Commitment())
	}
	u.waitFor("waiting in the pre-queue (a slot is free, but the event has not started)",
		`window.anteroom && window.anteroom.state === 'waiting' && Date.now() < `+strconv.FormatInt(ev.StartsAt.UnixMilli(), 10))
	waitAcrossReloads(t, u, "admitted at the start", `!!(window.anteroom && window.anteroom.state === 'active')`)
	u.requireNoProblems()
}
