package gate

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/anteroomhq/anteroom/gate/guard"
	"github.com/anteroomhq/anteroom/gate/wire"
)

// progressBody bounds a proxied request body in time without bounding its
// size: before every read it moves the connection's read deadline to idle
// from now, so an upload that keeps sending may take as long as it needs
// while one that stops is cut off after idle. (The server's ReadTimeout
// bounds the request as a whole before the handler runs; this replaces it
// for the body.) After the body's end it no longer touches the deadline:
// net/http clears it then for its own background read.
type progressBody struct {
	body   io.ReadCloser
	rc     *http.ResponseController
	idle   time.Duration
	ended  bool
	failed atomic.Bool // a read failed before the end: the client stalled or went away
}

func (b *progressBody) Read(p []byte) (int, error) {
	if b.ended {
		return b.body.Read(p)
	}
	_ = b.rc.SetReadDeadline(time.Now().Add(b.idle)) // not supported: the server's ReadTimeout still bounds it
	n, err := b.body.Read(p)
	if err != nil {
		b.ended = true
		if !errors.Is(err, io.EOF) {
			b.failed.Store(true)
		}
	}
	return n, err
}

func (b *progressBody) Close() error { return b.body.Close() }

// withBodyDeadline puts r's body, when it has one, under progressBody and
// returns the wrapper (nil without a body).
func withBodyDeadline(w http.ResponseWriter, r *http.Request, idle time.Duration) *progressBody {
	if idle <= 0 || r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
		return nil
	}
	b := &progressBody{body: r.Body, rc: http.NewResponseController(w), idle: idle}
	r.Body = b
	return b
}

// upstreamFailed answers a proxied request the app did not answer: 504
// upstream_timeout when no response headers came within the timeout (or
// connecting timed out), 502 bad_gateway when the app is down or broke the
// connection, 408 request_timeout when the client's body stopped arriving.
// A browser navigation gets a small HTML page, anything else the JSON error
// body.
func (s *Server) upstreamFailed(w http.ResponseWriter, r *http.Request, err error) {
	if st, _ := r.Context().Value(proxyStateKey{}).(*proxyState); st != nil && st.body != nil && st.body.failed.Load() {
		s.log.Debug("anteroom: request body stalled", "path", r.URL.Path, "err", err)
		w.Header().Set("Connection", "close")
		wire.WriteError(w, r, codeRequestTimeout, "the request body stopped arriving")
		return
	}
	if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
		s.log.Debug("anteroom: client went away before the app answered", "path", r.URL.Path)
		w.WriteHeader(http.StatusBadGateway) // nobody reads it
		return
	}
	code, msg := codeBadGateway, "the app behind anteroom is not answering"
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		code, msg = codeUpstreamTimeout, "the app behind anteroom did not answer in time"
	}
	s.log.Warn("anteroom: upstream failed", "upstream", s.proxy.opts.Upstream.Redacted(), "path", r.URL.Path, "code", code, "err", err)
	status := wire.Status(code)
	w.Header().Set("Cache-Control", "no-store")
	if guard.WantsPage(r) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Content-Security-Policy", "default-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'self'")
		w.WriteHeader(status)
		if r.Method != http.MethodHead {
			_, _ = io.WriteString(w, upstreamErrorPage(status, msg))
		}
		return
	}
	wire.WriteError(w, r, code, msg)
}

// upstreamErrorPage is the page a browser gets for 502 and 504: constant
// text, nothing from the request.
func upstreamErrorPage(status int, msg string) string {
	title := http.StatusText(status)
	return "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">" +
		"<title>" + title + "</title></head><body><main><h1>" + title + "</h1><p>Sorry: " + msg +
		". Please try again in a moment.</p><p><a href=\"\">Try again</a></p></main></body></html>\n"
}
