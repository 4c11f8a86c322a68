//go:build !race

package guard_test

// raceEnabled tells allocation tests that the race detector is on.
const raceEnabled = false
