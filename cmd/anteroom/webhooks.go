package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/anteroomhq/anteroom/gate"
	"github.com/anteroomhq/anteroom/gate/metrics"
	"github.com/anteroomhq/anteroom/gate/token"
	"github.com/anteroomhq/anteroom/gate/webhook"
	"github.com/anteroomhq/anteroom/session"
)

// WebhookConfig is one entry of webhooks: where to POST, which events, and
// the secret that signs them.
type WebhookConfig struct {
	URL    string   `yaml:"url" json:"url"`
	Events []string `yaml:"events" json:"events"`
	Secret string   `yaml:"secret" json:"secret"`
}

// parseWebhooksEnv reads ANTEROOM_WEBHOOKS: a JSON list of
// {"url","events","secret"} (a list of mappings has no comma-separated
// form).
func parseWebhooksEnv(v string) ([]WebhookConfig, error) {
	var out []WebhookConfig
	dec := json.NewDecoder(strings.NewReader(v))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&out); err != nil {
		return nil, fmt.Errorf(`want a JSON list such as [{"url":"https://app.example/hooks","events":["promoted"],"secret":"..."}]: %v`, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("want one JSON list")
	}
	return out, nil
}

// validateWebhooks checks the webhooks key, naming the bad entry.
func validateWebhooks(list []WebhookConfig) error {
	seen := map[string]int{}
	for i, w := range list {
		key := fmt.Sprintf("config: webhooks[%d]", i)
		if err := webhook.ValidateURL(w.URL); err != nil {
			return fmt.Errorf("%s.url: %w", key, err)
		}
		if j, dup := seen[w.URL]; dup {
			return fmt.Errorf("%s.url: %q is also webhooks[%d]'s", key, w.URL, j)
		}
		seen[w.URL] = i
		if len(w.Events) == 0 {
			return fmt.Errorf("%s.events: name at least one of %s", key, strings.Join(session.WebhookEvents, ", "))
		}
		for _, e := range w.Events {
			if !session.ValidWebhookEvent(e) {
				return fmt.Errorf("%s.events: %s: want some of %s", key, quote(e), strings.Join(session.WebhookEvents, ", "))
			}
		}
		if len(w.Secret) < webhook.MinSecretLength {
			return fmt.Errorf("%s.secret: must be at least %d characters", key, webhook.MinSecretLength)
		}
	}
	return nil
}

// webhooks runs the delivery worker of the configured webhooks. The zero
// value (none configured) does nothing.
type webhooks struct {
	d    *webhook.Deliverer
	stop context.CancelFunc
	done sync.WaitGroup
}

// startWebhooks installs the outbox routing on the store and starts the
// deliverer; with no webhooks configured it installs nothing. It returns an
// error when an endpoint is refused or the store keeps no outbox.
func startWebhooks(ctx context.Context, cfg Config, store session.Store, signer *token.Signer, met *metrics.Metrics, log *slog.Logger) (*webhooks, error) {
	w := &webhooks{}
	if len(cfg.Webhooks) == 0 {
		return w, nil
	}
	os, ok := store.(session.OutboxStore)
	if !ok {
		return nil, fmt.Errorf("config: webhooks: this database keeps no outbox")
	}
	var eps []webhook.Endpoint
	for _, c := range cfg.Webhooks {
		eps = append(eps, webhook.Endpoint{URL: c.URL, Events: c.Events, Secret: []byte(c.Secret)})
	}
	d, err := webhook.New(webhook.Options{
		Store:     os,
		Endpoints: eps,
		ClaimURL: func(gateName, id string, deadline time.Time) (string, error) {
			return gate.BuildClaimURL(signer, cfg.PublicURL, cfg.BasePath, gateName, id, deadline)
		},
		Logger: log,
	})
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	r, err := d.Routing()
	if err != nil {
		return nil, fmt.Errorf("config: webhooks: %w", err)
	}
	os.SetOutbox(r)
	if met != nil {
		met.AddWebhooks(func() (int64, int64, int64) {
			s := d.Stats()
			return s.Delivered, s.Failed, s.Dead
		})
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	w.d, w.stop = d, cancel
	w.done.Add(1)
	go func() {
		defer w.done.Done()
		d.Run(runCtx)
	}()
	log.Info("anteroom: webhooks on", "endpoints", len(eps))
	return w, nil
}

// observer wraps the Waitlist's commit observer next: after a commit with
// an event a webhook may want, the deliverer reads the outbox at once.
func (w *webhooks) observer(next func(session.Commit)) func(session.Commit) {
	if w == nil || w.d == nil {
		return next
	}
	return func(c session.Commit) {
		if next != nil {
			next(c)
		}
		for _, ev := range c.Events {
			if session.WebhookEvent(ev) != "" {
				w.d.Kick()
				return
			}
		}
	}
}

// close stops the deliverer and waits for the deliveries under way (each
// bounded by its timeout).
func (w *webhooks) close() {
	if w == nil || w.stop == nil {
		return
	}
	w.stop()
	w.done.Wait()
}
