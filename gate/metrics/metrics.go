// Package metrics is the sidecar's Prometheus instrumentation: what the
// service did (joins, admissions, purges by reason, waits, updates), what
// the store did (commit latency, batch size), the live state of every gate
// and of the websocket hub (read when scraped), and the Go runtime and
// process collectors. It counts from the session service's observers
// (session.Options.Observer, UpdateObserver) and the store's commit hook,
// each an increment or a histogram observation: nothing blocks the commit
// path.
package metrics

import (
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/anteroomhq/anteroom/broadcast"
	"github.com/anteroomhq/anteroom/session"
)

const namespace = "anteroom"

// The label values of anteroom_admissions_total{how}.
const (
	HowDirect   = "direct"   // admitted at join: a free slot and nobody waiting
	HowPromoted = "promoted" // promoted from the line
)

// reasons are the label values of anteroom_purges_total{reason}, indexed by
// session.PurgeReason; a departure whose Store gave no reason is "unknown".
var reasons = [...]string{
	session.NotStale:  "unknown",
	session.Gone:      session.Gone.String(),
	session.Idle:      session.Idle.String(),
	session.Unclaimed: session.Unclaimed.String(),
	session.Released:  session.Released.String(),
}

// Buckets of the histograms, in base units.
var (
	// WaitBuckets span a second to two hours in line.
	WaitBuckets = []float64{1, 5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200}
	// UpdateBuckets span half a millisecond to ten seconds per gate update.
	UpdateBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}
	// CommitBuckets span 50µs to a second per store transaction.
	CommitBuckets = []float64{.00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1}
	// BatchBuckets span 1 to 1024 operations per transaction.
	BatchBuckets = prometheus.ExponentialBuckets(1, 2, 11)
)

// Options configure a Metrics. Every field is optional.
type Options struct {
	// Hub, when set, gives anteroom_websocket_connections and
	// anteroom_broadcasts_total.
	Hub *broadcast.Hub
}

// Metrics holds the sidecar's collectors in their own registry. Its methods
// are safe for concurrent use.
type Metrics struct {
	reg *prometheus.Registry
	hub *broadcast.Hub

	joins      *prometheus.CounterVec
	admissions *prometheus.CounterVec
	purges     *prometheus.CounterVec
	wait       *prometheus.HistogramVec
	update     *prometheus.HistogramVec
	commit     prometheus.Histogram
	batch      prometheus.Histogram

	waitlist atomic.Pointer[session.Waitlist]
	gates    sync.Map // gate name → *gateMetrics
}

// gateMetrics are one gate's children of the vectors, resolved once: the
// commit path then only adds.
type gateMetrics struct {
	joins            prometheus.Counter
	direct, promoted prometheus.Counter
	purges           [len(reasons)]prometheus.Counter
	wait             prometheus.Observer
}

// New returns the collectors, registered in a new registry with the Go
// runtime and process collectors. It never fails.
func New(opts Options) *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		hub: opts.Hub,
		joins: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "joins_total",
			Help: "New sessions that joined the gate (admitted at once or put in line); a waiter coming back is not counted again.",
		}, []string{"gate"}),
		admissions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "admissions_total",
			Help: "Sessions that became active: how=direct at join, how=promoted from the line.",
		}, []string{"gate", "how"}),
		purges: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "purges_total",
			Help: "Sessions that left the gate, by reason: gone (a waiter with no sign of life for waiting_timeout), idle (an active session not seen for active_timeout), unclaimed (a promotion not claimed within claim_timeout), released (ended explicitly or on disconnect).",
		}, []string{"gate", "reason"}),
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Name: "wait_seconds",
			Help:    "Time in line of each promoted session, from its join to its admission.",
			Buckets: WaitBuckets,
		}, []string{"gate"}),
		update: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Name: "update_duration_seconds",
			Help:    "Duration of each gate's update (the tick that purges stale sessions and promotes waiters).",
			Buckets: UpdateBuckets,
		}, []string{"gate"}),
		commit: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Name: "store_commit_duration_seconds",
			Help:    "Time from the store's writer taking a batch of operations to its commit.",
			Buckets: CommitBuckets,
		}),
		batch: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Name: "store_commit_batch_size",
			Help:    "Operations per committed store transaction (group commit).",
			Buckets: BatchBuckets,
		}),
	}
	m.reg.MustRegister(m.joins, m.admissions, m.purges, m.wait, m.update, m.commit, m.batch,
		liveCollector{m},
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Registry returns the registry that holds the collectors, for a caller
// that adds its own.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the registry in the Prometheus exposition format (text,
// or what the scraper negotiates). It does no authentication.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// SetWaitlist makes the gates' live state (active, waiting, limit) part of
// the scrape, and starts every series of the Waitlist's gates at zero so
// that rates work from the first scrape. Until it is called (start-up still
// loading) the scrape has no gate gauges.
func (m *Metrics) SetWaitlist(w *session.Waitlist) {
	for _, g := range w.Gates() {
		m.gate(g)
	}
	m.waitlist.Store(w)
}

// gate returns the gate's resolved children, creating them.
func (m *Metrics) gate(name string) *gateMetrics {
	if g, ok := m.gates.Load(name); ok {
		return g.(*gateMetrics)
	}
	g := &gateMetrics{
		joins:    m.joins.WithLabelValues(name),
		direct:   m.admissions.WithLabelValues(name, HowDirect),
		promoted: m.admissions.WithLabelValues(name, HowPromoted),
		wait:     m.wait.WithLabelValues(name),
	}
	for i, r := range reasons {
		g.purges[i] = m.purges.WithLabelValues(name, r)
	}
	actual, _ := m.gates.LoadOrStore(name, g)
	return actual.(*gateMetrics)
}

// ObserveCommit counts what one commit did; it is the Waitlist's
// session.Options.Observer. Joins are EventActivated (also a direct
// admission) and EventQueued; EventPromoted is a promoted admission, its
// wait the session's LastActive (the promotion) minus its CreatedAt (the
// join); EventDeactivated and EventDequeued are departures by Event.Reason.
// A commit of another instance (Commit.Remote) is not counted: that
// instance counted it, so the counters summed over instances are the
// gate's.
func (m *Metrics) ObserveCommit(c session.Commit) {
	if c.Remote {
		return
	}
	var g *gateMetrics
	var name string
	for i := range c.Events {
		ev := &c.Events[i]
		if g == nil || ev.Session.Gate != name {
			name = ev.Session.Gate
			g = m.gate(name)
		}
		switch ev.Kind {
		case session.EventActivated:
			g.joins.Inc()
			g.direct.Inc()
		case session.EventQueued:
			g.joins.Inc()
		case session.EventPromoted:
			g.promoted.Inc()
			g.wait.Observe(max(ev.Session.LastActive.Sub(ev.Session.CreatedAt), 0).Seconds())
		case session.EventDeactivated, session.EventDequeued:
			r := ev.Reason
			if int(r) >= len(reasons) {
				r = session.NotStale
			}
			g.purges[r].Inc()
		}
	}
}

// ObserveUpdate records one gate's update duration; it is the Waitlist's
// session.Options.UpdateObserver.
func (m *Metrics) ObserveUpdate(r session.UpdateReport) {
	m.update.WithLabelValues(r.Gate).Observe(r.Duration.Seconds())
}

// ObserveStoreCommit records one committed store transaction: its
// operations and its latency (sqlite.Options.OnCommit).
func (m *Metrics) ObserveStoreCommit(ops int, d time.Duration) {
	m.batch.Observe(float64(ops))
	m.commit.Observe(d.Seconds())
}

// liveCollector reads, when scraped, the gates' state from the Waitlist's
// memory and the hub's counters.
type liveCollector struct{ m *Metrics }

var (
	descActive = prometheus.NewDesc(namespace+"_active_sessions",
		"Active sessions of the gate now.", []string{"gate"}, nil)
	descWaiting = prometheus.NewDesc(namespace+"_waiting_sessions",
		"Sessions waiting in the gate's line now.", []string{"gate"}, nil)
	descLimit = prometheus.NewDesc(namespace+"_active_limit",
		"The gate's active limit now.", []string{"gate"}, nil)
	descSockets = prometheus.NewDesc(namespace+"_websocket_connections",
		"Websocket connections open now (all gates).", nil, nil)
	descBroadcasts = prometheus.NewDesc(namespace+"_broadcasts_total",
		"Global messages broadcast to the gate's websockets (coalesced: one per change sent, whatever the number of sockets).", []string{"gate"}, nil)
)

// Describe implements prometheus.Collector.
func (c liveCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descActive
	ch <- descWaiting
	ch <- descLimit
	if c.m.hub != nil {
		ch <- descSockets
		ch <- descBroadcasts
	}
}

// Collect implements prometheus.Collector.
func (c liveCollector) Collect(ch chan<- prometheus.Metric) {
	var sent map[string]uint64
	if h := c.m.hub; h != nil {
		ch <- prometheus.MustNewConstMetric(descSockets, prometheus.GaugeValue, float64(h.Stats().Subscribers))
		sent = h.Broadcasts()
	}
	w := c.m.waitlist.Load()
	if w == nil {
		return
	}
	for _, name := range w.Gates() {
		v, err := w.Global(name)
		if err != nil {
			continue // removed meanwhile
		}
		ch <- prometheus.MustNewConstMetric(descActive, prometheus.GaugeValue, float64(v.Active), name)
		ch <- prometheus.MustNewConstMetric(descWaiting, prometheus.GaugeValue, float64(v.AllWaiting()), name) // both lanes
		ch <- prometheus.MustNewConstMetric(descLimit, prometheus.GaugeValue, float64(v.Limit), name)
		if sent != nil {
			ch <- prometheus.MustNewConstMetric(descBroadcasts, prometheus.CounterValue, float64(sent[name]), name)
		}
	}
}
