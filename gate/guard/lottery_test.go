package guard_test

import (
	"crypto/sha256"
	"encoding/hex"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/gate/guard"
	"github.com/anteroomhq/anteroom/gate/wire"
	"github.com/anteroomhq/anteroom/session"
)

// TestLotteryOrderMatchesTheSidecar: guard's verifier, written from the
// description alone, agrees with the sidecar's draw on random seeds and
// pre-queues.
func TestLotteryOrderMatchesTheSidecar(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 300; i++ {
		seed := make([]byte, 32)
		for k := range seed {
			seed[k] = byte(rng.Uint32())
		}
		n := rng.IntN(200)
		pos := make([]int64, n)
		p := int64(rng.IntN(1000))
		for k := range pos {
			p += 1 + int64(rng.IntN(5))
			pos[k] = p
		}
		want, err := session.LotteryOrder(seed, pos)
		require.NoError(t, err)
		got, err := guard.LotteryOrder(hex.EncodeToString(seed), pos)
		require.NoError(t, err)
		require.Equal(t, want, got, "seed %x n %d", seed, n)
	}
}

func TestVerifyLottery(t *testing.T) {
	seed := make([]byte, 32)
	for i := range seed {
		seed[i] = byte(i)
	}
	sum := sha256.Sum256(seed)
	commitment := hex.EncodeToString(sum[:])
	ev := wire.EventView{ID: "e", Shuffle: true, Seed: hex.EncodeToString(seed), FirstPosition: 10, Positions: []int64{10, 11, 12, 13, 14, 15, 16, 17, 18, 19}}
	served, err := guard.VerifyLottery(ev, commitment)
	require.NoError(t, err)
	// The pinned vector of session's tests.
	assert.Equal(t, []int64{12, 11, 10, 17, 18, 19, 13, 14, 16, 15}, served)
	now, ok := guard.LotteryPosition(ev, served, 12)
	assert.True(t, ok)
	assert.Equal(t, int64(10), now, "served first: the smallest position")
	_, ok = guard.LotteryPosition(ev, served, 9)
	assert.False(t, ok, "not in the pre-queue")

	for name, mut := range map[string]func(e *wire.EventView) string{
		"other seed":       func(e *wire.EventView) string { e.Seed = hex.EncodeToString(make([]byte, 32)); return commitment },
		"other commitment": func(e *wire.EventView) string { return hex.EncodeToString(make([]byte, 32)) },
		"no seed":          func(e *wire.EventView) string { e.Seed = ""; return commitment },
		"not hex":          func(e *wire.EventView) string { e.Seed = "zz"; return commitment },
		"unsorted":         func(e *wire.EventView) string { e.Positions = []int64{11, 10}; return commitment },
		"below first":      func(e *wire.EventView) string { e.Positions = []int64{9, 10}; return commitment },
		"duplicate":        func(e *wire.EventView) string { e.Positions = []int64{10, 10}; return commitment },
	} {
		e := ev
		c := mut(&e)
		_, err := guard.VerifyLottery(e, c)
		assert.ErrorIs(t, err, guard.ErrLotteryMismatch, name)
	}
	fifo := ev
	fifo.Shuffle = false
	served, err = guard.VerifyLottery(fifo, commitment)
	require.NoError(t, err)
	assert.Equal(t, fifo.Positions, served, "without shuffle, arrival order")
}
