package main

import (
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"runtime/trace"
)

// startCPUProfile starts writing this process's CPU profile to path; the
// returned function stops it and closes the file. An empty path profiles
// nothing. It returns the error of creating the file or of starting the
// profile (one is running already).
func startCPUProfile(path string) (stop func(), err error) {
	return startRecording("cpu profile", path, pprof.StartCPUProfile, pprof.StopCPUProfile)
}

// startTrace starts writing an execution trace (runtime/trace) to
// path.name, for the window of one scenario; the returned function stops it
// and closes the file. An empty path traces nothing. It returns the error of
// creating the file or of starting the trace (one is running already).
func startTrace(path, name string) (stop func(), err error) {
	if path != "" {
		path += "." + name
	}
	return startRecording("trace", path, trace.Start, trace.Stop)
}

// startRecording creates the file at path and starts a runtime recording
// (what) into it; the returned function stops it and closes the file. An
// empty path records nothing. Errors: the file's creation or start's,
// wrapped with what.
func startRecording(what, path string, start func(io.Writer) error, stopRec func()) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if err := start(f); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return func() {
		stopRec()
		_ = f.Close()
	}, nil
}
