package session

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
)

// The lottery of a scheduled event's pre-queue, deterministic given its
// seed, so that anyone can recompute it from the published data
// (GET {base}/api/events): the seed, and the pre-queue positions in arrival
// order (ascending).
//
// The algorithm, exactly (gate/guard.LotteryOrder is an independent copy):
//
//  1. a := positions (ascending, n of them); counter := 0.
//  2. For i from n-1 down to 1: j := draw(i+1); swap a[i] and a[j].
//  3. draw(b): x := the first 8 bytes, big-endian, of
//     HMAC-SHA256(key = seed, message = counter as 8 bytes big-endian);
//     counter++. Let r := 2^64 mod b. If r > 0 and x > 2^64-1-r, draw
//     again (rejection: every value of x mod b is then equally likely);
//     else return x mod b.
//  4. a is the order in which the pre-queue is served: the session that
//     arrived at position a[k] gets the k-th smallest position positions[k].
//
// The commitment published before the pre-queue opens is the lowercase hex
// SHA-256 of the seed's 32 raw bytes.

// LotterySeedSize is the size of a lottery seed in bytes.
const LotterySeedSize = 32

// NewLotterySeed returns a fresh random seed from crypto/rand, or a
// CodeInternal error when the system's randomness fails.
func NewLotterySeed() ([]byte, error) {
	b := make([]byte, LotterySeedSize)
	if _, err := rand.Read(b); err != nil {
		return nil, Errorf(CodeInternal, "lottery seed: %w", err)
	}
	return b, nil
}

// LotteryCommitment is the published commitment to seed: the lowercase hex
// SHA-256 of its bytes.
func LotteryCommitment(seed []byte) string {
	sum := sha256.Sum256(seed)
	return hex.EncodeToString(sum[:])
}

// lotteryDraw draws unbiased numbers below a bound from HMAC-SHA256(seed,
// counter).
type lotteryDraw struct {
	mac     []byte
	key     []byte
	counter uint64
}

func (d *lotteryDraw) below(b uint64) uint64 {
	r := (math.MaxUint64%b + 1) % b // 2^64 mod b
	for {
		var msg [8]byte
		binary.BigEndian.PutUint64(msg[:], d.counter)
		d.counter++
		m := hmac.New(sha256.New, d.key)
		m.Write(msg[:])
		d.mac = m.Sum(d.mac[:0])
		x := binary.BigEndian.Uint64(d.mac[:8])
		if r > 0 && x > math.MaxUint64-r {
			continue
		}
		return x % b
	}
}

// LotteryOrder returns the order in which the pre-queue at positions
// (ascending) is served, per the algorithm above. It returns an
// ErrInvalidArgument error for a seed that is not LotterySeedSize bytes.
func LotteryOrder(seed []byte, positions []int64) ([]int64, error) {
	if len(seed) != LotterySeedSize {
		return nil, Errorf(CodeInvalidArgument, "lottery seed: want %d bytes, got %d", LotterySeedSize, len(seed))
	}
	a := append([]int64{}, positions...)
	d := &lotteryDraw{key: seed}
	for i := len(a) - 1; i >= 1; i-- {
		j := d.below(uint64(i + 1))
		a[i], a[j] = a[j], a[i]
	}
	return a, nil
}

// DecodeLotterySeed parses a seed from its lowercase hex. It returns an
// ErrInvalidArgument error when it is not LotterySeedSize bytes of hex.
func DecodeLotterySeed(s string) ([]byte, error) {
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != LotterySeedSize {
		return nil, Errorf(CodeInvalidArgument, "lottery seed: want %d hex characters", 2*LotterySeedSize)
	}
	return b, nil
}

// lotteryMoves returns, for a started shuffled pre-queue, the new position
// of each session by its old one: served[k] moves to positions[k].
func lotteryMoves(positions, served []int64) (map[int64]int64, error) {
	if len(positions) != len(served) {
		return nil, fmt.Errorf("lottery: %d positions, %d served", len(positions), len(served))
	}
	m := make(map[int64]int64, len(served))
	for k, old := range served {
		m[old] = positions[k]
	}
	return m, nil
}
