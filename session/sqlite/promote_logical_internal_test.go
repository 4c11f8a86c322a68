package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
	"github.com/anteroomhq/anteroom/session/sessiontest"
)

// Logical promotion (logicalPromotion) records an update's promotions as a
// pending range in the gate's row, which the cleaner writes into the
// session rows later; row promotion writes each promoted row at once. The
// two must not be told apart from outside. Two stores, one of each, get
// the same random operations on the same clock (joins, some through a
// priority code, rejoins, leaves, touches with claims, claim links,
// releases, call-backs, updates in chunks of 1 to 40 or the default, named
// purges, a scheduled event's lottery, a changing limit and mode, clock
// jumps), with the cleaner held (the ranges stay pending over several
// ops) or let go, clean restarts, and crash copies of the logical store
// taken while a range is pending, which go on as the logical store. After
// each op both gave the same answer (error code, session, report) and the
// same commit events, and show the same Rows, Get (of the ids the op named
// and a few live ones; every fifth step of every id) and Load (after the
// ops that move counters, and every third step); once the cleaner is done,
// their tables hold the same rows. Coverage: steps that ended with a range
// pending (gates.promoted_to > promoted_from), ops that ran on one, crash
// copies taken with one.
// ANTEROOM_LOGICAL_SEED and ANTEROOM_LOGICAL_STEPS run another seed, longer.
func TestLogicalPromotionMatchesRowPromotion(t *testing.T) {
	seeds, steps, defaults := randomRuns(t, "ANTEROOM_LOGICAL_SEED", "ANTEROOM_LOGICAL_STEPS", []int64{1, 2, 3}, 250) // an even seed gives the gate claim windows; a multiple of 3 paces it
	var all lpCoverage
	ran := 0
	for _, seed := range seeds {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			c := logicalVsRowPromotion(t, seed, steps)
			all.pendingSteps += c.pendingSteps
			all.opsOnPending += c.opsOnPending
			all.pendingCrashes += c.pendingCrashes
			all.promoted += c.promoted
			ran++
		})
	}
	// The paths the test is for were taken by the default seeds: a change
	// that stopped drawing them would pass without testing anything.
	if !defaults || ran != len(seeds) {
		return
	}
	assert.Positive(t, all.promoted, "nobody was promoted")
	assert.Positive(t, all.pendingSteps, "no step left a promotion range pending in the logical store")
	assert.Positive(t, all.opsOnPending, "no op ran while a promotion range was pending")
	assert.Positive(t, all.pendingCrashes, "no crash copy was taken while a promotion range was pending")
}

// lpCoverage counts what a run of logicalVsRowPromotion went through: steps
// after which the logical store had a pending range, ops that started on
// one, crash copies taken with one, promotions reported.
type lpCoverage struct{ pendingSteps, opsOnPending, pendingCrashes, promoted int }

// lpSess is a session with its times as nanoseconds (lpNanos), for
// require.Equal.
type lpSess struct {
	Gate, ID                             string
	Position                             int64
	Status                               session.Status
	LastActive, CreatedAt, ClaimDeadline int64
	Notify                               bool
	Lane                                 session.Lane
}

// lpNanos is t as Unix nanoseconds, math.MinInt64 for the zero time.
func lpNanos(t time.Time) int64 {
	if t.IsZero() {
		return math.MinInt64
	}
	return t.UnixNano()
}

func lpSessOf(s session.Session) lpSess {
	return lpSess{Gate: s.Gate, ID: s.ID, Position: s.Position, Status: s.Status,
		LastActive: lpNanos(s.LastActive), CreatedAt: lpNanos(s.CreatedAt), ClaimDeadline: lpNanos(s.ClaimDeadline),
		Notify: s.Notify, Lane: s.Lane}
}

func lpSessions(ss []session.Session) []lpSess {
	var out []lpSess
	for _, s := range ss {
		out = append(out, lpSessOf(s))
	}
	return out
}

// lpEvent is a commit event as lpSess puts a session.
type lpEvent struct {
	Kind    session.EventKind
	Session lpSess
	Reason  session.PurgeReason
	Claimed bool
	At      int64
}

// lpSnap is what Load returns of a gate that both stores must agree on.
type lpSnap struct {
	State                    session.GateState
	Active                   []lpSess
	Waiting, PriorityWaiting []int64
}

// lpReport is an UpdateReport without what may differ (transactions,
// duration).
type lpReport struct {
	Gate                                  string
	PurgedWaiting, PurgedActive, Promoted int64
}

func lpReportOf(r session.UpdateReport) lpReport {
	return lpReport{Gate: r.Gate, PurgedWaiting: r.PurgedWaiting, PurgedActive: r.PurgedActive, Promoted: r.Promoted}
}

// lpRawRow is a row of the sessions table as stored.
type lpRawRow struct {
	Gate              string
	Position          int64
	ID                string
	Status            int64
	LastActive, Claim sql.NullInt64
	CreatedAt         int64
	Notify, Lane      int64
}

// lpRaw reads the databases of the test through connections of their own,
// not the Stores': one pool per file, kept while the Stores run (opening
// one reads the schema, slow under -race), closed before a Store closes.
type lpRaw struct {
	t   *testing.T
	dbs map[string]*sql.DB
}

func (r *lpRaw) db(path string) *sql.DB {
	r.t.Helper()
	if db, ok := r.dbs[path]; ok {
		return db
	}
	db, err := sqlOpen(path)
	require.NoError(r.t, err)
	r.dbs[path] = db
	return db
}

func (r *lpRaw) close() {
	for path, db := range r.dbs {
		_ = db.Close()
		delete(r.dbs, path)
	}
}

// rows reads the sessions table of the database at path.
func (r *lpRaw) rows(path string) []lpRawRow {
	r.t.Helper()
	rows, err := r.db(path).Query(`SELECT gate, position, id, status, last_active, claim_deadline, created_at, notify, lane FROM sessions ORDER BY gate, position`)
	require.NoError(r.t, err)
	defer rows.Close()
	var out []lpRawRow
	for rows.Next() {
		var x lpRawRow
		require.NoError(r.t, rows.Scan(&x.Gate, &x.Position, &x.ID, &x.Status, &x.LastActive, &x.Claim, &x.CreatedAt, &x.Notify, &x.Lane))
		out = append(out, x)
	}
	require.NoError(r.t, rows.Err())
	return out
}

// pending counts the gates of the database at path with a pending
// promotion range. It fails on a schema without logical promotion's
// columns.
func (r *lpRaw) pending(path string) (int, error) {
	var n int
	err := r.db(path).QueryRow(`SELECT count(*) FROM gates WHERE promoted_to > promoted_from`).Scan(&n)
	return n, err
}

// lpSide is one of the two stores: its file, the Store open on it, and
// the events of its commits not yet compared.
type lpSide struct {
	name    string
	logical bool // opened with logicalPromotion set
	path    string
	s       *Store

	mu     sync.Mutex
	events []lpEvent
}

func (p *lpSide) take() []lpEvent {
	p.mu.Lock()
	defer p.mu.Unlock()
	ev := p.events
	p.events = nil
	return ev
}

// lpHold holds the cleaners of every store while ch is set: testHookClean
// is one for the process, so the two stores are held and let go together.
// stop lets every cleaner go for good (before the stores close).
type lpHold struct {
	mu   sync.Mutex
	ch   chan struct{}
	stop chan struct{}
}

func (h *lpHold) hook() {
	h.mu.Lock()
	ch := h.ch
	h.mu.Unlock()
	if ch == nil {
		return
	}
	select {
	case <-ch:
	case <-h.stop:
	}
}

func (h *lpHold) hold() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ch == nil {
		h.ch = make(chan struct{})
	}
}

func (h *lpHold) release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ch != nil {
		close(h.ch)
		h.ch = nil
	}
}

func logicalVsRowPromotion(t *testing.T, seed int64, steps int) lpCoverage {
	rng := rand.New(rand.NewPCG(uint64(seed), 11))
	ctx := context.Background()
	was := logicalPromotion
	t.Cleanup(func() { logicalPromotion = was })

	L := &lpSide{name: "logical", logical: true, path: filepath.Join(t.TempDir(), "l.db")}
	R := &lpSide{name: "rows", path: filepath.Join(t.TempDir(), "r.db")}
	sides := []*lpSide{L, R}
	hold := &lpHold{stop: make(chan struct{})}
	hook := hold.hook
	testHookClean.Store(&hook)
	raw := &lpRaw{t: t, dbs: map[string]*sql.DB{}}
	open := map[*Store]bool{}
	defer func() {
		raw.close()
		close(hold.stop) // no cleaner waits in the hook while its store closes
		for s := range open {
			_ = s.Close()
		}
		testHookClean.Store(nil)
	}()
	openSide := func(p *lpSide, log *sessiontest.LogBuffer) {
		t.Helper()
		logger := slog.New(slog.DiscardHandler)
		if log != nil {
			logger = slog.New(slog.NewTextHandler(log, nil))
		}
		logicalPromotion = p.logical // read by Open
		s, err := Open(p.path, Options{Logger: logger})
		require.NoError(t, err, "open the %s store", p.name)
		open[s] = true
		s.SetCommitListener(func(c session.Commit) {
			p.mu.Lock()
			defer p.mu.Unlock()
			for _, ev := range c.Events {
				p.events = append(p.events, lpEvent{Kind: ev.Kind, Session: lpSessOf(ev.Session), Reason: ev.Reason, Claimed: ev.Claimed, At: lpNanos(ev.At)})
			}
		})
		p.s = s
	}
	closeSide := func(p *lpSide) {
		t.Helper()
		raw.close()
		require.NoError(t, p.s.Close(), "close the %s store", p.name)
		delete(open, p.s)
	}
	for _, p := range sides {
		openSide(p, nil)
	}
	held := true
	hold.hold()

	tenth := time.Duration(seenSecondNanos) / 10
	cfg := sessiontest.GateConfig("default", int64(3+rng.IntN(4)))
	cfg.WaitingTimeout = 60*tenth + 3*tenth/10 // longer than the active timeout: a line forms
	cfg.ActiveTimeout = 25*tenth + 7*tenth/10
	if seed%2 == 0 {
		cfg.ClaimTimeout = 15 * tenth
		cfg.NotifyClaimTimeout = 25 * tenth
	} // else a waiter called back gets DefaultNotifyClaimTimeout, the others none
	if seed%3 == 0 {
		cfg.NewUsersPerMinute = 150
	}
	ids := make([]string, 40)
	for i := range ids {
		ids[i] = fmt.Sprintf("s%d", i)
	}
	now := epoch
	pick := func() time.Time {
		// near a second's boundary, in the recent past or at now
		base := now.Truncate(10 * tenth).Add(-time.Duration(rng.IntN(6)) * 10 * tenth)
		switch rng.IntN(6) {
		case 0:
			return base
		case 1:
			return base.Add(-time.Nanosecond)
		case 2:
			return base.Add(time.Nanosecond)
		case 3:
			return base.Add(time.Duration(rng.IntN(100)) * tenth / 10)
		}
		return now
	}

	// same requires that both stores answered alike: the same error code
	// (neither an internal one), and without error the same value.
	same := func(where string, lv, rv any, le, re error) {
		t.Helper()
		require.Equal(t, session.CodeOf(re), session.CodeOf(le), "%s: error code (logical: %v; rows: %v)", where, le, re)
		require.NotEqual(t, session.CodeInternal, session.CodeOf(re), "%s: %v", where, re)
		require.NotEqual(t, session.CodeUnavailable, session.CodeOf(re), "%s: %v", where, re)
		if re == nil {
			require.Equal(t, rv, lv, "%s: logical store (actual) vs rows store (expected)", where)
		}
	}
	get := func(p *lpSide, id string) (lpSess, error) {
		s, err := p.s.Get(ctx, cfg.Name, id)
		return lpSessOf(s), err
	}
	load := func(p *lpSide) (lpSnap, error) {
		snaps, err := p.s.Load(ctx, []string{cfg.Name})
		if err != nil {
			return lpSnap{}, err
		}
		st := snaps[cfg.Name]
		out := lpSnap{State: st.State, Active: lpSessions(st.Active)}
		if len(st.Waiting) > 0 {
			out.Waiting = st.Waiting
		}
		if len(st.PriorityWaiting) > 0 {
			out.PriorityWaiting = st.PriorityWaiting
		}
		return out, nil
	}
	rows := func(p *lpSide) ([]lpSess, error) {
		rs, err := p.s.Rows(ctx, cfg.Name)
		return lpSessions(rs), err
	}
	var lastRows []lpSess // the rows store's at the last compare
	// someID is an id of the rows compared last, or any.
	someID := func() string {
		if len(lastRows) > 0 && rng.IntN(2) == 0 {
			return lastRows[rng.IntN(len(lastRows))].ID
		}
		return ids[rng.IntN(len(ids))]
	}
	// activeID is mostly an active session's id, or any.
	activeID := func() string {
		var active []string
		for _, r := range lastRows {
			if r.Status == session.StatusActive {
				active = append(active, r.ID)
			}
		}
		if len(active) > 0 && rng.IntN(3) > 0 {
			return active[rng.IntN(len(active))]
		}
		return ids[rng.IntN(len(ids))]
	}
	// compare requires that the stores show the same sessions: Rows; Get
	// of the ids the op named, of a few of the ids either store holds,
	// and when full of every id; Load when full or asked.
	compare := func(where string, full, withLoad bool, named map[string]bool) {
		t.Helper()
		lv, le := rows(L)
		rv, re := rows(R)
		same(where+": Rows", lv, rv, le, re)
		lastRows = rv
		want := map[string]bool{}
		for id := range named {
			want[id] = true
		}
		for range 6 {
			if len(rv) > 0 {
				want[rv[rng.IntN(len(rv))].ID] = true
			}
			if len(lv) > 0 {
				want[lv[rng.IntN(len(lv))].ID] = true
			}
		}
		for _, id := range ids {
			if !full && !want[id] {
				continue
			}
			lv, le := get(L, id)
			rv, re := get(R, id)
			same(where+": Get "+id, lv, rv, le, re)
		}
		if !full && !withLoad {
			return
		}
		ls, le := load(L)
		rs, re := load(R)
		same(where+": Load", ls, rs, le, re)
	}
	waitClean := func(where string) {
		t.Helper()
		require.False(t, held, "%s: WaitClean with the cleaners held", where)
		for _, p := range sides {
			require.NoError(t, p.s.WaitClean(ctx), "%s: WaitClean %s", where, p.name)
		}
	}
	rawCompare := func(where string) {
		t.Helper()
		waitClean(where)
		require.Equal(t, raw.rows(R.path), raw.rows(L.path), "%s: the tables once cleaned: logical (actual) vs rows (expected)", where)
	}

	var cov lpCoverage
	var pendErr error // logical promotion's columns could not be read
	pending := 0      // pending ranges in the logical store after the last step
	opsOnPending := map[string]int{}
	crashes := 0

	code, err := session.NewPriorityCode(cfg.Name, "vip-code-0123", "vip", 12, now.Add(24*time.Hour), now)
	require.NoError(t, err)
	for _, p := range sides {
		require.NoError(t, p.s.CreateCode(ctx, code))
	}

	// One scheduled event with a lottery at a time (as in the marks'
	// random test): saved and its pre-queue opened, waiters joined while
	// it is open (the gate held), drawn, then deleted.
	type lpEv struct {
		Phase         session.EventPhase
		Changed       bool
		FirstPosition int64
		Positions     []int64
	}
	var ev session.ScheduledEvent
	var evPhase session.EventPhase
	evCount := 0
	joinCfg := func() session.GateConfig {
		if evPhase == session.EventPrequeue {
			c := cfg
			c.Mode = session.ModeQueueAll
			return c
		}
		return cfg
	}
	advance := func(where string, at time.Time) lpEv {
		t.Helper()
		var vals [2]lpEv
		var errs [2]error
		for i, p := range sides {
			next, changed, err := p.s.AdvanceEvent(ctx, cfg.Name, ev.ID, at)
			vals[i], errs[i] = lpEv{Phase: next.Phase, Changed: changed, FirstPosition: next.FirstPosition, Positions: next.Positions}, err
		}
		same(where, vals[0], vals[1], errs[0], errs[1])
		return vals[1]
	}
	eventStep := func(where string) string {
		t.Helper()
		switch evPhase {
		case "":
			evCount++
			lotterySeed := make([]byte, session.LotterySeedSize)
			for i := range lotterySeed {
				lotterySeed[i] = byte(rng.Uint32())
			}
			ev = session.ScheduledEvent{Gate: cfg.Name, ID: fmt.Sprintf("ev%d", evCount),
				PrequeueAt: now.Add(-time.Duration(rng.IntN(30)) * tenth),
				StartsAt:   now.Add(time.Duration(1+rng.IntN(30)) * tenth),
				Shuffle:    true, Seed: lotterySeed}
			what := fmt.Sprintf("schedule %s [%v, %v) and open it at %v", ev.ID, ev.PrequeueAt, ev.StartsAt, now)
			var errs [2]error
			for i, p := range sides {
				_, errs[i] = p.s.SaveEvent(ctx, ev)
			}
			same(where+" "+what, nil, nil, errs[0], errs[1])
			require.NoError(t, errs[1], "%s %s", where, what)
			got := advance(where+" "+what, now)
			require.Equal(t, session.EventPrequeue, got.Phase, "%s %s", where, what)
			evPhase = session.EventPrequeue
			return what
		case session.EventPrequeue:
			at := ev.StartsAt
			if now.After(at) && rng.IntN(2) == 0 {
				at = now
			}
			what := fmt.Sprintf("draw %s at %v", ev.ID, at)
			got := advance(where+" "+what, at)
			require.Equal(t, session.EventStarted, got.Phase, "%s %s", where, what)
			evPhase = session.EventStarted
			return what
		}
		what := "delete " + ev.ID
		var errs [2]error
		for i, p := range sides {
			errs[i] = p.s.DeleteEvent(ctx, cfg.Name, ev.ID)
		}
		same(where+" "+what, nil, nil, errs[0], errs[1])
		evPhase = ""
		return what
	}

	for step := 1; step <= steps; step++ {
		id := ids[rng.IntN(len(ids))]
		named := map[string]bool{} // the ids the op names
		where := fmt.Sprintf("seed %d step %d", seed, step)
		var kind string
		switch p := rng.IntN(100); {
		case cov.pendingCrashes == 0 && step >= steps/2 && held && pending > 0:
			kind = "crash" // one at least, with a range pending
		case evPhase == session.EventPrequeue && !now.Before(ev.StartsAt) && rng.IntN(2) == 0:
			kind = "event" // the draw, due
		case p < 18:
			kind = "join"
		case p < 23:
			kind = "leave"
		case p < 33:
			kind = "touch"
		case p < 37:
			kind = "claim link"
		case p < 41:
			kind = "release"
		case p < 45:
			kind = "notify"
		case p < 64:
			kind = "clock"
		case p < 83:
			kind = "update"
		case p < 88:
			kind = "purge"
		case p < 89:
			kind = "event"
		case p < 97:
			kind = "cleaner"
		case p < 98:
			kind = "restart"
		default:
			kind = "crash"
		}
		if pending > 0 {
			switch kind {
			case "clock", "cleaner", "restart", "crash":
			default:
				opsOnPending[kind]++
				cov.opsOnPending++
			}
		}
		what := kind
		switch kind {
		case "join":
			// one to three (a line forms), now and then with the code
			// (priority lane; its uses run out)
			c := joinCfg()
			what = fmt.Sprintf("join at %v:", now)
			for k := range 1 + rng.IntN(3) {
				jid := id
				if k > 0 {
					jid = ids[rng.IntN(len(ids))]
				}
				type joined struct {
					S    lpSess
					Code session.Code
				}
				var vals [2]joined
				var errs [2]error
				withCode := rng.IntN(6) == 0
				for i, p := range sides {
					var s session.Session
					var codeErr, err error
					if withCode {
						s, codeErr, err = p.s.JoinWithCode(ctx, c, jid, "vip-code-0123", now)
					} else {
						s, err = p.s.Join(ctx, c, jid, now)
					}
					vals[i], errs[i] = joined{lpSessOf(s), session.CodeOf(codeErr)}, err
				}
				what += " " + jid
				named[jid] = true
				if withCode {
					what += " (code)"
				}
				same(where+" "+what, vals[0], vals[1], errs[0], errs[1])
			}
		case "leave", "release", "notify":
			switch kind {
			case "release":
				id = activeID()
			case "leave":
				id = someID()
			}
			notify := rng.IntN(3) > 0
			what = fmt.Sprintf("%s %s at %v", kind, id, now)
			named[id] = true
			if kind == "notify" {
				what += fmt.Sprint(" to ", notify)
			}
			var vals [2]lpSess
			var errs [2]error
			for i, p := range sides {
				var s session.Session
				var err error
				switch kind {
				case "leave":
					s, err = p.s.Leave(ctx, cfg, id, now)
				case "release":
					s, err = p.s.Release(ctx, cfg, id, now)
				default:
					s, err = p.s.SetNotify(ctx, cfg, id, notify, now)
				}
				vals[i], errs[i] = lpSessOf(s), err
			}
			same(where+" "+what, vals[0], vals[1], errs[0], errs[1])
		case "touch", "claim link":
			// A claim names the promotion by its deadline: the session's
			// (read from the rows store; the stores agreed on it at the
			// last step), one a nanosecond off, or none.
			deadline := func(id string) time.Time {
				r, err := R.s.Get(ctx, cfg.Name, id)
				if err != nil {
					return time.Time{}
				}
				switch d := r.ClaimDeadline; rng.IntN(6) {
				case 0, 1, 2:
					return d
				case 3:
					if !d.IsZero() {
						return d.Add(time.Nanosecond)
					}
				}
				return time.Time{}
			}
			if kind == "claim link" {
				id = activeID()
				d := deadline(id)
				what = fmt.Sprintf("claim link %s deadline %v at %v", id, d, now)
				named[id] = true
				var vals [2]lpSess
				var errs [2]error
				for i, p := range sides {
					s, err := p.s.ClaimLink(ctx, cfg.Name, id, d, now)
					vals[i], errs[i] = lpSessOf(s), err
				}
				same(where+" "+what, vals[0], vals[1], errs[0], errs[1])
				break
			}
			var ts []session.Touch
			for range 1 + rng.IntN(6) {
				tid := someID()
				named[tid] = true
				tc := session.Touch{ID: tid, ClaimDeadline: deadline(tid)}
				if tc.ClaimDeadline.IsZero() || rng.IntN(4) > 0 {
					tc.LastActive = pick()
				}
				ts = append(ts, tc)
			}
			what = fmt.Sprintf("touch %v", ts)
			var errs [2]error
			for i, p := range sides {
				errs[i] = p.s.Touch(ctx, cfg.Name, ts)
			}
			same(where+" "+what, nil, nil, errs[0], errs[1])
		case "clock":
			// forward by a bit, to a second's edge, past it by a
			// nanosecond, or back
			switch rng.IntN(10) {
			case 0:
				now = now.Add(-time.Duration(rng.IntN(1000)) * tenth / 100)
			case 1:
				now = now.Truncate(10 * tenth).Add(10 * tenth)
			case 2:
				now = now.Add(time.Nanosecond)
			case 3, 4:
				now = now.Add(cfg.ActiveTimeout + time.Duration(rng.IntN(100))*tenth/100) // a batch of active sessions ends
			default:
				now = now.Add(time.Duration(rng.IntN(2000)) * tenth / 100)
			}
			what = "clock " + now.String()
		case "update", "purge":
			if rng.IntN(20) == 0 {
				cfg.ActiveLimit = int64(3 + rng.IntN(4))
			}
			cfg.Mode = session.ModeOpen // now and then held until the next update or purge
			if rng.IntN(15) == 0 {
				cfg.Mode = session.ModeQueueAll
			}
			var run func(s *Store) (session.UpdateReport, error)
			if kind == "update" {
				chunk := 1 + rng.IntN(40)
				if rng.IntN(5) == 0 {
					chunk = 0 // the default
				}
				what = fmt.Sprintf("update at %v chunk %d limit %d mode %q", now, chunk, cfg.ActiveLimit, cfg.Mode)
				run = func(s *Store) (session.UpdateReport, error) { return s.Update(ctx, cfg, now, chunk) }
			} else {
				var pids []string
				for range rng.IntN(6) {
					pid := someID()
					pids = append(pids, pid)
					named[pid] = true
				}
				what = fmt.Sprintf("purge %v at %v limit %d mode %q", pids, now, cfg.ActiveLimit, cfg.Mode)
				run = func(s *Store) (session.UpdateReport, error) { return s.Purge(ctx, cfg, pids, now) }
			}
			var vals [2]lpReport
			var errs [2]error
			for i, p := range sides {
				rep, err := run(p.s)
				vals[i], errs[i] = lpReportOf(rep), err
			}
			same(where+" "+what, vals[0], vals[1], errs[0], errs[1])
			cov.promoted += int(vals[1].Promoted)
		case "event":
			what = eventStep(where)
		case "cleaner":
			if held {
				hold.release()
				held = false
				rawCompare(where + " cleaner let go")
				what = "cleaner let go"
				if rng.IntN(2) == 0 {
					hold.hold()
					held = true
					what = "clean pass"
				}
			} else {
				rawCompare(where + " cleaner held")
				hold.hold()
				held = true
				what = "cleaner held"
			}
		case "restart":
			wasHeld := held
			hold.release()
			held = false
			what = "restart"
			if rng.IntN(2) == 0 {
				waitClean(where + " restart")
				what = "restart once cleaned"
			}
			for _, p := range sides {
				closeSide(p)
			}
			for _, p := range sides {
				openSide(p, nil)
			}
			if wasHeld {
				hold.hold()
				held = true
			}
		case "crash":
			if !held {
				what = "crash skipped: the cleaner runs"
				break
			}
			// The logical store's files as a crash leaves them (its
			// cleaner held: nothing writes rows meanwhile); the copy goes
			// on as the logical store, the old one stays open, unheard.
			n, err := raw.pending(L.path)
			if err != nil && pendErr == nil {
				pendErr = err
			}
			what = fmt.Sprintf("crash with %d ranges pending", n)
			crashed := copyFiles(t, L.path, t.TempDir(), "", "-wal")
			L.s.SetCommitListener(nil)
			L.take()
			L.path = crashed
			var log sessiontest.LogBuffer
			openSide(L, &log)
			require.NotContains(t, log.String(), "repaired", "%s %s", where, what)
			crashes++
			if n > 0 {
				cov.pendingCrashes++
			}
		}
		where += " " + what

		if !held {
			waitClean(where) // the cleaner is done before the next op: it never runs beside one
		}
		require.Equal(t, R.take(), L.take(), "%s: commit events: logical (actual) vs rows (expected)", where)
		countPending := func() int {
			n, err := raw.pending(L.path)
			if err != nil {
				if pendErr == nil {
					pendErr = err
				}
				return 0
			}
			return n
		}
		if countPending() > 0 {
			cov.pendingSteps++
		}
		switch kind {
		case "update", "purge", "release", "event", "restart", "crash":
			compare(where, step%5 == 0, true, named)
		default:
			compare(where, step%5 == 0, step%3 == 0, named)
		}
		if !held && step%5 == 0 {
			rawCompare(where)
		}
		pending = countPending()
	}
	if held {
		hold.release()
		held = false
	}
	rawCompare(fmt.Sprintf("seed %d at the end", seed))
	t.Logf("promoted: %d; steps ending with a range pending: %d; ops on a pending range: %d %v; crash copies: %d, %d with a range pending",
		cov.promoted, cov.pendingSteps, cov.opsOnPending, opsOnPending, crashes, cov.pendingCrashes)
	require.NoError(t, pendErr, "counting the logical store's pending promotion ranges (SELECT count(*) FROM gates WHERE promoted_to > promoted_from) failed: "+
		"no logical promotion in this schema (the columns promoted_from, promoted_to, ... of gates)? The comparisons above passed, but the coverage of pending ranges is unknown")
	return cov
}
