//go:build !linux

package main

import (
	"os/exec"
	"time"
)

func raiseFileLimit() {}

func fileLimit() int { return 1024 }

func dieWithParent(*exec.Cmd) {}

func cpuTime() time.Duration { return 0 }
