package sessiontest

import (
	"runtime"
	"strings"
	"testing"
	"time"
	"unsafe"
)

// RequireFreed checks that nothing keeps a request's memory through a
// piece of it. It passes use piece cut from the tail of a 32 KB string that
// stands for the request (a query string at the end of a padded request
// line, an id at the end of a padded header), drops the string, and fails
// the test with msg unless the garbage collector frees it within 10 s. The
// function use returns, when not nil, runs once the string is freed (or
// the test failed): checks on what use kept, while it is still kept.
func RequireFreed(t testing.TB, piece string, use func(piece string) (after func()), msg string) {
	t.Helper()
	freed := make(chan struct{})
	request := strings.Repeat("x", 32<<10) + piece
	runtime.AddCleanup(unsafe.StringData(request), func(ch chan struct{}) { close(ch) }, freed)
	after := use(request[len(request)-len(piece):])
	request = ""
	if after != nil {
		defer after()
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		runtime.GC()
		select {
		case <-freed:
			return
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal(msg)
		}
	}
}
