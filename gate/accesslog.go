package gate

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
)

// Keys of what a handler notes for the access log in the echo context.
const (
	ctxLogGate    = "anteroom.log.gate"
	ctxLogSession = "anteroom.log.session"
)

// accessLogKeyLen is the length of the random key of the session hash.
const accessLogKeyLen = 32

// maxLoggedPath bounds the path an access-log line carries.
const maxLoggedPath = 256

// note records, for the access log, the gate and session a handler
// resolved (a join's new session, a body's gate, a ticket's session; ""
// for none): the log takes it as found and verifies no token again. It
// costs nothing when the access log is off.
func (s *Server) note(c echo.Context, gate, id string) {
	if !s.opts.AccessLog {
		return
	}
	c.Set(ctxLogGate, gate)
	c.Set(ctxLogSession, id)
}

// accessLog returns the middleware that logs one line per request: method,
// path without the query string, status, latency in seconds, the gate (a
// configured one only) and the session as a short keyed hash. It returns an
// error when no random key can be drawn.
func (s *Server) accessLog(key []byte) (echo.MiddlewareFunc, error) {
	if len(key) == 0 {
		key = make([]byte, accessLogKeyLen)
		if _, err := rand.Read(key); err != nil {
			return nil, fmt.Errorf("gate: access log key: %w", err)
		}
	}
	key = append([]byte(nil), key...)
	base := s.opts.BasePath
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			start := time.Now()
			err := next(c)
			if err != nil {
				c.Error(err) // write the error answer now, to log its status
			}
			r := c.Request()
			gate, _ := c.Get(ctxLogGate).(string)
			id, noted := c.Get(ctxLogSession).(string)
			if p := r.URL.Path; p == base || strings.HasPrefix(p, base+"/") {
				if gate == "" {
					gate = s.gateOf(c, "")
				}
				if !noted { // a handler that noted none found none: no token is verified twice
					id, _ = s.sessionID(r)
				}
			}
			if _, gerr := s.opts.Waitlist.GateConfig(gate); gerr != nil {
				gate = "" // only configured gates: not whatever a client sent
			}
			path := r.URL.Path
			if len(path) > maxLoggedPath {
				path = path[:maxLoggedPath]
			}
			s.log.LogAttrs(r.Context(), slog.LevelInfo, "anteroom: request",
				slog.String("method", r.Method),
				slog.String("path", path),
				slog.Int("status", c.Response().Status),
				slog.Float64("latency", time.Since(start).Seconds()),
				slog.String("gate", gate),
				slog.String("session", sessionHash(key, id)),
			)
			return nil
		}
	}, nil
}

// sessionHash names a session in the access log: the first 8 bytes of
// HMAC-SHA256(key, id) in hex; "" for no session.
func sessionHash(key []byte, id string) string {
	if id == "" {
		return ""
	}
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id))
	return hex.EncodeToString(m.Sum(nil)[:8])
}
