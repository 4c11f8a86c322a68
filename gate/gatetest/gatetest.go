// Package gatetest starts a real anteroom sidecar for tests: SQLite in a
// temporary directory, a broadcast hub, a Waitlist (on a fake clock unless
// told otherwise) and the gate, served on a loopback listener. Everything is
// closed when the test ends.
package gatetest

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anteroomhq/anteroom/broadcast"
	"github.com/anteroomhq/anteroom/gate"
	"github.com/anteroomhq/anteroom/gate/token"
	"github.com/anteroomhq/anteroom/session"
	"github.com/anteroomhq/anteroom/session/sessiontest"
	"github.com/anteroomhq/anteroom/session/sqlite"
)

// BasePath is where the test sidecar serves, as in the default config.
const BasePath = "/anteroom"

// Start is the fake clock's starting time.
var Start = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// Options configure a test sidecar. Only Gates is required.
type Options struct {
	Gates []session.GateConfig
	// RealClock runs the Waitlist on the wall clock (for browsers and cron);
	// otherwise on a fake clock, Sidecar.Clock.
	RealClock bool
	// TouchInterval is passed to the Waitlist. Default -1: refreshes are
	// persisted by Update and Close only, which keeps tests deterministic.
	TouchInterval time.Duration
	// Hub configures the broadcast hub. Interval defaults to 1ms; Logger to
	// Logger.
	Hub broadcast.Options
	// Gate adjusts the gate's options (Demo, Proxy, APIKeys, ...) before
	// gate.New.
	Gate func(*gate.Options)
	// Wrap, when set, wraps the sidecar's handler (to count or fail requests).
	Wrap func(http.Handler) http.Handler
	// Logger receives everything; default: discarded.
	Logger *slog.Logger
	// AdmissionTTL, when not empty, issues admission tokens at these gates
	// (gate.Options.Admissions, on the sidecar's clock).
	AdmissionTTL map[string]time.Duration
}

// Sidecar is a running test sidecar.
type Sidecar struct {
	// URL is the server's root, such as http://127.0.0.1:41234.
	URL      string
	Store    *sqlite.Store
	Waitlist *session.Waitlist
	Hub      *broadcast.Hub
	Signer   *token.Signer
	// Clock is the fake clock; nil with RealClock.
	Clock *sessiontest.Clock
	// Handler is the sidecar (wrapped by Options.Wrap), for in-memory
	// requests; Server serves it on loopback.
	Handler http.Handler
	Server  *httptest.Server
	// Admissions issues admission tokens; nil without Options.AdmissionTTL.
	Admissions *gate.Admissions
}

// Gate returns a gate config with the given limit, active_timeout 5m and
// waiting_timeout 1m.
func Gate(name string, limit int64) session.GateConfig {
	return session.GateConfig{Name: name, ActiveLimit: limit, ActiveTimeout: 5 * time.Minute, WaitingTimeout: time.Minute}
}

// StartSidecar starts a sidecar and registers its shutdown with t.Cleanup.
// It fails the test when any part cannot start.
func StartSidecar(t testing.TB, opts Options) *Sidecar {
	t.Helper()
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	store, err := sqlite.Open(filepath.Join(t.TempDir(), "anteroom.db"), sqlite.Options{Logger: log})
	if err != nil {
		t.Fatalf("gatetest: sqlite.Open: %v", err)
	}
	t.Cleanup(func() { _ = store.Close() })

	hubOpts := opts.Hub
	if hubOpts.Interval == 0 {
		hubOpts.Interval = time.Millisecond
	}
	if hubOpts.Logger == nil {
		hubOpts.Logger = log
	}
	hub := broadcast.New(hubOpts)
	t.Cleanup(func() { _ = hub.Close() })

	sc := &Sidecar{Store: store, Hub: hub}
	wopts := session.Options{Publisher: hub, Logger: log, TouchInterval: opts.TouchInterval}
	if wopts.TouchInterval == 0 {
		wopts.TouchInterval = -1
	}
	if !opts.RealClock {
		sc.Clock = sessiontest.NewClock(Start)
		wopts.Clock = sc.Clock
		// The background sweeper would run on the wall clock's beat against
		// the fake clock, promoting between a test's steps; tests that need
		// a sweep call Waitlist.Sweep themselves.
		wopts.SweepInterval = -1
	}
	gates := append([]session.GateConfig(nil), opts.Gates...)
	for i := range gates { // as cmd/anteroom's configuration does
		if d, ok := opts.AdmissionTTL[gates[i].Name]; ok && gates[i].AdmissionTTL == 0 {
			gates[i].AdmissionTTL = d
		}
	}
	sc.Waitlist, err = session.New(context.Background(), store, gates, wopts)
	if err != nil {
		t.Fatalf("gatetest: session.New: %v", err)
	}
	t.Cleanup(func() { _ = sc.Waitlist.Close() })

	if sc.Signer, err = token.NewSigner([]byte(strings.Repeat("s", token.MinSecretLength))); err != nil {
		t.Fatalf("gatetest: token.NewSigner: %v", err)
	}
	gopts := gate.Options{BasePath: BasePath, Waitlist: sc.Waitlist, Signer: sc.Signer, Hub: hub, Logger: log}
	if len(opts.AdmissionTTL) > 0 {
		aopts := gate.AdmissionsOptions{Store: store, TTL: opts.AdmissionTTL, Logger: log, TTLOf: func(g string) time.Duration {
			c, err := sc.Waitlist.GateConfig(g)
			if err != nil {
				return 0
			}
			return c.AdmissionTTL
		}}
		if sc.Clock != nil {
			aopts.Now = sc.Clock.Now
		}
		if sc.Admissions, err = gate.NewAdmissions(context.Background(), aopts); err != nil {
			t.Fatalf("gatetest: gate.NewAdmissions: %v", err)
		}
		gopts.Admissions = sc.Admissions
	}
	if opts.Gate != nil {
		opts.Gate(&gopts)
	}
	srv, err := gate.New(gopts)
	if err != nil {
		t.Fatalf("gatetest: gate.New: %v", err)
	}
	var handler http.Handler = srv
	if opts.Wrap != nil {
		handler = opts.Wrap(handler)
	}
	sc.Handler = handler
	sc.Server = httptest.NewServer(handler)
	// Websockets are hijacked: the hub closes them before the server waits.
	t.Cleanup(func() { _ = hub.Close(); sc.Server.Close() })
	sc.URL = sc.Server.URL
	return sc
}

// Token signs id with the sidecar's key.
func (s *Sidecar) Token(t testing.TB, id string) string {
	t.Helper()
	tok, err := s.Signer.Sign(id)
	if err != nil {
		t.Fatalf("gatetest: sign %q: %v", id, err)
	}
	return tok
}
