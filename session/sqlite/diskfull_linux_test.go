package sqlite

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session/sessiontest"
)

// smallDisk mounts a private 4 MiB tmpfs for the test (root only: skipped
// elsewhere, required under CI, which runs as root) and unmounts it after.
func smallDisk(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, "size=4m,mode=0700"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("mounting a small tmpfs for a real full disk: %v (CI runs as root)", err)
		}
		t.Skipf("mounting a small tmpfs needs root: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
	return dir
}

// On a really full disk a join's commit fails when the WAL must grow. The
// readiness probe used to write 8 KiB, which committed into the blocks the
// failed commit had already added to the WAL: Ready said ready while every
// join still failed. (TestReadyReportsAFullDatabase fills the database with
// max_page_count instead, which fails at the INSERT, not at the commit.)
func TestReadyOnARealFullDisk(t *testing.T) {
	defer func(p time.Duration) { probeInterval = p }(probeInterval)
	probeInterval = 0
	dir := smallDisk(t)
	s, err := Open(filepath.Join(dir, "f.db"), Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	defer s.Close()
	ctx := context.Background()
	cfg := sessiontest.GateConfig("default", 2)
	var st syscall.Statfs_t
	require.NoError(t, syscall.Statfs(dir, &st))
	free := int64(st.Bavail) * int64(st.Bsize)
	filler := filepath.Join(dir, "filler")
	require.NoError(t, os.WriteFile(filler, make([]byte, free-300<<10), 0o600))

	var joinErr error
	acked := 0
	for i := 0; i < 20000 && joinErr == nil; i++ {
		if _, joinErr = s.Join(ctx, cfg, fmt.Sprintf("fill-%06d-%0100d", i, i), epoch); joinErr == nil {
			acked++
		}
	}
	require.Error(t, joinErr, "the disk filled up")
	for range 3 {
		rerr := s.Ready(ctx)
		_, jerr := s.Join(ctx, cfg, fmt.Sprintf("again-%0100d", time.Now().UnixNano()), epoch)
		if jerr != nil {
			assert.Error(t, rerr, "Ready said ready while a join failed with %v", jerr)
		}
	}

	require.NoError(t, os.Remove(filler))
	require.NoError(t, s.Ready(ctx), "room again: the probe commits")
	_, err = s.Join(ctx, cfg, "after", epoch)
	require.NoError(t, err)
	require.NoError(t, s.Close())
	// Nothing acknowledged was lost.
	s2, err := Open(filepath.Join(dir, "f.db"), Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	defer s2.Close()
	snaps, err := s2.Load(ctx, []string{"default"})
	require.NoError(t, err)
	st2 := snaps["default"].State
	assert.GreaterOrEqual(t, st2.Active+st2.Waiting, int64(acked+1))
}
