package main

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/anteroomhq/anteroom/gate"
	"github.com/anteroomhq/anteroom/session"
)

// newAdmissions returns the issuer of admission tokens when a gate has
// admission_token.ttl set, else nil. It returns an error when the store
// keeps no admission records or the keyring cannot be read.
//
// Each issue reads the gate's lifetime from wl (its settings, so a gate
// added at runtime issues tokens as the settings it inherited say).
func newAdmissions(ctx context.Context, cfg Config, store appStore, wl *session.Waitlist, log *slog.Logger) (*gate.Admissions, error) {
	ttls := cfg.AdmissionTTLs()
	if len(ttls) == 0 {
		return nil, nil
	}
	as, ok := store.(session.AdmissionStore)
	if !ok {
		return nil, errors.New("admission_token: the store keeps no admission records")
	}
	ttlOf := func(g string) time.Duration {
		c, err := wl.GateConfig(g)
		if err != nil {
			return 0
		}
		return c.AdmissionTTL
	}
	return gate.NewAdmissions(ctx, gate.AdmissionsOptions{Store: as, TTL: ttls, TTLOf: ttlOf, Logger: log})
}
