package e2e

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/anteroomhq/anteroom/gate"
	"github.com/anteroomhq/anteroom/session"
)

// A stored event that no longer decodes (edited by hand, or written by a
// newer version before a rollback) holds its gate: the dashboard says so,
// names the event and says how to clear it, and the gate's mode reads
// queue_all, which the mode control shows as in effect beside the
// configured mode it sets; once the event is deleted the note goes.
func TestDashboardShowsAHoldingDamagedEvent(t *testing.T) {
	srv := sidecarWithDamagedEvent(t, `{"phase":"paused"}`)
	ctx := context.Background()

	op := openDashboard(t, newBrowser(t), srv)
	op.waitFor("the hold shown, naming the event", text(`.note`)+`.startsWith('Held: stored event "drop" does not decode')
  && `+text(`.mode`)+` === 'queue_all'`)
	op.waitFor("the mode control: open configured, queue_all in effect", card(`select[name=mode]`)+`.value === 'open'
  && !`+card(`.effect`)+`.hidden && `+text(`.effect`)+` === 'in effect: queue_all'`)
	writePNG(t, screenshotDir(t), "dashboard_damaged.png", fullScreenshot(op))
	if got, want := evalJS[string](op, text(`.note`)), "Delete it (DELETE …/admin/api/gates/default/events/drop) and schedule it again."; !strings.Contains(got, want) {
		t.Errorf("note %q does not say how to clear the hold (%q)", got, want)
	}
	if _, st := joinHTTP(t, srv); st != session.StatusWaiting {
		t.Errorf("a join into a free slot: %s, want waiting (held)", st)
	}

	if err := srv.waitlist.RemoveEvent(ctx, "default", "drop"); err != nil {
		t.Fatal(err)
	}
	op.waitFor("the note gone once the event is deleted", `!/stored event/.test(`+text(`.note`)+`)
  && `+text(`.mode`)+` === 'open' && `+card(`.effect`)+`.hidden`)
	if got := evalJS[string](op, text(`.note`)); strings.Contains(got, "drop") {
		t.Errorf("note %q still names the event", got)
	}
	op.requireNoProblems()
}

// A damaged stored event that reads as started holds nothing
// (session.DamagedEventHolds): the dashboard names it, says it is left out
// and how to clear it, and the gate stays open; once the event is deleted
// the note goes.
func TestDashboardShowsADamagedEventThatHoldsNothing(t *testing.T) {
	srv := sidecarWithDamagedEvent(t, `{"phase":"started"}`)
	ctx := context.Background()

	op := openDashboard(t, newBrowser(t), srv)
	op.waitFor("the damaged event named, not holding", text(`.note`)+`.startsWith('Stored event "drop" does not decode and is left out')
  && `+text(`.mode`)+` === 'open'`)
	writePNG(t, screenshotDir(t), "dashboard_damaged_nohold.png", fullScreenshot(op))
	if got, want := evalJS[string](op, text(`.note`)), "Delete it (DELETE …/admin/api/gates/default/events/drop) to clear this note"; !strings.Contains(got, want) {
		t.Errorf("note %q does not say how to clear it (%q)", got, want)
	}
	if _, st := joinHTTP(t, srv); st != session.StatusActive {
		t.Errorf("a join into a free slot: %s, want active (nothing held)", st)
	}

	if err := srv.waitlist.RemoveEvent(ctx, "default", "drop"); err != nil {
		t.Fatal(err)
	}
	op.waitFor("the note gone once the event is deleted", `!/stored event/i.test(`+text(`.note`)+`)`)
	op.requireNoProblems()
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
