package gate_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/gate/gatetest"
	"github.com/anteroomhq/anteroom/gate/guard"
	"github.com/anteroomhq/anteroom/gate/wire"
	"github.com/anteroomhq/anteroom/session"
)

type joined struct {
	session.SessionView
	Token string `json:"token"`
}

func httpDo(t *testing.T, method, url, bearer, body string) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	require.NoError(t, err)
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, b
}

func publicEvents(t *testing.T, sc *gatetest.Sidecar, gateName string) wire.EventsView {
	t.Helper()
	code, body := httpDo(t, http.MethodGet, sc.URL+base+"/api/events?gate="+gateName, "", "")
	require.Equal(t, http.StatusOK, code, string(body))
	var v wire.EventsView
	require.NoError(t, json.Unmarshal(body, &v))
	return v
}

func rfc(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// TestEventLotteryEndToEnd schedules an event through the admin API, fills
// its pre-queue over HTTP, starts it on the fake clock, recomputes the
// order from the public answer alone with guard's verifier, and checks it
// against the order in which sessions are actually admitted.
func TestEventLotteryEndToEnd(t *testing.T) {
	h := newAdminHarness(t, adminToken, nil)
	sc := h.sc
	start := gatetest.Start
	body := `{"id":"drop","prequeueAt":"` + rfc(start.Add(time.Minute)) + `","startsAt":"` + rfc(start.Add(2*time.Minute)) +
		`","endsAt":"` + rfc(start.Add(time.Hour)) + `","shuffle":true,"activeLimit":2}`
	code, resp, _ := h.do(http.MethodPost, "gates/default/events", adminToken, body)
	require.Equal(t, http.StatusCreated, code, resp)

	v := publicEvents(t, sc, "default")
	require.Len(t, v.Events, 1)
	ev := v.Events[0]
	assert.Equal(t, "scheduled", ev.Phase)
	require.Len(t, ev.Commitment, 64)
	assert.Empty(t, ev.Seed, "the seed is secret before the start")
	assert.Empty(t, ev.Positions)
	commitment := ev.Commitment
	assert.True(t, v.Now.Equal(start), "the server's clock, for the countdown")

	// Before the pre-queue: as configured (limit 1).
	var first joined
	code, b := httpDo(t, http.MethodPost, sc.URL+base+"/api/join", "", `{}`)
	require.Equal(t, http.StatusOK, code, string(b))
	require.NoError(t, json.Unmarshal(b, &first))
	assert.Equal(t, session.StatusActive, first.Status)
	code, _ = httpDo(t, http.MethodPost, sc.URL+base+"/api/release", first.Token, "")
	require.Equal(t, http.StatusNoContent, code)

	sc.Clock.Set(start.Add(time.Minute))
	byPos := map[int64]joined{}
	var all []joined
	for i := 0; i < 9; i++ {
		var j joined
		code, b := httpDo(t, http.MethodPost, sc.URL+base+"/api/join", "", `{}`)
		require.Equal(t, http.StatusOK, code, string(b))
		require.NoError(t, json.Unmarshal(b, &j))
		assert.Equal(t, session.StatusWaiting, j.Status, "everyone waits in the pre-queue")
		byPos[j.Position] = j
		all = append(all, j)
		sc.Clock.Advance(time.Second)
	}
	require.NoError(t, sc.Waitlist.Sweep(t.Context()))
	g, err := sc.Waitlist.Global("default")
	require.NoError(t, err)
	assert.Zero(t, g.Active, "free slots, and nobody promoted before the start")
	v = publicEvents(t, sc, "default")
	assert.Equal(t, "prequeue", v.Events[0].Phase)
	assert.Empty(t, v.Events[0].Seed)
	assert.Equal(t, commitment, v.Events[0].Commitment)

	// The start happens without a request: the sweeper's tick.
	sc.Clock.Set(start.Add(2 * time.Minute))
	require.NoError(t, sc.Waitlist.Sweep(t.Context()))
	var late joined
	code, b = httpDo(t, http.MethodPost, sc.URL+base+"/api/join", "", `{}`)
	require.Equal(t, http.StatusOK, code, string(b))
	require.NoError(t, json.Unmarshal(b, &late))

	// Recompute the order from the public answer alone.
	v = publicEvents(t, sc, "default")
	ev = v.Events[0]
	require.Equal(t, "started", ev.Phase)
	served, err := guard.VerifyLottery(ev, commitment)
	require.NoError(t, err)
	require.Len(t, served, len(all))
	forged := ev
	forged.Seed = strings.Repeat("00", 32)
	_, err = guard.VerifyLottery(forged, commitment)
	assert.ErrorIs(t, err, guard.ErrLotteryMismatch, "another seed does not match the commitment")

	status := func(j joined) session.SessionView {
		t.Helper()
		code, b := httpDo(t, http.MethodGet, sc.URL+base+"/api/status", j.Token, "")
		require.Equal(t, http.StatusOK, code, string(b))
		var sv session.SessionView
		require.NoError(t, json.Unmarshal(b, &sv))
		return sv
	}
	for k, arrived := range served {
		now, ok := guard.LotteryPosition(ev, served, arrived)
		require.True(t, ok)
		sv := status(byPos[arrived])
		assert.Equal(t, now, sv.Position, "served %d holds the position the verifier says", k)
	}

	// The actual promotion order, with the event's limit of 2.
	var admitted []int64
	released := map[string]bool{}
	active := func() []joined {
		var out []joined
		for _, j := range all {
			if !released[j.Session] && status(j).Status == session.StatusActive {
				out = append(out, j)
			}
		}
		return out
	}
	seen := map[string]bool{}
	for len(admitted) < len(all) {
		assert.Equal(t, session.StatusWaiting, status(late).Status, "the late arrival comes after the whole pre-queue")
		act := active()
		require.NotEmpty(t, act)
		require.LessOrEqual(t, len(act), 2, "the event's limit")
		for _, j := range act {
			if !seen[j.Session] {
				seen[j.Session] = true
				admitted = append(admitted, j.Position)
			}
		}
		// Release the earliest admitted still active.
		for _, p := range admitted {
			j := byPos[p]
			if !released[j.Session] {
				code, _ := httpDo(t, http.MethodPost, sc.URL+base+"/api/release", j.Token, "")
				require.Equal(t, http.StatusNoContent, code)
				released[j.Session] = true
				break
			}
		}
	}
	// Admitted two at a time, so compare as pairs in order.
	require.Len(t, admitted, len(served))
	for k := 0; k < len(served); k += 2 {
		end := min(k+2, len(served))
		assert.ElementsMatch(t, served[k:end], admitted[k:end], "admissions %d-%d follow the lottery", k, end)
	}
	assert.Equal(t, session.StatusActive, status(late).Status)
}

// TestEventAdminHostile tries what an attacker or a clumsy operator would.
func TestEventAdminHostile(t *testing.T) {
	h := newAdminHarness(t, adminToken, nil)
	start := gatetest.Start
	ok := func(id string, at time.Time) string {
		return `{"id":"` + id + `","prequeueAt":"` + rfc(at) + `","startsAt":"` + rfc(at.Add(time.Minute)) + `","shuffle":true}`
	}
	for _, tc := range []struct {
		name, method, path, body string
		status                   int
		code                     session.Code
	}{
		{"starts before its pre-queue", "POST", "gates/default/events", `{"id":"a","prequeueAt":"` + rfc(start.Add(time.Hour)) + `","startsAt":"` + rfc(start.Add(time.Minute)) + `"}`, 400, session.CodeInvalidArgument},
		{"far future", "POST", "gates/default/events", ok("a", start.AddDate(3, 0, 0)), 400, session.CodeInvalidArgument},
		{"year 0", "POST", "gates/default/events", `{"id":"a","prequeueAt":"0000-01-01T00:00:00Z","startsAt":"0000-01-01T00:01:00Z"}`, 400, session.CodeInvalidArgument},
		{"in the past", "POST", "gates/default/events", ok("a", start.Add(-time.Hour)), 400, session.CodeInvalidArgument},
		{"huge limit", "POST", "gates/default/events", strings.Replace(ok("a", start.Add(time.Hour)), `"shuffle":true`, `"activeLimit":9223372036854775807`, 1), 400, session.CodeInvalidArgument},
		{"negative pacing", "POST", "gates/default/events", strings.Replace(ok("a", start.Add(time.Hour)), `"shuffle":true`, `"newUsersPerMinute":-1`, 1), 400, session.CodeInvalidArgument},
		{"overflowing limit", "POST", "gates/default/events", strings.Replace(ok("a", start.Add(time.Hour)), `"shuffle":true`, `"activeLimit":1e400`, 1), 400, "invalid_json"},
		{"not a time", "POST", "gates/default/events", `{"id":"a","prequeueAt":"tomorrow","startsAt":"later"}`, 400, session.CodeInvalidArgument},
		{"no id", "POST", "gates/default/events", `{"prequeueAt":"` + rfc(start.Add(time.Hour)) + `","startsAt":"` + rfc(start.Add(2*time.Hour)) + `"}`, 400, session.CodeInvalidArgument},
		{"bad id", "POST", "gates/default/events", ok("../x", start.Add(time.Hour)), 400, session.CodeInvalidArgument},
		{"unknown field", "POST", "gates/default/events", strings.Replace(ok("a", start.Add(time.Hour)), `"shuffle":true`, `"seed":"00"`, 1), 400, "invalid_json"},
		{"unknown gate", "POST", "gates/nope/events", ok("a", start.Add(time.Hour)), 404, session.CodeUnknownGate},
		{"unknown gate list", "GET", "gates/nope/events", "", 404, session.CodeUnknownGate},
		{"unknown event", "DELETE", "gates/default/events/nope", "", 404, session.CodeEventNotFound},
		{"replace unknown", "PUT", "gates/default/events/nope", ok("nope", start.Add(time.Hour)), 404, session.CodeEventNotFound},
		{"rename", "PUT", "gates/default/events/a", ok("b", start.Add(time.Hour)), 400, session.CodeInvalidArgument},
	} {
		code, body, _ := h.do(tc.method, tc.path, adminToken, tc.body)
		assert.Equal(t, tc.status, code, "%s: %s", tc.name, body)
		assert.Equal(t, tc.code, errorCode(t, body), tc.name)
	}
	code, body, _ := h.do("POST", "gates/default/events", "", ok("a", start.Add(time.Hour)))
	assert.Equal(t, http.StatusUnauthorized, code, body)

	// One event; the same id again is a conflict, an overlapping pre-queue
	// is refused.
	code, body, _ = h.do("POST", "gates/default/events", adminToken, ok("a", start.Add(time.Hour)))
	require.Equal(t, http.StatusCreated, code, body)
	code, body, _ = h.do("POST", "gates/default/events", adminToken, ok("a", start.Add(2*time.Hour)))
	assert.Equal(t, http.StatusConflict, code, body)
	assert.Equal(t, session.CodeEventExists, errorCode(t, body))
	code, body, _ = h.do("POST", "gates/default/events", adminToken, ok("b", start.Add(time.Hour+30*time.Second)))
	assert.Equal(t, http.StatusBadRequest, code, body)

	// Replace while scheduled; then locked in the pre-queue.
	code, body, _ = h.do("PUT", "gates/default/events/a", adminToken, ok("a", start.Add(30*time.Minute)))
	require.Equal(t, http.StatusOK, code, body)
	h.sc.Clock.Set(start.Add(30 * time.Minute))
	require.NoError(t, h.sc.Waitlist.Sweep(t.Context()))
	code, body, _ = h.do("PUT", "gates/default/events/a", adminToken, ok("a", start.Add(time.Hour)))
	assert.Equal(t, http.StatusConflict, code, body)
	assert.Equal(t, session.CodeEventLocked, errorCode(t, body))
	code, body, _ = h.do("DELETE", "gates/default/events/a", adminToken, "")
	assert.Equal(t, http.StatusConflict, code, body)
	assert.Equal(t, session.CodeEventLocked, errorCode(t, body))

	// The public answer: unknown gate is 404 with the contract's body.
	c, b := httpDo(t, http.MethodGet, h.sc.URL+base+"/api/events?gate=nope", "", "")
	assert.Equal(t, http.StatusNotFound, c)
	assert.Equal(t, session.CodeUnknownGate, errorCode(t, string(b)))

	// Started: it may go.
	h.sc.Clock.Set(start.Add(31 * time.Minute))
	require.NoError(t, h.sc.Waitlist.Sweep(t.Context()))
	code, body, _ = h.do("DELETE", "gates/default/events/a", adminToken, "")
	assert.Equal(t, http.StatusNoContent, code, body)
}

// TestEventSurvivesRestart: the seed of an event whose pre-queue is open is
// persisted, never published, and the start after a restart uses it (the
// commitment published before the restart verifies).
func TestEventSurvivesRestart(t *testing.T) {
	sc := gatetest.StartSidecar(t, gatetest.Options{Gates: []session.GateConfig{gatetest.Gate("default", 0)}})
	start := gatetest.Start
	_, err := sc.Waitlist.AddEvent(t.Context(), session.ScheduledEvent{Gate: "default", ID: "e",
		PrequeueAt: start, StartsAt: start.Add(time.Minute), Shuffle: true})
	require.NoError(t, err)
	commitment := publicEvents(t, sc, "default").Events[0].Commitment
	for i := 0; i < 5; i++ {
		_, err := sc.Waitlist.Join(t.Context(), "default", "s"+string(rune('a'+i)))
		require.NoError(t, err)
	}
	// Restart: a new Waitlist over the same store.
	require.NoError(t, sc.Waitlist.Close())
	clock := sc.Clock
	w, err := session.New(t.Context(), sc.Store, []session.GateConfig{gatetest.Gate("default", 0)}, session.Options{Clock: clock, TouchInterval: -1, SweepInterval: -1})
	require.NoError(t, err)
	defer w.Close()
	evs, err := w.Events("default")
	require.NoError(t, err)
	require.Len(t, evs, 1)
	require.Equal(t, session.EventPrequeue, evs[0].Phase)
	clock.Set(start.Add(time.Minute))
	require.NoError(t, w.Sweep(t.Context()))
	evs, err = w.Events("default")
	require.NoError(t, err)
	view := wire.NewEventView(evs[0], clock.Now())
	_, err = guard.VerifyLottery(view, commitment)
	require.NoError(t, err, "the seed drawn with is the one committed to before the restart")
	assert.Len(t, view.Positions, 5)
}
