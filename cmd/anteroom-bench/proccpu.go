package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// clockTick is the unit of /proc/<pid>/stat's CPU times (USER_HZ, 100 on
// every Linux this runs on).
const clockTick = 10 * time.Millisecond

// procCPU returns the user+system CPU time the processes have used so far,
// from /proc/<pid>/stat; a process that is gone (or a system without
// /proc) counts nothing, and ok says whether any was read.
func procCPU(pids []int) (d time.Duration, ok bool) {
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		// The command name, in parentheses, may hold spaces: the fields
		// counted from the last ')'. utime and stime are fields 14 and 15.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := bytes.Fields(b[i+1:])
		if len(f) < 13 {
			continue
		}
		u, err1 := strconv.ParseInt(string(f[11]), 10, 64)
		s, err2 := strconv.ParseInt(string(f[12]), 10, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		d += time.Duration(u+s) * clockTick
		ok = true
	}
	return d, ok
}

// serverPIDs returns the process ids of the server's backends and
// background processes (pg_stat_activity), to read their CPU time when the
// server runs on this machine.
func serverPIDs(ctx context.Context, c *pgx.Conn) ([]int, error) {
	rows, err := c.Query(ctx, "SELECT pid FROM pg_stat_activity")
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[int])
}

// cpuSplit adds up the CPU time the processes of a measured load used,
// windows after windows: the anteroom instances, the server's processes and
// this process (the load generator).
type cpuSplit struct {
	anteroom, server, self time.Duration
	ops                    int64
	ok                     bool
}

// measure runs fn and adds the CPU time used meanwhile and the ops it
// reports.
func (c *cpuSplit) measure(kids, server []int, fn func() (int64, error)) error {
	a0, ok1 := procCPU(kids)
	s0, ok2 := procCPU(server)
	m0 := cpuTime()
	n, err := fn()
	if err != nil {
		return err
	}
	a1, _ := procCPU(kids)
	s1, _ := procCPU(server)
	c.anteroom += a1 - a0
	c.server += s1 - s0
	c.self += cpuTime() - m0
	c.ops += n
	c.ok = c.ok || (ok1 && ok2)
	return nil
}

// String reports the CPU time per op, in microseconds.
func (c *cpuSplit) String() string {
	if !c.ok || c.ops == 0 {
		return "CPU per join not measured (no /proc, or a server on another machine)"
	}
	per := func(d time.Duration) int64 { return d.Microseconds() / c.ops }
	return fmt.Sprintf("CPU per join (warmups included, /proc): anteroom instances %d µs, Postgres processes %d µs, load generator %d µs",
		per(c.anteroom), per(c.server), per(c.self))
}
