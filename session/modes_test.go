package session_test

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
)

func TestDecideJoinModes(t *testing.T) {
	now := t0
	waiter := session.Session{Gate: "default", ID: "w", Position: 7, Status: session.StatusWaiting, CreatedAt: t0}
	tests := []struct {
		name       string
		mode       session.Mode
		counters   session.Counters
		existing   *session.Session
		wantStatus session.Status
		wantErr    error
	}{
		{"open admits with a free slot", session.ModeOpen, session.Counters{NextPosition: 1}, nil, session.StatusActive, nil},
		{"empty mode reads as open", "", session.Counters{NextPosition: 1}, nil, session.StatusActive, nil},
		{"queue_all makes a newcomer wait despite a free slot", session.ModeQueueAll, session.Counters{NextPosition: 1}, nil, session.StatusWaiting, nil},
		{"reject refuses a newcomer", session.ModeReject, session.Counters{NextPosition: 1}, nil, "", session.ErrGateClosed},
		{"reject keeps an existing waiter's place", session.ModeReject, session.Counters{NextPosition: 9, Waiting: 1}, &waiter, session.StatusWaiting, nil},
		{"queue_all keeps an existing waiter waiting", session.ModeQueueAll, session.Counters{NextPosition: 9, Waiting: 1}, &waiter, session.StatusWaiting, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := cfg
			c.Mode = tt.mode
			out, err := session.DecideJoin(c, tt.counters, session.Pace{}, tt.existing, "new", now)
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr)
				assert.Equal(t, session.CodeGateClosed, session.CodeOf(err))
				assert.Equal(t, session.ActionNone, out.Action, "a refused join writes nothing")
				assert.Equal(t, session.Counters{}, out.Delta)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.wantStatus, out.Session.Status)
		})
	}
}

func TestPromotionsByMode(t *testing.T) {
	c := session.Counters{Active: 1, Waiting: 5}
	for _, tt := range []struct {
		mode session.Mode
		want int64
	}{{session.ModeOpen, 1}, {"", 1}, {session.ModeQueueAll, 0}, {session.ModeReject, 0}} {
		g := cfg
		g.Mode = tt.mode
		assert.Equal(t, tt.want, session.Promotions(g, c), "mode %q", tt.mode)
		// A release in these modes promotes as Promotions says.
		active := session.Session{Gate: "default", ID: "a", Position: 1, Status: session.StatusActive}
		assert.Equal(t, tt.want+1, session.DecideRelease(g, session.Counters{Active: 2, Waiting: 5}, &active).Promote+1, "mode %q", tt.mode)
	}
	lowered := cfg
	lowered.ActiveLimit = 1
	assert.Equal(t, int64(0), session.Promotions(lowered, session.Counters{Active: 3, Waiting: 5}), "a lowered limit admits nobody")
}

func TestPace(t *testing.T) {
	paced := func(perMinute int64) session.GateConfig {
		c := cfg
		c.NewUsersPerMinute = perMinute
		return c
	}
	t.Run("no pacing grants everything and keeps the bucket", func(t *testing.T) {
		p := session.Pace{Tokens: 0.5, At: t0}
		n, next := p.Allow(cfg, 1000, t0)
		assert.Equal(t, int64(1000), n)
		assert.Equal(t, p, next)
		assert.Equal(t, int64(math.MaxInt64), p.Available(cfg, t0))
	})
	tests := []struct {
		name      string
		perMinute int64
		pace      session.Pace
		at        time.Duration // after t0
		ask       int64
		want      int64
		wantLeft  float64
	}{
		{"a fresh bucket holds one second's worth", 600, session.Pace{}, 0, 100, 10, 0},
		{"below 60 a minute the burst is one", 30, session.Pace{}, 0, 5, 1, 0},
		{"an empty bucket grants nothing", 60, session.Pace{Tokens: 0, At: t0}, 0, 3, 0, 0},
		{"tokens come back evenly: one a second at 60", 60, session.Pace{Tokens: 0, At: t0}, time.Second, 3, 1, 0},
		{"half a token is no token", 60, session.Pace{Tokens: 0, At: t0}, 500 * time.Millisecond, 3, 0, 0.5},
		{"at 30 a minute, one every two seconds", 30, session.Pace{Tokens: 0, At: t0}, 2 * time.Second, 3, 1, 0},
		{"a long pause refills only the burst", 120, session.Pace{Tokens: 0, At: t0}, time.Hour, 100, 2, 0},
		{"a clock going back adds nothing", 60, session.Pace{Tokens: 0, At: t0}, -time.Minute, 1, 0, 0},
		{"ask for fewer than available", 600, session.Pace{Tokens: 10, At: t0}, 0, 4, 4, 6},
		{"ask for none", 600, session.Pace{Tokens: 10, At: t0}, 0, 0, 0, 10},
		{"a lowered rate caps what was saved", 60, session.Pace{Tokens: 10, At: t0}, 0, 10, 1, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := paced(tt.perMinute)
			now := t0.Add(tt.at)
			avail := tt.pace.Available(c, now)
			n, next := tt.pace.Allow(c, tt.ask, now)
			assert.Equal(t, tt.want, n)
			assert.InDelta(t, tt.wantLeft, next.Tokens, 1e-6)
			assert.Equal(t, min(avail, max(tt.ask, 0)), n, "Allow grants what Available says, up to the ask")
		})
	}
	t.Run("over a minute at most the rate plus one second's burst", func(t *testing.T) {
		c := paced(120)
		var p session.Pace
		var total int64
		for ms := 0; ms <= 60_000; ms += 250 { // a sweeper every 250ms asking for plenty
			var n int64
			n, p = p.Allow(c, 1000, t0.Add(time.Duration(ms)*time.Millisecond))
			total += n
			assert.LessOrEqual(t, n, int64(2), "never more than a second's worth at once")
		}
		assert.Equal(t, int64(120+2), total)
	})
	t.Run("a paced join waits without a token", func(t *testing.T) {
		c := paced(60)
		out, err := session.DecideJoin(c, session.Counters{NextPosition: 1}, session.Pace{}, nil, "a", t0)
		require.NoError(t, err)
		assert.Equal(t, session.StatusActive, out.Session.Status)
		out, err = session.DecideJoin(c, session.Counters{NextPosition: 2, Active: 1}, out.Pace, nil, "b", t0.Add(100*time.Millisecond))
		require.NoError(t, err)
		assert.Equal(t, session.StatusWaiting, out.Session.Status, "the token was spent: b waits despite a free slot")
	})
}

func TestValidateModeAndPacing(t *testing.T) {
	for _, tt := range []struct {
		mutate func(*session.GateConfig)
		ok     bool
	}{
		{func(c *session.GateConfig) { c.Mode = session.ModeQueueAll }, true},
		{func(c *session.GateConfig) { c.Mode = "closed" }, false},
		{func(c *session.GateConfig) { c.Mode = "OPEN" }, false},
		{func(c *session.GateConfig) { c.NewUsersPerMinute = -1 }, false},
		{func(c *session.GateConfig) { c.NewUsersPerMinute = math.MaxInt64 }, false},
		{func(c *session.GateConfig) { c.NewUsersPerMinute = 6000 }, true},
	} {
		c := cfg
		tt.mutate(&c)
		err := c.Validate()
		if tt.ok {
			assert.NoError(t, err)
		} else {
			assert.True(t, errors.Is(err, session.ErrInvalidArgument), "%+v: %v", c, err)
		}
	}
}
