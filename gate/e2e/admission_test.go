package e2e

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/anteroomhq/anteroom/broadcast"
	"github.com/anteroomhq/anteroom/gate"
	"github.com/anteroomhq/anteroom/gate/gatetest"
	"github.com/anteroomhq/anteroom/session"
)

// The snippet exposes the admission token in Chromium: a visitor admitted
// at join finds it in anteroom.view.admission at once; one promoted over
// the websocket (claim_timeout 0: the notice carries no deadline, and no
// admission) gets it from the status call that follows, with an
// "anteroom:admission" event.
func TestSnippetExposesTheAdmissionToken(t *testing.T) {
	sc := gatetest.StartSidecar(t, gatetest.Options{
		Gates:         []session.GateConfig{{Name: "default", ActiveLimit: 1, ActiveTimeout: time.Minute, WaitingTimeout: time.Minute}},
		RealClock:     true,
		TouchInterval: time.Second,
		Hub:           broadcast.Options{Interval: 100 * time.Millisecond},
		Gate:          func(o *gate.Options) { o.Demo = true },
		AdmissionTTL:  map[string]time.Duration{"default": 5 * time.Minute},
	})
	b := newBrowser(t)
	first, second := b.newUser(t, "first"), b.newUser(t, "second")
	first.open(sc.URL + "/")
	first.waitFor("admitted at join with an admission token",
		`window.anteroom.state === 'active' && typeof window.anteroom.view.admission === 'string' && window.anteroom.view.admission.split('.').length === 3`)

	second.open(sc.URL + "/")
	second.waitFor("waiting, without an admission token", `window.anteroom.state === 'waiting' && !window.anteroom.view.admission`)
	evalJS[int](second, `(window.__adm = 0, document.addEventListener('anteroom:admission', () => window.__adm++), 1)`)
	evalJS[int](first, `(window.anteroom.release(), 1)`)
	second.waitFor("promoted, then the admission token from the status",
		`window.anteroom.state === 'active' && window.__adm === 1 && typeof window.anteroom.view.admission === 'string'`)

	jwt := evalJS[string](second, `window.anteroom.view.admission`)
	parts := strings.Split(jwt, ".")
	if len(parts) != 3 {
		t.Fatalf("admission %q is not a JWS", jwt)
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatalf("admission payload: %v", err)
	}
	var claims map[string]any
	if err := json.Unmarshal(payload, &claims); err != nil {
		t.Fatalf("admission claims: %v", err)
	}
	if want := evalJS[string](second, `window.anteroom.view.session`); claims["sub"] != want || claims["gate"] != "default" {
		t.Errorf("claims %v: want sub %q, gate default", claims, want)
	}
	second.requireNoProblems()
}
