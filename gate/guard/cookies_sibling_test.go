package guard_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
)

// A sibling subdomain that sets anteroom_session for the parent domain on
// every prefix of a deep URL's path gets its cookies sent ahead of the
// visitor's own (browsers order by path length: /a/b/c/d/page carried
// eight before it in Chromium). The visitor stays admitted, through both
// checkers (the remote one asks the sidecar over a socket), however many
// foreign cookies come ahead: past wire.MaxCookies the last ones are read
// too.
func TestSiblingCookiesDoNotKnockAVisitorOut(t *testing.T) {
	e := newEnv(t, 1)
	active, st := e.join(t, "alice")
	require.Equal(t, session.StatusActive, st)
	foreign := forge(t, "mallory")
	for _, ahead := range []int{8, 31, 63, 64, 100, 500} {
		parts := make([]string, 0, ahead+2)
		for range ahead {
			parts = append(parts, "anteroom_session="+foreign)
		}
		parts = append(parts, "anteroom_session="+active, "anteroom_session="+foreign)
		for name, c := range checkers(t, e) {
			r := httptest.NewRequest(http.MethodGet, "/a/b/c/d/page", nil)
			r.Header.Set("Cookie", strings.Join(parts, "; "))
			assert.NoError(t, c.ValidateSessionAndRefreshLastActive(r), "%s, %d foreign cookies ahead", name, ahead)
		}
	}
}
