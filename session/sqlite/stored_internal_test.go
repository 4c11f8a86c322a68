package sqlite

// The writer's copy of each gate's stored settings and events (gateEntry
// held, events): what it keeps, how failures and damaged rows leave it, and
// what an update decides with when they change under it.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
	"github.com/anteroomhq/anteroom/session/sessiontest"
)

// The writer's entry decides with the gate's events and holds the gate
// while a pre-queue is open; neither needs a started event's drawn line
// (Postgres leaves it out).
func TestGateEntryKeepsNoDrawnLine(t *testing.T) {
	s, ctx, cfg := openInternal(t), context.Background(), sessiontest.GateConfig("default", 1)
	ev := session.ScheduledEvent{Gate: "default", ID: "drop", PrequeueAt: epoch.Add(time.Minute),
		StartsAt: epoch.Add(2 * time.Minute), Seed: make([]byte, session.LotterySeedSize)}
	_, err := s.SaveEvent(ctx, ev)
	require.NoError(t, err)
	_, _, err = s.AdvanceEvent(ctx, "default", "drop", ev.PrequeueAt)
	require.NoError(t, err)
	for i := range 2000 {
		_, err := s.Join(ctx, cfg, fmt.Sprint("p", i), ev.PrequeueAt)
		require.NoError(t, err)
	}
	_, _, err = s.AdvanceEvent(ctx, "default", "drop", ev.StartsAt)
	require.NoError(t, err)
	for _, miss := range []bool{false, true} {
		if miss {
			clear(s.cache) // as every failed batch does
		}
		var events, positions int
		require.NoError(t, s.gateOp(ctx, "default", func(_ *batch, e *gateEntry) error {
			events = len(e.events) // read on the writer, checked here
			if events > 0 {
				positions = len(e.events[0].Positions)
			}
			return nil
		}))
		require.Equal(t, 1, events)
		assert.Zero(t, positions, "drawn line kept (cache miss: %v)", miss)
	}
}

// A settings op batched with joins, and its batch's failures (the op's own
// after it wrote, a later op's, the commit's: each rolls the transaction
// back and reruns it, or fails it, with the writer's cache dropped): the
// joins decide with what is stored in the end, never with what was rolled
// back.
func TestTheStoredSettingsHoldThroughAnUndo(t *testing.T) {
	injected := errors.New("injected")
	for _, tc := range []struct {
		name       string
		failOp     func(o *op) bool // fails after it wrote
		failCommit bool
		// the want of "c", queued after the settings op, and of "d", joined after the batch
		wantC, wantD session.Status
	}{
		{"all commit", nil, false, session.StatusWaiting, session.StatusWaiting},
		{"the settings op fails", func(o *op) bool { return o.kind == opSettings }, false, session.StatusActive, session.StatusActive},
		{"a later join fails", func(o *op) bool { return o.kind == opJoin && o.id == "boom" }, false, session.StatusWaiting, session.StatusWaiting},
		{"the commit fails", nil, true, "", session.StatusActive},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var failCommit bool
			setHooks(t, func(o *op) error {
				if o.kind == opSettings && tc.failCommit {
					failCommit = true // the transaction of the settings op
				}
				if tc.failOp != nil && tc.failOp(o) {
					return injected
				}
				return nil
			}, func() error {
				if failCommit {
					failCommit = false
					return injected
				}
				return nil
			})
			s := openInternal(t)
			ctx := context.Background()
			cfg := sessiontest.GateConfig("default", 5)
			_, err := s.Join(ctx, cfg, "a", epoch)
			require.NoError(t, err)
			lowered := cfg
			lowered.ActiveLimit = 1

			release := blockWriter(t, s)
			saved := make(chan error, 1)
			n := len(s.ops)
			go func() { saved <- s.SaveGateSettings(ctx, "default", &lowered) }()
			waitQueued(t, s, n+1)
			res := queueJoins(t, s, ctx, cfg, "c", "boom")
			release()
			<-saved
			c := <-res[0]
			<-res[1]
			if tc.wantC != "" {
				require.NoError(t, c.err)
				assert.Equal(t, tc.wantC, c.s.Status, "c")
			}
			d, err := s.Join(ctx, cfg, "d", epoch.Add(time.Second))
			require.NoError(t, err)
			assert.Equal(t, tc.wantD, d.Status, "d")
		})
	}
}

// Settings or event rows damaged by hand: the gate keeps working, deciding
// with the ops' own configuration, and the writer warns.
func TestDamagedStoredRowsKeepTheGateWorking(t *testing.T) {
	good := `{"activeLimit":1,"activeTimeoutNs":60000000000,"waitingTimeoutNs":120000000000,"mode":"open"}`
	for _, tc := range []struct {
		name string
		rows []string // meta (key, value) pairs, as SQL values
		warn string
		// held: a damaged event that may be an open pre-queue holds the
		// gate (session.DamagedEventHolds); a row under an id that is not
		// one was never an event, and could not be deleted.
		held bool
	}{
		{"settings do not validate", []string{`'gate_settings/default', '{"activeLimit": -4}'`}, "stored runtime settings are damaged", false},
		{"settings not an object", []string{`'gate_settings/default', '[1, 2]'`}, "stored runtime settings are damaged", false},
		{"event not JSON", []string{`'gate_settings/default', '` + good + `'`, `'gate_events/default/e', 'garbage'`}, "stored event is damaged", true},
		{"event of a bad phase", []string{`'gate_settings/default', '` + good + `'`, `'gate_events/default/e', '{"phase":"bogus"}'`}, "stored event is damaged", true},
		{"event of a bad id", []string{`'gate_settings/default', '` + good + `'`, `'gate_events/default/a b', '{"phase":"scheduled"}'`}, "stored event is damaged", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "d.db")
			s, err := Open(path, Options{Logger: slog.New(slog.DiscardHandler)})
			require.NoError(t, err)
			require.NoError(t, s.Close())
			stmts := make([]string, len(tc.rows))
			for i, r := range tc.rows {
				stmts[i] = "INSERT OR REPLACE INTO meta (key, value) VALUES (" + r + ")"
			}
			rawExec(t, path, stmts...)
			logs := &sessiontest.LogBuffer{}
			s, err = Open(path, Options{Logger: slog.New(slog.NewTextHandler(logs, nil))})
			require.NoError(t, err)
			t.Cleanup(func() { _ = s.Close() })
			cfg := sessiontest.GateConfig("default", 2)
			ctx := context.Background()
			want := session.StatusActive // decided with the op's own limit (2)
			if tc.held {
				want = session.StatusWaiting
			}
			for i := range 2 {
				got, err := s.Join(ctx, cfg, fmt.Sprint("s", i), epoch)
				require.NoError(t, err)
				assert.Equal(t, want, got.Status)
			}
			_, err = s.Release(ctx, cfg, "s0", epoch)
			require.NoError(t, err)
			_, err = s.Update(ctx, cfg, epoch, 0)
			require.NoError(t, err)
			assert.Equal(t, 1, strings.Count(logs.String(), tc.warn), logs.String())
		})
	}
}

// Settings changed between two transactions of one update: each
// transaction purges by the cutoffs of the configuration it decides with.
// Two waiters are stale by every timeout but the raised one; four only by
// the lowered one (seen 90 s after the others), which the caller's
// cutoffs would have kept.
func TestSettingsChangedMidUpdateSetItsCutoffs(t *testing.T) {
	for _, tc := range []struct {
		name       string
		timeout    time.Duration // the waiting timeout saved after the first transaction
		wantPurged int64
	}{
		{"raised: the rest stay", 10 * time.Minute, 2},
		{"lowered: the rest go", time.Minute, 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := openInternal(t)
			ctx := context.Background()
			cfg := sessiontest.GateConfig("default", 1) // waiting timeout 2m (GateConfig's)
			cfg.WaitingTimeout = 2 * time.Minute
			_, err := s.Join(ctx, cfg, "a", epoch)
			require.NoError(t, err)
			for i := range 6 {
				_, err := s.Join(ctx, cfg, fmt.Sprint("w", i), epoch)
				require.NoError(t, err)
			}
			touches := []session.Touch{{ID: "a", LastActive: epoch.Add(3 * time.Minute)}}
			for i := 2; i < 6; i++ {
				touches = append(touches, session.Touch{ID: fmt.Sprint("w", i), LastActive: epoch.Add(90 * time.Second)})
			}
			require.NoError(t, s.Touch(ctx, "default", touches))
			saved := make(chan error, 1)
			changed := cfg
			changed.WaitingTimeout = tc.timeout
			atUpdateStep(t, s, 1, 1, func() {
				go func() { saved <- s.SaveGateSettings(ctx, "default", &changed) }()
			})
			rep, err := s.Update(ctx, cfg, epoch.Add(3*time.Minute+time.Second), 2)
			require.NoError(t, err)
			require.NoError(t, <-saved)
			assert.Equal(t, tc.wantPurged, rep.PurgedWaiting)
			assert.Greater(t, rep.Transactions, 1)
		})
	}
}

// Stored events and settings that do not decode: the shared suite's tests
// (sessiontest.RunDamagedRowSuite), the row rewritten by hand while the
// store is closed.
func TestDamagedRowSuite(t *testing.T) {
	sessiontest.RunDamagedRowSuite(t, func(tb testing.TB) (func() session.Store, func(gate, id, value string)) {
		path := filepath.Join(tb.TempDir(), "anteroom.db")
		open := func() session.Store {
			s, err := Open(path, Options{Logger: slog.New(slog.DiscardHandler)})
			require.NoError(tb, err)
			return s
		}
		damage := func(gate, id, value string) {
			key := eventKey(gate, id)
			if id == "" {
				key = settingsPrefix + gate
			}
			db, err := sqlOpen(path)
			require.NoError(tb, err)
			defer db.Close()
			res, err := db.Exec(`UPDATE meta SET value = ? WHERE key = ?`, value, key)
			require.NoError(tb, err)
			n, err := res.RowsAffected()
			require.NoError(tb, err)
			require.Equal(tb, int64(1), n, "row %s", key)
		}
		return open, damage
	})
}
