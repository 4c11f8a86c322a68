// Package webhook delivers anteroom's webhooks from the store's durable
// outbox (session.OutboxStore): each row is POSTed as JSON to its endpoint,
// signed with HMAC-SHA256, with its row id as idempotency key, at least
// once. A failed delivery is retried with exponential backoff and jitter up
// to a cap, and dead-lettered (kept, counted, logged) past a maximum age or
// number of attempts. Delivery runs in its own goroutines: a slow or dead
// receiver never slows a join, whose transaction only inserts the rows.
//
// The signature header is
//
//	X-Anteroom-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>
//
// and a receiver checks it with Verify (or the same few lines in any
// language), refusing a timestamp too far from its clock.
package webhook

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/anteroomhq/anteroom/session"
)

// Headers of a delivery.
const (
	HeaderSignature   = "X-Anteroom-Signature"
	HeaderEvent       = "X-Anteroom-Event"
	HeaderDelivery    = "X-Anteroom-Delivery" // the idempotency key (also in Idempotency-Key)
	HeaderIdempotency = "Idempotency-Key"
	HeaderAttempt     = "X-Anteroom-Attempt"
)

// MinSecretLength is the shortest endpoint secret New accepts.
const MinSecretLength = 16

// MaxResponseBytes is how much of a receiver's answer is read (then the
// connection is closed rather than drained further).
const MaxResponseBytes = 64 << 10

// Endpoint is one configured receiver.
type Endpoint struct {
	// URL is an absolute http or https URL (from the operator's config,
	// trusted, but any other scheme is refused).
	URL string
	// Events are the webhook events it receives (session.WebhookEvents).
	Events []string
	// Secret signs the deliveries (at least MinSecretLength bytes).
	Secret []byte
}

// Name is the endpoint's stable key in the outbox: a digest of its URL, so
// that reordering the config keeps each row with its endpoint.
func (e Endpoint) Name() string {
	sum := sha256.Sum256([]byte(e.URL))
	return "wh_" + hex.EncodeToString(sum[:8])
}

// ValidateURL returns an error unless raw is an absolute http or https URL
// with a host and no user info.
func ValidateURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("webhook url: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("webhook url %q: want an http or https URL", raw)
	}
	if u.Host == "" || u.User != nil || u.Fragment != "" {
		return fmt.Errorf("webhook url %q: want an absolute URL with a host, without user info or fragment", raw)
	}
	return nil
}

// Options configure a Deliverer.
type Options struct {
	Store     session.OutboxStore
	Endpoints []Endpoint
	// ClaimURL returns the claim link of a promoted notify session whose
	// claim window ends at deadline; nil: promoted payloads carry none.
	ClaimURL func(gate, id string, deadline time.Time) (string, error)
	// Client posts the deliveries. Default: a client with Timeout and no
	// redirects followed (a 3xx is a failed attempt).
	Client *http.Client
	// Timeout bounds one delivery (connect, send, headers, body). Default 10s.
	Timeout time.Duration
	// Poll is how often the outbox is read when nothing kicked it. Default 1s.
	Poll time.Duration
	// Workers deliver in parallel, per endpoint. Default 4.
	Workers int
	// Batch is the most rows of one endpoint claimed at once. Default 32.
	Batch int
	// BaseBackoff is the wait after the first failure; it doubles per
	// attempt up to MaxBackoff, with full jitter over its upper half.
	// Defaults 1s and 10m.
	BaseBackoff, MaxBackoff time.Duration
	// MaxAge: a row still failing this long after it was written is
	// dead-lettered. Default 24h.
	MaxAge time.Duration
	// MaxAttempts: a row that failed this many times is dead-lettered.
	// Default 30.
	MaxAttempts int
	// Now tells the time. Default time.Now.
	Now    func() time.Time
	Logger *slog.Logger
}

// Stats are the deliverer's counters since it started.
type Stats struct {
	Delivered, Failed, Dead int64
}

// Deliverer posts the outbox's rows. Safe for concurrent use.
type Deliverer struct {
	o         Options
	endpoints map[string]Endpoint
	lanes     []*lane // one per endpoint, then the unknown targets
	delivered atomic.Int64
	failed    atomic.Int64
	dead      atomic.Int64
}

// New returns a Deliverer. It returns an error for an endpoint whose URL is
// not http(s), whose secret is short, or whose event is unknown, and for two
// endpoints with the same URL.
func New(o Options) (*Deliverer, error) {
	if o.Store == nil {
		return nil, errors.New("webhook: no store")
	}
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Second
	}
	if o.Client == nil {
		o.Client = &http.Client{
			Timeout:       o.Timeout,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
	if o.Poll <= 0 {
		o.Poll = time.Second
	}
	if o.Workers <= 0 {
		o.Workers = 4
	}
	if o.Batch <= 0 {
		o.Batch = 32
	}
	if o.BaseBackoff <= 0 {
		o.BaseBackoff = time.Second
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = 10 * time.Minute
	}
	if o.MaxAge <= 0 {
		o.MaxAge = 24 * time.Hour
	}
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = 30
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	d := &Deliverer{o: o, endpoints: map[string]Endpoint{}}
	for i, e := range o.Endpoints {
		if err := ValidateURL(e.URL); err != nil {
			return nil, fmt.Errorf("webhook %d: %w", i, err)
		}
		if len(e.Secret) < MinSecretLength {
			return nil, fmt.Errorf("webhook %d: secret of %d bytes: want at least %d", i, len(e.Secret), MinSecretLength)
		}
		if len(e.Events) == 0 {
			return nil, fmt.Errorf("webhook %d: no events: want some of %v", i, session.WebhookEvents)
		}
		for _, ev := range e.Events {
			if !session.ValidWebhookEvent(ev) {
				return nil, fmt.Errorf("webhook %d: unknown event %q: want some of %v", i, ev, session.WebhookEvents)
			}
		}
		if _, dup := d.endpoints[e.Name()]; dup {
			return nil, fmt.Errorf("webhook %d: url %q is configured twice", i, e.URL)
		}
		d.endpoints[e.Name()] = e
	}
	var known []string
	for _, e := range o.Endpoints {
		known = append(known, e.Name())
		d.lanes = append(d.lanes, &lane{which: session.OutboxTargets{Only: e.Name()}, kick: make(chan struct{}, 1)})
	}
	// The rows of endpoints no longer configured: dead-lettered (handle).
	d.lanes = append(d.lanes, &lane{which: session.OutboxTargets{Not: known}, kick: make(chan struct{}, 1)})
	return d, nil
}

// Routing is the outbox routing of the endpoints, for the Store's SetOutbox.
// It returns an error only for endpoints New would refuse.
func (d *Deliverer) Routing() (*session.OutboxRouting, error) {
	var targets []session.OutboxTarget
	for _, e := range d.o.Endpoints {
		targets = append(targets, session.OutboxTarget{Name: e.Name(), Events: e.Events})
	}
	return session.NewOutboxRouting(targets)
}

// Kick makes the deliverer read the outbox now (after a commit that wrote
// to it); it never blocks.
func (d *Deliverer) Kick() {
	for _, l := range d.lanes {
		select {
		case l.kick <- struct{}{}:
		default:
		}
	}
}

// Stats returns the counters.
func (d *Deliverer) Stats() Stats {
	return Stats{Delivered: d.delivered.Load(), Failed: d.failed.Load(), Dead: d.dead.Load()}
}

// Run delivers until ctx is done. Then the attempts under way are cut
// (each recorded as a failed attempt, retried later) and the rows claimed
// and not started are given back unattempted; Run returns once both are
// done.
//
// Each endpoint has a lane of its own: its rows are claimed apart, oldest
// first, and delivered by Workers of its own, so that a receiver that
// hangs (each of its attempts taking the whole Timeout) holds up no other
// receiver's rows, such as the claim links of called-back sessions. One
// more lane dead-letters the rows of endpoints no longer configured.
//
// A lane claims, in one transaction, as many rows as it has idle workers
// (up to Batch), once half its workers are idle, and starts them all at
// once: one slow attempt does not hold back the rows that come meanwhile,
// and a claim's lease need only cover one attempt and the recording of its
// answer (claimLease), so no other instance of a shared store sends a row
// while this one may, and a killed process's rows wait out no more.
func (d *Deliverer) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, l := range d.lanes {
		wg.Go(func() { d.runLane(ctx, l) })
	}
	wg.Wait()
}

// lane is the rows one loop of Run claims, and how it is woken.
type lane struct {
	which session.OutboxTargets
	kick  chan struct{}
}

// recordTimeout bounds the recording of an attempt's answer (handle).
const recordTimeout = 5 * time.Second

func (d *Deliverer) runLane(ctx context.Context, l *lane) {
	t := time.NewTicker(d.o.Poll)
	defer t.Stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	idle := make(chan struct{}, d.o.Workers)
	busy, more := 0, true
	// A claim when rows may be due and half the workers are idle.
	claimNow := func() bool {
		return more && d.o.Workers-busy >= (d.o.Workers+1)/2 && ctx.Err() == nil
	}
	for {
		if claimNow() {
			n := min(d.o.Workers-busy, d.o.Batch)
			msgs := d.claim(ctx, l.which, n, d.claimLease(busy, n))
			more = len(msgs) == n
			for _, m := range msgs {
				busy++
				wg.Go(func() {
					if ctx.Err() != nil { // stopped: back unattempted
						d.giveBack([]session.OutboxMessage{m})
					} else {
						d.handle(ctx, m)
					}
					select {
					case idle <- struct{}{}:
					case <-ctx.Done(): // the loop has stopped counting
					}
				})
			}
			if claimNow() {
				continue // the claim came back full: there may be more due
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-idle:
			busy--
		case <-t.C:
			more = true
		case <-l.kick:
			more = true
		}
	}
}

// claim leases up to n due rows of which for lease; a failure is logged
// and claims nothing.
func (d *Deliverer) claim(ctx context.Context, which session.OutboxTargets, n int, lease time.Duration) []session.OutboxMessage {
	msgs, err := d.o.Store.ClaimOutbox(ctx, which, d.o.Now(), lease, n)
	if err != nil {
		if ctx.Err() == nil {
			d.o.Logger.Warn("anteroom: webhook outbox: claim failed", "err", err)
		}
		return nil
	}
	return msgs
}

// claimLease is how long a claim of n rows holds them while busy attempts
// run on the lane's Workers: the last row starts after at most
// ⌈(busy+n)/Workers⌉−1 turns of a worker, each an attempt (Timeout) and
// the recording of its answer (recordTimeout), and ends one turn later;
// the margin covers the claim itself. Run claims only for idle workers,
// so its claims hold one turn; RunOnce's a turn per Workers rows. A killed
// process's rows wait it out. It is at most maxLease (a huge Timeout would
// overflow it).
func (d *Deliverer) claimLease(busy, n int) time.Duration {
	turns := (busy + n + d.o.Workers - 1) / d.o.Workers
	turn := d.o.Timeout + recordTimeout
	if turn > (maxLease-10*time.Second)/time.Duration(turns) {
		return maxLease
	}
	return time.Duration(turns)*turn + 10*time.Second
}

// maxLease bounds a claim's lease.
const maxLease = 24 * time.Hour

// giveBack returns rows claimed and never started (ReleaseOutbox): due
// again at once, for this process or another, with no attempt counted.
// It takes at most recordTimeout in all (a store that does not answer
// must not hold a shutdown for a batch of timeouts).
func (d *Deliverer) giveBack(rows []session.OutboxMessage) {
	if len(rows) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), recordTimeout)
	defer cancel()
	for _, m := range rows {
		if err := d.o.Store.ReleaseOutbox(ctx, m); err != nil {
			d.o.Logger.Warn("anteroom: webhook row not given back; it is sent once its lease ends", "id", m.ID, "err", err)
		}
	}
}

// RunOnce claims one batch of every lane (up to Batch rows each), delivers
// them Workers at a time per lane, the lanes side by side, records each
// outcome and returns how many rows it claimed: Run's work done once, by
// hand (its lease covers every turn of the batch).
func (d *Deliverer) RunOnce(ctx context.Context) int {
	var claimedRows atomic.Int64
	var wg sync.WaitGroup
	for _, l := range d.lanes {
		wg.Go(func() {
			rows := d.claim(ctx, l.which, d.o.Batch, d.claimLease(0, d.o.Batch))
			claimedRows.Add(int64(len(rows)))
			sem := make(chan struct{}, d.o.Workers)
			var each sync.WaitGroup
			for i, m := range rows {
				sem <- struct{}{}
				if ctx.Err() != nil { // stopped: the rest go back unattempted
					d.giveBack(rows[i:])
					break
				}
				each.Go(func() {
					defer func() { <-sem }()
					d.handle(ctx, m)
				})
			}
			each.Wait()
		})
	}
	wg.Wait()
	return int(claimedRows.Load())
}

// handle delivers one row and records the outcome under its lease.
func (d *Deliverer) handle(ctx context.Context, m session.OutboxMessage) {
	// Answers are written even when ctx ends (the row's lease would hold
	// it for nothing), within recordTimeout from when the attempt ended: an
	// attempt takes Timeout, then its recording recordTimeout, as the
	// leases count (claimLease).
	record := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	}
	e, ok := d.endpoints[m.Target]
	if !ok {
		actx, cancel := record()
		defer cancel()
		d.deadLetter(actx, m, "no endpoint configured for this row any more")
		return
	}
	err := d.deliver(ctx, e, m)
	actx, cancel := record()
	defer cancel()
	if err == nil {
		d.delivered.Add(1)
		if aerr := d.o.Store.AckOutbox(actx, m, d.o.Now()); aerr != nil {
			// Delivered but not recorded: it is delivered again (at least once).
			d.o.Logger.Warn("anteroom: webhook delivered but not recorded; it will be sent again", "id", m.ID, "err", aerr)
		}
		return
	}
	d.failed.Add(1)
	now := d.o.Now()
	attempts := m.Attempts + 1
	next := now.Add(d.backoff(attempts))
	if attempts >= d.o.MaxAttempts || next.Sub(m.CreatedAt) > d.o.MaxAge {
		d.deadLetter(actx, m, err.Error())
		return
	}
	d.o.Logger.Info("anteroom: webhook delivery failed; will retry", "id", m.ID, "event", m.Event, "url", redact(e.URL), "attempt", attempts, "retry_in", next.Sub(now).Round(time.Millisecond), "err", err)
	if rerr := d.o.Store.RetryOutbox(actx, m, next, err.Error()); rerr != nil {
		d.o.Logger.Warn("anteroom: webhook retry not recorded; the lease expires and it is tried again", "id", m.ID, "err", rerr)
	}
}

func (d *Deliverer) deadLetter(ctx context.Context, m session.OutboxMessage, why string) {
	d.dead.Add(1)
	target := m.Target
	if e, ok := d.endpoints[m.Target]; ok {
		target = redact(e.URL)
	}
	d.o.Logger.Error("anteroom: webhook dead-lettered (kept in the outbox, not retried)", "id", m.ID, "event", m.Event, "target", target, "attempts", m.Attempts+1, "err", why)
	if err := d.o.Store.DeadOutbox(ctx, m, why); err != nil {
		d.o.Logger.Warn("anteroom: webhook dead letter not recorded", "id", m.ID, "err", err)
	}
}

// backoff is the wait before attempt n+1 after n failures: BaseBackoff·2^(n-1)
// capped at MaxBackoff, drawn uniformly from its upper half (jitter, so
// that receivers that come back are not hit by every row at once).
func (d *Deliverer) backoff(n int) time.Duration {
	b := d.o.BaseBackoff
	for i := 1; i < n && b < d.o.MaxBackoff; i++ {
		b *= 2
	}
	b = min(b, d.o.MaxBackoff)
	half := b / 2
	return half + time.Duration(rand.Int64N(int64(half)+1))
}

// Delivery is the JSON body of a webhook.
type Delivery struct {
	// ID is the idempotency key: the same on every attempt of one row.
	ID        string          `json:"id"`
	Event     string          `json:"event"`
	Gate      string          `json:"gate"`
	CreatedAt time.Time       `json:"createdAt"`
	Data      json.RawMessage `json:"data"`
	// ClaimURL is the claim link of a promoted notify session: its first
	// visit claims the slot, until the claim deadline.
	ClaimURL string `json:"claimUrl,omitempty"`
}

// ID is the idempotency key of a row.
func ID(m session.OutboxMessage) string { return "evt_" + strconv.FormatInt(m.ID, 10) }

func (d *Deliverer) body(m session.OutboxMessage) ([]byte, error) {
	dl := Delivery{ID: ID(m), Event: m.Event, Gate: m.Gate, CreatedAt: m.CreatedAt.UTC(), Data: m.Payload}
	if !json.Valid(m.Payload) {
		dl.Data = json.RawMessage("null")
	}
	if m.Event == session.WebhookPromoted && d.o.ClaimURL != nil {
		var data session.OutboxData
		if err := json.Unmarshal(m.Payload, &data); err == nil && data.Notify && data.ClaimDeadline != nil {
			// Past the deadline there is no link to give (the payload's
			// claimDeadline says so).
			if u, err := d.o.ClaimURL(m.Gate, data.Session, *data.ClaimDeadline); err == nil {
				dl.ClaimURL = u
			}
		}
	}
	return json.Marshal(dl)
}

// deliver posts m to e once.
func (d *Deliverer) deliver(ctx context.Context, e Endpoint, m session.OutboxMessage) error {
	body, err := d.body(m)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, d.o.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.URL, bytes.NewReader(body))
	if err != nil {
		return err
	}
	id := ID(m)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "anteroom-webhook/1")
	req.Header.Set(HeaderEvent, m.Event)
	req.Header.Set(HeaderDelivery, id)
	req.Header.Set(HeaderIdempotency, id)
	req.Header.Set(HeaderAttempt, strconv.Itoa(m.Attempts+1))
	req.Header.Set(HeaderSignature, Sign(e.Secret, d.o.Now(), body))
	resp, err := d.o.Client.Do(req)
	if err != nil {
		return fmt.Errorf("post: %w", err)
	}
	defer resp.Body.Close()
	// Read a bounded part of the answer (so the connection may be reused);
	// what is longer is cut off with the connection.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, MaxResponseBytes))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("receiver answered %d", resp.StatusCode)
	}
	return nil
}

// Sign returns the signature header value of body at t under secret:
// "t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>".
func Sign(secret []byte, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	return "t=" + ts + ",v1=" + hex.EncodeToString(mac(secret, ts, body))
}

func mac(secret []byte, ts string, body []byte) []byte {
	h := hmac.New(sha256.New, secret)
	h.Write([]byte(ts))
	h.Write([]byte{'.'})
	h.Write(body)
	return h.Sum(nil)
}

// Verify checks a signature header against body and secret, and that its
// timestamp is within tolerance of now (a replay window). It returns an
// error saying which check failed.
func Verify(secret []byte, header string, body []byte, now time.Time, tolerance time.Duration) error {
	var ts string
	var sigs []string
	for _, part := range strings.Split(header, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			continue
		}
		switch k {
		case "t":
			ts = v
		case "v1":
			sigs = append(sigs, v)
		}
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || len(sigs) == 0 {
		return errors.New("webhook: malformed signature header")
	}
	if d := now.Sub(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
		return errors.New("webhook: signature timestamp outside the tolerance")
	}
	want := mac(secret, ts, body)
	for _, s := range sigs {
		got, err := hex.DecodeString(s)
		if err == nil && hmac.Equal(got, want) {
			return nil
		}
	}
	return errors.New("webhook: signature does not match")
}

// redact drops a URL's query (it may hold a receiver's token) for logs.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "?"
	}
	u.RawQuery, u.User = "", nil
	return u.String()
}
