// Command anteroom is the session-gating sidecar: it keeps the number of
// active sessions of a web app under a limit and lines everyone else up.
//
// Usage:
//
//	anteroom [-config anteroom.yaml]
//	anteroom -version
//	anteroom -h
//
// With no config it serves a demo on 127.0.0.1:8080 with anteroom.db in the
// working directory. Every key and its ANTEROOM_* variable is in
// config.example.yaml and the README's Configuration section; -h lists them.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/anteroomhq/anteroom/broadcast"
	"github.com/anteroomhq/anteroom/cronjobs"
	"github.com/anteroomhq/anteroom/gate"
	"github.com/anteroomhq/anteroom/gate/metrics"
	"github.com/anteroomhq/anteroom/gate/token"
	"github.com/anteroomhq/anteroom/session"
)

// version is set at build time with -ldflags "-X main.version=v1.2.3".
var version = ""

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Environ(), os.Stdout, os.Stderr, nil); err != nil {
		fmt.Fprintln(os.Stderr, "anteroom:", err)
		os.Exit(1)
	}
}

// usage writes the -h text: the flags, then every config key with its
// environment variable, and where each is explained.
func usage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprintf(w, `Usage: anteroom [-config FILE] [-version]

anteroom is a waiting room for a web app: it keeps the number of active
sessions under a limit and lines everyone else up. With no config it serves a
demo on http://127.0.0.1:8080/.

Flags:
`)
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
	fmt.Fprintf(w, `
Configuration: a YAML file (-config) and ANTEROOM_* environment variables,
which override it. Every key is optional. config.example.yaml lists every key
with its default and what it does (in the container image:
/etc/anteroom/config.example.yaml); the README's Configuration section has the
same table. Lists in the environment are comma-separated; <NAME> is a gate's
name in upper case with '-' and '.' as '_'.

`)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  KEY\tENVIRONMENT\tVALUE")
	for _, s := range settings {
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", s.key, s.env, s.want)
	}
	_ = tw.Flush()
}

// run is the whole program: it returns when ctx is done (after a graceful
// shutdown) or when starting fails. It listens at once, answering 503 but
// on /healthz while it loads; ready, when not nil, is called with the
// address it listens on once it serves every route.
func run(ctx context.Context, args, environ []string, stdout, stderr io.Writer, ready func(addr string)) error {
	fs := flag.NewFlagSet("anteroom", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are returned; -h prints usage to stdout
	configPath := fs.String("config", "", "path of the YAML config file (default: none, built-in defaults)")
	showVersion := fs.Bool("version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			usage(stdout, fs)
			return nil
		}
		return fmt.Errorf("%w (anteroom -h lists the flags)", err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q (use -config FILE)", fs.Args())
	}
	if *showVersion {
		fmt.Fprintln(stdout, "anteroom", buildVersion())
		return nil
	}
	cfg, warnings, err := LoadConfig(*configPath, environ)
	if err != nil {
		return err
	}
	level, _ := parseLogLevel(cfg.LogLevel)
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	for _, w := range warnings {
		args := []any{"var", w.Var, "nearest_known", w.Nearest}
		if w.Hint != "" {
			args = append(args, "hint", w.Hint)
		}
		log.Warn("anteroom: ignoring unknown environment variable", args...)
	}
	schedule, err := cronjobs.ParseSchedule(cfg.UpdateInterval)
	if err != nil {
		return fmt.Errorf("config: update_interval: %w", err)
	}
	trusted, err := cfg.TrustedNetworks()
	if err != nil {
		return err
	}
	for _, n := range wideNetworks(trusted) {
		log.Warn("anteroom: trusted_proxies holds a very wide network: every client in it is believed about its own address and exempt from max_conns_per_ip",
			"network", n)
	}
	var upstream *url.URL
	if cfg.Upstream != "" {
		if upstream, err = url.Parse(cfg.Upstream); err != nil {
			return fmt.Errorf("config: upstream: %w", err)
		}
	}
	hooks := startHooksOf(ctx)

	// Listen at once: while the store opens and the waitlist loads (a big
	// database takes a while), /healthz says the process is alive, /readyz
	// says it is starting, and every other route answers 503 with
	// Retry-After. The full handler replaces that one when loaded. The same
	// bounds in every mode: in reverse-proxy mode too a request must arrive
	// within the read timeout, but for a proxied body, which may take as long
	// as it keeps arriving (gate.ProxyOptions.BodyIdleTimeout); and an answer
	// must be taken within the write timeout, but for a proxied one, which
	// may take as long as the client keeps taking it (gate.Options.WriteTimeout).
	timeouts := defaultTimeouts
	var current switchHandler
	current.set(startingHandler{})
	srv := newHTTPServer(&current, log, timeouts)
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", cfg.Listen, err)
	}
	if n := *cfg.MaxConnsPerIP; n > 0 {
		limiter := newConnLimiter(n, trusted)
		ln = limiter.Listener(ln)
		srv.ConnState = limiter.ConnState
	}
	addr := ln.Addr().String()
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	defer srv.Close() // a failed start; after Shutdown it does nothing
	log.Info("anteroom: listening, starting", "url", "http://"+addr+"/", "database", databaseForLog(cfg.Database), "version", buildVersion())
	if hooks.listening != nil {
		hooks.listening(addr)
	}

	hub := broadcast.New(broadcast.Options{
		Interval:                time.Duration(cfg.BroadcastInterval),
		OriginPatterns:          cfg.AllowedOrigins,
		MaxConnections:          *cfg.Websocket.MaxConnections,
		MaxConnectionsPerClient: *cfg.Websocket.MaxPerClient,
		Logger:                  log,
	})
	defer hub.Close()
	met := metrics.New(metrics.Options{Hub: hub})

	if hooks.loading != nil {
		hooks.loading()
	}
	store, storeReady, err := openStore(ctx, cfg.Database, log, met.ObserveStoreCommit, cfg.historyRetention() < 0)
	if err != nil {
		return err
	}
	defer func() {
		if err := store.Close(); err != nil {
			log.Error("anteroom: closing the database", "err", err)
		}
	}()

	secret := []byte(cfg.Secret)
	if len(secret) == 0 {
		if secret, err = store.Secret(ctx, token.NewSecret); err != nil {
			return err
		}
	}
	signer, err := token.NewSignerWithOptions(secret, token.Options{Previous: []byte(cfg.SecretPrevious), TTL: time.Duration(cfg.TokenTTL)})
	if err != nil {
		return fmt.Errorf("config: secret: %w", err)
	}

	deliveries, err := startWebhooks(ctx, cfg, store, signer, met, log)
	if err != nil {
		return err
	}
	defer deliveries.close()
	waitlist, err := session.New(ctx, store, cfg.SessionGates(), session.Options{
		Publisher:      hub,
		Logger:         log,
		Observer:       deliveries.observer(met.ObserveCommit),
		UpdateObserver: met.ObserveUpdate,
		Ready:          storeReady,
		Events:         cfg.SessionEvents(),
		// history_retention 0: -1, no pruning (nor writing: openStore).
		HistoryRetention: cfg.historyRetention(),
	})
	if err != nil {
		return err
	}
	defer func() {
		if err := waitlist.Close(); err != nil {
			log.Error("anteroom: persisting last refreshes", "err", err)
		}
	}()
	met.SetWaitlist(waitlist)
	// One update at start fills slots freed while the sidecar was down or by
	// a raised limit, without waiting for the first tick.
	if err := cronjobs.RunUpdate(ctx, waitlist, log); err != nil {
		return err
	}
	scheduler := cronjobs.Start(waitlist, schedule, cronjobs.Options{Logger: log})
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = scheduler.Stop(stopCtx)
	}()

	opts := gate.Options{
		BasePath:       cfg.BasePath,
		Waitlist:       waitlist,
		Signer:         signer,
		Hub:            hub,
		Demo:           cfg.DemoServed(),
		APIKeys:        cfg.APIKeys,
		AllowedOrigins: cfg.AllowedOrigins,
		AdminToken:     cfg.AdminToken,
		RateLimit:      gate.RateLimitOptions{PerSecond: *cfg.RateLimit.PerSecond, Burst: cfg.RateLimit.Burst},
		// A client that stops reading an answer is cut off (the server has
		// no write timeout, for proxied answers that stream).
		WriteTimeout:   timeouts.write,
		TrustedProxies: trusted,
		Logger:         log,
		Metrics:        met.Handler(),
		AccessLog:      cfg.AccessLog,
		AccessLogKey:   accessLogKey(secret),
		// /readyz answers 503 while the store cannot write (disk full, I/O
		// errors, its file removed) or, on a shared store, while this
		// instance does not follow the others' commits.
		Ready: func() error {
			if storeReady != nil {
				if err := storeReady(); err != nil {
					return err
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			return waitlist.Ready(ctx)
		},
	}
	if upstream != nil {
		opts.Proxy = gate.ProxyOptions{Upstream: upstream, Protect: cfg.Protect, Bypass: cfg.Bypass,
			ResponseHeaderTimeout: time.Duration(cfg.UpstreamTimeout),
			// A proxied body may take as long as it keeps arriving (uploads to
			// the app may be slow); one that stops is cut off like any request.
			BodyIdleTimeout: timeouts.read,
		}
	}
	if opts.Admissions, err = newAdmissions(ctx, cfg, store, waitlist, log); err != nil {
		return err
	}
	handler, err := gate.New(opts)
	if err != nil {
		return err
	}
	current.set(handler)
	log.Info("anteroom: ready", "url", "http://"+addr+"/", "base_path", cfg.BasePath, "upstream", cfg.Upstream,
		"database", databaseForLog(cfg.Database), "gates", strings.Join(waitlist.Gates(), ","), "version", buildVersion())
	if ready != nil {
		ready(addr)
	}

	select {
	case err := <-serveErr:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	log.Info("anteroom: shutting down")
	// Websockets are hijacked connections that Shutdown does not track: the
	// hub closes them (StatusGoingAway) so that clients reconnect elsewhere.
	_ = hub.Close()
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		log.Warn("anteroom: graceful shutdown incomplete", "err", err)
	}
	return nil
}

// serverTimeouts bound slow clients (slowloris): a request's headers must
// arrive within readHeader, the whole request within read (0: no bound),
// and an idle keep-alive connection is closed after idle. Websockets are
// not cut by read: net/http clears the deadline once a request without a
// body is read, and the hijacked connection keeps none. write bounds slow
// readers: the gate gives each answer that long to be taken
// (gate.Options.WriteTimeout), each write of a proxied one.
type serverTimeouts struct {
	readHeader, read, idle, write time.Duration
}

var defaultTimeouts = serverTimeouts{readHeader: 10 * time.Second, read: 30 * time.Second, idle: 2 * time.Minute, write: 30 * time.Second}

// newHTTPServer is the sidecar's http.Server. There is no write timeout:
// proxied responses may stream for long (the gate bounds each of their
// writes, and the sidecar's own answers, with serverTimeouts.write).
func newHTTPServer(h http.Handler, log *slog.Logger, t serverTimeouts) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: t.readHeader,
		ReadTimeout:       t.read,
		IdleTimeout:       t.idle,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}

func parseLogLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("%q: want debug, info, warn or error", s)
	}
	return l, nil
}

func buildVersion() string {
	if version != "" {
		return version
	}
	if info, ok := debug.ReadBuildInfo(); ok && info.Main.Version != "" && info.Main.Version != "(devel)" {
		return info.Main.Version
	}
	return "dev"
}
