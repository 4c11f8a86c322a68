package guard

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"

	"github.com/anteroomhq/anteroom/gate/wire"
)

// The verifier of a scheduled event's lottery, written from its published
// description alone (README, "Scheduled events") and kept independent of
// the sidecar's code (session.LotteryOrder), with the standard library
// only: anyone can recompute the order from GET {base}/api/events.
//
//  1. a := positions (ascending, as published); counter := 0.
//  2. For i from n-1 down to 1: j := draw(i+1); swap a[i] and a[j].
//  3. draw(b): x := the first 8 bytes, big-endian, of
//     HMAC-SHA256(key = seed, message = counter as 8 bytes big-endian);
//     counter++; with r := 2^64 mod b, draw again while r > 0 and
//     x > 2^64-1-r; else return x mod b.
//  4. a[k] is the position, at arrival, of the session served k-th; it now
//     holds positions[k].

// ErrLotteryMismatch is returned by VerifyLottery when the published seed
// does not match the published commitment, or the data is inconsistent.
var ErrLotteryMismatch = errors.New("anteroom: the lottery's published data does not verify")

// LotteryOrder recomputes the order in which a pre-queue is served from the
// seed (64 hex characters) and the pre-queue's positions in arrival order.
// It returns an error wrapping ErrLotteryMismatch for a malformed seed.
func LotteryOrder(seedHex string, positions []int64) ([]int64, error) {
	seed, err := hex.DecodeString(seedHex)
	if err != nil || len(seed) != 32 {
		return nil, fmt.Errorf("%w: the seed is not 32 bytes of hex", ErrLotteryMismatch)
	}
	a := make([]int64, len(positions))
	copy(a, positions)
	var counter uint64
	draw := func(b uint64) uint64 {
		r := (math.MaxUint64%b + 1) % b
		for {
			var msg [8]byte
			binary.BigEndian.PutUint64(msg[:], counter)
			counter++
			m := hmac.New(sha256.New, seed)
			m.Write(msg[:])
			x := binary.BigEndian.Uint64(m.Sum(nil)[:8])
			if r == 0 || x <= math.MaxUint64-r {
				return x % b
			}
		}
	}
	for i := len(a) - 1; i >= 1; i-- {
		j := draw(uint64(i) + 1)
		a[i], a[j] = a[j], a[i]
	}
	return a, nil
}

// VerifyLottery checks a started event's published data and recomputes its
// order: the seed's SHA-256 must be the commitment published before the
// pre-queue opened, and the positions ascending and at or above
// FirstPosition. It returns the order in which the pre-queue is served
// (served[k] is the arrival position of the k-th; it now holds
// ev.Positions[k]); without shuffle, the positions as they are. Errors wrap
// ErrLotteryMismatch.
func VerifyLottery(ev wire.EventView, commitment string) ([]int64, error) {
	if ev.Seed == "" {
		return nil, fmt.Errorf("%w: event %q has not started (no seed published)", ErrLotteryMismatch, ev.ID)
	}
	seed, err := hex.DecodeString(ev.Seed)
	if err != nil {
		return nil, fmt.Errorf("%w: the seed is not hex", ErrLotteryMismatch)
	}
	sum := sha256.Sum256(seed)
	if !hmac.Equal([]byte(hex.EncodeToString(sum[:])), []byte(commitment)) {
		return nil, fmt.Errorf("%w: SHA-256 of the seed is not the commitment %q", ErrLotteryMismatch, commitment)
	}
	for i, p := range ev.Positions {
		if p < ev.FirstPosition || i > 0 && p <= ev.Positions[i-1] {
			return nil, fmt.Errorf("%w: the positions are not ascending from firstPosition", ErrLotteryMismatch)
		}
	}
	if !ev.Shuffle {
		return append([]int64{}, ev.Positions...), nil
	}
	return LotteryOrder(ev.Seed, ev.Positions)
}

// LotteryPosition returns where the session that arrived at position
// arrived stands after the draw, from the order VerifyLottery returned, and
// false when it was not in the pre-queue.
func LotteryPosition(ev wire.EventView, served []int64, arrived int64) (int64, bool) {
	for k, p := range served {
		if p == arrived && k < len(ev.Positions) {
			return ev.Positions[k], true
		}
	}
	return 0, false
}
