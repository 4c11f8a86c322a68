package gate_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/gate"
)

// feedTicket asks for a feed ticket with the admin token.
func (h *adminHarness) feedTicket() string {
	h.t.Helper()
	code, body, _ := h.do(http.MethodPost, "feed/ticket", adminToken, "")
	require.Equal(h.t, http.StatusOK, code, body)
	var r struct {
		Ticket    string `json:"ticket"`
		ExpiresIn int    `json:"expiresIn"`
	}
	require.NoError(h.t, json.Unmarshal([]byte(body), &r))
	require.NotEmpty(h.t, r.Ticket)
	assert.Equal(h.t, 30, r.ExpiresIn)
	return r.Ticket
}

// dialFeed opens the feed with ticket and origin ("" for none); it returns
// the connection, or the handshake's HTTP status.
func (h *adminHarness) dialFeed(ticket, origin string) (*websocket.Conn, int) {
	h.t.Helper()
	u := "ws" + strings.TrimPrefix(h.sc.URL, "http") + base + "/admin/api/feed"
	if ticket != "" {
		u += "?ticket=" + url.QueryEscape(ticket)
	}
	hdr := http.Header{}
	if origin != "" {
		hdr.Set("Origin", origin)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, resp, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPHeader: hdr})
	if err != nil {
		require.NotNil(h.t, resp, "dial failed without an answer: %v", err)
		return nil, resp.StatusCode
	}
	h.t.Cleanup(func() { c.CloseNow() })
	return c, http.StatusSwitchingProtocols
}

func readGates(t *testing.T, c *websocket.Conn, timeout time.Duration) (gate.AdminGates, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	typ, b, err := c.Read(ctx)
	if err != nil {
		return gate.AdminGates{}, err
	}
	require.Equal(t, websocket.MessageText, typ)
	var g gate.AdminGates
	require.NoError(t, json.Unmarshal(b, &g), string(b))
	return g, nil
}

func TestAdminFeedPushesChanges(t *testing.T) {
	h := newAdminHarness(t, adminToken, nil)
	c, code := h.dialFeed(h.feedTicket(), h.sc.URL)
	require.Equal(t, http.StatusSwitchingProtocols, code)
	first, err := readGates(t, c, 5*time.Second)
	require.NoError(t, err)
	require.Len(t, first.Gates, 2, "at once, every gate")
	assert.Equal(t, int64(1), first.Gates[0].Limit)

	code, body, _ := h.do(http.MethodPatch, "gates/default", adminToken, `{"activeLimit":42}`)
	require.Equal(t, http.StatusOK, code, body)
	deadline := time.Now().Add(5 * time.Second)
	for {
		g, err := readGates(t, c, time.Until(deadline))
		require.NoError(t, err, "the change is pushed")
		if g.Gates[0].Name == "default" && g.Gates[0].Limit == 42 {
			break
		}
	}
}

func TestAdminFeedRefusals(t *testing.T) {
	h := newAdminHarness(t, adminToken, nil)
	cases := []struct {
		name   string
		ticket func() string
		origin string
		want   int
	}{
		{"no ticket", func() string { return "" }, "", http.StatusUnauthorized},
		{"the admin token as a ticket", func() string { return adminToken }, "", http.StatusUnauthorized},
		{"garbage", func() string { return "1.2.3" }, "", http.StatusUnauthorized},
		{"a forged mac", func() string {
			p := strings.Split(h.feedTicket(), ".")
			return p[0] + "." + p[1] + ".AAAA" + p[2][4:]
		}, "", http.StatusUnauthorized},
		{"a stretched expiry", func() string {
			p := strings.Split(h.feedTicket(), ".")
			return "9" + p[0] + "." + p[1] + "." + p[2]
		}, "", http.StatusUnauthorized},
		{"another site's page", h.feedTicket, "https://evil.example", http.StatusForbidden},
		{"a sandboxed frame", h.feedTicket, "null", http.StatusForbidden},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, code := h.dialFeed(tc.ticket(), tc.origin)
			assert.Nil(t, c)
			assert.Equal(t, tc.want, code)
		})
	}

	t.Run("a ticket is used once", func(t *testing.T) {
		tk := h.feedTicket()
		c, code := h.dialFeed(tk, "")
		require.Equal(t, http.StatusSwitchingProtocols, code)
		require.NotNil(t, c)
		_, code = h.dialFeed(tk, "")
		assert.Equal(t, http.StatusUnauthorized, code)
	})
	t.Run("a ticket needs the token", func(t *testing.T) {
		code, _, _ := h.do(http.MethodPost, "feed/ticket", "", "")
		assert.Equal(t, http.StatusUnauthorized, code)
		code, _, _ = h.do(http.MethodPost, "feed/ticket", strings.Repeat("x", 40), "")
		assert.Equal(t, http.StatusUnauthorized, code)
	})
	t.Run("a refused origin does not spend the ticket", func(t *testing.T) {
		tk := h.feedTicket()
		_, code := h.dialFeed(tk, "https://evil.example")
		require.Equal(t, http.StatusForbidden, code)
		c, code := h.dialFeed(tk, h.sc.URL)
		assert.Equal(t, http.StatusSwitchingProtocols, code)
		assert.NotNil(t, c)
	})
}

// Without an admin token there is no feed either.
func TestAdminFeedOff(t *testing.T) {
	h := newAdminHarness(t, "", nil)
	code, _, _ := h.do(http.MethodPost, "feed/ticket", adminToken, "")
	assert.Equal(t, http.StatusNotFound, code)
	_, code = h.dialFeed("x", "")
	assert.Equal(t, http.StatusNotFound, code)
}
