//go:build unix

package session_test

import (
	"syscall"
	"time"
)

// processCPU is the process's CPU time so far (user and system), which a
// benchmark on a shared machine reports beside its wall time.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
