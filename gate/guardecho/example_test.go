package guardecho_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/anteroomhq/anteroom/gate/guard"
	"github.com/anteroomhq/anteroom/gate/guardecho"
	"github.com/anteroomhq/anteroom/gate/token"
	"github.com/anteroomhq/anteroom/session"
	"github.com/anteroomhq/anteroom/session/sqlite"
)

// An echo app keeps its /app routes behind the gate "default"; here with the
// in-process checker, the same with guard.NewRemote.
func ExampleMiddleware() {
	dir, err := os.MkdirTemp("", "anteroom-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	quiet := slog.New(slog.DiscardHandler)
	store, err := sqlite.Open(filepath.Join(dir, "anteroom.db"), sqlite.Options{Logger: quiet})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	gates := []session.GateConfig{{Name: "default", ActiveLimit: 1, ActiveTimeout: 5 * time.Minute, WaitingTimeout: time.Minute}}
	wl, err := session.New(context.Background(), store, gates, session.Options{Logger: quiet})
	if err != nil {
		log.Fatal(err)
	}
	defer wl.Close()
	signer, err := token.NewSigner([]byte("an example secret of at least 32 bytes"))
	if err != nil {
		log.Fatal(err)
	}
	checker, err := guard.NewInProcess(wl, signer, guard.InProcessOptions{})
	if err != nil {
		log.Fatal(err)
	}

	e := echo.New()
	app := e.Group("/app", guardecho.Middleware(checker, guard.MiddlewareOptions{BasePath: "/anteroom"}))
	app.GET("", func(c echo.Context) error { return c.String(http.StatusOK, "welcome") })

	for _, id := range []string{"alice", "bob"} {
		if _, err := wl.Join(context.Background(), "default", id); err != nil {
			log.Fatal(err)
		}
		tok, _ := signer.Sign(id)
		r := httptest.NewRequest(http.MethodGet, "/app", nil)
		r.AddCookie(&http.Cookie{Name: guard.CookieName, Value: tok})
		w := httptest.NewRecorder()
		e.ServeHTTP(w, r)
		fmt.Printf("%s %d Retry-After=%q\n", id, w.Code, w.Header().Get("Retry-After"))
	}
	// Output:
	// alice 200 Retry-After=""
	// bob 403 Retry-After="5"
}
