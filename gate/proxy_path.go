package gate

import (
	"net/url"
	"path"
	"strings"

	"github.com/anteroomhq/anteroom/gate/wire"
)

// canonicalPath returns the one form of u's path that reverse-proxy mode both
// matches against protect and bypass and forwards to the app: decoded once,
// with "." and ".." segments resolved and repeated slashes collapsed (a
// trailing slash is kept). Because the app receives exactly the path that
// was matched, no reading of the path by the app (a static file server that
// cleans it, a servlet container that drops ";parameters", a server that
// decodes "%2f") can reach a different resource than the one checked.
//
// It returns an error (code invalid_path, 400) for what different servers
// read differently, so cannot be cleaned unambiguously: an encoded '/', '\',
// '.' or ';', anything encoded twice (a "%" followed by two hex digits once
// decoded), a literal '\' or ';', a NUL or another control character, and a
// path that does not start with '/'.
func canonicalPath(u *url.URL) (string, error) {
	decoded := u.Path
	raw := u.RawPath // set only when the request's encoding differs from the default one
	if raw == "" {
		raw = decoded
	}
	if !strings.HasPrefix(decoded, "/") {
		return "", apiError(codeInvalidPath, "the path must start with '/'")
	}
	if i := ambiguousEscape(raw); i >= 0 {
		return "", apiError(codeInvalidPath, "the path holds an encoded '/', '\\', '.', ';' or NUL ("+raw[i:i+3]+"), which servers read differently")
	}
	if hasEscape(decoded) {
		return "", apiError(codeInvalidPath, "the path is percent-encoded twice, which servers read differently")
	}
	for i := 0; i < len(decoded); i++ {
		switch b := decoded[i]; {
		case b < 0x20 || b == 0x7f:
			return "", apiError(codeInvalidPath, "the path holds a control character")
		case b == '\\':
			return "", apiError(codeInvalidPath, "the path holds a backslash, which some servers read as '/'")
		case b == ';':
			return "", apiError(codeInvalidPath, "the path holds ';', which some servers read as the start of path parameters")
		}
	}
	clean := path.Clean(decoded)
	if strings.HasSuffix(decoded, "/") && clean != "/" {
		clean += "/"
	}
	return clean, nil
}

// ambiguousEscape returns the index of the first %2e, %2f, %5c, %3b or %00
// (any case) in s, or -1. It looks at each escape in place: lowering its
// digits into a new string cost an allocation per escape.
func ambiguousEscape(s string) int {
	for i := 0; i+2 < len(s); i++ {
		if s[i] != '%' {
			continue
		}
		switch hi, lo := s[i+1], s[i+2]|0x20; { // lo in lower case, if a letter
		case hi == '2' && (lo == 'e' || lo == 'f'), hi == '5' && lo == 'c', hi == '3' && lo == 'b', hi == '0' && s[i+2] == '0':
			return i
		}
	}
	return -1
}

// hasEscape reports whether s holds a percent-escape ('%' and two hex
// digits), which a server that decodes twice would decode.
func hasEscape(s string) bool {
	for i := range len(s) {
		if wire.EscapeAt(s, i) {
			return true
		}
	}
	return false
}

// hasPathPrefix reports whether p lies under prefix. With fold, letters
// match in any case (for protect: a case-insensitive app serves /App/x as
// /app/x). A prefix ending in '/' also covers the path without it ("/app/"
// covers "/app"), which such apps answer too.
func hasPathPrefix(p, prefix string, fold bool) bool {
	eq := func(a, b string) bool { return a == b }
	if fold {
		eq = strings.EqualFold
	}
	if len(p) >= len(prefix) && eq(p[:len(prefix)], prefix) {
		return true
	}
	return strings.HasSuffix(prefix, "/") && len(prefix) > 1 && eq(p, prefix[:len(prefix)-1])
}

// forwardQuery returns the query proxy mode sends the app for raw: raw
// itself when httputil.ReverseProxy passes it on unchanged (no ';', every
// '%' the start of an escape), else raw without the parameters
// url.ParseQuery drops (those holding ';' or a '%' that is no escape, and
// empty ones), the others as sent and in their order, so that the reverse
// proxy then passes it on unchanged. The reverse proxy re-encoded such a
// query whole itself (url.ParseQuery, then Values.Encode, which sorts the
// keys): about 6 ms and 30,000 allocations for 9,000 parameters, on any
// bypassed path and without a session. The app parses the same values as
// from the re-encoded query; only their order and their escapes are as
// the client sent them. A query of more parameters than net/url parses is
// dropped, as the reverse proxy drops it.
func forwardQuery(raw string) string {
	if !reencoded(raw) {
		return raw
	}
	if strings.Count(raw, "&") >= wire.MaxQueryParams {
		return ""
	}
	// One pass: a parameter is kept, when it ends, unless it was empty or
	// held a ';' or a '%' that is no escape ('&' is no hex digit, so an
	// escape never runs into the next parameter).
	var b strings.Builder
	b.Grow(len(raw))
	start, keep := 0, true
	for i := 0; i <= len(raw); i++ {
		if i == len(raw) || raw[i] == '&' {
			if keep && i > start {
				if b.Len() > 0 {
					b.WriteByte('&')
				}
				b.WriteString(raw[start:i])
			}
			start, keep = i+1, true
			continue
		}
		switch raw[i] {
		case ';':
			keep = false
		case '%':
			if wire.EscapeAt(raw, i) {
				i += 2
			} else {
				keep = false
			}
		}
	}
	return b.String()
}

// reencoded reports whether httputil.ReverseProxy would re-encode the query
// s, under net/url's default bound on the parameters: it holds ';', or a
// '%' not followed by two hex digits, or more parameters than the bound.
func reencoded(s string) bool {
	if strings.IndexByte(s, ';') >= 0 {
		return true
	}
	for i := strings.IndexByte(s, '%'); i >= 0; {
		if !wire.EscapeAt(s, i) {
			return true
		}
		j := strings.IndexByte(s[i+3:], '%')
		if j < 0 {
			break
		}
		i += 3 + j
	}
	return strings.Count(s, "&") >= wire.MaxQueryParams
}
