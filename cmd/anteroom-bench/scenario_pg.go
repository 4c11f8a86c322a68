package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/anteroomhq/anteroom/cronjobs"
	"github.com/anteroomhq/anteroom/gate/token"
	"github.com/anteroomhq/anteroom/session"
	"github.com/anteroomhq/anteroom/session/postgres"
)

// pgbenchScript is the baseline's transaction: one row updated and
// committed, on a table of pgbenchRows rows.
const (
	pgbenchRows   = 10000
	pgbenchScript = "\\set id random(1, 10000)\nUPDATE anteroom_bench_pgbench SET n = n + 1 WHERE id = :id;\n"
)

func newSecretHex() string {
	secret := make([]byte, 32)
	_, _ = rand.Read(secret)
	return hex.EncodeToString(secret)
}

// pgJoin: durable joins/s over HTTP through the anteroom instances on one
// database, against pgbench's one-row-update transactions/s on the same
// server, in alternating windows of the same length.
func (b *bench) pgJoin(ctx context.Context) ([]Result, error) {
	db, drop, err := b.freshDB(ctx)
	if err != nil {
		return nil, err
	}
	defer drop()
	pgbench, err := b.pgbenchPath()
	if err != nil {
		return nil, err
	}
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, `CREATE TABLE anteroom_bench_pgbench (id int PRIMARY KEY, n bigint NOT NULL DEFAULT 0);
		INSERT INTO anteroom_bench_pgbench (id) SELECT generate_series(1, `+fmt.Sprint(pgbenchRows)+`);
		ANALYZE anteroom_bench_pgbench`); err != nil {
		return nil, fmt.Errorf("the pgbench table: %w", err)
	}
	dir, cleanup, err := tempDir("pg-join")
	if err != nil {
		return nil, err
	}
	defer cleanup()
	script := filepath.Join(dir, "update.sql")
	if err := os.WriteFile(script, []byte(pgbenchScript), 0o644); err != nil {
		return nil, err
	}

	n := b.cfg.pg.instances
	kids, addrs, err := b.startServers(ctx, n, db, newSecretHex(), 1000, time.Hour)
	if err != nil {
		return nil, err
	}
	defer stopAll(kids)
	l := &httpLoad{}
	defer l.Close()
	for i := range b.cfg.conns {
		c, err := dialRaw(ctx, addrs[i%n], nil)
		if err != nil {
			return nil, err
		}
		l.conns = append(l.conns, c)
	}
	body := `{"gate":"default"}`
	reqs := make([][]byte, n)
	for i, a := range addrs {
		reqs[i] = fmt.Appendf(nil, "POST %s/api/join HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", basePath, a, len(body), body)
	}
	var joined atomic.Int64
	joinCheck := func(status int, body []byte) error {
		if status != 200 || !bytes.Contains(body, []byte(`"token":`)) {
			return fmt.Errorf("join: status %d: %.200s", status, body)
		}
		joined.Add(1)
		return nil
	}
	secs := max(1, int((b.cfg.window+time.Second-1)/time.Second))
	window := time.Duration(secs) * time.Second
	tx0, err := storeTransactions(addrs)
	if err != nil {
		return nil, err
	}
	loads := []string{load1()}
	p := &pairs{}
	var kidPIDs []int
	for _, k := range kids {
		kidPIDs = append(kidPIDs, k.cmd.Process.Pid)
	}
	cpu := &cpuSplit{}
	for r := range b.cfg.rounds {
		tps, err := runPgbench(ctx, pgbench, db, script, b.cfg.pg.pgbenchClients, secs)
		if err != nil {
			return nil, err
		}
		server, err := serverPIDs(ctx, conn)
		if err != nil {
			return nil, err
		}
		var rv measure
		if err := cpu.measure(kidPIDs, server, func() (int64, error) {
			j0 := joined.Load()
			rv, err = l.run(ctx, b.cfg.warmup, window, func(w, _ int) []byte { return reqs[w%n] }, joinCheck)
			return joined.Load() - j0, err
		}); err != nil {
			return nil, err
		}
		b.debugf("round %d: pgbench %.0f tps, joins %.0f/s", r+1, tps, rv.rate)
		p.add(measure{rate: tps}, measure{rate: rv.rate})
		loads = append(loads, load1())
	}
	base, val := p.means()
	tx1, err := storeTransactions(addrs)
	if err != nil {
		return nil, err
	}
	// Every acknowledged join is a row: the 200s were durable.
	var rows int64
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM anteroom_sessions").Scan(&rows); err != nil {
		return nil, err
	}
	if rows != joined.Load() {
		return nil, fmt.Errorf("%d joins acknowledged, %d rows stored", joined.Load(), rows)
	}
	var act, wait int64
	if err := conn.QueryRow(ctx, "SELECT active, waiting FROM anteroom_gates WHERE name = $1", gateName).Scan(&act, &wait); err != nil {
		return nil, err
	}
	if act+wait != rows {
		return nil, fmt.Errorf("counters %d+%d, rows %d", act, wait, rows)
	}
	txs := tx1 - tx0
	note := fmt.Sprintf("%d instances, %d HTTP conns spread over them; %d joins in %d transactions (mean %.1f joins/tx, warmups included), every one a row; baseline: pgbench -M prepared -c %d -j 2, one-row UPDATE per transaction on the same server, %d s windows alternating with the joins' (after a %s warmup); %s; %s; load average %s",
		n, b.cfg.conns, joined.Load(), txs, float64(joined.Load())/float64(max(txs, 1)), b.cfg.pg.pgbenchClients, secs, b.cfg.warmup, p.spread(), cpu, joinList(loads))
	return []Result{
		Result{Metric: "durable joins/s over HTTP, " + fmt.Sprint(n) + " instances on one Postgres", Unit: unitPerSec, Value: val,
			Check: checkRatioMin, Want: 0.5, Target: ">= 0.5 x pgbench tps", Note: note}.withBaseline(base),
	}, nil
}

// storeTransactions sums the write transactions the instances committed.
func storeTransactions(addrs []string) (int64, error) {
	var sum int64
	for _, a := range addrs {
		var r storeReport
		if err := getJSON(a, "/bench/store", &r); err != nil {
			return 0, err
		}
		sum += r.Transactions
	}
	return sum, nil
}

func joinList(v []string) string {
	var b bytes.Buffer
	for i, s := range v {
		if i > 0 {
			b.WriteByte('/')
		}
		b.WriteString(s)
	}
	return b.String()
}

// pgStartup: how long an instance takes to be ready on a database holding
// many sessions (the steps of cmd/anteroom: open and migrate, the secret,
// load every gate, the first update), against reading the same rows with
// plain queries.
func (b *bench) pgStartup(ctx context.Context) ([]Result, error) {
	db, drop, err := b.freshDB(ctx)
	if err != nil {
		return nil, err
	}
	defer drop()
	log := slog.New(slog.NewTextHandler(b.log, &slog.HandlerOptions{Level: slog.LevelWarn}))
	st, err := postgres.Open(ctx, db, postgres.Options{Logger: log})
	if err != nil {
		return nil, err
	}
	_ = st.Close()
	n, a := int64(b.cfg.pg.startupSessions), int64(b.cfg.pg.startupActive)
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.Background())
	t0 := time.Now()
	now := time.Now().UnixNano()
	if _, err := conn.Exec(ctx, `INSERT INTO anteroom_gates (name, next_position, active, waiting) VALUES ($1, $2, $3, $4)`,
		gateName, n+1, a, n-a); err != nil {
		return nil, err
	}
	// Ids like the sidecar's (random, 22 characters), every sign of life
	// recent, so the first update purges nobody.
	if _, err := conn.Exec(ctx, `INSERT INTO anteroom_sessions (gate, position, id, status, last_active, created_at)
		SELECT $1, g, substr(md5(g::text), 1, 22), CASE WHEN g <= $3 THEN 1 ELSE 0 END, $4, $4 FROM generate_series(1, $2::bigint) g`,
		gateName, n, a, now); err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, "VACUUM ANALYZE anteroom_sessions"); err != nil {
		return nil, err
	}
	b.progress("pg-startup: %d sessions (%d active) written in %s", n, a, time.Since(t0).Round(time.Millisecond))
	cfg := session.GateConfig{Name: gateName, ActiveLimit: a, ActiveTimeout: time.Hour, WaitingTimeout: time.Hour}

	reps := 3
	if b.cfg.smoke {
		reps = 1
	}
	var ready, raw []float64
	loads := []string{load1()}
	for range reps {
		// Baseline: the rows the start reads, with plain queries.
		t := time.Now()
		if err := readRaw(ctx, conn, a, n-a); err != nil {
			return nil, err
		}
		raw = append(raw, float64(time.Since(t).Microseconds())/1000)

		t = time.Now()
		st, err := postgres.Open(ctx, db, postgres.Options{Logger: log})
		if err != nil {
			return nil, err
		}
		if _, err := st.Secret(ctx, token.NewSecret); err != nil {
			_ = st.Close()
			return nil, err
		}
		wl, err := session.New(ctx, st, []session.GateConfig{cfg}, session.Options{Logger: log, Ready: st.Ready})
		if err == nil {
			err = cronjobs.RunUpdate(ctx, wl, log)
		}
		if err == nil {
			err = wl.Ready(ctx)
		}
		d := time.Since(t)
		var g session.GlobalView
		if err == nil {
			g, err = wl.Global(gateName)
		}
		if wl != nil {
			_ = wl.Close()
		}
		_ = st.Close()
		if err != nil {
			return nil, err
		}
		if g.Active != a || g.Waiting != n-a || g.FirstWaitingPosition != a+1 {
			return nil, fmt.Errorf("after the start: active %d waiting %d first %d, want %d %d %d", g.Active, g.Waiting, g.FirstWaitingPosition, a, n-a, a+1)
		}
		ready = append(ready, float64(d.Microseconds())/1000)
		loads = append(loads, load1())
	}
	worst, meanRaw := ready[0], 0.0
	for i := range ready {
		worst = max(worst, ready[i])
		meanRaw += raw[i]
	}
	meanRaw /= float64(len(raw))
	note := fmt.Sprintf("%d sessions (%d active): open, secret, load, first update, until ready; %d starts, ms %s; baseline: the active rows and the waiting positions read with plain queries, ms %s; load average %s",
		n, a, reps, fmtList(ready), fmtList(raw), joinList(loads))
	return []Result{
		Result{Metric: "ready with " + groupDigits(n) + " sessions in Postgres", Unit: unitMs, Value: worst,
			Check: checkValueMax, Want: 5000, Target: "<= 5 s", Note: note}.withBaseline(meanRaw),
	}, nil
}

// readRaw reads what the start reads, as plainly as possible: the active
// sessions' rows and the waiting positions in order.
func readRaw(ctx context.Context, c *pgx.Conn, active, waiting int64) error {
	rows, err := c.Query(ctx, `SELECT id, position, last_active, created_at, claim_deadline FROM anteroom_sessions WHERE gate = $1 AND status = 1 ORDER BY position`, gateName)
	if err != nil {
		return err
	}
	var got int64
	for rows.Next() {
		var id string
		var pos, created int64
		var last, claim *int64
		if err := rows.Scan(&id, &pos, &last, &created, &claim); err != nil {
			rows.Close()
			return err
		}
		got++
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	rows, err = c.Query(ctx, `SELECT position FROM anteroom_sessions WHERE gate = $1 AND status = 0 ORDER BY position`, gateName)
	if err != nil {
		return err
	}
	positions := make([]int64, 0, waiting)
	for rows.Next() {
		var p int64
		if err := rows.Scan(&p); err != nil {
			rows.Close()
			return err
		}
		positions = append(positions, p)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	if got != active || int64(len(positions)) != waiting {
		return fmt.Errorf("raw read: %d active, %d waiting; want %d, %d", got, len(positions), active, waiting)
	}
	return nil
}
