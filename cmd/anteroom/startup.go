package main

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"net/http"
	"sync/atomic"

	"github.com/anteroomhq/anteroom/gate/wire"
	"github.com/anteroomhq/anteroom/session"
)

// switchHandler serves whichever handler was set last: the starting one
// while the store loads, then the sidecar's.
type switchHandler struct {
	h atomic.Pointer[http.Handler]
}

func (s *switchHandler) set(h http.Handler) { s.h.Store(&h) }

// ServeHTTP implements http.Handler.
func (s *switchHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	(*s.h.Load()).ServeHTTP(w, r)
}

// startingRetryAfter is the Retry-After, in seconds, of the answers given
// while starting.
const startingRetryAfter = "2"

// startingHandler answers while the store opens and the waitlist loads:
// /healthz 200 (the process is alive), /readyz 503 "starting", and every
// other route 503 unavailable with Retry-After.
type startingHandler struct{}

// ServeHTTP implements http.Handler.
func (startingHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	if r.URL.Path == "/healthz" && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
		b, _ := json.Marshal(map[string]string{"status": "ok"})
		h.Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		if r.Method != http.MethodHead {
			_, _ = w.Write(b)
		}
		return
	}
	h.Set("Retry-After", startingRetryAfter)
	msg := "starting: the sidecar is loading its sessions"
	if r.URL.Path == "/readyz" {
		msg = "not ready: starting"
	}
	wire.WriteError(w, r, session.CodeUnavailable, msg)
}

// startHooks let a test watch and hold the start-up (run takes them from
// its context): listening is called with the address once the listener
// accepts connections, loading just before the store is opened.
type startHooks struct {
	listening func(addr string)
	loading   func()
}

type startHooksKey struct{}

// withStartHooks returns ctx carrying h, for run.
func withStartHooks(ctx context.Context, h startHooks) context.Context {
	return context.WithValue(ctx, startHooksKey{}, h)
}

func startHooksOf(ctx context.Context) startHooks {
	h, _ := ctx.Value(startHooksKey{}).(startHooks)
	return h
}

// accessLogKey derives the key of the access log's session hash from the
// token secret: stable across restarts and instances sharing the secret,
// and useless without it.
func accessLogKey(secret []byte) []byte {
	k := sha256.Sum256(append([]byte("anteroom access log\x00"), secret...))
	return k[:]
}
