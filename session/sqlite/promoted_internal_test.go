package sqlite

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
)

// Logical promotion (promoted.go): while an update's promotion is pending
// (its rows not written yet: the cleaner is held), every operation on a
// promoted session answers as it does on a store that wrote the rows, and
// once the rows are written the two tables are the same.

// pendingPair is a store with logical promotion and one without, given the
// same operations; their cleaners are held.
type pendingPair struct {
	logical, rows *Store
	paths         [2]string
	cfg           session.GateConfig
	now           time.Time
	ids           []string
	release       func()
}

// openWithLogical opens a store at path with logical promotion on or off.
func openWithLogical(t *testing.T, path string, on bool) *Store {
	t.Helper()
	was := logicalPromotion
	logicalPromotion = on
	defer func() { logicalPromotion = was }()
	s, err := Open(path, Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	return s
}

// newPendingPair joins a0, a1 (active) and w0..w5 (waiting) at epoch to a
// gate of limit 2 in both stores, w1 to be called back; an update once
// a0 and a1 are idle purges them and promotes w0 and w1, which the
// logical store leaves pending.
func newPendingPair(t *testing.T, claim time.Duration) *pendingPair {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	p := &pendingPair{
		paths: [2]string{filepath.Join(dir, "logical.db"), filepath.Join(dir, "rows.db")},
		cfg:   session.GateConfig{Name: "default", ActiveLimit: 2, ActiveTimeout: time.Minute, WaitingTimeout: 10 * time.Minute, ClaimTimeout: claim},
		ids:   []string{"a0", "a1", "w0", "w1", "w2", "w3", "w4", "w5"},
	}
	p.logical = openWithLogical(t, p.paths[0], true)
	p.rows = openWithLogical(t, p.paths[1], false)
	t.Cleanup(func() { _ = p.logical.Close(); _ = p.rows.Close() })
	p.release = holdCleaner(t, p.logical)
	for _, s := range p.both() {
		for _, id := range p.ids {
			_, err := s.Join(ctx, p.cfg, id, epoch)
			require.NoError(t, err)
		}
		_, err := s.SetNotify(ctx, p.cfg, "w1", true, epoch)
		require.NoError(t, err)
	}
	p.now = epoch.Add(p.cfg.ActiveTimeout + time.Second)
	p.same(t, "update", func(s *Store) (any, error) {
		rep, err := s.Update(ctx, p.cfg, p.now, session.DefaultUpdateChunk)
		rep.Duration, rep.Transactions = 0, 0
		return rep, err
	})
	require.True(t, p.pending(t), "the update left no promotion pending")
	return p
}

func (p *pendingPair) both() []*Store { return []*Store{p.logical, p.rows} }

// cleanBoth lets the cleaners go and waits until both wrote their pending
// promotions and deleted their purged rows.
func (p *pendingPair) cleanBoth(t *testing.T) {
	t.Helper()
	p.release()
	for _, s := range p.both() {
		s.cleanWanted(p.cfg.Name, true)
		s.cleanStart()
		require.NoError(t, s.WaitClean(context.Background()))
	}
}

// pending reports whether the logical store has a promotion pending as
// stored.
func (p *pendingPair) pending(t *testing.T) bool {
	t.Helper()
	var n int
	require.NoError(t, p.logical.readDB.QueryRow(`SELECT count(*) FROM gates WHERE promoted_to > promoted_from`).Scan(&n))
	return n > 0
}

// same runs op on both stores and requires the same answer, then the same
// sessions from Get and Rows.
func (p *pendingPair) same(t *testing.T, what string, op func(s *Store) (any, error)) {
	t.Helper()
	a, aerr := op(p.logical)
	b, berr := op(p.rows)
	require.Equal(t, session.CodeOf(berr), session.CodeOf(aerr), "%s: %v / %v", what, aerr, berr)
	require.Equal(t, fmt.Sprint(b), fmt.Sprint(a), what)
	p.sameSessions(t, what)
}

func (p *pendingPair) sameSessions(t *testing.T, what string) {
	t.Helper()
	ctx := context.Background()
	for _, id := range p.ids {
		a, aerr := p.logical.Get(ctx, p.cfg.Name, id)
		b, berr := p.rows.Get(ctx, p.cfg.Name, id)
		require.Equal(t, session.CodeOf(berr), session.CodeOf(aerr), "%s: Get %s", what, id)
		require.Equal(t, fmt.Sprint(b), fmt.Sprint(a), "%s: Get %s", what, id)
	}
	a, err := p.logical.Rows(ctx, p.cfg.Name)
	require.NoError(t, err)
	b, err := p.rows.Rows(ctx, p.cfg.Name)
	require.NoError(t, err)
	require.Equal(t, fmt.Sprint(b), fmt.Sprint(a), "%s: Rows", what)
}

// table reads the gate's rows and counters as stored.
func table(t *testing.T, s *Store) string {
	t.Helper()
	rows, err := s.readDB.Query(`SELECT position, id, status, last_active, claim_deadline, notify, lane FROM sessions ORDER BY position`)
	require.NoError(t, err)
	defer rows.Close()
	var out []string
	for rows.Next() {
		var pos, status, notify, lane int64
		var id string
		var la, claim *int64
		require.NoError(t, rows.Scan(&pos, &id, &status, &la, &claim, &notify, &lane))
		out = append(out, fmt.Sprint(pos, id, status, deref(la), deref(claim), notify, lane))
	}
	require.NoError(t, rows.Err())
	var c string
	var next, active, waiting int64
	require.NoError(t, s.readDB.QueryRow(`SELECT next_position, active, waiting FROM gates WHERE name = 'default'`).Scan(&next, &active, &waiting))
	c = fmt.Sprint(next, active, waiting)
	return fmt.Sprint(out, c)
}

func deref(p *int64) any {
	if p == nil {
		return nil
	}
	return *p
}

// later is a second after the pair's update.
func later(p *pendingPair) time.Time { return p.now.Add(time.Second) }

// claimByTouch is a touch of id a second after the update that claims its
// slot (the claim deadline Get reads).
func claimByTouch(id string) func(p *pendingPair, s *Store) (any, error) {
	return func(p *pendingPair, s *Store) (any, error) {
		ctx := context.Background()
		cur, err := s.Get(ctx, p.cfg.Name, id)
		if err != nil {
			return nil, err
		}
		return nil, s.Touch(ctx, p.cfg.Name, []session.Touch{{ID: id, LastActive: later(p), ClaimDeadline: cur.ClaimDeadline}})
	}
}

func TestAPendingPromotionReadsAsWritten(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name string
		op   func(p *pendingPair, s *Store) (any, error)
		// still: the promotion is left pending (an op that runs with it)
		still bool
	}{
		{"get", func(p *pendingPair, s *Store) (any, error) { return s.Get(ctx, p.cfg.Name, "w0") }, true},
		{"touch claims the slot", claimByTouch("w0"), true},
		{"touch of the called-back one", claimByTouch("w1"), true},
		{"leave", func(p *pendingPair, s *Store) (any, error) { return s.Leave(ctx, p.cfg, "w0", later(p)) }, true},
		{"release promotes the next by its row", func(p *pendingPair, s *Store) (any, error) { return s.Release(ctx, p.cfg, "w1", later(p)) }, true},
		{"rejoin", func(p *pendingPair, s *Store) (any, error) { return s.Join(ctx, p.cfg, "w0", later(p)) }, true},
		{"call back off", func(p *pendingPair, s *Store) (any, error) { return s.SetNotify(ctx, p.cfg, "w1", false, later(p)) }, true},
		{"call back on", func(p *pendingPair, s *Store) (any, error) { return s.SetNotify(ctx, p.cfg, "w0", true, later(p)) }, true},
		{"named purge once idle", func(p *pendingPair, s *Store) (any, error) {
			rep, err := s.Purge(ctx, p.cfg, []string{"w0", "w1"}, p.now.Add(p.cfg.ActiveTimeout+time.Hour))
			rep.Duration, rep.Transactions = 0, 0
			return rep, err
		}, true},
		{"a new join", func(p *pendingPair, s *Store) (any, error) { return s.Join(ctx, p.cfg, "n0", later(p)) }, true},
		{"another update (its purges write the promotion first)", func(p *pendingPair, s *Store) (any, error) {
			rep, err := s.Update(ctx, p.cfg, p.now.Add(p.cfg.ActiveTimeout+time.Hour), session.DefaultUpdateChunk)
			rep.Duration, rep.Transactions = 0, 0
			return rep, err
		}, false},
		{"load", func(p *pendingPair, s *Store) (any, error) {
			snaps, err := s.Load(ctx, []string{p.cfg.Name})
			return snaps[p.cfg.Name], err
		}, true},
	}
	for _, claim := range []time.Duration{0, 30 * time.Second} {
		for _, c := range cases {
			t.Run(fmt.Sprintf("%s, claim window %v", c.name, claim), func(t *testing.T) {
				p := newPendingPair(t, claim)
				p.sameSessions(t, "after the update")
				p.same(t, c.name, func(s *Store) (any, error) { return c.op(p, s) })
				assert.Equal(t, c.still, p.pending(t), "pending after %s", c.name)
				p.ids = append(p.ids, "n0")
				p.sameSessions(t, c.name)
				// Written by the cleaner, the tables are the same.
				p.cleanBoth(t)
				assert.False(t, p.pending(t), "the cleaner left the promotion pending")
				assert.Equal(t, table(t, p.rows), table(t, p.logical))
			})
		}
	}
}

// A process that stops with a promotion pending (a crash, or a Close that
// could not write it): the next Open writes its rows before it counts
// them. A clean Close writes them too.
func TestOpenWritesAPendingPromotion(t *testing.T) {
	ctx := context.Background()
	for _, crash := range []bool{true, false} {
		t.Run(fmt.Sprint("crash ", crash), func(t *testing.T) {
			p := newPendingPair(t, 30*time.Second)
			path := p.paths[0]
			if crash {
				path = copyFiles(t, p.paths[0], t.TempDir(), "", "-wal")
			} else {
				require.NoError(t, p.logical.Close())
				// Close wrote the rows itself, before its snapshot.
				db, err := sqlOpen(path)
				require.NoError(t, err)
				var n int
				require.NoError(t, db.QueryRow(`SELECT count(*) FROM gates WHERE promoted_to > promoted_from`).Scan(&n))
				require.NoError(t, db.Close())
				assert.Zero(t, n, "still pending after Close")
			}
			s := openWithLogical(t, path, true)
			defer s.Close()
			var n int
			require.NoError(t, s.readDB.QueryRow(`SELECT count(*) FROM gates WHERE promoted_to > promoted_from OR promoted_at <> 0`).Scan(&n))
			assert.Zero(t, n, "still pending after Open")
			// Open deleted the purged rows too: the other store's cleaner
			// does, let go.
			p.release()
			p.rows.cleanWanted(p.cfg.Name, false)
			p.rows.cleanStart()
			require.NoError(t, p.rows.WaitClean(ctx))
			assert.Equal(t, table(t, p.rows), table(t, s))
			a, err := s.Load(ctx, []string{p.cfg.Name})
			require.NoError(t, err)
			b, err := p.rows.Load(ctx, []string{p.cfg.Name})
			require.NoError(t, err)
			assert.Equal(t, fmt.Sprint(b), fmt.Sprint(a))
		})
	}
}

// A pending promotion damaged on disk (not a range of positions, or times
// that are not integers) refuses the file: which waiters it made active
// is unknown.
func TestOpenRefusesADamagedPendingPromotion(t *testing.T) {
	for _, set := range []string{
		`promoted_from = 'x', promoted_to = 5`,
		`promoted_from = 5, promoted_to = 3, promoted_at = 1`,
		`promoted_from = 3, promoted_to = 999`,
		`promoted_from = 3, promoted_to = 5, promoted_at = 'soon'`,
		`promoted_from = 3, promoted_to = 5, promoted_claim = 'x'`,
		`promoted_from = -3, promoted_to = 5`,
	} {
		t.Run(set, func(t *testing.T) {
			p := newPendingPair(t, 0)
			path := copyFiles(t, p.paths[1], t.TempDir(), "", "-wal")
			rawExec(t, path, `UPDATE gates SET `+set)
			_, err := Open(path, Options{Logger: slog.New(slog.DiscardHandler)})
			require.ErrorIs(t, err, ErrDamaged)
			assert.Contains(t, err.Error(), "pending promotion")
		})
	}
}

// After a failed transaction the writer reads its gates afresh, with no
// lower bound of the first waiter: the search for it starts past the
// pending range all the same, or a release would promote a pending
// session a second time.
func TestAPendingPromotionSurvivesAFailedTransaction(t *testing.T) {
	ctx := context.Background()
	p := newPendingPair(t, 30*time.Second)
	testHookBeforeCommit = func() error { return errors.New("injected") }
	for _, s := range p.both() {
		_, err := s.Join(ctx, p.cfg, "n0", p.now)
		require.Error(t, err)
	}
	testHookBeforeCommit = nil
	p.ids = append(p.ids, "n0")
	require.True(t, p.pending(t))
	p.same(t, "release", func(s *Store) (any, error) { return s.Release(ctx, p.cfg, "w0", p.now.Add(time.Second)) })
	p.same(t, "join", func(s *Store) (any, error) { return s.Join(ctx, p.cfg, "n0", p.now.Add(time.Second)) })
	p.cleanBoth(t)
	assert.Equal(t, table(t, p.rows), table(t, p.logical))
}
