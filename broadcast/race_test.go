//go:build race

package broadcast

// raceEnabled tells allocation tests that the race detector is on: it makes
// sync.Pool drop items at random, so allocation counts vary.
const raceEnabled = true
