package e2e

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/anteroomhq/anteroom/session"
)

// laneCase is one input of session.GlobalView.EstimatePlaceIn and
// ServedBefore, and their results.
type laneCase struct {
	G          session.GlobalView `json:"g"`
	Lane       string             `json:"lane"`
	P          int64              `json:"p"`
	Place      int64              `json:"place"`
	WantPlace  int64              `json:"wantPlace"`
	WantServed int64              `json:"wantServed"`
}

// randomLane is a line of waiters from first, with gaps, bucketed as the
// server does (or not at all).
func randomLane(rng *rand.Rand, first int64) (positions, buckets []int64) {
	for p, n := first, 1+rng.IntN(200); len(positions) < n; p += 1 + rng.Int64N(1+rng.Int64N(30)) {
		positions = append(positions, p)
	}
	if rng.IntN(8) > 0 {
		size := 1 + rng.IntN(30)
		for i := 0; i < len(positions); {
			n := min(len(positions)-i, max(1, size+rng.IntN(size+1)-size/2))
			buckets = append(buckets, positions[i]-first, int64(n))
			i += n
		}
	}
	return positions, buckets
}

func laneCases() []laneCase {
	rng := rand.New(rand.NewPCG(13, 2026))
	var cases []laneCase
	for range 120 {
		first := rng.Int64N(1_000_000)
		normal, nb := randomLane(rng, first)
		g := session.GlobalView{FirstWaitingPosition: first, LastWaitingPosition: normal[len(normal)-1], Waiting: int64(len(normal)), Buckets: nb}
		var prio []int64
		if rng.IntN(5) > 0 {
			// The priority lane joined later: positions above the normal
			// lane's first (some interleave with it, as they do).
			var pb []int64
			prio, pb = randomLane(rng, first+1+rng.Int64N(normal[len(normal)-1]-first+50))
			g.Priority = &session.LaneView{FirstWaitingPosition: prio[0], LastWaitingPosition: prio[len(prio)-1], Waiting: int64(len(prio)), Buckets: pb}
		}
		add := func(lane session.Lane, p int64) {
			place := 1 + rng.Int64N(300)
			cases = append(cases, laneCase{G: g, Lane: lane.String(), P: p, Place: place,
				WantPlace: g.EstimatePlaceIn(lane, p), WantServed: g.ServedBefore(lane, place)})
		}
		for range 8 {
			add(session.LaneNormal, normal[rng.IntN(len(normal))])
			if len(prio) > 0 {
				add(session.LanePriority, prio[rng.IntN(len(prio))])
			}
		}
		add(session.LanePriority, first-1)
		add(session.LanePriority, normal[0])
		add(session.LaneNormal, normal[len(normal)-1]+1)
	}
	return cases
}

// The snippet's place and wait arithmetic in both lanes
// (window.anteroom.estimatePlaceIn and servedBefore) equals
// session.GlobalView.EstimatePlaceIn and ServedBefore on every case.
func TestSnippetPlaceArithmeticInBothLanes(t *testing.T) {
	cases := laneCases()
	in, err := json.Marshal(cases)
	if err != nil {
		t.Fatal(err)
	}
	f := startFakeSidecar(t)
	b := newBrowser(t)
	u := b.newUser(t, "lanes")
	u.open(f.url + "/page")
	got := evalJS[[][2]int64](u, `(`+string(in)+`).map((c) => [
		window.anteroom.estimatePlaceIn(c.g, c.lane, c.p), window.anteroom.servedBefore(c.g, c.lane, c.place)])`)
	if len(got) != len(cases) {
		t.Fatalf("%d results for %d cases", len(got), len(cases))
	}
	bad, prio := 0, 0
	for i, c := range cases {
		if c.Lane == "priority" && c.WantPlace > 0 {
			prio++
		}
		if got[i][0] != c.WantPlace || got[i][1] != c.WantServed {
			if bad++; bad <= 10 {
				t.Errorf("lane %s, position %d, place %d: snippet (%d, %d), session (%d, %d); view %+v priority %+v",
					c.Lane, c.P, c.Place, got[i][0], got[i][1], c.WantPlace, c.WantServed, c.G, c.G.Priority)
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d cases differ", bad, len(cases))
	}
	if prio < 100 {
		t.Errorf("only %d cases in the priority lane", prio)
	}
	t.Logf("%d cases agree (%d in the priority lane)", len(cases), prio)
}

// A visitor who arrives with ?anteroom_code= waits in the priority lane and
// is let in before an earlier visitor of the normal lane, whose place never
// rises; a wrong code still joins, in the normal lane, and says so.
func TestPriorityCodeInTheBrowser(t *testing.T) {
	srv := startSidecar(t, session.GateConfig{
		Name: "default", ActiveLimit: 1,
		ActiveTimeout: time.Minute, WaitingTimeout: time.Minute,
	})
	if _, err := srv.waitlist.CreateCode(context.Background(), "default", "vip-code-1", "e2e", 1, time.Hour); err != nil {
		t.Fatal(err)
	}
	b := newBrowser(t)
	first := b.newUser(t, "first")
	first.open(srv.url + "/")
	first.waitFor("let in at once", admittedJS)

	normal := b.newUser(t, "normal")
	normal.open(srv.url + "/")
	normal.waitFor("place 1 of 1", placeIs("Your place: 1 of 1"))

	vip := b.newUser(t, "vip")
	vip.open(srv.url + "/?anteroom_code=vip-code-1")
	vip.waitFor("the priority lane, place 1 of 1", `window.anteroom.state === 'waiting' && window.anteroom.view.lane === 'priority' && `+placeIs("Your place: 1 of 1"))
	vip.waitFor("the code gone from the address bar", `!location.search.includes('anteroom_code') && window.anteroom.codeError === ''`)
	vip.waitFor("the lane said", `document.getElementById('anteroom-hint').textContent.includes('Priority line')`)

	late := b.newUser(t, "late")
	late.open(srv.url + "/?anteroom_code=wrong-code")
	late.waitFor("joined all the same, in the normal lane", `window.anteroom.state === 'waiting' && window.anteroom.codeError === 'code_unknown' && !window.anteroom.view.lane`)
	late.waitFor("place 2 of 2", placeIs("Your place: 2 of 2"))
	late.waitFor("the code's failure said", `document.getElementById('anteroom-hint').textContent.includes('could not be used')`)
	normal.waitFor("still place 1 (of 2): the priority join did not move it", placeIs("Your place: 1 of 2"))

	// The slot goes to the priority lane first.
	evalJS[bool](first, `window.anteroom.release()`)
	vip.waitFor("let in first", `window.anteroom.state === 'active'`)
	normal.waitFor("still waiting, place 1", `window.anteroom.state === 'waiting' && `+placeIs("Your place: 1 of 2"))
	for _, u := range []*user{normal, vip, late} {
		u.requireNoProblems()
	}
}
