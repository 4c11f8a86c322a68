package main

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
)

// report is the whole run, as printed and as written by -json.
type report struct {
	Mode    string   `json:"mode"`
	Machine machine  `json:"machine"`
	Started string   `json:"started"`
	Seconds float64  `json:"seconds"`
	Args    []string `json:"args"`
	Results []Result `json:"results"`
}

// Check kinds: how a Result's target is judged.
const (
	checkNone     = ""          // informational row
	checkRatioMin = "ratio>="   // Ratio >= Want
	checkRatioMax = "ratio<="   // Ratio <= Want
	checkValueMin = "value>="   // Value >= Want
	checkValueMax = "value<="   // Value <= Want
	checkValueEq  = "value=="   // Value == Want
	resultPass    = "pass"      //
	resultFail    = "FAIL"      //
	resultInfo    = "-"         //
	resultError   = "ERROR"     //
	unitPerSec    = "/s"        //
	unitMs        = "ms"        //
	unitKB        = "KB"        //
	unitAllocs    = "allocs/op" //
	unitCount     = ""          //
	unitSec       = "s"         //
	unitPercent   = "%"         //
)

// Result is one row of the table.
type Result struct {
	Scenario string   `json:"scenario"`
	Metric   string   `json:"metric"`
	Unit     string   `json:"unit,omitempty"`
	Value    float64  `json:"value"`
	Baseline *float64 `json:"baseline,omitempty"`
	Ratio    *float64 `json:"ratio,omitempty"`
	Target   string   `json:"target,omitempty"`
	Check    string   `json:"check,omitempty"`
	Want     float64  `json:"want,omitempty"`
	Result   string   `json:"result"`
	Note     string   `json:"note,omitempty"`
}

func ptr(f float64) *float64 { return &f }

// withBaseline sets the baseline and the ratio value/baseline.
func (r Result) withBaseline(base float64) Result {
	r.Baseline = ptr(base)
	if base != 0 {
		r.Ratio = ptr(r.Value / base)
	}
	return r
}

// evaluate fills Result from Check and Want (and leaves an ERROR alone).
func (r *Result) evaluate() {
	if r.Result == resultError {
		return
	}
	pass := true
	switch r.Check {
	case checkNone:
		r.Result = resultInfo
		return
	case checkRatioMin:
		pass = r.Ratio != nil && *r.Ratio >= r.Want
	case checkRatioMax:
		pass = r.Ratio != nil && *r.Ratio <= r.Want
	case checkValueMin:
		pass = r.Value >= r.Want
	case checkValueMax:
		pass = r.Value <= r.Want
	case checkValueEq:
		pass = r.Value == r.Want
	}
	if math.IsNaN(r.Value) {
		pass = false
	}
	r.Result = resultFail
	if pass {
		r.Result = resultPass
	}
}

func formatValue(v float64, unit string) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "n/a"
	}
	switch unit {
	case unitPerSec:
		return groupDigits(int64(math.Round(v))) + "/s"
	case unitMs:
		return strconv.FormatFloat(v, 'f', 1, 64) + " ms"
	case unitKB:
		return strconv.FormatFloat(v, 'f', 1, 64) + " KB"
	case unitAllocs:
		return strconv.FormatFloat(v, 'f', 2, 64)
	case unitSec:
		return strconv.FormatFloat(v, 'f', 1, 64) + " s"
	case unitPercent:
		return strconv.FormatFloat(v, 'f', 2, 64) + "%"
	}
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return groupDigits(int64(v))
	}
	return strconv.FormatFloat(v, 'g', 4, 64)
}

func groupDigits(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	if neg {
		s = s[1:]
	}
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

func printTable(w io.Writer, rep report) {
	m := rep.Machine
	fmt.Fprintf(w, "anteroom-bench (%s) on %d CPUs (GOMAXPROCS %d), %s, %s, %s; %.0f s\n\n",
		rep.Mode, m.NumCPU, m.GOMAXPROCS, m.CPU, m.Go, m.OS, rep.Seconds)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SCENARIO\tMETRIC\tVALUE\tBASELINE\tRATIO\tTARGET\tRESULT\tNOTE")
	for _, r := range rep.Results {
		base, ratio := "-", "-"
		if r.Baseline != nil {
			base = formatValue(*r.Baseline, r.Unit)
		}
		if r.Ratio != nil {
			ratio = formatRatio(*r.Ratio)
		}
		value := formatValue(r.Value, r.Unit)
		target := r.Target
		if r.Result == resultError {
			value, target = "-", "-"
		}
		if target == "" {
			target = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Scenario, r.Metric, value, base, ratio, target, r.Result, r.Note)
	}
	_ = tw.Flush()
}

func formatRatio(r float64) string {
	if r != 0 && math.Abs(r) < 0.01 {
		return strconv.FormatFloat(r, 'g', 2, 64)
	}
	return strconv.FormatFloat(r, 'f', 3, 64)
}
