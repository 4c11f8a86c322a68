package gate_test

import (
	"io"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/gate"
	"github.com/anteroomhq/anteroom/gate/gatetest"
	"github.com/anteroomhq/anteroom/session"
)

// HEAD is answered like GET on everything a GET reads (health checks,
// forward-auth, the snippet, the pages): the same status and headers, no
// body. It used to be 405.
func TestHeadIsAnsweredLikeGet(t *testing.T) {
	sc := gatetest.StartSidecar(t, gatetest.Options{
		Gates: []session.GateConfig{gatetest.Gate("default", 1), gatetest.Gate("other", 0)},
		Gate:  func(o *gate.Options) { o.Demo = true },
	})
	active := sc.Token(t, "alice")
	_, err := sc.Waitlist.Join(t.Context(), "default", "alice")
	require.NoError(t, err)
	waiting := sc.Token(t, "bob")
	_, err = sc.Waitlist.Join(t.Context(), "default", "bob")
	require.NoError(t, err)

	tests := []struct {
		name, path, token string
		want              int
	}{
		{name: "healthz", path: "/healthz", want: http.StatusOK},
		{name: "readyz", path: "/readyz", want: http.StatusOK},
		{name: "check, active", path: "/anteroom/check", token: active, want: http.StatusOK},
		{name: "check, waiting", path: "/anteroom/check", token: waiting, want: http.StatusForbidden},
		{name: "check, no session", path: "/anteroom/check", want: http.StatusUnauthorized},
		{name: "check, unknown gate", path: "/anteroom/check?gate=nope", want: http.StatusNotFound},
		{name: "snippet", path: "/anteroom/anteroom.js", want: http.StatusOK},
		{name: "waiting page", path: "/anteroom/", want: http.StatusOK},
		{name: "waiting page, no slash", path: "/anteroom", want: http.StatusOK},
		{name: "waiting page of a gate", path: "/anteroom/?gate=other&next=/x", want: http.StatusOK},
		{name: "demo page", path: "/", want: http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			do := func(method string) (*http.Response, []byte) {
				req, err := http.NewRequest(method, sc.URL+tt.path, nil)
				require.NoError(t, err)
				if tt.token != "" {
					req.Header.Set("Authorization", "Bearer "+tt.token)
				}
				resp, err := http.DefaultClient.Do(req)
				require.NoError(t, err)
				defer resp.Body.Close()
				body, err := io.ReadAll(resp.Body)
				require.NoError(t, err)
				return resp, body
			}
			get, getBody := do(http.MethodGet)
			head, headBody := do(http.MethodHead)
			assert.Equal(t, tt.want, get.StatusCode)
			assert.Equal(t, get.StatusCode, head.StatusCode)
			assert.Empty(t, headBody)
			for _, h := range []string{"Content-Type", "Cache-Control", "ETag", "Retry-After", "X-Content-Type-Options", gate.SessionHeader} {
				assert.Equal(t, get.Header.Get(h), head.Header.Get(h), h)
			}
			if head.Header.Get("Content-Length") != "" {
				assert.Equal(t, len(getBody), int(head.ContentLength), "HEAD announces the GET's length")
			}
			if len(getBody) > 0 && tt.path != "/anteroom/check" {
				assert.NotEmpty(t, head.Header.Get("Content-Type"))
			}
		})
	}

	// Writes stay writes: HEAD on the API is still refused.
	req, err := http.NewRequest(http.MethodHead, sc.URL+"/anteroom/api/join", nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
}
