package broadcast

import (
	"encoding/base64"
	"net/http"
	"net/url"
	"path"
	"strings"

	"github.com/anteroomhq/anteroom/gate/wire"
	"github.com/anteroomhq/anteroom/session"
)

// RefuseHandshake answers, with the wire's JSON error, a request that
// websocket.Accept would refuse with a plain-text body of its own: one that
// is not a WebSocket handshake (400 invalid_argument; 405 for a method
// other than GET) or that comes from an origin OriginPatterns does not allow
// (403 cross_origin). Its checks are the library's (verifyClientRequest and
// authenticateOrigin in coder/websocket's accept.go), so a request they pass
// is one the library accepts. It reports whether it answered. Serve and
// Handoff call it after checking the subscription; a handler may call it
// earlier, before it does anything for the socket.
func (h *Hub) RefuseHandshake(w http.ResponseWriter, r *http.Request) bool {
	code, msg := handshakeProblem(r, h.opts.OriginPatterns)
	if code == "" {
		return false
	}
	if msg == msgVersion {
		w.Header().Set("Sec-WebSocket-Version", "13") // RFC 6455 4.4: the versions served
	}
	wire.WriteError(w, r, code, msg)
	return true
}

const msgVersion = "unsupported WebSocket version: want Sec-WebSocket-Version 13"

// handshakeProblem returns the error code and message that refuse r as a
// WebSocket handshake, or "" when r is one from an allowed origin.
func handshakeProblem(r *http.Request, originPatterns []string) (session.Code, string) {
	switch {
	case !r.ProtoAtLeast(1, 1):
		return session.CodeInvalidArgument, "a WebSocket handshake needs HTTP/1.1"
	case !headerHasToken(r.Header, "Connection", "upgrade") || !headerHasToken(r.Header, "Upgrade", "websocket"):
		return session.CodeInvalidArgument, "want a WebSocket handshake (Connection: Upgrade, Upgrade: websocket)"
	case r.Method != http.MethodGet:
		return wire.CodeMethodNotAllowed, "a WebSocket handshake is a GET"
	case r.Header.Get("Sec-WebSocket-Version") != "13":
		return session.CodeInvalidArgument, msgVersion
	}
	keys := r.Header.Values("Sec-WebSocket-Key")
	if len(keys) != 1 {
		return session.CodeInvalidArgument, "want exactly one Sec-WebSocket-Key"
	}
	if k, err := base64.StdEncoding.DecodeString(strings.TrimSpace(keys[0])); err != nil || len(k) != 16 {
		return session.CodeInvalidArgument, "Sec-WebSocket-Key must be 16 bytes in base64"
	}
	if !originAllowed(r, originPatterns) {
		return wire.CodeCrossOrigin, "WebSocket requests from this origin are not allowed (allowed_origins)"
	}
	return "", ""
}

// originAllowed is the library's origin rule: no Origin, the request's own
// host, or a host (scheme://host when the pattern has a scheme) matching one
// of patterns with path.Match, in any letter case.
func originAllowed(r *http.Request, patterns []string) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	u, err := url.Parse(origin)
	if err != nil {
		return false
	}
	if strings.EqualFold(r.Host, u.Host) {
		return true
	}
	for _, p := range patterns {
		target := u.Host
		if strings.Contains(p, "://") {
			target = u.Scheme + "://" + u.Host
		}
		ok, err := path.Match(strings.ToLower(p), strings.ToLower(target))
		if err != nil {
			return false // the library refuses at a malformed pattern (New logged it)
		}
		if ok {
			return true
		}
	}
	return false
}

// headerHasToken reports whether one of the comma-separated values of the
// header key is token, in any letter case.
func headerHasToken(h http.Header, key, token string) bool {
	for _, v := range h.Values(key) {
		for t := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}
