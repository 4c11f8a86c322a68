package sqlite

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
	"github.com/anteroomhq/anteroom/session/sessiontest"
)

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
			once := false
			testHookUpdateStep = func() {
				if once {
					return
				}
				once = true
				n := len(s.ops)
				go func() { saved <- s.SaveGateSettings(ctx, "default", &changed) }()
				waitQueued(t, s, n+1)
			}
			t.Cleanup(func() { testHookUpdateStep = nil })
			rep, err := s.Update(ctx, cfg, epoch.Add(3*time.Minute+time.Second), 2)
			require.NoError(t, err)
			require.NoError(t, <-saved)
			assert.Equal(t, tc.wantPurged, rep.PurgedWaiting)
			assert.Greater(t, rep.Transactions, 1)
		})
	}
}
