package gate

import (
	"net/http"
	"strings"
)

// Bounds of the Accept header prefersHTML reads. A browser's is about 150
// bytes and 8 media ranges; a longer one is no browser's, and is answered
// as an API client (the JSON of the wire contract) without being parsed.
const (
	maxAcceptBytes  = 1024
	maxAcceptRanges = 32
)

// prefersHTML reports whether a request's Accept header (all its lines,
// as one list) gives text/html a higher quality than application/json, by
// RFC 9110's rules: each type takes the quality of the most specific range
// that matches it (text/html, then text/*, then */*), 0 when none does.
// A browser navigating (text/html first, */* with a lower q) prefers HTML;
// an API client, curl and fetch() (*/*, application/json, or no Accept at
// all) do not, and neither does a tie. A range whose q is malformed is
// ignored; a header longer than maxAcceptBytes or with more than
// maxAcceptRanges ranges (or lines) prefers JSON. It never fails and does not
// allocate beyond the header's own lines.
func prefersHTML(h http.Header) bool {
	lines := h.Values("Accept")
	if len(lines) > maxAcceptRanges {
		return false
	}
	n := 0
	for _, l := range lines {
		if n += len(l); n > maxAcceptBytes {
			return false
		}
	}
	var html, json acceptMatch
	ranges := 0
	for _, line := range lines {
		for part := range strings.SplitSeq(line, ",") {
			if strings.TrimSpace(part) == "" {
				continue
			}
			if ranges++; ranges > maxAcceptRanges {
				return false
			}
			typ, sub, q, ok := parseMediaRange(part)
			if !ok {
				continue
			}
			html.offer(typ, sub, "text", "html", q)
			json.offer(typ, sub, "application", "json", q)
		}
	}
	return html.q > json.q
}

// acceptMatch is the best match so far of one media type in an Accept
// header: the specificity of the range (0 none, 1 */*, 2 type/*, 3 the
// type itself) and its quality in thousandths.
type acceptMatch struct{ spec, q int }

// offer takes the range typ/sub of quality q into account for the media
// type wantTyp/wantSub: a more specific match replaces the one so far, an
// equally specific one counts with the higher quality.
func (m *acceptMatch) offer(typ, sub, wantTyp, wantSub string, q int) {
	spec := 0
	switch {
	case typ == "*" && sub == "*":
		spec = 1
	case !strings.EqualFold(typ, wantTyp):
	case sub == "*":
		spec = 2
	case strings.EqualFold(sub, wantSub):
		spec = 3
	}
	if spec > m.spec || (spec == m.spec && spec > 0 && q > m.q) {
		m.spec, m.q = spec, q
	}
}

// parseMediaRange reads one element of an Accept header, `type/subtype`
// with optional parameters, and returns the type, the subtype and the
// quality in thousandths (1000 without q=); ok is false for an element
// that is not type/subtype or whose q is not a qvalue.
func parseMediaRange(s string) (typ, sub string, q int, ok bool) {
	mt, params, _ := strings.Cut(s, ";")
	typ, sub, ok = strings.Cut(strings.TrimSpace(mt), "/")
	if !ok || typ == "" || sub == "" || (typ == "*" && sub != "*") {
		return "", "", 0, false
	}
	q = 1000
	for params != "" {
		var p string
		p, params, _ = strings.Cut(params, ";")
		k, v, _ := strings.Cut(p, "=")
		if !strings.EqualFold(strings.TrimSpace(k), "q") {
			continue
		}
		if q, ok = parseQValue(strings.TrimSpace(v)); !ok {
			return "", "", 0, false
		}
	}
	return typ, sub, q, true
}

// parseQValue reads RFC 9110's qvalue ("0" to "1", at most three decimals)
// in thousandths; ok is false for anything else.
func parseQValue(v string) (int, bool) {
	if v == "" || (v[0] != '0' && v[0] != '1') || len(v) > 5 {
		return 0, false
	}
	q := int(v[0]-'0') * 1000
	if len(v) == 1 {
		return q, true
	}
	if v[1] != '.' {
		return 0, false
	}
	scale := 100
	for i := 2; i < len(v); i++ {
		d := v[i]
		if d < '0' || d > '9' {
			return 0, false
		}
		q += int(d-'0') * scale
		scale /= 10
	}
	if q > 1000 {
		return 0, false
	}
	return q, true
}
