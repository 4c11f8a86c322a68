package sqlite

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
)

// Two gates with pending ranges (one with a priority lane
// and called-back rows), settings saved, another gate's lottery drawn,
// Load of both gates: the logical store answers as the rows store does.
func TestTwoGatesPendingLoadAndEvents(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	L := openWithLogical(t, filepath.Join(dir, "l.db"), true)
	R := openWithLogical(t, filepath.Join(dir, "r.db"), false)
	t.Cleanup(func() { _ = L.Close(); _ = R.Close() })
	release := holdCleaner(t, L)
	both := []*Store{L, R}
	a := session.GateConfig{Name: "a", ActiveLimit: 2, ActiveTimeout: time.Minute, WaitingTimeout: time.Hour, ClaimTimeout: 30 * time.Second, NotifyClaimTimeout: time.Minute}
	b := session.GateConfig{Name: "b", ActiveLimit: 2, ActiveTimeout: time.Minute, WaitingTimeout: time.Hour}
	code, err := session.NewPriorityCode("a", "vip-code-0123", "vip", 5, epoch.Add(time.Hour), epoch)
	require.NoError(t, err)
	for _, s := range both {
		require.NoError(t, s.CreateCode(ctx, code))
		for i := range 12 {
			_, err := s.Join(ctx, a, fmt.Sprintf("a%d", i), epoch)
			require.NoError(t, err)
			_, err = s.Join(ctx, b, fmt.Sprintf("b%d", i), epoch)
			require.NoError(t, err)
		}
		for _, id := range []string{"a4", "a7"} {
			_, err := s.SetNotify(ctx, a, id, true, epoch)
			require.NoError(t, err)
		}
		_, _, err := s.JoinWithCode(ctx, a, "p0", "vip-code-0123", epoch)
		require.NoError(t, err)
	}
	now := epoch.Add(2 * time.Minute)
	a.ActiveLimit, b.ActiveLimit = 8, 6
	load := func(s *Store) string {
		snaps, err := s.Load(ctx, []string{"a", "b"})
		require.NoError(t, err)
		return fmt.Sprint(snaps["a"].State, snaps["a"].Active, snaps["a"].Waiting, snaps["a"].PriorityWaiting, "|",
			snaps["b"].State, snaps["b"].Active, snaps["b"].Waiting, snaps["b"].PriorityWaiting)
	}
	step := func(what string, op func(s *Store) (any, error)) {
		t.Helper()
		x, xerr := op(L)
		y, yerr := op(R)
		require.Equal(t, session.CodeOf(yerr), session.CodeOf(xerr), "%s: %v / %v", what, xerr, yerr)
		require.Equal(t, fmt.Sprint(y), fmt.Sprint(x), what)
		require.Equal(t, load(R), load(L), what+": Load")
	}
	for _, g := range []session.GateConfig{a, b} {
		step("update "+g.Name, func(s *Store) (any, error) {
			rep, err := s.Update(ctx, g, now, session.DefaultUpdateChunk)
			return lpReportOf(rep), err
		})
	}
	var n int
	require.NoError(t, L.readDB.QueryRow(`SELECT count(*) FROM gates WHERE promoted_to > promoted_from`).Scan(&n))
	require.Equal(t, 2, n, "the premise: both gates pending")
	step("settings a", func(s *Store) (any, error) {
		c := a
		c.ClaimTimeout = time.Minute
		return nil, s.SaveGateSettings(ctx, "a", &c)
	})
	ev := session.ScheduledEvent{Gate: "b", ID: "e", PrequeueAt: now, StartsAt: now.Add(time.Second), Shuffle: true, Seed: make([]byte, session.LotterySeedSize)}
	for i := range ev.Seed {
		ev.Seed[i] = byte(i * 7)
	}
	step("save event b", func(s *Store) (any, error) { _, err := s.SaveEvent(ctx, ev); return nil, err })
	step("open b", func(s *Store) (any, error) {
		e, _, err := s.AdvanceEvent(ctx, "b", "e", now)
		return e.FirstPosition, err
	})
	for i := range 4 {
		step("join b", func(s *Store) (any, error) {
			c := b
			c.Mode = session.ModeQueueAll
			x, err := s.Join(ctx, c, fmt.Sprintf("late%d", i), now)
			return x, err
		})
	}
	step("draw b", func(s *Store) (any, error) {
		e, _, err := s.AdvanceEvent(ctx, "b", "e", now.Add(time.Second))
		return e.Positions, err
	})
	require.NoError(t, L.readDB.QueryRow(`SELECT count(*) FROM gates WHERE promoted_to > promoted_from`).Scan(&n))
	require.Equal(t, 1, n, "gate a still pending")
	step("remove c", func(s *Store) (any, error) {
		return nil, s.RemoveGate(ctx, session.GateConfig{Name: "c", ActiveLimit: 1, ActiveTimeout: time.Hour, WaitingTimeout: time.Hour}, now)
	})
	step("touch a1", func(s *Store) (any, error) {
		return nil, s.Touch(ctx, "a", []session.Touch{{ID: "a3", LastActive: now.Add(time.Second)}})
	})
	release()
	for _, s := range both {
		s.cleanWanted("a", true)
		s.cleanStart()
		require.NoError(t, s.WaitClean(ctx))
	}
	require.Equal(t, load(R), load(L), "after the cleaners")
}
