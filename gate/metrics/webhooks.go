package metrics

import "github.com/prometheus/client_golang/prometheus"

// WebhookStats reads the webhook deliverer's counters since start:
// deliveries acknowledged, attempts failed, rows dead-lettered.
type WebhookStats func() (delivered, failed, dead int64)

// AddWebhooks registers anteroom_webhook_deliveries_total{outcome} (
// "delivered", "failed", "dead"), read from stats when scraped. A dead
// letter is a row that will not be tried again (kept in the outbox). It
// panics when called twice on one Metrics (a wiring bug).
func (m *Metrics) AddWebhooks(stats WebhookStats) {
	desc := prometheus.NewDesc("anteroom_webhook_deliveries_total",
		"Webhook delivery outcomes since start: delivered (acknowledged by a 2xx), failed (an attempt to retry), dead (dead-lettered, kept in the outbox, not retried).",
		[]string{"outcome"}, nil)
	m.reg.MustRegister(webhookCollector{desc: desc, stats: stats})
}

type webhookCollector struct {
	desc  *prometheus.Desc
	stats WebhookStats
}

func (c webhookCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c webhookCollector) Collect(ch chan<- prometheus.Metric) {
	d, f, x := c.stats()
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(d), "delivered")
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(f), "failed")
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(x), "dead")
}
