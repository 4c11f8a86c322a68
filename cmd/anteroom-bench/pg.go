package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/anteroomhq/anteroom/session/postgres/pgtest"
)

// pgConfig holds the flags of the pg-* scenarios.
type pgConfig struct {
	database        string // -database: an existing server; empty: a private one
	instances       int    // anteroom processes on the one database
	sockets         int    // pg-fanout: websockets over all instances
	samples         int    // pg-fanout: cross-instance latency samples
	sampleRate      int    // pg-fanout: joins/s while sampling
	startupSessions int    // pg-startup: sessions in the database
	startupActive   int    // pg-startup: of which active
	pgbenchClients  int    // pg-join: pgbench's clients (-c)
}

func (p *pgConfig) flags(fs *flag.FlagSet) {
	fs.StringVar(&p.database, "database", "", "pg-*: `URL` (postgres://...) of a Postgres server to run on; each scenario creates a database of its own there (needs CREATEDB) and drops it. Default: a private server (initdb in a temp dir, Debian's /usr/lib/postgresql/*/bin). Given, the pg-* scenarios run with the others")
	fs.IntVar(&p.instances, "pg-instances", 3, "pg-*: anteroom processes on the one database")
	fs.IntVar(&p.sockets, "sockets", 0, "pg-fanout: websockets over all the instances (default 45000, smoke 300); each instance's share comes from a client process of its own")
	fs.IntVar(&p.samples, "pg-samples", 0, "pg-fanout: joins through one instance timed to a websocket on another (default 400, smoke 30)")
	fs.IntVar(&p.sampleRate, "pg-sample-rate", 20, "pg-fanout: joins/s while sampling the cross-instance latency")
	fs.IntVar(&p.startupSessions, "pg-startup-sessions", 0, "pg-startup: sessions in the database (default 1000000, smoke 20000)")
	fs.IntVar(&p.startupActive, "pg-startup-active", 0, "pg-startup: of which active (default 1000, smoke 100)")
	fs.IntVar(&p.pgbenchClients, "pgbench-clients", 16, "pg-join: pgbench's clients (-c)")
}

func (p *pgConfig) fillDefaults(smoke bool) {
	pick := func(v *int, full, sm int) {
		if *v <= 0 {
			*v = full
			if smoke {
				*v = sm
			}
		}
	}
	pick(&p.instances, 3, 3)
	pick(&p.sockets, 45000, 300)
	pick(&p.samples, 400, 30)
	pick(&p.sampleRate, 20, 20)
	pick(&p.startupSessions, 1000000, 20000)
	pick(&p.startupActive, 1000, 100)
	pick(&p.pgbenchClients, 16, 8)
}

// pgServer is the server of the pg-* scenarios: the -database one, or a
// private one started on first use.
type pgServer struct {
	started bool
	err     error
	srv     *pgtest.Server // nil with -database
	admin   string         // URL of a database to run CREATE DATABASE from
	dbs     int
}

// pgAdmin returns the URL scenarios create their databases from, starting
// the private server on first use. Errors: pgtest.ErrNoBinaries, or why the
// server did not start.
func (b *bench) pgAdmin() (string, error) {
	p := &b.pg
	if !p.started {
		p.started = true
		if b.cfg.pg.database != "" {
			p.admin = b.cfg.pg.database
		} else {
			t0 := time.Now()
			// Durable: fsync on, as a production server; the baseline
			// (pgbench) runs on the same server, so the ratio is fair either way.
			p.srv, p.err = pgtest.StartWith(pgtest.Options{Durable: true})
			if p.err == nil {
				p.admin = p.srv.URL("postgres")
				b.progress("postgres: private server (initdb, fsync on) in %s, socket %s", time.Since(t0).Round(time.Millisecond), p.srv.SocketDir())
			}
		}
	}
	return p.admin, p.err
}

func (b *bench) closePG() {
	if b.pg.srv != nil {
		if err := b.pg.srv.Close(); err != nil {
			b.progress("postgres: %v", err)
		}
		b.pg.srv = nil
	}
}

// freshDB creates an empty database for one scenario and returns its URL
// and the function that drops it.
func (b *bench) freshDB(ctx context.Context) (string, func(), error) {
	admin, err := b.pgAdmin()
	if err != nil {
		return "", nil, err
	}
	b.pg.dbs++
	name := fmt.Sprintf("anteroom_bench_%d_%d", os.Getpid(), b.pg.dbs)
	c, err := pgx.Connect(ctx, admin)
	if err != nil {
		return "", nil, fmt.Errorf("postgres: %w", err)
	}
	defer c.Close(context.Background())
	if _, err := c.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return "", nil, fmt.Errorf("postgres: create database %s (the bench needs CREATEDB): %w", name, err)
	}
	u, err := url.Parse(admin)
	if err != nil {
		return "", nil, fmt.Errorf("-database: %w", err)
	}
	u.Path = "/" + name
	drop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, admin)
		if err != nil {
			b.progress("postgres: drop %s: %v", name, err)
			return
		}
		defer c.Close(context.Background())
		if _, err := c.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			b.progress("postgres: drop %s: %v", name, err)
		}
	}
	return u.String(), drop, nil
}

// pgbenchPath finds pgbench: beside the private server's binaries, on
// PATH, or in Debian's /usr/lib/postgresql/*/bin.
func (b *bench) pgbenchPath() (string, error) {
	if b.pg.srv != nil {
		if p := filepath.Join(b.pg.srv.BinDir(), "pgbench"); isExecutable(p) {
			return p, nil
		}
	}
	if p, err := exec.LookPath("pgbench"); err == nil {
		return p, nil
	}
	if dir, err := pgtest.BinDir(); err == nil {
		if p := filepath.Join(dir, "pgbench"); isExecutable(p) {
			return p, nil
		}
	}
	return "", errors.New("pgbench not found (Debian: the postgresql-client package)")
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

var pgbenchTPS = regexp.MustCompile(`tps = ([0-9.]+) \(without initial connection time\)`)

// pgbenchNone is pgbench's report of a run that committed nothing: its
// clients spent the whole duration connecting (a smoke run's one second,
// on a loaded machine); it then prints no tps.
var pgbenchNone = regexp.MustCompile(`number of transactions actually processed: 0\b`)

// pgbenchTries bounds runPgbench's runs that commit nothing; each doubles
// the duration of the one before.
const pgbenchTries = 4

// runPgbench runs pgbench's script on db for secs seconds and returns its
// transactions per second (without the connection time). A run that
// committed nothing is run again, twice as long, up to pgbenchTries runs.
func runPgbench(ctx context.Context, bin, db, script string, clients, secs int) (float64, error) {
	var out []byte
	for try := range pgbenchTries {
		cmd := exec.CommandContext(ctx, bin, "-n", "-M", "prepared", "-f", script,
			"-c", strconv.Itoa(clients), "-j", "2", "-T", strconv.Itoa(secs<<try), db)
		var err error
		out, err = cmd.CombinedOutput()
		if err != nil {
			return 0, fmt.Errorf("pgbench: %w\n%s", err, out)
		}
		if m := pgbenchTPS.FindSubmatch(out); m != nil {
			return strconv.ParseFloat(string(m[1]), 64)
		}
		if !pgbenchNone.Match(out) {
			break
		}
	}
	return 0, fmt.Errorf("pgbench: no tps in its output:\n%s", out)
}

// child is a process of this binary (-serve or -ws-worker).
type child struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	out    *bufio.Reader
	exited chan struct{}
}

// childEnv marks a child for the test binary's TestMain, which then runs
// realMain instead of the tests.
const childEnv = "ANTEROOM_BENCH_CHILD=1"

// startChild runs this binary with args and waits for its ready line; it
// returns what follows readyPrefix on it.
func (b *bench) startChild(ctx context.Context, args []string) (*child, string, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, "", err
	}
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), childEnv)
	cmd.Stderr = b.log
	dieWithParent(cmd)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, "", err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, "", err
	}
	if err := cmd.Start(); err != nil {
		return nil, "", err
	}
	c := &child{cmd: cmd, stdin: stdin, out: bufio.NewReader(stdout), exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(c.exited) }()
	type ready struct {
		line string
		err  error
	}
	got := make(chan ready, 1)
	go func() {
		for {
			line, err := c.out.ReadString('\n')
			if err != nil {
				got <- ready{err: fmt.Errorf("child %v exited before it was ready: %w", args[:2], err)}
				return
			}
			if rest, ok := strings.CutPrefix(strings.TrimSpace(line), strings.TrimSpace(readyPrefix)); ok {
				got <- ready{line: strings.TrimSpace(rest)}
				return
			}
		}
	}()
	select {
	case r := <-got:
		if r.err != nil {
			c.stop()
			return nil, "", r.err
		}
		return c, r.line, nil
	case <-time.After(5 * time.Minute):
		c.stop()
		return nil, "", fmt.Errorf("child %v not ready after 5 minutes", args[:2])
	case <-ctx.Done():
		c.stop()
		return nil, "", ctx.Err()
	}
}

// line reads the child's next line of output.
func (c *child) line(timeout time.Duration) (string, error) {
	got := make(chan string, 1)
	fail := make(chan error, 1)
	go func() {
		s, err := c.out.ReadString('\n')
		if err != nil {
			fail <- err
			return
		}
		got <- strings.TrimSpace(s)
	}()
	select {
	case s := <-got:
		return s, nil
	case err := <-fail:
		return "", fmt.Errorf("child: %w", err)
	case <-time.After(timeout):
		return "", fmt.Errorf("child: no answer within %s", timeout)
	}
}

// stop closes the child's stdin (it stops when that closes) and kills it
// if it has not exited within 15 s.
func (c *child) stop() {
	_ = c.stdin.Close()
	select {
	case <-c.exited:
	case <-time.After(15 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.exited
	}
}

// startServers starts n -serve children on the Postgres database db, each
// with the given limit and waiting timeout, and returns them with their
// addresses.
func (b *bench) startServers(ctx context.Context, n int, db, secretHex string, limit int64, waitingTimeout time.Duration) ([]*child, []string, error) {
	var kids []*child
	var addrs []string
	for i := range n {
		args := []string{"-serve", "-serve-database", db, "-serve-secret", secretHex,
			"-serve-limit", strconv.FormatInt(limit, 10), "-serve-waiting-timeout", waitingTimeout.String(),
			"-interval", b.cfg.interval.String()}
		if b.cfg.cpuProfile != "" {
			args = append(args, "-cpuprofile", fmt.Sprintf("%s.server%d", b.cfg.cpuProfile, i))
		}
		c, addr, err := b.startChild(ctx, args)
		if err != nil {
			stopAll(kids)
			return nil, nil, err
		}
		go func() { _, _ = io.Copy(io.Discard, c.out) }()
		kids = append(kids, c)
		addrs = append(addrs, addr)
	}
	return kids, addrs, nil
}

func stopAll(kids []*child) {
	for _, c := range kids {
		c.stop()
	}
}

// load1 returns the 1-minute load average, or "?".
func load1() string {
	f := strings.Fields(loadAvg())
	if len(f) == 0 {
		return "?"
	}
	return f[0]
}
