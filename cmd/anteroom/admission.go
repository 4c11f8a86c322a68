package main

import (
	"context"
	"errors"
	"log/slog"

	"github.com/anteroomhq/anteroom/gate"
	"github.com/anteroomhq/anteroom/session"
)

// newAdmissions returns the issuer of admission tokens when a gate has
// admission_token.ttl set, else nil. It returns an error when the store
// keeps no admission records or the keyring cannot be read.
func newAdmissions(ctx context.Context, cfg Config, store appStore, log *slog.Logger) (*gate.Admissions, error) {
	ttls := cfg.AdmissionTTLs()
	if len(ttls) == 0 {
		return nil, nil
	}
	as, ok := store.(session.AdmissionStore)
	if !ok {
		return nil, errors.New("admission_token: the store keeps no admission records")
	}
	return gate.NewAdmissions(ctx, gate.AdmissionsOptions{Store: as, TTL: ttls, Logger: log})
}
