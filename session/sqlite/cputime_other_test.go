//go:build !unix

package sqlite_test

import "time"

// cpuTime is the process's CPU time where getrusage exists; elsewhere 0, so
// the benchmarks' cpu-ns/op reads 0 rather than a wrong figure.
func cpuTime() time.Duration { return 0 }
