package guard

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
)

// cookieValue must find what net/http's own parser finds.
func TestCookieValueAgreesWithNetHTTP(t *testing.T) {
	for _, header := range [][]string{
		nil,
		{""},
		{"anteroom_session=abc.def"},
		{"a=1; anteroom_session=abc.def; b=2"},
		{"a=1;anteroom_session=abc.def"},
		{"anteroom_session_x=nope; anteroom_session=yes"},
		{"xanteroom_session=nope"},
		{"anteroom_session"},
		{"anteroom_session="},
		{`anteroom_session="quoted.value"`},
		{"a=1", "anteroom_session=second-line"},
		{"anteroom_session=first; anteroom_session=second"},
		{" anteroom_session = spaced"},
	} {
		r := &http.Request{Header: http.Header{"Cookie": header}}
		want := ""
		if c, err := r.Cookie(CookieName); err == nil {
			want = c.Value
		}
		assert.Equal(t, want, cookieValue(r.Header, CookieName), "Cookie: %q", header)
	}
}
