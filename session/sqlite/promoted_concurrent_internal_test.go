package sqlite

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
	"github.com/anteroomhq/anteroom/session/sessiontest"
)

// Concurrent ops on a store with logical promotion: joins, touches and
// claims, claim links, releases, leaves, call-backs, named purges,
// admissions, updates in small chunks (so that their transactions share
// batches with the others: takeQueued) and the cleaner, with two gates.
// In every snapshot of the read pool the counters equal the live rows with
// the pending ranges applied, and the active rows stay within the limit;
// at the end, a reopen repairs no counter.
func TestConcurrentLogicalPromotionKeepsTheCounters(t *testing.T) {
	dur := 3 * time.Second
	if v := os.Getenv("REVIEW_STRESS_SECONDS"); v != "" {
		n, _ := strconv.Atoi(v)
		dur = time.Duration(n) * time.Second
	}
	path := t.TempDir() + "/c.db"
	log := &sessiontest.LogBuffer{}
	s := openWithLogicalLog(t, path, true, log)
	ctx := context.Background()
	gates := []session.GateConfig{
		{Name: "g1", ActiveLimit: 20, ActiveTimeout: 3 * time.Second, WaitingTimeout: 5 * time.Second, ClaimTimeout: 2 * time.Second},
		{Name: "g2", ActiveLimit: 7, ActiveTimeout: 2 * time.Second, WaitingTimeout: 9 * time.Second},
	}
	var clock atomic.Int64
	clock.Store(epoch.UnixNano())
	now := func() time.Time { return time.Unix(0, clock.Load()).UTC() }
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var fails, seenPending, checks atomic.Int64
	failf := func(format string, args ...any) {
		if fails.Add(1) <= 5 {
			t.Errorf(format, args...)
		}
	}
	check := func(cfg session.GateConfig) {
		q := `SELECT g.active, g.waiting, ` +
			`(SELECT count(*) FROM sessions WHERE gate = ?1 AND ` + liveStored + ` AND (CASE WHEN ` + pendingRow + ` THEN 1 ELSE status END) = 1), ` +
			`(SELECT count(*) FROM sessions WHERE gate = ?1 AND ` + liveStored + ` AND (CASE WHEN ` + pendingRow + ` THEN 1 ELSE status END) = 0), ` +
			`g.promoted_from, g.promoted_to FROM gates g WHERE g.name = ?1`
		var a, w, ar, wr, pf, pt int64
		err := s.readDB.QueryRow(q, cfg.Name).Scan(&a, &w, &ar, &wr, &pf, &pt)
		if err != nil {
			if !strings.Contains(err.Error(), "no rows") {
				failf("check: %v", err)
			}
			return
		}
		if pt > pf {
			seenPending.Add(1)
		}
		checks.Add(1)
		if a != ar || w != wr {
			failf("gate %s: counters active %d waiting %d, live rows active %d waiting %d (range [%d, %d))", cfg.Name, a, w, ar, wr, pf, pt)
		}
		if a > cfg.ActiveLimit {
			failf("gate %s: %d active over the limit %d", cfg.Name, a, cfg.ActiveLimit)
		}
	}
	worker := func(seed uint64, fn func(rng *rand.Rand, cfg session.GateConfig)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, 7))
			for {
				select {
				case <-stop:
					return
				default:
				}
				fn(rng, gates[rng.IntN(len(gates))])
			}
		}()
	}
	id := func(rng *rand.Rand) string { return fmt.Sprintf("s%d", rng.IntN(300)) }
	for k := range 3 {
		worker(uint64(10+k), func(rng *rand.Rand, cfg session.GateConfig) {
			_, _ = s.Join(ctx, cfg, id(rng), now())
		})
	}
	worker(20, func(rng *rand.Rand, cfg session.GateConfig) {
		i := id(rng)
		cur, err := s.Get(ctx, cfg.Name, i)
		if err != nil {
			return
		}
		switch rng.IntN(3) {
		case 0:
			_ = s.Touch(ctx, cfg.Name, []session.Touch{{ID: i, LastActive: now(), ClaimDeadline: cur.ClaimDeadline}})
		case 1:
			if !cur.ClaimDeadline.IsZero() {
				_, _ = s.ClaimLink(ctx, cfg.Name, i, cur.ClaimDeadline, now())
			}
		case 2:
			_ = s.Touch(ctx, cfg.Name, []session.Touch{{ID: i, LastActive: now()}})
		}
	})
	worker(21, func(rng *rand.Rand, cfg session.GateConfig) {
		switch rng.IntN(4) {
		case 0:
			_, _ = s.Release(ctx, cfg, id(rng), now())
		case 1:
			_, _ = s.Leave(ctx, cfg, id(rng), now())
		case 2:
			_, _ = s.SetNotify(ctx, cfg, id(rng), rng.IntN(2) == 0, now())
		case 3:
			_, _ = s.Purge(ctx, cfg, []string{id(rng), id(rng)}, now())
		}
	})
	worker(22, func(rng *rand.Rand, cfg session.GateConfig) {
		i := id(rng)
		cur, err := s.Get(ctx, cfg.Name, i)
		if err != nil || cur.Status != session.StatusActive {
			return
		}
		_, _ = s.IssueAdmission(ctx, session.Admission{ID: fmt.Sprintf("j%d", rng.Uint64()), Gate: cfg.Name, Session: i, Position: cur.Position, IssuedAt: now(), Expires: now().Add(time.Second)})
	})
	worker(30, func(rng *rand.Rand, cfg session.GateConfig) {
		clock.Add(int64(time.Duration(rng.IntN(400)) * time.Millisecond))
		if rng.IntN(30) == 0 {
			clock.Add(-int64(time.Second)) // a clock set back
		}
		_, err := s.Update(ctx, cfg, now(), 1+rng.IntN(6))
		if err != nil {
			failf("update: %v", err)
		}
	})
	worker(40, func(rng *rand.Rand, cfg session.GateConfig) {
		check(cfg)
		if rng.IntN(50) == 0 {
			if _, err := s.Load(ctx, []string{cfg.Name}); err != nil {
				failf("load: %v", err)
			}
		}
	})
	time.Sleep(dur)
	close(stop)
	wg.Wait()
	t.Logf("%d checks, %d with a range pending", checks.Load(), seenPending.Load())
	for _, cfg := range gates {
		check(cfg)
	}
	require.NoError(t, s.WaitClean(ctx))
	for _, cfg := range gates {
		check(cfg)
	}
	require.NoError(t, s.Close())
	s2 := openWithLogicalLog(t, path, true, log)
	defer s2.Close()
	assert.NotContains(t, log.String(), "did not match")
	assert.NotContains(t, log.String(), "level=ERROR")
}

func openWithLogicalLog(t *testing.T, path string, on bool, log *sessiontest.LogBuffer) *Store {
	t.Helper()
	was := logicalPromotion
	logicalPromotion = on
	defer func() { logicalPromotion = was }()
	s, err := Open(path, Options{Logger: slog.New(slog.NewTextHandler(log, nil))})
	require.NoError(t, err)
	return s
}
