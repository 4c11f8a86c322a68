//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package sqlite_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session/sqlite"
)

// lockChildEnv names the database the helper process tries to open.
const lockChildEnv = "ANTEROOM_SQLITE_LOCK_CHILD"

// TestLockChild is the helper process of TestExclusiveLockAcrossProcesses:
// it only runs when re-executed by it.
func TestLockChild(t *testing.T) {
	path := os.Getenv(lockChildEnv)
	if path == "" {
		t.Skip("helper process of TestExclusiveLockAcrossProcesses")
	}
	start := time.Now()
	s, err := sqlite.Open(path, quiet)
	took := time.Since(start)
	if err != nil {
		fmt.Printf("CHILD open failed after %v: locked=%v: %v\n", took.Round(time.Millisecond), errors.Is(err, sqlite.ErrLocked), err)
		require.Less(t, took, 5*time.Second, "Open must fail at once, not wait for the lock")
		return
	}
	fmt.Println("CHILD open succeeded")
	require.NoError(t, s.Close())
}

func runLockChild(t *testing.T, path string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestLockChild$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), lockChildEnv+"="+path)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "helper process:\n%s", out)
	return string(out)
}

func TestExclusiveLockAcrossProcesses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.db")
	s, err := sqlite.Open(path, quiet)
	require.NoError(t, err)

	out := runLockChild(t, path)
	require.Contains(t, out, "CHILD open failed")
	require.Contains(t, out, "locked=true")
	require.Contains(t, out, fmt.Sprintf("anteroom: database %q is in use by another process (lock %s held)", path, path+".lock"))

	require.NoError(t, s.Close())
	out = runLockChild(t, path)
	require.Contains(t, out, "CHILD open succeeded")

	s, err = sqlite.Open(path, quiet)
	require.NoError(t, err, "reopen after the other process closed")
	require.NoError(t, s.Close())
}
