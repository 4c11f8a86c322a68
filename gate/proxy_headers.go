package gate

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/anteroomhq/anteroom/gate/token"
	"github.com/anteroomhq/anteroom/gate/wire"
)

// scrubForUpstream removes from a request on its way to the app what only
// the sidecar may say or read:
//
//   - every X-Anteroom-* header (and trailer), whatever its case and with '_' for '-' too
//     (CGI, PHP and WSGI apps read X_Anteroom_Session as X-Anteroom-Session),
//     so that the X-Anteroom-Session and X-Anteroom-Gate the proxy sets for an
//     admitted request are the only ones the app sees;
//   - the anteroom_session cookie (the app's own cookies stay, in order);
//   - an Authorization: Bearer header whose token verifies as an anteroom
//     token (the app's own bearer tokens stay);
//   - ?session= parameters whose value verifies as an anteroom token (the
//     rest of the query stays byte for byte).
func scrubForUpstream(r *http.Request, signer *token.Signer) {
	for k := range r.Header {
		if isAnteroomHeader(k) {
			delete(r.Header, k)
		}
	}
	for k := range r.Trailer { // chunked bodies' trailers reach the app too
		if isAnteroomHeader(k) {
			delete(r.Trailer, k)
		}
	}
	if lines, ok := r.Header["Cookie"]; ok {
		var kept []string
		for _, line := range lines {
			if line = withoutCookie(line, CookieName); line != "" {
				kept = append(kept, line)
			}
		}
		if len(kept) == 0 {
			delete(r.Header, "Cookie")
		} else {
			r.Header["Cookie"] = kept
		}
	}
	if h := r.Header.Get("Authorization"); len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
		if _, ok := signer.Verify(strings.TrimSpace(h[7:])); ok {
			r.Header.Del("Authorization")
		}
	}
	if r.URL.RawQuery != "" {
		r.URL.RawQuery = withoutSessionParam(r.URL.RawQuery, func(v string) bool {
			_, ok := signer.Verify(v)
			return ok
		})
	}
}

// isAnteroomHeader reports whether a header name is one of the sidecar's:
// it starts with X-Anteroom in any case, '_' counting as '-'.
func isAnteroomHeader(name string) bool {
	const prefix = "x-anteroom"
	if len(name) < len(prefix) {
		return false
	}
	for i := 0; i < len(prefix); i++ {
		c := name[i]
		if c == '_' {
			c = '-'
		}
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != prefix[i] {
			return false
		}
	}
	return true
}

// withoutCookie returns a Cookie header line without the cookies named name,
// the others unchanged and in order; "" when none is left.
func withoutCookie(line, name string) string {
	if !strings.Contains(line, name) {
		return line
	}
	var kept []string
	for part := range strings.SplitSeq(line, ";") {
		k, _, _ := strings.Cut(part, "=")
		if strings.TrimSpace(k) == name {
			continue
		}
		if p := strings.TrimSpace(part); p != "" {
			kept = append(kept, p)
		}
	}
	return strings.Join(kept, "; ")
}

// withoutSessionParam returns a raw query without the session parameters
// whose value verifies as a token (verify), every other byte kept. It
// verifies at most wire.MaxCookies of them, as many as a request's cookies
// are read: past those, every further session parameter is dropped
// unverified, so that no token reaches the app however many come before
// it (a verification per parameter made 1,000 of them cost about 40 times
// forwarding the request, on paths that need no session).
func withoutSessionParam(raw string, verify func(string) bool) string {
	if !strings.Contains(raw, "session") && !strings.Contains(raw, "%") {
		return raw
	}
	var kept []string
	changed := false
	verified := 0
	for part := range strings.SplitSeq(raw, "&") {
		k, v, _ := strings.Cut(part, "=")
		if key, err := url.QueryUnescape(k); err == nil && key == wire.SessionParam {
			if val, err := url.QueryUnescape(v); err == nil {
				if verified == wire.MaxCookies {
					changed = true
					continue
				}
				verified++
				if verify(val) {
					changed = true
					continue
				}
			}
		}
		kept = append(kept, part)
	}
	if !changed {
		return raw
	}
	return strings.Join(kept, "&")
}
