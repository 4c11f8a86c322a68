package gate_test

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/gate"
	"github.com/anteroomhq/anteroom/session"
)

func (h *adminHarness) history(query string) gate.AdminHistory {
	h.t.Helper()
	code, body, hdr := h.do(http.MethodGet, "gates/default/history"+query, adminToken, "")
	require.Equal(h.t, http.StatusOK, code, body)
	assert.Contains(h.t, hdr.Get("Content-Type"), "application/json")
	var out gate.AdminHistory
	require.NoError(h.t, json.Unmarshal([]byte(body), &out))
	return out
}

// histKinds lists "kind:session" of each record.
func histKinds(recs []gate.AdminHistoryRecord) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = string(r.Kind) + ":" + r.Session
	}
	return out
}

func TestAdminHistory(t *testing.T) {
	h := newAdminHarness(t, adminToken, nil)
	ctx := context.Background()
	w, clock := h.sc.Waitlist, h.sc.Clock
	start := clock.Now()
	_, err := w.Join(ctx, "default", "a") // admitted (limit 1)
	require.NoError(t, err)
	_, err = w.Join(ctx, "default", "b")
	require.NoError(t, err)
	clock.Advance(90 * time.Second)
	require.NoError(t, w.Release(ctx, "default", "a")) // b promoted after 90s
	clock.Advance(time.Second)
	mid := clock.Now()
	_, err = w.Join(ctx, "default", "c")
	require.NoError(t, err)
	require.NoError(t, w.Leave(ctx, "default", "c"))

	t.Run("json", func(t *testing.T) {
		got := h.history("")
		assert.Equal(t, "default", got.Gate)
		assert.Equal(t, []string{"left:c", "joined:c", "promoted:b", "released:a", "joined:b", "joined:a"}, histKinds(got.Records))
		assert.Empty(t, got.Next)
		promoted := got.Records[2]
		require.NotNil(t, promoted.WaitSeconds)
		assert.InDelta(t, 90, *promoted.WaitSeconds, 1e-9)
		assert.Equal(t, session.StatusActive, promoted.Status)
		assert.Equal(t, int64(2), promoted.Position)
		assert.Equal(t, "released", got.Records[3].Reason)
		assert.Nil(t, got.Records[0].WaitSeconds, "no wait on a leave")
		assert.True(t, got.Records[5].At.Equal(start))
	})
	t.Run("filters and cursor", func(t *testing.T) {
		assert.Equal(t, []string{"promoted:b", "joined:b"}, histKinds(h.history("?session=b").Records))
		assert.Equal(t, []string{"left:c", "joined:c"}, histKinds(h.history("?since="+url.QueryEscape(mid.Format(time.RFC3339Nano))).Records))
		assert.Equal(t, []string{"promoted:b", "released:a", "joined:b", "joined:a"},
			histKinds(h.history("?until="+url.QueryEscape(mid.Format(time.RFC3339))).Records))
		var all []string
		q := "?limit=4"
		for i := 0; ; i++ {
			require.Less(t, i, 10)
			page := h.history(q)
			all = append(all, histKinds(page.Records)...)
			if page.Next == "" {
				break
			}
			q = "?limit=4&cursor=" + url.QueryEscape(page.Next)
		}
		assert.Equal(t, histKinds(h.history("").Records), all)
	})
	t.Run("csv", func(t *testing.T) {
		code, body, hdr := h.do(http.MethodGet, "gates/default/history?format=csv&limit=2", adminToken, "")
		require.Equal(t, http.StatusOK, code, body)
		assert.Equal(t, "text/csv; charset=utf-8", hdr.Get("Content-Type"))
		assert.Equal(t, "nosniff", hdr.Get("X-Content-Type-Options"))
		assert.NotEmpty(t, hdr.Get(gate.HistoryCursorHeader), "a next page")
		rows, err := csv.NewReader(strings.NewReader(body)).ReadAll()
		require.NoError(t, err)
		require.Len(t, rows, 3)
		assert.Equal(t, []string{"id", "at", "gate", "session", "kind", "status", "position", "reason", "wait_seconds"}, rows[0])
		assert.Equal(t, []string{"c", "left", "waiting", "3"}, []string{rows[1][3], rows[1][4], rows[1][5], rows[1][6]})
		assert.Equal(t, "default", rows[1][2])
	})
	t.Run("unknown gate", func(t *testing.T) {
		code, body, _ := h.do(http.MethodGet, "gates/nope/history", adminToken, "")
		assert.Equal(t, http.StatusNotFound, code)
		assert.Equal(t, session.CodeUnknownGate, errorCode(t, body))
	})
	t.Run("needs the admin token", func(t *testing.T) {
		code, body, _ := h.do(http.MethodGet, "gates/default/history", "", "")
		assert.Equal(t, http.StatusUnauthorized, code)
		assert.Equal(t, session.Code("admin_token_required"), errorCode(t, body))
		code, _, _ = h.do(http.MethodGet, "gates/default/history?format=csv", adminToken+"x", "")
		assert.Equal(t, http.StatusUnauthorized, code)
	})
}

// Every bad query is a 400 with the contract's error body naming the
// parameter, never a 500 nor a silently clamped answer.
func TestAdminHistoryHostileQueries(t *testing.T) {
	h := newAdminHarness(t, adminToken, nil)
	_, err := h.sc.Waitlist.Join(context.Background(), "default", "a")
	require.NoError(t, err)
	cases := map[string]string{
		"?limit=1001":                    "limit",
		"?limit=99999999999999999999999": "limit",
		"?limit=0":                       "limit",
		"?limit=-1":                      "limit",
		"?limit=1e3":                     "limit",
		"?limit=10&limit=20":             "limit",
		"?since=yesterday":               "since",
		"?since=2026-13-01T00:00:00Z":    "since",
		"?since=99999-01-01T00:00:00Z":   "since",
		"?until=0001-01-01T00:00:00Z":    "until",
		"?since=2026-03-02T00:00:00Z&until=2026-03-01T00:00:00Z": "until",
		"?session=" + url.QueryEscape("' OR 1=1 --"):             "session",
		"?session=" + url.QueryEscape("a.b"):                     "session",
		"?session=" + strings.Repeat("x", 129):                   "session",
		"?session=%00":                                           "session",
		"?format=xml":                                            "format",
		"?cursor=abc":                                            "cursor",
		"?cursor=1_-5":                                           "cursor",
		"?cursor=" + strings.Repeat("9", 30) + "_1":              "cursor",
		"?gate=vip":                                              "gate",
		"?%zz":                                                   "query",
		"?session=" + strings.Repeat("x", 3000):                  "query",
	}
	for q, param := range cases {
		code, body, hdr := h.do(http.MethodGet, "gates/default/history"+q, adminToken, "")
		assert.Equal(t, http.StatusBadRequest, code, "%s: %s", q, body)
		assert.Equal(t, session.CodeInvalidArgument, errorCode(t, body), q)
		assert.Contains(t, body, param, q)
		assert.Contains(t, hdr.Get("Content-Type"), "application/json", q)
	}
	// An id that is valid but looks like SQL finds nothing and breaks
	// nothing.
	for _, id := range []string{`a'--`, `'OR'1'='1`, `%`, `a";DROP`} {
		got := h.history("?session=" + url.QueryEscape(id))
		assert.Empty(t, got.Records, id)
	}
	assert.Len(t, h.history("").Records, 1, "the history is intact")
}

// Cells that a spreadsheet would run as a formula are neutralised; the CSV
// stays well formed whatever the ids hold.
func TestAdminHistoryCSVInjection(t *testing.T) {
	h := newAdminHarness(t, adminToken, nil)
	ids := []string{`=HYPERLINK("http://evil","x")`, `+1+1`, `-2+3`, `@SUM(A1)`, `plain`, `"quoted",comma`}
	for _, id := range ids {
		id = strings.ReplaceAll(id, " ", "") // ids have no spaces
		_, err := h.sc.Waitlist.Join(context.Background(), "default", id)
		require.NoError(t, err, id)
	}
	code, body, _ := h.do(http.MethodGet, "gates/default/history?format=csv", adminToken, "")
	require.Equal(t, http.StatusOK, code, body)
	rows, err := csv.NewReader(strings.NewReader(body)).ReadAll()
	require.NoError(t, err)
	require.Len(t, rows, len(ids)+1)
	got := map[string]bool{}
	for _, r := range rows[1:] {
		require.Len(t, r, 9)
		got[r[3]] = true
		for _, cell := range r {
			if cell != "" {
				assert.NotContains(t, "=+-@", cell[:1], "cell %q would run as a formula", cell)
			}
		}
	}
	assert.True(t, got[`'=HYPERLINK("http://evil","x")`])
	assert.True(t, got[`'+1+1`])
	assert.True(t, got[`'-2+3`])
	assert.True(t, got[`'@SUM(A1)`])
	assert.True(t, got[`plain`])
	assert.True(t, got[`"quoted",comma`], "quotes and commas survive, escaped")
}

// GET gates carries the wait figures: null percentiles before anyone was
// admitted, then the percentiles of the last hour (direct admissions count
// as no wait), and the abandon rate.
func TestAdminGatesWaitFigures(t *testing.T) {
	h := newAdminHarness(t, adminToken, nil)
	figures := func() map[string]any {
		code, body, _ := h.do(http.MethodGet, "gates", adminToken, "")
		require.Equal(t, http.StatusOK, code, body)
		var out struct {
			Gates []map[string]any `json:"gates"`
		}
		require.NoError(t, json.Unmarshal([]byte(body), &out))
		for _, g := range out.Gates {
			if g["name"] == "default" {
				return g
			}
		}
		t.Fatal("no default gate")
		return nil
	}
	g := figures()
	for _, k := range []string{"waitP50Seconds", "waitP90Seconds"} {
		v, present := g[k]
		assert.True(t, present, k)
		assert.Nil(t, v, "%s before any admission", k)
	}
	assert.Equal(t, 0.0, g["abandonsPerMinute"])

	ctx := context.Background()
	w, clock := h.sc.Waitlist, h.sc.Clock
	_, err := w.Join(ctx, "default", "a")
	require.NoError(t, err)
	_, err = w.Join(ctx, "default", "b")
	require.NoError(t, err)
	clock.Advance(90 * time.Second)
	require.NoError(t, w.Release(ctx, "default", "a"))
	g = figures()
	assert.Equal(t, 0.0, g["waitP50Seconds"], "one of two was admitted at once")
	assert.InEpsilon(t, 90.0, g["waitP90Seconds"], 0.045)
}
