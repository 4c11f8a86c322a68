package metrics_test

import (
	"bytes"
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/broadcast"
	"github.com/anteroomhq/anteroom/gate/metrics"
)

// With webhooks, the deliveries are counted by outcome, read when scraped;
// a dead letter shows.
func TestWebhookDeliveries(t *testing.T) {
	hub := broadcast.New(broadcast.Options{})
	defer hub.Close()
	m := metrics.New(metrics.Options{Hub: hub})
	var dead int64
	m.AddWebhooks(func() (int64, int64, int64) { return 7, 3, dead })
	dead = 2
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, err := io.ReadAll(rec.Body)
	require.NoError(t, err)
	text := string(body)
	assert.Contains(t, text, `anteroom_webhook_deliveries_total{outcome="delivered"} 7`)
	assert.Contains(t, text, `anteroom_webhook_deliveries_total{outcome="failed"} 3`)
	assert.Contains(t, text, `anteroom_webhook_deliveries_total{outcome="dead"} 2`)
	problems, err := promlint.New(bytes.NewReader(body)).Lint()
	require.NoError(t, err)
	for _, p := range problems {
		assert.False(t, strings.HasPrefix(p.Metric, "anteroom_webhook"), "%s: %s", p.Metric, p.Text)
	}
}
