package broadcast

import (
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
)

// The origin rule is the library's, a malformed pattern included: the
// library refuses at the first pattern path.Match rejects, even when a later
// one would match, so the copy does too (else a handshake it passed got the
// library's plain-text 403).
func TestOriginAllowedIsTheLibrarys(t *testing.T) {
	for _, tc := range []struct {
		name, origin string
		patterns     []string
		want         bool
	}{
		{"no Origin", "", nil, true},
		{"the same host", "http://example.test", nil, true},
		{"another host", "http://evil.example", nil, false},
		{"a matching pattern", "http://app.example", []string{"*.example"}, true},
		{"a pattern with a scheme", "https://app.example", []string{"https://app.example"}, true},
		{"the wrong scheme", "http://app.example", []string{"https://app.example"}, false},
		{"a malformed pattern before a match", "http://app.example", []string{"[", "app.example"}, false},
		{"garbage", "%zz", []string{"*"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "http://example.test/ws", nil)
			if tc.origin != "" {
				r.Header.Set("Origin", tc.origin)
			}
			assert.Equal(t, tc.want, originAllowed(r, tc.patterns))
		})
	}
}
