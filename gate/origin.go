package gate

import (
	"net/http"
	"net/url"
	"path"
	"strings"
)

// originPolicy decides whether a state-changing request (join, leave,
// release, ticket) may come from the page that sent it. A page on another
// site could otherwise make its visitors join (a text/plain POST needs no
// preflight) or leave.
type originPolicy struct {
	// patterns are allowed_origins: path.Match patterns of the origin's host
	// ("app.example.com", "*.example.com"), or of scheme://host when the
	// pattern contains "://" -- the rules the websocket route applies.
	patterns []string
}

// allowed reports whether r may change state: its Origin is the sidecar's
// own (the Host it was sent to) or matches a pattern; without an Origin, it
// is refused only when the browser says it is cross-site (Sec-Fetch-Site).
// Requests without either (curl, backends) are not a browser's and pass.
func (p originPolicy) allowed(r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return !strings.EqualFold(r.Header.Get("Sec-Fetch-Site"), "cross-site")
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") ||
		u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return false // "null" (sandboxed frames, file:), garbage: no browser sends more than scheme://host
	}
	if strings.EqualFold(u.Host, r.Host) {
		return true
	}
	host := strings.ToLower(u.Host)
	full := strings.ToLower(u.Scheme) + "://" + host
	for _, pat := range p.patterns {
		target := host
		if strings.Contains(pat, "://") {
			target = full
		}
		if ok, err := path.Match(strings.ToLower(pat), target); err == nil && ok {
			return true
		}
	}
	return false
}

// checkOrigin returns a cross_origin error (403) when r comes from a page
// the policy does not allow, unless r carries a valid API key (a backend).
func (s *Server) checkOrigin(r *http.Request) error {
	if s.origins.allowed(r) || s.trusted(r) {
		return nil
	}
	return apiError(codeCrossOrigin, "requests from this origin are not allowed (allowed_origins)")
}
