package gate

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// prefersHTML decides which error a claim link's GET answers: a page for a
// browser, the wire contract's JSON for everyone else. Only a header that
// ranks text/html strictly above application/json is a browser's.
func TestPrefersHTML(t *testing.T) {
	const (
		chrome  = "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,image/apng,*/*;q=0.8,application/signed-exchange;v=b3;q=0.7"
		firefox = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"
		safari  = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"
		edge    = "text/html,application/xhtml+xml,application/xml;q=0.9,image/webp,image/apng,*/*;q=0.8,application/signed-exchange;v=b3;q=0.7"
	)
	for _, tc := range []struct {
		name   string
		accept []string // nil: no Accept header at all
		want   bool
	}{
		// Browsers navigating.
		{"Chrome", []string{chrome}, true},
		{"Firefox", []string{firefox}, true},
		{"Safari", []string{safari}, true},
		{"Edge", []string{edge}, true},
		{"text/html alone", []string{"text/html"}, true},
		{"text/* alone", []string{"text/*"}, true},
		{"case and spaces", []string{"  TEXT/HTML ; Q=1 , Application/JSON ; q=0.5 "}, true},
		{"html low, json lower", []string{"text/html;q=0.5, application/json;q=0.4"}, true},
		{"html a little", []string{"text/html;q=0.001"}, true},
		{"html with a charset parameter", []string{"text/html;charset=utf-8, */*;q=0.1"}, true},
		{"html on a second line", []string{"application/json;q=0.5", "text/html"}, true},

		// API clients, curl, fetch() and XHR.
		{"no Accept", nil, false},
		{"empty", []string{""}, false},
		{"*/* (curl, fetch, Go, Python)", []string{"*/*"}, false},
		{"application/json", []string{"application/json"}, false},
		{"HTTPie", []string{"application/json, */*;q=0.5"}, false},
		{"application/*", []string{"application/*"}, false},
		{"a tie", []string{"text/html, application/json"}, false},
		{"a tie on two lines", []string{"application/json", "text/html"}, false},
		{"a tie through */*", []string{"text/html;q=0.8, */*;q=0.8"}, false},

		// Tricks.
		{"html refused", []string{"text/html;q=0"}, false},
		{"html refused, all else welcome", []string{"text/html;q=0, */*"}, false},
		{"html refused, the specific range wins over text/*", []string{"text/*, text/html;q=0"}, false},
		{"json first, html a little", []string{"application/json, text/html;q=0.1"}, false},
		{"json refused but html too", []string{"text/html;q=0, application/json;q=0"}, false},
		{"json refused, html via */*", []string{"application/json;q=0, */*"}, true},
		{"q out of range", []string{"text/html;q=2"}, false},
		{"q negative", []string{"text/html;q=-1"}, false},
		{"q with four decimals", []string{"text/html;q=0.0001"}, false},
		{"q of 1.001", []string{"text/html;q=1.001"}, false},
		{"q not a number", []string{"text/html;q=abc"}, false},
		{"q empty", []string{"text/html;q="}, false},
		{"malformed q ignored, the rest counts", []string{"text/html;q=x, text/*;q=0.5"}, true},
		{"no subtype", []string{"text/"}, false},
		{"no slash", []string{"html"}, false},
		{"*/html is no range", []string{"*/html"}, false},
		{"html as a parameter", []string{"application/json;x=text/html"}, false},
		{"html as a subtype of another type", []string{"application/html"}, false},
		{"commas only", []string{",,,,"}, false},
		{"script", []string{"<script>alert(1)</script>"}, false},
		{"absurdly long, html first", []string{"text/html," + strings.Repeat("a", 4096)}, false},
		{"absurdly many ranges", []string{"text/html" + strings.Repeat(",a/b", 64)}, false},
		{"absurdly many lines", append([]string{"text/html"}, make([]string, 64)...), false},
		{"just under the bounds", []string{"text/html" + strings.Repeat(",a/b", maxAcceptRanges-1)}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{}
			for _, v := range tc.accept {
				h.Add("Accept", v)
			}
			assert.Equal(t, tc.want, prefersHTML(h), "Accept: %q", tc.accept)
		})
	}
}

func TestPrefersHTMLDoesNotAllocate(t *testing.T) {
	h := http.Header{"Accept": {"text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"}}
	assert.Zero(t, testing.AllocsPerRun(100, func() { prefersHTML(h) }))
}

func TestParseQValue(t *testing.T) {
	for v, want := range map[string]int{"0": 0, "0.": 0, "0.5": 500, "0.123": 123, "0.05": 50, "1": 1000, "1.": 1000, "1.0": 1000, "1.000": 1000} {
		q, ok := parseQValue(v)
		assert.True(t, ok, v)
		assert.Equal(t, want, q, v)
	}
	for _, v := range []string{"", ".5", "2", "-0", "0.1234", "1.001", "1.5", "0,5", "0.5 ", "01", "1e0", "0x1"} {
		_, ok := parseQValue(v)
		assert.False(t, ok, v)
	}
}
