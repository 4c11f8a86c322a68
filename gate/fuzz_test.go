package gate_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/anteroomhq/anteroom/gate"
	"github.com/anteroomhq/anteroom/gate/gatetest"
	"github.com/anteroomhq/anteroom/gate/token"
	"github.com/anteroomhq/anteroom/session"
)

// The request bodies of the client API, fuzzed against the real server (echo,
// the session service, SQLite): whatever the body, content type, ?gate= and
// credentials, the answer is never a 5xx, and it is either the endpoint's
// success (200 SessionView for join, 204 for leave and release) or the
// contract's JSON error body with a stable code and its status.
//
// Seeds live in testdata/fuzz/Fuzz{Join,Leave,Release}Body; plain go test
// runs them. To fuzz: scripts/fuzz.sh, or
//
//	go test -run='^$' -fuzz='^FuzzJoinBody$' -fuzztime=60s ./gate/

const fuzzAPIKey = "fuzz-api-key-0123456789"

// fuzzServer is a test sidecar (gatetest) with an API key, built once per
// fuzz target rather than once per input: opening a database per input would
// slow fuzzing to a crawl.
type fuzzServer struct {
	handler  http.Handler
	waitlist *session.Waitlist
	signer   *token.Signer
	// token names a session joined at start (it may be released by an input;
	// a later join with it starts it again).
	token string
}

func newFuzzServer(tb testing.TB) *fuzzServer {
	tb.Helper()
	sc := gatetest.StartSidecar(tb, gatetest.Options{
		Gates: []session.GateConfig{gatetest.Gate("default", 3), gatetest.Gate("vip", 1)},
		Gate: func(o *gate.Options) {
			o.Demo = true
			o.APIKeys = []string{fuzzAPIKey}
		},
	})
	fs := &fuzzServer{handler: sc.Handler, waitlist: sc.Waitlist, signer: sc.Signer, token: sc.Token(tb, "fuzz-session")}
	if _, err := sc.Waitlist.Join(context.Background(), "default", "fuzz-session"); err != nil {
		tb.Fatal(err)
	}
	return fs
}

// The credentials an input sends, by auth % fuzzAuthModes.
const (
	fuzzAuthNone = iota
	fuzzAuthCookie
	fuzzAuthBearer
	fuzzAuthQuery
	fuzzAuthForged
	fuzzAuthAPIKey
	fuzzAuthModes
)

// statusOfCode is the contract's status for every code the client API may
// answer with.
var statusOfCode = map[string]int{
	"invalid_json":       http.StatusBadRequest,
	"invalid_argument":   http.StatusBadRequest,
	"api_key_required":   http.StatusUnauthorized,
	"no_session":         http.StatusUnauthorized,
	"unknown_gate":       http.StatusNotFound,
	"session_not_found":  http.StatusNotFound,
	"body_too_large":     http.StatusRequestEntityTooLarge,
	"rate_limited":       http.StatusTooManyRequests,
	"session_not_active": http.StatusForbidden,
}

var snakeCase = regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)

func (fs *fuzzServer) check(t *testing.T, endpoint string, body []byte, contentType, gateQuery string, auth uint8) {
	target := base + "/api/" + endpoint
	q := url.Values{}
	if gateQuery != "" {
		q.Set("gate", gateQuery)
	}
	mode := auth % fuzzAuthModes
	if mode == fuzzAuthQuery {
		q.Set("session", fs.token)
	}
	if len(q) > 0 {
		target += "?" + q.Encode()
	}
	req := httptest.NewRequest(http.MethodPost, target, bytes.NewReader(body))
	if contentType != "" && !strings.ContainsAny(contentType, "\r\n\x00") {
		req.Header.Set("Content-Type", contentType)
	}
	switch mode {
	case fuzzAuthCookie:
		req.AddCookie(&http.Cookie{Name: gate.CookieName, Value: fs.token})
	case fuzzAuthBearer:
		req.Header.Set("Authorization", "Bearer "+fs.token)
	case fuzzAuthForged:
		forged := []byte(fs.token)
		forged[len(forged)-2] ^= 1
		req.Header.Set("Authorization", "Bearer "+string(forged))
	case fuzzAuthAPIKey:
		req.Header.Set(gate.APIKeyHeader, fuzzAPIKey)
	}
	rec := httptest.NewRecorder()
	fs.handler.ServeHTTP(rec, req)
	res := rec.Result()
	raw := rec.Body.Bytes()
	ctype := strings.TrimSpace(strings.Split(res.Header.Get("Content-Type"), ";")[0])
	describe := func() string {
		return "POST " + target + " body " + quoteForLog(body) + " content-type " + quoteForLog([]byte(contentType)) +
			" → " + res.Status + " " + string(raw)
	}

	switch {
	case res.StatusCode >= 500:
		t.Fatalf("server error: %s", describe())
	case res.StatusCode == http.StatusOK && endpoint == "join":
		var v struct {
			session.SessionView
			Token string `json:"token"`
		}
		if ctype != "application/json" || json.Unmarshal(raw, &v) != nil {
			t.Fatalf("join succeeded without a SessionView: %s", describe())
		}
		if !session.ValidID(v.Session) || !v.Status.Valid() || v.Position < 1 || (v.Gate != "default" && v.Gate != "vip") || v.Active > v.Limit {
			t.Fatalf("join succeeded with a malformed view: %s", describe())
		}
		if id, ok := fs.signer.Verify(v.Token); !ok || id != v.Session {
			t.Fatalf("join succeeded with a token that does not name its session: %s", describe())
		}
	case res.StatusCode == http.StatusNoContent && endpoint != "join":
		if len(raw) != 0 {
			t.Fatalf("204 with a body: %s", describe())
		}
	default:
		var e gate.ErrorBody
		if ctype != "application/json" || json.Unmarshal(raw, &e) != nil {
			t.Fatalf("refusal without the JSON error body: %s", describe())
		}
		code := string(e.Error.Code)
		if !snakeCase.MatchString(code) || e.Error.Message == "" {
			t.Fatalf("error body without a snake_case code and a message: %s", describe())
		}
		if want, ok := statusOfCode[code]; !ok || want != res.StatusCode {
			t.Fatalf("code %q answered with status %d (contract: %d): %s", code, res.StatusCode, want, describe())
		}
	}
	for _, g := range []string{"default", "vip"} {
		if v, err := fs.waitlist.Global(g); err != nil || v.Active > v.Limit || v.Waiting < 0 {
			t.Fatalf("after %s: gate %s: %v %v", describe(), g, v, err)
		}
	}
}

func quoteForLog(b []byte) string {
	const keep = 200
	if len(b) > keep {
		return strings.TrimSuffix(string(mustJSON(string(b[:keep]))), `"`) + `..."`
	}
	return string(mustJSON(string(b)))
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

func fuzzEndpoint(f *testing.F, endpoint string) {
	for _, seed := range []struct {
		body, contentType, gate string
		auth                    uint8
	}{
		{`{"gate":"default"}`, "application/json", "", fuzzAuthNone},
		{`{"gate":"vip"}`, "application/json", "", fuzzAuthBearer},
		{``, "", "vip", fuzzAuthCookie},
		{`{"gate":`, "application/json", "", fuzzAuthNone},
		{`{"sessionId":"user:42"}`, "application/json", "", fuzzAuthAPIKey},
		{`{"sessionId":"user:42"}`, "application/json", "", fuzzAuthNone},
	} {
		f.Add([]byte(seed.body), seed.contentType, seed.gate, seed.auth)
	}
	fs := newFuzzServer(f)
	f.Fuzz(func(t *testing.T, body []byte, contentType, gateQuery string, auth uint8) {
		fs.check(t, endpoint, body, contentType, gateQuery, auth)
	})
}

func FuzzJoinBody(f *testing.F)    { fuzzEndpoint(f, "join") }
func FuzzLeaveBody(f *testing.F)   { fuzzEndpoint(f, "leave") }
func FuzzReleaseBody(f *testing.F) { fuzzEndpoint(f, "release") }
