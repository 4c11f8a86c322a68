package gate_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/gate/wire"
	"github.com/anteroomhq/anteroom/session"
)

// Every error answer, whoever writes it (echo's router, a handler, the
// websocket hub, the reverse proxy), is the one wire error body: the status
// of its code, application/json with its length, nosniff, and exactly the
// bytes of wire.WriteError.
func TestEveryErrorAnswerIsTheWireErrorBody(t *testing.T) {
	h := newHarness(t, 1)
	down := httptest.NewServer(http.NotFoundHandler())
	down.Close() // the proxy's upstream refuses connections
	p := proxyHarness(t, down.URL)

	for _, c := range []struct {
		name, method, url string
		code              session.Code
	}{
		{"unknown route", http.MethodGet, h.url + "/nope", wire.CodeRouteNotFound},
		{"unknown route, HEAD", http.MethodHead, h.url + "/nope", wire.CodeRouteNotFound},
		{"wrong method", http.MethodPost, h.url + "/healthz", wire.CodeMethodNotAllowed},
		{"check without a session", http.MethodGet, h.url + base + "/check", wire.CodeNoSession},
		{"check at an unknown gate", http.MethodGet, h.url + base + "/check?gate=nope", session.CodeUnknownGate},
		{"status without a session", http.MethodGet, h.url + base + "/api/status", session.CodeNotFound},
	} {
		t.Run(c.name, func(t *testing.T) { requireWireError(t, c.method, c.url, nil, c.code) })
	}

	t.Run("proxy, app down", func(t *testing.T) {
		join := do(t, newClient(t), http.MethodPost, p.url+base+"/api/join", "application/json", "")
		require.Equal(t, http.StatusOK, join.status, join.raw)
		requireWireError(t, http.MethodGet, p.url+"/app", http.Header{"Authorization": {"Bearer " + join.body["token"].(string)}}, wire.CodeBadGateway)
	})
	t.Run("websocket, hub closed", func(t *testing.T) {
		require.NoError(t, h.hub.Close())
		requireWireError(t, http.MethodGet, h.url+base+"/ws", http.Header{
			"Connection": {"Upgrade"}, "Upgrade": {"websocket"}, "Sec-Websocket-Version": {"13"},
			"Sec-Websocket-Key": {"dGhlIHNhbXBsZSBub25jZQ=="},
		}, session.CodeUnavailable)
	})
}

func requireWireError(t *testing.T, method, url string, header http.Header, code session.Code) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	require.NoError(t, err)
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)

	assert.Equal(t, wire.Status(code), resp.StatusCode, "%s", raw)
	assert.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	assert.Equal(t, "nosniff", resp.Header.Get("X-Content-Type-Options"))
	length, err := strconv.Atoi(resp.Header.Get("Content-Length"))
	require.NoError(t, err, "Content-Length %q", resp.Header.Get("Content-Length"))
	if method == http.MethodHead {
		assert.Empty(t, raw)
		assert.Positive(t, length, "HEAD announces the body GET would send")
		return
	}
	assert.Equal(t, len(raw), length)
	var body wire.ErrorBody
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&body), "%s", raw)
	assert.Equal(t, code, body.Error.Code)
	assert.NotEmpty(t, body.Error.Message)
	want := httptest.NewRecorder()
	wire.WriteError(want, httptest.NewRequest(method, "/", nil), body.Error.Code, body.Error.Message)
	assert.Equal(t, want.Body.String(), string(raw), "the bytes of wire.WriteError")
}
