// Package pgtest starts private Postgres servers for tests: initdb in a
// temporary directory, the server listening only on a unix socket in that
// directory, everything removed afterwards. It needs the server binaries of
// Debian's postgresql package (/usr/lib/postgresql/*/bin) or initdb on PATH.
// Without them a test is skipped with a clear message, except when the
// environment variable CI is set: then it fails.
//
// When the tests run as root (as in CI), initdb refuses to run: the server
// is run as the unprivileged system user "postgres" (created by the
// package), which owns the temporary directory.
//
// One server per test binary is enough: call Run from TestMain and DB from
// each test, which gets a fresh database on the shared server.
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Server is one private Postgres server.
type Server struct {
	dir     string // temporary root, removed by Stop
	data    string
	sock    string // unix socket directory
	bin     string
	cred    *credential // nil unless running as root
	logPath string
	opts    Options

	mu  sync.Mutex
	cmd *exec.Cmd
	ext chan struct{} // closed when cmd exits
	dbs atomic.Int64
}

// ErrNoBinaries is returned by Start when no Postgres server binaries are
// installed.
var ErrNoBinaries = errors.New("pgtest: no Postgres server binaries (install Debian's postgresql package: /usr/lib/postgresql/*/bin)")

// BinDir returns the directory of initdb and postgres: the newest
// /usr/lib/postgresql/*/bin, else the directory of initdb on PATH. It
// returns ErrNoBinaries when there is none.
func BinDir() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return pgVersion(dirs[i]) > pgVersion(dirs[j]) })
	for _, d := range dirs {
		if isExec(filepath.Join(d, "initdb")) && isExec(filepath.Join(d, "postgres")) {
			return d, nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		d := filepath.Dir(p)
		if isExec(filepath.Join(d, "postgres")) {
			return d, nil
		}
	}
	return "", ErrNoBinaries
}

func pgVersion(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

func isExec(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

// Options tune a server started by StartWith. The zero value is what Start
// uses: a server for tests, which does not sync to disk.
type Options struct {
	// Durable keeps Postgres's defaults for fsync, full_page_writes and
	// shared_buffers (on, on, 128MB), so that a commit waits for the disk
	// as in production; for benchmarks. Tests turn the first two off and
	// use 32MB.
	Durable bool
	// MaxConnections is the server's max_connections. Default 300.
	MaxConnections int
}

// Start initialises a new cluster in a temporary directory and starts its
// server. Errors: ErrNoBinaries, or why initdb or the server failed (with
// the server's log).
func Start() (*Server, error) { return StartWith(Options{}) }

// StartWith is Start with options. Errors: those of Start.
func StartWith(opts Options) (*Server, error) {
	bin, err := BinDir()
	if err != nil {
		return nil, err
	}
	if opts.MaxConnections <= 0 {
		opts.MaxConnections = 300
	}
	s := &Server{bin: bin, opts: opts}
	s.dir, err = os.MkdirTemp("", "anteroom-pg-")
	if err != nil {
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	s.data = filepath.Join(s.dir, "data")
	s.sock = s.dir
	s.logPath = filepath.Join(s.dir, "server.log")
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			_ = os.RemoveAll(s.dir)
			return nil, fmt.Errorf("pgtest: running as root and there is no system user postgres to run the server as: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		s.cred = &credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(s.dir, uid, gid); err != nil {
			_ = os.RemoveAll(s.dir)
			return nil, fmt.Errorf("pgtest: %w", err)
		}
	}
	out, err := s.command(filepath.Join(bin, "initdb"), "-D", s.data, "-U", "postgres", "--auth=trust",
		"--no-sync", "--encoding=UTF8", "--locale=C").CombinedOutput()
	if err != nil {
		_ = os.RemoveAll(s.dir)
		return nil, fmt.Errorf("pgtest: initdb: %w\n%s", err, out)
	}
	if err := s.start(); err != nil {
		_ = os.RemoveAll(s.dir)
		return nil, err
	}
	return s, nil
}

func (s *Server) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.Dir = s.dir
	cmd.SysProcAttr = sysProcAttr(s.cred)
	return cmd
}

// start runs the postmaster as a child of this process (killed with it, see
// sysProcAttr) and waits until it accepts connections.
func (s *Server) start() error {
	// Right after a kill -9 the old server's children may still hold its
	// shared memory and lock file for a moment, and a new postmaster exits
	// at once: try again a few times before calling it a failure.
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		if err = s.startOnce(); !errors.Is(err, errExitedAtStart) {
			return err
		}
		time.Sleep(time.Duration(attempt+1) * 200 * time.Millisecond)
	}
	return err
}

// errExitedAtStart is matched by the error of a start whose postmaster
// exited before it answered.
var errExitedAtStart = errors.New("pgtest: postgres exited at start")

func (s *Server) startOnce() error {
	logf, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	defer logf.Close()
	args := []string{"-D", s.data,
		"-k", s.sock, "-c", "listen_addresses=", "-c", "port=5432",
		"-c", "max_connections=" + strconv.Itoa(s.opts.MaxConnections),
		"-c", "log_min_messages=warning"}
	if !s.opts.Durable {
		args = append(args, "-c", "fsync=off", "-c", "full_page_writes=off", "-c", "shared_buffers=32MB")
	}
	cmd := s.command(filepath.Join(s.bin, "postgres"), args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("pgtest: start postgres: %w", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	s.mu.Lock()
	s.cmd, s.ext = cmd, exited
	s.mu.Unlock()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		c, err := pgx.Connect(ctx, s.URL("postgres"))
		cancel()
		if err == nil {
			_ = c.Close(context.Background())
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("%w: %w\n%s", errExitedAtStart, err, s.Log())
		default:
		}
		if time.Now().After(deadline) {
			s.kill()
			return fmt.Errorf("pgtest: postgres not ready after 30s: %w\n%s", err, s.Log())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Log returns the server's log so far.
func (s *Server) Log() string {
	b, _ := os.ReadFile(s.logPath)
	return string(b)
}

// BinDir returns the directory of the server's binaries (initdb, postgres,
// and on Debian pgbench).
func (s *Server) BinDir() string { return s.bin }

// SocketDir returns the directory of the server's unix socket.
func (s *Server) SocketDir() string { return s.sock }

// URL returns the connection URL of database db on the server.
func (s *Server) URL(db string) string {
	return fmt.Sprintf("postgres://postgres@/%s?host=%s&port=5432&sslmode=disable", db, s.sock)
}

// CreateDatabase creates a new, empty database and returns its URL.
// Errors: the server's.
func (s *Server) CreateDatabase(ctx context.Context) (name, url string, err error) {
	name = fmt.Sprintf("t%d_%d", os.Getpid(), s.dbs.Add(1))
	c, err := pgx.Connect(ctx, s.URL("postgres"))
	if err != nil {
		return "", "", fmt.Errorf("pgtest: %w", err)
	}
	defer c.Close(context.Background())
	if _, err := c.Exec(ctx, "CREATE DATABASE "+name+" TEMPLATE template0 STRATEGY FILE_COPY"); err != nil {
		return "", "", fmt.Errorf("pgtest: create database: %w", err)
	}
	return name, s.URL(name), nil
}

// DropDatabase drops a database, closing its connections.
// Errors: the server's.
func (s *Server) DropDatabase(ctx context.Context, name string) error {
	c, err := pgx.Connect(ctx, s.URL("postgres"))
	if err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	defer c.Close(context.Background())
	if _, err := c.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("pgtest: drop database: %w", err)
	}
	return nil
}

// Kill kills the server at once (SIGKILL of the postmaster; its backends
// exit when they see it gone), as a crash would.
func (s *Server) Kill() { s.kill() }

func (s *Server) kill() {
	s.mu.Lock()
	cmd, exited := s.cmd, s.ext
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-exited
	// The backends notice the postmaster is gone within a moment; a new
	// postmaster refuses to start while they hold the shared memory.
	for range 200 {
		if _, err := os.Stat(filepath.Join(s.data, "postmaster.pid")); err != nil {
			break
		}
		if !backendsAlive(s.data) {
			break
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// backendsAlive reports whether processes of the data directory remain:
// it looks for the postmaster.pid's shared memory holders via /proc.
func backendsAlive(data string) bool {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err == nil && strings.HasPrefix(string(b), "postgres: ") {
			exe, _ := os.Readlink(filepath.Join(filepath.Dir(p), "cwd"))
			if exe == data {
				return true
			}
		}
	}
	return false
}

// Stop stops the server (fast shutdown) within 10 seconds, else kills it.
// Errors: none today; the signature leaves room.
func (s *Server) Stop() error {
	s.mu.Lock()
	cmd, exited := s.cmd, s.ext
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return nil
	}
	_ = cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-exited
	}
	return nil
}

// Restart stops the server if it runs (kill: true kills it as a crash
// would) and starts it again on the same data and socket. Errors: those of
// Start.
func (s *Server) Restart(kill bool) error {
	if kill {
		s.kill()
		s.mu.Lock()
		s.cmd = nil
		s.mu.Unlock()
	} else if err := s.Stop(); err != nil {
		return err
	}
	return s.start()
}

// Close stops the server and removes its directory. Errors: the removal's.
func (s *Server) Close() error {
	_ = s.Stop()
	if err := os.RemoveAll(s.dir); err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	return nil
}

var shared struct {
	once sync.Once
	srv  *Server
	err  error
}

// Shared returns the test binary's shared server, starting it on first use.
// Without binaries (ErrNoBinaries) it skips tb, or fails it when the
// environment variable CI is set; on any other start failure it fails tb.
func Shared(tb testing.TB) *Server {
	tb.Helper()
	shared.once.Do(func() { shared.srv, shared.err = Start() })
	if shared.err != nil {
		if errors.Is(shared.err, ErrNoBinaries) && os.Getenv("CI") == "" {
			tb.Skipf("skipping: %v", shared.err)
		}
		tb.Fatalf("%v", shared.err)
	}
	return shared.srv
}

// Own starts a server of tb's own, one tb may stop, kill or crash, closed
// when tb ends, and returns it with the URL of a fresh database on it.
// Without binaries it skips or fails tb as Shared does; on any other start
// failure it fails tb.
func Own(tb testing.TB) (*Server, string) {
	tb.Helper()
	srv, err := Start()
	if err != nil {
		Shared(tb) // skips or fails as the shared server would
		tb.Fatalf("%v", err)
	}
	tb.Cleanup(func() {
		if err := srv.Close(); err != nil {
			tb.Logf("pgtest: %v", err)
		}
	})
	_, url, err := srv.CreateDatabase(context.Background())
	if err != nil {
		tb.Fatalf("%v\n%s", err, srv.Log())
	}
	return srv, url
}

// DB creates a fresh database on the shared server for tb, dropped when tb
// ends, and returns its URL. It skips or fails tb as Shared does.
func DB(tb testing.TB) string {
	tb.Helper()
	srv := Shared(tb)
	name, url, err := srv.CreateDatabase(context.Background())
	if err != nil {
		tb.Fatalf("%v\n%s", err, srv.Log())
	}
	tb.Cleanup(func() {
		if err := srv.DropDatabase(context.Background(), name); err != nil {
			tb.Logf("pgtest: %v", err)
		}
	})
	return url
}

// Run is for TestMain: it runs the tests, then stops the shared server if
// one was started, and returns the exit code.
func Run(m *testing.M) int {
	code := m.Run()
	if shared.srv != nil {
		if err := shared.srv.Close(); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}
	return code
}
