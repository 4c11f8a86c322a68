package gate

import (
	"net/http"
	"time"
)

// Answers are bounded in time like requests. The server has no write
// timeout (proxied answers may stream for long), so a client that asked for
// an answer and then kept its receive window shut left the write blocked
// for as long as the connection lived, which a peer that acknowledges
// TCP's probes keeps for ever: the handler's goroutine, the connection's
// buffers and whatever the answer held (the full events answer held its
// encoding until it was cached), beyond every read and idle timeout, and
// not evictable by max_conns_per_ip (the connection is busy). So:
//
//   - an answer of the sidecar's own must be taken within WriteTimeout of
//     its request's start (ServeHTTP); the ones that may be large, the
//     full events answer and the admin history's pages, within
//     WriteTimeout of each piece of them (writeInTime);
//   - a proxied answer may take as long as it keeps being taken: each of
//     its writes within WriteTimeout (takenWriter), so that a stream that
//     pauses (server-sent events, a long poll) is not cut;
//   - a socket (the hub's, the admin feed's, a proxied one) keeps none of
//     these deadlines: net/http clears a connection's deadlines when it is
//     hijacked.
//
// A write past its deadline fails, and net/http closes the connection.

// defaultWriteTimeout is Options.WriteTimeout's default.
const defaultWriteTimeout = 30 * time.Second

// answerPiece is how much of a large answer writeInTime writes within one
// WriteTimeout: a client taking it at 1 KB/s keeps up with the default.
const answerPiece = 16 << 10

// setWriteDeadline sets the write deadline of the connection under w, as
// http.ResponseController does but without allocating (this is on every
// request's path). A writer that unwraps to none (a recorder in tests)
// leaves the answer unbounded.
func setWriteDeadline(w http.ResponseWriter, t time.Time) {
	for {
		switch x := w.(type) {
		case interface{ SetWriteDeadline(time.Time) error }:
			_ = x.SetWriteDeadline(t)
			return
		case interface{ Unwrap() http.ResponseWriter }:
			w = x.Unwrap()
		default:
			return
		}
	}
}

// writeInTime writes p to w in pieces of answerPiece, each of which the
// client must take within idle (when positive) of the moment it is
// written: a large answer may take as long as it keeps being taken.
func writeInTime(w http.ResponseWriter, p []byte, idle time.Duration) error {
	if idle <= 0 {
		_, err := w.Write(p)
		return err
	}
	for len(p) > 0 {
		n := min(len(p), answerPiece)
		setWriteDeadline(w, time.Now().Add(idle))
		if _, err := w.Write(p[:n]); err != nil {
			return err
		}
		p = p[n:]
	}
	return nil
}

// takenWriter is the ResponseWriter a proxied answer is written through:
// before its header and before each write it moves the connection's write
// deadline to idle from now, so the answer may take as long as the client
// keeps taking it, and one the client stops taking is cut off after idle.
// Hijack and Flush reach the writer under it (Unwrap).
type takenWriter struct {
	http.ResponseWriter
	idle time.Duration
}

// newTakenWriter returns w under a takenWriter, after lifting the deadline
// ServeHTTP set: the wait for the app is upstream_timeout's. With no
// idle it returns w.
func newTakenWriter(w http.ResponseWriter, idle time.Duration) http.ResponseWriter {
	if idle <= 0 {
		return w
	}
	setWriteDeadline(w, time.Time{})
	return &takenWriter{ResponseWriter: w, idle: idle}
}

func (w *takenWriter) arm() { setWriteDeadline(w.ResponseWriter, time.Now().Add(w.idle)) }

func (w *takenWriter) WriteHeader(code int) {
	w.arm()
	w.ResponseWriter.WriteHeader(code)
}

func (w *takenWriter) Write(p []byte) (int, error) {
	w.arm()
	return w.ResponseWriter.Write(p)
}

func (w *takenWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
