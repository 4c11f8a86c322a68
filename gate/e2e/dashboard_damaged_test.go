package e2e

import (
	"context"
	"database/sql"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/anteroomhq/anteroom/gate"
	"github.com/anteroomhq/anteroom/session"
)

// A stored event that no longer decodes (edited by hand, or written by a
// newer version before a rollback) is shown on the dashboard, named, with
// how to clear it. One that may be an open pre-queue holds its gate: the
// mode reads queue_all, which the mode control shows as in effect beside
// the configured mode it sets, and a join waits. One that reads as started
// holds nothing (session.DamagedEventHolds): it is left out and the gate
// stays open. Once the event is deleted the note, and the hold, go.
func TestDashboardShowsADamagedEvent(t *testing.T) {
	for _, tc := range []struct {
		name, stored, png string
		note, clear       string // how the note begins, what it says to clear it
		mode, inEffect    string // the badge's mode, the mode control's words ("" hidden)
		join              session.Status
	}{
		{"holding", `{"phase":"paused"}`, "dashboard_damaged.png",
			`Held: stored event "drop" does not decode`, "Delete it (DELETE …/admin/api/gates/default/events/drop) and schedule it again.",
			"queue_all", "in effect: queue_all", session.StatusWaiting},
		{"holding nothing", `{"phase":"started"}`, "dashboard_damaged_nohold.png",
			`Stored event "drop" does not decode and is left out`, "Delete it (DELETE …/admin/api/gates/default/events/drop) to clear this note",
			"open", "", session.StatusActive},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := sidecarWithDamagedEvent(t, tc.stored)
			op := openDashboard(t, newBrowser(t), srv)
			op.waitFor("the damaged event named", text(`.note`)+`.startsWith(`+strconv.Quote(tc.note)+`)
  && `+text(`.mode`)+` === `+strconv.Quote(tc.mode))
			writePNG(t, screenshotDir(t), tc.png, fullScreenshot(op))
			if got := evalJS[string](op, text(`.note`)); !strings.Contains(got, tc.clear) {
				t.Errorf("note %q does not say how to clear it (%q)", got, tc.clear)
			}
			if got, want := evalJS[string](op, card(`select[name=mode]`)+`.value`), "open"; got != want {
				t.Errorf("the mode control shows %q, want the configured %q", got, want)
			}
			if got := evalJS[string](op, `(`+card(`.effect`)+`.hidden ? '' : `+text(`.effect`)+`)`); got != tc.inEffect {
				t.Errorf("the mode control says %q beside the selector, want %q", got, tc.inEffect)
			}
			if _, st := joinHTTP(t, srv); st != tc.join {
				t.Errorf("a join into a free slot: %s, want %s", st, tc.join)
			}

			if err := srv.waitlist.RemoveEvent(context.Background(), "default", "drop"); err != nil {
				t.Fatal(err)
			}
			op.waitFor("the note and the hold gone once the event is deleted", `!/stored event/i.test(`+text(`.note`)+`)
  && `+text(`.mode`)+` === 'open' && `+card(`.effect`)+`.hidden`)
			if got := evalJS[string](op, text(`.note`)); strings.Contains(got, "drop") {
				t.Errorf("note %q still names the event", got)
			}
			op.requireNoProblems()
		})
	}
}

// sidecarWithDamagedEvent starts a sidecar whose gate "default" (limit 1)
// has a stored event "drop" whose row a hand edit replaced with stored, and
// a valid event "later" added after the edit: memory reads the gate's
// events at an admin change of them.
func sidecarWithDamagedEvent(t *testing.T, stored string) *sidecar {
	t.Helper()
	srv := startSidecarWith(t, session.GateConfig{
		Name: "default", ActiveLimit: 1,
		ActiveTimeout: 5 * time.Minute, WaitingTimeout: 5 * time.Minute,
	}, func(o *gate.Options) { o.AdminToken = dashboardToken })
	ctx := context.Background()
	now := time.Now()
	drop := session.ScheduledEvent{Gate: "default", ID: "drop", PrequeueAt: now.Add(time.Hour), StartsAt: now.Add(2 * time.Hour), Shuffle: true}
	if _, err := srv.waitlist.AddEvent(ctx, drop); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", srv.store.Path()+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	res, err := db.Exec(`UPDATE meta SET value = ? WHERE key = 'gate_events/default/drop'`, stored)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		t.Fatalf("damaged %d rows, want 1", n)
	}
	later := drop
	later.ID, later.PrequeueAt, later.StartsAt = "later", now.Add(3*time.Hour), now.Add(4*time.Hour)
	if _, err := srv.waitlist.AddEvent(ctx, later); err != nil {
		t.Fatal(err)
	}
	return srv
}
