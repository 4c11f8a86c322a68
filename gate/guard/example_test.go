package guard_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/anteroomhq/anteroom/broadcast"
	"github.com/anteroomhq/anteroom/gate"
	"github.com/anteroomhq/anteroom/gate/guard"
	"github.com/anteroomhq/anteroom/gate/token"
	"github.com/anteroomhq/anteroom/session"
	"github.com/anteroomhq/anteroom/session/sqlite"
)

// exampleWaitlist opens a Waitlist over SQLite in a temporary directory, with
// one gate of one active slot. The caller runs cleanup when done.
func exampleWaitlist() (*session.Waitlist, func()) {
	dir, err := os.MkdirTemp("", "anteroom-example")
	if err != nil {
		log.Fatal(err)
	}
	quiet := slog.New(slog.DiscardHandler)
	store, err := sqlite.Open(filepath.Join(dir, "anteroom.db"), sqlite.Options{Logger: quiet})
	if err != nil {
		log.Fatal(err)
	}
	gates := []session.GateConfig{{Name: "default", ActiveLimit: 1, ActiveTimeout: 5 * time.Minute, WaitingTimeout: time.Minute}}
	wl, err := session.New(context.Background(), store, gates, session.Options{Logger: quiet})
	if err != nil {
		log.Fatal(err)
	}
	return wl, func() {
		_ = wl.Close()
		_ = store.Close()
		_ = os.RemoveAll(dir)
	}
}

// An app that embeds anteroom checks sessions in process: from memory, with
// the Signer the sidecar's routes use.
func ExampleNewInProcess() {
	wl, cleanup := exampleWaitlist()
	defer cleanup()
	signer, err := token.NewSigner([]byte("an example secret of at least 32 bytes"))
	if err != nil {
		log.Fatal(err)
	}
	checker, err := guard.NewInProcess(wl, signer, guard.InProcessOptions{Gate: "default"})
	if err != nil {
		log.Fatal(err)
	}

	// Alice takes the one slot, Bob waits.
	for _, id := range []string{"alice", "bob"} {
		if _, err := wl.Join(context.Background(), "default", id); err != nil {
			log.Fatal(err)
		}
	}
	alice, _ := signer.Sign("alice")
	bob, _ := signer.Sign("bob")

	// The checker on its own.
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.AddCookie(&http.Cookie{Name: guard.CookieName, Value: bob})
	err = checker.ValidateSessionIsActive(r)
	fmt.Println("bob waits:", errors.Is(err, session.ErrNotActive))

	// The middleware in front of a handler.
	protected := guard.Middleware(checker, guard.MiddlewareOptions{BasePath: "/anteroom"})(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "welcome") }))
	for _, tok := range []string{alice, bob, ""} {
		r := httptest.NewRequest(http.MethodGet, "/app", nil)
		r.Header.Set("Accept", "application/json")
		if tok != "" {
			r.Header.Set("Authorization", "Bearer "+tok)
		}
		w := httptest.NewRecorder()
		protected.ServeHTTP(w, r)
		fmt.Println(w.Code, strings.TrimSpace(w.Body.String()))
	}
	// Output:
	// bob waits: true
	// 200 welcome
	// 403 {"error":{"code":"session_not_active","message":"waiting in line"}}
	// 401 {"error":{"code":"no_session","message":"no valid session: join the line first"}}
}

// An app beside a sidecar asks the sidecar's /check over HTTP.
func ExampleNewRemote() {
	wl, cleanup := exampleWaitlist()
	defer cleanup()
	signer, err := token.NewSigner([]byte("an example secret of at least 32 bytes"))
	if err != nil {
		log.Fatal(err)
	}
	hub := broadcast.New(broadcast.Options{Logger: slog.New(slog.DiscardHandler)})
	defer hub.Close()
	srv, err := gate.New(gate.Options{BasePath: "/anteroom", Waitlist: wl, Signer: signer, Hub: hub, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		log.Fatal(err)
	}
	sidecar := httptest.NewServer(srv)
	defer sidecar.Close()

	// The host app: its /app route is behind the sidecar's gate "default".
	checker, err := guard.NewRemote(sidecar.URL+"/anteroom", guard.RemoteOptions{
		Gate:     "default",
		Timeout:  2 * time.Second,
		CacheTTL: 0, // no cache: a released session is refused at once
	})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/app", guard.Middleware(checker, guard.MiddlewareOptions{})(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "welcome") })))
	app := httptest.NewServer(mux)
	defer app.Close()

	// Two clients join at the sidecar and call the app with their tokens.
	join := func() string {
		resp, err := http.Post(sidecar.URL+"/anteroom/api/join", "application/json", strings.NewReader(`{"gate":"default"}`))
		if err != nil {
			log.Fatal(err)
		}
		defer resp.Body.Close()
		var view struct {
			Status string `json:"status"`
			Token  string `json:"token"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&view); err != nil {
			log.Fatal(err)
		}
		fmt.Println("joined:", view.Status)
		return view.Token
	}
	first, second := join(), join()
	for _, tok := range []string{first, second} {
		req, _ := http.NewRequest(http.MethodGet, app.URL+"/app", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Println(resp.StatusCode, resp.Header.Get("Retry-After"), strings.TrimSpace(string(body)))
	}
	// Output:
	// joined: active
	// joined: waiting
	// 200  welcome
	// 403 5 {"error":{"code":"session_not_active","message":"waiting in line"}}
}
