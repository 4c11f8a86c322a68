package main

import (
	"fmt"
	"os"
	"runtime/pprof"
)

// startCPUProfile starts writing this process's CPU profile to path; the
// returned function stops it and closes the file. An empty path profiles
// nothing. It returns the error of creating the file or of starting the
// profile (one is running already).
func startCPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		_ = f.Close()
	}, nil
}
