package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync/atomic"
)

// interleave runs the baseline and the measured load in alternating windows
// (baseline first).
func (b *bench) interleave(ctx context.Context, l *httpLoad, baseReq, valReq requestFunc, baseCheck, valCheck checkFunc) (*pairs, error) {
	p := &pairs{}
	for r := range b.cfg.rounds {
		rb, err := l.run(ctx, b.cfg.warmup, b.cfg.window, baseReq, baseCheck)
		if err != nil {
			return nil, fmt.Errorf("baseline: %w", err)
		}
		rv, err := l.run(ctx, b.cfg.warmup, b.cfg.window, valReq, valCheck)
		if err != nil {
			return nil, err
		}
		b.debugf("round %d: baseline %.0f/s, value %.0f/s", r+1, rb.rate, rv.rate)
		p.add(rb, rv)
	}
	return p, nil
}

func (b *bench) joinHTTP(ctx context.Context) ([]Result, error) {
	dir, cleanup, err := tempDir("join-http")
	if err != nil {
		return nil, err
	}
	defer cleanup()
	in, err := startInstance(ctx, instanceConfig{dir: dir, limit: 1000, interval: b.cfg.interval, cron: true})
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
	joinReq := fmt.Appendf(nil, "POST %s/api/join HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", basePath, in.addr, len(body), body)
	emptyReq := fmt.Appendf(nil, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", emptyPath, in.addr, len(body), body)
	var joined atomic.Int64
	joinCheck := func(status int, body []byte) error {
		if status != 200 || !bytes.Contains(body, []byte(`"token":`)) {
			return fmt.Errorf("join: status %d: %.200s", status, body)
		}
		joined.Add(1)
		return nil
	}
	st0 := in.store.Stats()
	p, err := b.interleave(ctx, l,
		func(int, int) []byte { return emptyReq }, func(int, int) []byte { return joinReq },
		wantStatus(200), joinCheck)
	if err != nil {
		return nil, err
	}
	base, val := p.means()
	st1 := in.store.Stats()
	// Every acknowledged join must be in the committed state the service
	// reads from memory: the 200s were durable.
	v, err := in.wl.Global(gateName)
	if err != nil {
		return nil, err
	}
	if got := v.Active + v.Waiting; got != joined.Load() {
		return nil, fmt.Errorf("%d joins acknowledged, but the gate counts %d sessions", joined.Load(), got)
	}
	txs := st1.Transactions - st0.Transactions
	note := fmt.Sprintf("%d conns; %d joins in %d tx (mean %.1f/tx, max %d); baseline: empty echo handler, same http.Server; %s",
		b.cfg.conns, joined.Load(), txs, float64(st1.Ops-st0.Ops)/float64(max(txs, 1)), st1.MaxBatch, p.spread())
	return []Result{
		Result{Metric: "joins/s over HTTP, acked after commit", Unit: unitPerSec, Value: val,
			Check: checkRatioMin, Want: 0.5, Target: ">= 0.5 x baseline", Note: note}.withBaseline(base),
	}, nil
}

func (b *bench) checkHTTP(ctx context.Context) ([]Result, error) {
	dir, cleanup, err := tempDir("check-http")
	if err != nil {
		return nil, err
	}
	defer cleanup()
	k := b.cfg.sessions
	in, err := startInstance(ctx, instanceConfig{dir: dir, limit: int64(k), interval: b.cfg.interval, cron: true})
	if err != nil {
		return nil, err
	}
	defer in.Close()
	ids, err := seedActive(ctx, in, k)
	if err != nil {
		return nil, err
	}
	checkReqs := make([][]byte, k)
	emptyReqs := make([][]byte, k)
	for i, id := range ids {
		tok, err := in.signer.Sign(id)
		if err != nil {
			return nil, err
		}
		checkReqs[i] = fmt.Appendf(nil, "GET %s/check HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n\r\n", basePath, in.addr, tok)
		emptyReqs[i] = fmt.Appendf(nil, "GET %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n\r\n", emptyPath, in.addr, tok)
	}
	pick := func(reqs [][]byte) requestFunc {
		return func(w, i int) []byte { return reqs[(w*7919+i)%len(reqs)] }
	}
	l, err := newHTTPLoad(ctx, in.addr, b.cfg.conns)
	if err != nil {
		return nil, err
	}
	defer l.Close()
	p, err := b.interleave(ctx, l, pick(emptyReqs), pick(checkReqs), wantStatus(200), wantStatus(200))
	if err != nil {
		if errors.Is(err, context.Canceled) {
			return nil, err
		}
		return nil, fmt.Errorf("check: %w", err)
	}
	base, val := p.means()
	note := fmt.Sprintf("%d conns, %d active sessions, Bearer token; baseline: empty echo handler, same request; %s", b.cfg.conns, k, p.spread())
	return []Result{
		Result{Metric: "forward-auth checks/s ({base}/check)", Unit: unitPerSec, Value: val,
			Check: checkRatioMin, Want: 0.9, Target: ">= 0.9 x baseline", Note: note}.withBaseline(base),
	}, nil
}
