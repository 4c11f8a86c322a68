package gate

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
)

// TestLongLineAnswersAreNotChunked: the join answer and /api/global of a
// line of millions (160 buckets with offsets of seven digits, more than
// net/http's 2 KB buffer) go out with their Content-Length, in one piece,
// not chunked; as do short ones.
func TestLongLineAnswersAreNotChunked(t *testing.T) {
	long := session.GlobalView{Gate: "default", FirstWaitingPosition: 1001, LastWaitingPosition: 5_001_000, Waiting: 5_000_000, Active: 1000, Limit: 1000}
	for j := range int64(session.MaxBuckets) {
		long.Buckets = append(long.Buckets, j*31250+j%7, 31250)
	}
	short := session.GlobalView{Gate: "default", FirstWaitingPosition: 11, LastWaitingPosition: 12, Waiting: 2, Active: 10, Limit: 10, Buckets: []int64{0, 2}}
	e := echo.New()
	var view session.GlobalView
	e.POST("/join", func(c echo.Context) error {
		return (*Server)(nil).writeJoin(c, &session.SessionView{GlobalView: view, Session: "s", Status: session.StatusWaiting, Position: 5_001_000, Place: 5_000_000}, "tok")
	})
	e.GET("/global", func(c echo.Context) error { return writeGlobal(c, &view) })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &http.Server{Handler: e}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	for _, v := range []session.GlobalView{long, short} {
		view = v
		for _, route := range []string{"POST /join", "GET /global"} {
			method, path, _ := strings.Cut(route, " ")
			req, err := http.NewRequest(method, "http://"+ln.Addr().String()+path, nil)
			require.NoError(t, err)
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			body, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			_ = resp.Body.Close()
			require.Equal(t, http.StatusOK, resp.StatusCode, route)
			if len(v.Buckets) > 2 {
				require.Greater(t, len(body), 2048, "%s: the long line's answer is past net/http's buffer", route)
			}
			assert.Empty(t, resp.TransferEncoding, "%s: not chunked", route)
			assert.Equal(t, int64(len(body)), resp.ContentLength, "%s: its Content-Length", route)
		}
	}
}
