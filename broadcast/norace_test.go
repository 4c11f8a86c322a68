//go:build !race

package broadcast

// raceEnabled tells allocation tests that the race detector is on.
const raceEnabled = false
