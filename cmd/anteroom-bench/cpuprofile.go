package main

import (
	"fmt"
	"os"
	"runtime/pprof"
	"runtime/trace"
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

// startTrace starts writing an execution trace (runtime/trace) to
// path.name, for the window of one scenario; the returned function stops it
// and closes the file. An empty path traces nothing. It returns the error of
// creating the file or of starting the trace (one is running already).
func startTrace(path, name string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path + "." + name)
	if err != nil {
		return nil, fmt.Errorf("trace: %w", err)
	}
	if err := trace.Start(f); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("trace: %w", err)
	}
	return func() {
		trace.Stop()
		_ = f.Close()
	}, nil
}
