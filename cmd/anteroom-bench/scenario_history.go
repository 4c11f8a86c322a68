package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
)

// joinHTTPHistory measures what history costs the join path: two servers in
// one run, one with history (the default, history_retention > 0) and one
// without (history_retention: 0, sqlite.Options.DisableHistory), the same
// durable joins over HTTP sent to each in alternating windows, so the
// machine's load falls on both alike. The ratio is on/off: 1 means free.
func (b *bench) joinHTTPHistory(ctx context.Context) ([]Result, error) {
	dir, cleanup, err := tempDir("join-http-history")
	if err != nil {
		return nil, err
	}
	defer cleanup()
	type side struct {
		in     *instance
		l      *httpLoad
		req    []byte
		joined atomic.Int64
	}
	var on, off side
	for _, s := range []struct {
		side      *side
		name      string
		noHistory bool
	}{{&on, "on", false}, {&off, "off", true}} {
		if err := os.Mkdir(filepath.Join(dir, s.name), 0o700); err != nil {
			return nil, err
		}
		in, err := startInstance(ctx, instanceConfig{dir: filepath.Join(dir, s.name), limit: 1000, interval: b.cfg.interval, cron: true, noHistory: s.noHistory})
		if err != nil {
			return nil, err
		}
		defer in.Close()
		l, err := newHTTPLoad(ctx, in.addr, b.cfg.conns)
		if err != nil {
			return nil, err
		}
		defer l.Close()
		body := `{"gate":"default"}`
		s.side.in, s.side.l = in, l
		s.side.req = fmt.Appendf(nil, "POST %s/api/join HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", basePath, in.addr, len(body), body)
	}
	check := func(s *side) checkFunc {
		return func(status int, body []byte) error {
			if status != 200 || !bytes.Contains(body, []byte(`"token":`)) {
				return fmt.Errorf("join: status %d: %.200s", status, body)
			}
			s.joined.Add(1)
			return nil
		}
	}
	p := &pairs{}
	for r := range b.cfg.rounds {
		// Alternate which side goes first, so that neither always follows
		// the other's checkpoint.
		first, second := &off, &on
		if r%2 == 1 {
			first, second = second, first
		}
		m1, err := first.l.run(ctx, b.cfg.warmup, b.cfg.window, func(int, int) []byte { return first.req }, check(first))
		if err != nil {
			return nil, err
		}
		m2, err := second.l.run(ctx, b.cfg.warmup, b.cfg.window, func(int, int) []byte { return second.req }, check(second))
		if err != nil {
			return nil, err
		}
		if first == &on {
			m1, m2 = m2, m1
		}
		b.debugf("round %d: history off %.0f/s, on %.0f/s", r+1, m1.rate, m2.rate)
		p.add(m1, m2)
	}
	base, val := p.means()
	// Every acknowledged join has its record.
	recs, err := countHistory(ctx, on.in)
	if err != nil {
		return nil, err
	}
	if recs != on.joined.Load() {
		return nil, fmt.Errorf("%d joins acknowledged with history on, but %d joined records", on.joined.Load(), recs)
	}
	if n, err := countHistory(ctx, off.in); err != nil || n != 0 {
		return nil, fmt.Errorf("history off wrote %d records (%v)", n, err)
	}
	note := fmt.Sprintf("%d conns; baseline: the same server with history_retention 0; %d joins with history, %d without; %s",
		b.cfg.conns, on.joined.Load(), off.joined.Load(), p.spread())
	return []Result{
		Result{Metric: "joins/s over HTTP with history on", Unit: unitPerSec, Value: val,
			Check: checkRatioMin, Want: 0.95, Target: ">= 0.95 x history off", Note: note}.withBaseline(base),
	}, nil
}
