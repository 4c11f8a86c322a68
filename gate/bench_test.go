package gate_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/anteroomhq/anteroom/gate"
	"github.com/anteroomhq/anteroom/gate/gatetest"
	"github.com/anteroomhq/anteroom/session"
)

// BenchmarkCheck measures the forward-auth check of an active session
// through the whole gate (echo, middleware, token, memory), beside an empty
// echo handler as the baseline: compare the two in the same run.
func BenchmarkCheck(b *testing.B) {
	sc := gatetest.StartSidecar(b, gatetest.Options{Gates: []session.GateConfig{gatetest.Gate("default", 10)}})
	if _, err := sc.Waitlist.Join(context.Background(), "default", "bench-session"); err != nil {
		b.Fatal(err)
	}
	cookie := gate.CookieName + "=" + sc.Token(b, "bench-session")
	empty := echo.New()
	empty.GET("/empty", func(c echo.Context) error { return c.NoContent(http.StatusOK) })

	run := func(b *testing.B, h http.Handler, path string) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			req := httptest.NewRequest(http.MethodGet, path, nil)
			req.Header.Set("Cookie", cookie)
			for pb.Next() {
				w := httptest.NewRecorder()
				h.ServeHTTP(w, req)
				if w.Code != http.StatusOK {
					b.Fatalf("%s: %d %s", path, w.Code, w.Body)
				}
			}
		})
	}
	b.Run("baseline-empty-echo", func(b *testing.B) { run(b, empty, "/empty") })
	b.Run("check", func(b *testing.B) { run(b, sc.Handler, gatetest.BasePath+"/check") })
	b.Run("healthz", func(b *testing.B) { run(b, sc.Handler, "/healthz") })
	b.Run("global", func(b *testing.B) { run(b, sc.Handler, gatetest.BasePath+"/api/global") })
}

// BenchmarkJoinHandler measures a new session's join through the gate:
// body parsing, id and token, the durable join, the JSON answer.
func BenchmarkJoinHandler(b *testing.B) {
	sc := gatetest.StartSidecar(b, gatetest.Options{Gates: []session.GateConfig{gatetest.Gate("default", 1<<40)}})
	b.ReportAllocs()
	b.SetParallelism(joinParallelism)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			req := httptest.NewRequest(http.MethodPost, gatetest.BasePath+"/api/join", strings.NewReader(`{"gate":"default"}`))
			w := httptest.NewRecorder()
			sc.Handler.ServeHTTP(w, req)
			if w.Code != http.StatusOK {
				b.Fatalf("join: %d %s", w.Code, w.Body)
			}
		}
	})
}

// joinParallelism is how many callers per CPU BenchmarkJoinHandler runs, as
// behind an HTTP server, so that the store's group commit forms batches.
const joinParallelism = 32
