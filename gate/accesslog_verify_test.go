package gate_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/gate"
	"github.com/anteroomhq/anteroom/gate/gatetest"
	"github.com/anteroomhq/anteroom/gate/token"
	"github.com/anteroomhq/anteroom/session"
)

// The access log names the session a handler found, and verifies no
// token again: /check and status resolved it for themselves without
// noting it, so the log verified every credential of the request a second
// time, a MAC per cookie up to wire.MaxCookies, which made /check with 64
// cookies that do not verify cost 2.4 times as much with the log on.
// Counted through the signer's clock, which each verification of a token
// reads.
func TestTheAccessLogVerifiesNoTokenAgain(t *testing.T) {
	var reads atomic.Int64
	secret := []byte(strings.Repeat("s", token.MinSecretLength)) // gatetest's
	counting, err := token.NewSignerWithOptions(secret, token.Options{Now: func() time.Time { reads.Add(1); return time.Now() }})
	require.NoError(t, err)
	var bad []string
	for i := 0; i < 64; i++ {
		var mac [32]byte
		_, _ = rand.Read(mac[:])
		bad = append(bad, gate.CookieName+"=x"+strconv.Itoa(i)+".9999999999."+base64.RawURLEncoding.EncodeToString(mac[:]))
	}
	verifications := func(accessLog bool) map[string]int64 {
		sc := gatetest.StartSidecar(t, gatetest.Options{Gates: []session.GateConfig{gatetest.Gate("default", 1)}, Gate: func(o *gate.Options) {
			o.AccessLog = accessLog
			o.Signer = counting
		}})
		_, err := sc.Waitlist.Join(context.Background(), "default", "active-one")
		require.NoError(t, err)
		_, err = sc.Waitlist.Join(context.Background(), "default", "waiting-one")
		require.NoError(t, err)
		active := gate.CookieName + "=" + sc.Token(t, "active-one")
		waiting := gate.CookieName + "=" + sc.Token(t, "waiting-one")
		out := map[string]int64{}
		for name, tc := range map[string]struct{ path, cookie string }{
			"check, active":                 {base + "/check", active},
			"check, waiting":                {base + "/check", waiting},
			"check, 64 that do not verify":  {base + "/check", strings.Join(bad, "; ")},
			"check, the active one last":    {base + "/check", strings.Join(bad[:63], "; ") + "; " + active},
			"check, none":                   {base + "/check", ""},
			"status, active":                {base + "/api/status", active},
			"status, 64 that do not verify": {base + "/api/status", strings.Join(bad, "; ")},
		} {
			req := httptest.NewRequest(http.MethodGet, tc.path, nil)
			if tc.cookie != "" {
				req.Header.Set("Cookie", tc.cookie)
			}
			before := reads.Load()
			sc.Handler.ServeHTTP(httptest.NewRecorder(), req)
			out[name] = reads.Load() - before
		}
		return out
	}
	off, on := verifications(false), verifications(true)
	assert.Equal(t, off, on, "the signer's clock read per request, without the access log and with it")
	assert.Greater(t, off["check, 64 that do not verify"], int64(0))
}
