package sqlite

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
	"github.com/anteroomhq/anteroom/session/sessiontest"
)

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
