package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// lockedBuffer collects a child's log.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// tail returns at most the last n bytes of the log.
func (l *lockedBuffer) tail(n int) string {
	s := l.String()
	if len(s) > n {
		return "...\n" + s[len(s)-n:]
	}
	return s
}

var listeningURL = regexp.MustCompile(`url=http://(127\.0\.0\.1:\d+)/`)

// startLimitedBinary builds the sidecar and runs it with at most nofile open
// files (soft and hard: Go cannot raise it), on a free loopback port. It
// returns the address, the child's pid and its log.
func startLimitedBinary(t *testing.T, nofile int, env ...string) (string, int, *lockedBuffer) {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("this test builds the binary and needs go on PATH: %v", err)
		}
		t.Skipf("go not on PATH, cannot build the binary: %v", err)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "anteroom")
	if out, err := exec.Command(goBin, "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cmd := exec.Command("sh", "-c", fmt.Sprintf(`ulimit -n %d && exec "$0"`, nofile), bin)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ANTEROOM_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "ANTEROOM_LISTEN=127.0.0.1:0", "ANTEROOM_DATABASE="+filepath.Join(dir, "anteroom.db"),
		"ANTEROOM_LOG_LEVEL=info", "ANTEROOM_RATE_LIMIT_PER_SECOND=0")
	cmd.Env = append(cmd.Env, env...)
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	log := &lockedBuffer{}
	addrCh := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			_, _ = log.Write([]byte(line + "\n"))
			if m := listeningURL.FindStringSubmatch(line); m != nil {
				select {
				case addrCh <- m[1]:
				default:
				}
			}
		}
		_ = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	select {
	case addr := <-addrCh:
		return addr, cmd.Process.Pid, log
	case <-exited:
		t.Fatalf("the sidecar exited:\n%s", log.String())
	case <-time.After(60 * time.Second):
		t.Fatalf("the sidecar did not listen within 60s:\n%s", log.String())
	}
	return "", 0, nil
}

// openFiles counts the process's open file descriptors.
func openFiles(t *testing.T, pid int) int {
	entries, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	require.NoError(t, err)
	return len(entries)
}

// 600 idle connections from one address cannot starve a sidecar limited
// to 512 open files: the per-address cap keeps it far from the limit (a new
// connection pushes out the oldest idle one), so /healthz, from the same
// address, still answers. Without the cap the idle keep-alive connections
// would hold every descriptor for the idle timeout (2 minutes) and new
// connections would wait in the kernel's backlog.
func TestHealthzAnswersWhile600IdleConnectionsAreOpenUnderUlimit512(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc and relies on the shell's ulimit: linux only")
	}
	app := proxyApp(t)
	addr, pid, log := startLimitedBinary(t, 512, "ANTEROOM_UPSTREAM="+app.URL)
	limits, err := os.ReadFile(fmt.Sprintf("/proc/%d/limits", pid))
	require.NoError(t, err)
	require.Regexp(t, `Max open files\s+512\s+512`, string(limits), "the child really runs under ulimit -n 512")

	// Every connection sends a request, then stays open and idle.
	idle := make([]net.Conn, 0, 600)
	t.Cleanup(func() {
		for _, c := range idle {
			_ = c.Close()
		}
	})
	for i := range 600 {
		c, err := net.DialTimeout("tcp", addr, 10*time.Second)
		require.NoError(t, err, "connection %d", i)
		idle = append(idle, c)
		_, _ = io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n") // a write to a closed one may fail: fine
	}

	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	for i := range 5 {
		resp, err := client.Get("http://" + addr + "/healthz")
		require.NoError(t, err, "health check %d, with 600 idle connections open\n%s", i, log.tail(4<<10))
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		assert.Equal(t, http.StatusOK, resp.StatusCode)
	}
	assert.Less(t, openFiles(t, pid), 256+64, "the cap (256 per address) bounds the descriptors")
	assert.NotContains(t, log.String(), "too many open files", "the sidecar never ran out of descriptors")

	// The sidecar still works as a proxy for a browser afterwards, once it
	// is ready (on a loaded machine it may still be loading its sessions:
	// the listener answers from the start).
	ready := false
	for deadline := time.Now().Add(60 * time.Second); !ready && time.Now().Before(deadline); {
		if resp, err := client.Get("http://" + addr + "/readyz"); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			ready = resp.StatusCode == http.StatusOK
		}
		if !ready {
			time.Sleep(50 * time.Millisecond)
		}
	}
	require.True(t, ready, "the sidecar became ready within 60s\n%s", log.tail(4<<10))
	req, err := http.NewRequest(http.MethodGet, "http://"+addr+"/", nil)
	require.NoError(t, err)
	req.Header.Set("Accept", "text/html")
	resp, err := client.Do(req)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	assert.Equal(t, "page", string(body))
}
