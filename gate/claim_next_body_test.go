package gate_test

import (
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// claimFormNext is the value of the claim page's hidden next field.
var claimFormNext = regexp.MustCompile(`name="next" value="([^"]*)"`)

// A next the claim page puts in its form (claimNext: a local path of at
// most 2 KiB) must not make the form's POST, as a browser serializes it
// (application/x-www-form-urlencoded, which escapes every byte but
// [A-Za-z0-9*-._]), larger than the claim's body limit (4 KiB by default):
// the claim itself would fail (413), not only its next.
func TestClaimPageNextFitsTheClaimsBody(t *testing.T) {
	for _, tc := range []struct{ name, next string }{
		{"a path of slashes", "/" + strings.Repeat("a/", 1023)},
		{"a query", "/search?" + strings.Repeat("a=b&", 510)},
		{"a non-ASCII path", "/" + strings.Repeat("é", 1023)},
		{"an escaped non-ASCII path", "/" + strings.Repeat("%C3%A9", 341)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.LessOrEqual(t, len(tc.next), 2<<10)
			sc := notifySidecar(t)
			deadline := promoteCalledBack(t, sc)
			link := claimURL(t, sc, "default", "b", deadline) + "&next=" + url.QueryEscape(tc.next)
			status, body, _ := send(t, noRedirects, "GET", link, "")
			require.Equal(t, http.StatusOK, status, body)
			m := claimFormNext.FindStringSubmatch(body)
			if m == nil || html.UnescapeString(m[1]) == "" {
				return // the page does not carry it: nothing to post
			}
			require.Equal(t, tc.next, html.UnescapeString(m[1]))
			status, body, hdr := claimPost(t, noRedirects, link) // the form as a browser posts it
			require.Equal(t, http.StatusSeeOther, status, "a next the claim page accepted fails the claim: %s", body)
			assert.Equal(t, tc.next, hdr.Get("Location"))
		})
	}
}
