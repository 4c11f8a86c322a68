package gate

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/anteroomhq/anteroom/session"
)

// GET {base}/admin/api/gates/{gate}/history: the gate's lifecycle records
// (session.HistoryRecord), newest first, as JSON or, with ?format=csv, as
// CSV. Query parameters, each at most once, no others: session, since and
// until (RFC 3339), limit (1 to session.MaxHistoryLimit, default
// session.DefaultHistoryLimit), cursor (the previous page's next) and
// format (json or csv).

// HistoryCursorHeader carries the next page's cursor of a CSV answer (a
// JSON answer has it in its body).
const HistoryCursorHeader = "X-Anteroom-Next-Cursor"

// AdminHistoryRecord is one record as the history endpoint shows it.
type AdminHistoryRecord struct {
	ID       int64               `json:"id"`
	At       time.Time           `json:"at"`
	Session  string              `json:"session"`
	Kind     session.HistoryKind `json:"kind"`
	Status   session.Status      `json:"status"`
	Position int64               `json:"position"`
	// Reason is why a session was purged (gone, idle, unclaimed) or
	// "released"; absent on other records.
	Reason string `json:"reason,omitempty"`
	// WaitSeconds is the time from join to admission, on admissions only.
	WaitSeconds *float64 `json:"waitSeconds,omitempty"`
}

// AdminHistory is the JSON answer of the history endpoint.
type AdminHistory struct {
	Gate    string               `json:"gate"`
	Records []AdminHistoryRecord `json:"records"`
	// Next is the cursor of the following page (pass it as ?cursor=);
	// absent on the last page.
	Next string `json:"next,omitempty"`
}

var historyParams = map[string]bool{"session": true, "since": true, "until": true, "limit": true, "cursor": true, "format": true}

// maxHistoryQuery bounds the query string of a history request.
const maxHistoryQuery = 2048

// historyQuery reads the history request's query, or returns an
// invalid_argument error naming the parameter that is wrong.
func historyQuery(gate string, raw string) (session.HistoryQuery, bool, error) {
	q := session.HistoryQuery{Gate: gate}
	bad := func(param, want string) error { return apiError(session.CodeInvalidArgument, param+": "+want) }
	if len(raw) > maxHistoryQuery {
		return q, false, bad("query", "too long")
	}
	vals, err := url.ParseQuery(raw)
	if err != nil {
		return q, false, bad("query", "not a valid query string")
	}
	for k, v := range vals {
		if !historyParams[k] {
			return q, false, bad(strconv.QuoteToASCII(k), "unknown parameter; want session, since, until, limit, cursor or format")
		}
		if len(v) != 1 {
			return q, false, bad(k, "give it once")
		}
	}
	csvOut := false
	switch vals.Get("format") {
	case "", "json":
	case "csv":
		csvOut = true
	default:
		return q, false, bad("format", "want json or csv")
	}
	if id, ok := vals["session"]; ok {
		if !session.ValidID(id[0]) {
			return q, false, bad("session", "want 1-128 printable ASCII characters without spaces or '.'")
		}
		q.Session = id[0]
	}
	for _, p := range []struct {
		name string
		dst  *time.Time
	}{{"since", &q.Since}, {"until", &q.Until}} {
		v, ok := vals[p.name]
		if !ok {
			continue
		}
		t, err := time.Parse(time.RFC3339Nano, v[0])
		if err != nil || t.Year() < 1970 || t.Year() > 2200 {
			return q, false, bad(p.name, `want an RFC 3339 time between 1970 and 2200, such as "2026-03-01T12:00:00Z"`)
		}
		*p.dst = t
	}
	if !q.Since.IsZero() && !q.Until.IsZero() && !q.Until.After(q.Since) {
		return q, false, bad("until", "must be after since")
	}
	if v, ok := vals["limit"]; ok {
		n, err := strconv.Atoi(v[0])
		if err != nil || n < 1 || n > session.MaxHistoryLimit {
			return q, false, bad("limit", "want a whole number from 1 to "+strconv.Itoa(session.MaxHistoryLimit))
		}
		q.Limit = n
	}
	if v, ok := vals["cursor"]; ok {
		c, ok := parseHistoryCursor(v[0])
		if !ok {
			return q, false, bad("cursor", "want the next value of a previous page")
		}
		q.Before = &c
	}
	return q, csvOut, nil
}

// A cursor is "<unix nanoseconds>_<id>" of the last record of a page.
func formatHistoryCursor(c *session.HistoryCursor) string {
	if c == nil {
		return ""
	}
	return strconv.FormatInt(c.At.UnixNano(), 10) + "_" + strconv.FormatInt(c.ID, 10)
}

func parseHistoryCursor(s string) (session.HistoryCursor, bool) {
	at, id, ok := strings.Cut(s, "_")
	if !ok || len(s) > 41 {
		return session.HistoryCursor{}, false
	}
	ns, err1 := strconv.ParseInt(at, 10, 64)
	n, err2 := strconv.ParseInt(id, 10, 64)
	if err1 != nil || err2 != nil || n < 0 {
		return session.HistoryCursor{}, false
	}
	return session.HistoryCursor{At: time.Unix(0, ns).UTC(), ID: n}, true
}

func adminHistoryRecord(r session.HistoryRecord) AdminHistoryRecord {
	out := AdminHistoryRecord{ID: r.ID, At: r.At.UTC(), Session: r.Session, Kind: r.Kind, Status: r.Status, Position: r.Position}
	if r.Kind == session.HistoryPurged || r.Kind == session.HistoryReleased {
		out.Reason = r.Reason.String()
	}
	if r.Wait >= 0 {
		w := r.Wait.Seconds()
		out.WaitSeconds = &w
	}
	return out
}

func (s *Server) adminHistory(c echo.Context) error {
	name := c.Param("gate")
	if _, err := s.opts.Waitlist.GateConfig(name); err != nil {
		return err
	}
	q, csvOut, err := historyQuery(name, c.Request().URL.RawQuery)
	if err != nil {
		return err
	}
	page, err := s.opts.Waitlist.History(c.Request().Context(), q)
	if err != nil {
		return err
	}
	out := AdminHistory{Gate: name, Records: make([]AdminHistoryRecord, len(page.Records)), Next: formatHistoryCursor(page.Next)}
	for i, r := range page.Records {
		out.Records[i] = adminHistoryRecord(r)
	}
	// A page is up to session.MaxHistoryLimit records (about 200 KB of
	// JSON): it is written in pieces, each of which the client must take
	// within WriteTimeout (writeInTime), not the whole page within it.
	if !csvOut {
		var body bytes.Buffer
		enc := json.NewEncoder(&body) // the bytes c.JSON writes
		if pretty(c) {
			enc.SetIndent("", "  ")
		}
		if err := enc.Encode(out); err != nil {
			return err
		}
		return s.writeLarge(c, echo.MIMEApplicationJSON, body.Bytes())
	}
	body, err := historyCSV(out)
	if err != nil {
		return err
	}
	h := c.Response().Header()
	h.Set("Content-Disposition", `attachment; filename="anteroom-history-`+name+`.csv"`)
	h.Set("X-Content-Type-Options", "nosniff")
	if out.Next != "" {
		h.Set(HistoryCursorHeader, out.Next)
	}
	return s.writeLarge(c, "text/csv; charset=utf-8", body)
}

// writeLarge answers 200 with body of contentType, in pieces the client
// must each take within WriteTimeout. It returns the response writer's
// error.
func (s *Server) writeLarge(c echo.Context, contentType string, body []byte) error {
	h := c.Response().Header()
	h.Set(echo.HeaderContentType, contentType)
	h.Set(echo.HeaderContentLength, strconv.Itoa(len(body)))
	c.Response().WriteHeader(http.StatusOK)
	return writeInTime(c.Response(), body, s.opts.WriteTimeout)
}

// historyCSV renders the records with a header line. encoding/csv quotes
// what needs quoting; cells a spreadsheet would run as a formula are
// neutralised (csvCell).
func historyCSV(h AdminHistory) ([]byte, error) {
	var buf bytes.Buffer
	w := csv.NewWriter(&buf)
	_ = w.Write([]string{"id", "at", "gate", "session", "kind", "status", "position", "reason", "wait_seconds"})
	for _, r := range h.Records {
		wait := ""
		if r.WaitSeconds != nil {
			wait = strconv.FormatFloat(*r.WaitSeconds, 'f', -1, 64)
		}
		_ = w.Write([]string{
			strconv.FormatInt(r.ID, 10), r.At.Format(time.RFC3339Nano), csvCell(h.Gate), csvCell(r.Session),
			string(r.Kind), string(r.Status), strconv.FormatInt(r.Position, 10), r.Reason, wait,
		})
	}
	w.Flush()
	return buf.Bytes(), w.Error()
}

// csvCell neutralises a text cell that a spreadsheet would read as a
// formula (CSV injection): one beginning with = + - @, a tab or a carriage
// return gets a leading apostrophe. Session ids and gate names may begin
// with these; numbers and times are written by us and are left alone.
func csvCell(s string) string {
	if s != "" && strings.ContainsRune("=+-@\t\r", rune(s[0])) {
		return "'" + s
	}
	return s
}

// waitSeconds is a wait percentile for AdminGate: nil without admissions.
func waitSeconds(w session.WaitStats, d time.Duration) *float64 {
	if w.Admissions == 0 {
		return nil
	}
	v := d.Seconds()
	return &v
}
