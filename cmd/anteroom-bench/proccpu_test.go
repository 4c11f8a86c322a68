package main

import (
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestProcCPU(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	// Burn CPU until getrusage sees more than two clock ticks of it.
	x := 0
	for cpuTime() < 3*clockTick {
		for i := range 1_000_000 {
			x += i
		}
	}
	_ = x
	self := os.Getpid()
	tests := []struct {
		name    string
		pids    []int
		ok      bool
		atLeast time.Duration
	}{
		{"this process", []int{self}, true, clockTick},
		{"twice counts twice", []int{self, self}, true, 2 * clockTick},
		{"no such process", []int{1 << 30}, false, 0},
		{"none", nil, false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, ok := procCPU(tt.pids)
			assert.Equal(t, tt.ok, ok)
			assert.GreaterOrEqual(t, d, tt.atLeast)
			if !tt.ok {
				assert.Zero(t, d)
			}
		})
	}
	c := &cpuSplit{}
	assert.Contains(t, c.String(), "not measured")
	c = &cpuSplit{anteroom: 3 * time.Millisecond, server: 2 * time.Millisecond, self: time.Millisecond, ops: 10, ok: true}
	assert.Contains(t, c.String(), "anteroom instances 300 µs, Postgres processes 200 µs, load generator 100 µs")
}
