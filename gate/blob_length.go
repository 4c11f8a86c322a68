package gate

import (
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"
)

// blobJSON answers 200 with the JSON in b and its Content-Length. Without
// it net/http sends a body longer than its 2 KB buffer chunked, writing the
// header from inside the handler: a join answer with a long line's buckets
// (offsets of six or seven digits) is about that size.
func blobJSON(c echo.Context, b []byte) error {
	c.Response().Header().Set(echo.HeaderContentLength, strconv.Itoa(len(b)))
	return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, b)
}
