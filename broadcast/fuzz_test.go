package broadcast

import (
	"bytes"
	"encoding/json"
	"math"
	"slices"
	"sort"
	"testing"

	"github.com/anteroomhq/anteroom/session"
)

// The websocket messages, fuzzed at the hub's encoding: whatever the view
// (any strings, any numbers, a NaN or infinite rate), the bytes sent are one
// valid JSON object with "type" and exactly the view's fields, carrying the
// same values (a rate JSON cannot carry is sent as 0).
//
// Seeds live in testdata/fuzz/FuzzEncode{Global,Session}; plain go test runs
// them. To fuzz: scripts/fuzz.sh, or
//
//	go test -run='^$' -fuzz='^FuzzEncodeGlobal$' -fuzztime=60s ./broadcast/

func FuzzEncodeGlobal(f *testing.F) {
	f.Add("default", int64(3), int64(9), int64(5), int64(100), int64(100), 12.5)
	f.Add("", int64(0), int64(-1), int64(0), int64(0), int64(0), math.NaN())
	f.Fuzz(func(t *testing.T, gate string, first, last, waiting, active, limit int64, rate float64) {
		v := session.GlobalView{Gate: gate, FirstWaitingPosition: first, LastWaitingPosition: last,
			Waiting: waiting, Active: active, Limit: limit, AdmittedPerMinute: rate}
		b := encodeGlobal(v)
		requireMessage(t, b, "global", v)
		var got session.GlobalView
		decodeStrict(t, b, &got)
		if want := expectedGlobal(v); !got.Equal(want) {
			t.Fatalf("%s decodes to %+v, want %+v", b, got, want)
		}
	})
}

func FuzzEncodeSession(f *testing.F) {
	f.Add("default", "XkR2pN8QeW0aB7cD9fGh1i", "active", int64(42), int64(40), int64(60), int64(21), int64(10), int64(10), 0.5)
	f.Add("vip", "user:42", "waiting", int64(1), int64(1), int64(1), int64(1), int64(0), int64(0), math.Inf(1))
	f.Fuzz(func(t *testing.T, gate, id, status string, position, first, last, waiting, active, limit int64, rate float64) {
		v := session.SessionView{
			GlobalView: session.GlobalView{Gate: gate, FirstWaitingPosition: first, LastWaitingPosition: last,
				Waiting: waiting, Active: active, Limit: limit, AdmittedPerMinute: rate},
			Session: id, Status: session.Status(status), Position: position,
		}
		before := v
		b := newSessionScratch().encode(&v)
		if !sameView(v, before) {
			t.Fatalf("encode changed its argument: %+v, was %+v", v, before)
		}
		requireMessage(t, b, "session", v)
		var got session.SessionView
		decodeStrict(t, b, &got)
		want := v
		want.GlobalView = expectedGlobal(v.GlobalView)
		want.Session, want.Status = jsonString(id), session.Status(jsonString(status))
		if !sameView(got, want) {
			t.Fatalf("%s decodes to %+v, want %+v", b, got, want)
		}
	})
}

// requireMessage checks that b is one JSON object whose keys are "type" and
// exactly those of the view as encoding/json writes it, and that "type" is
// typ.
func requireMessage(t *testing.T, b []byte, typ string, view any) {
	t.Helper()
	if !json.Valid(b) {
		t.Fatalf("invalid JSON: %q", b)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(b, &fields); err != nil {
		t.Fatalf("not a JSON object: %s: %v", b, err)
	}
	var gotType string
	if err := json.Unmarshal(fields["type"], &gotType); err != nil || gotType != typ {
		t.Fatalf("type %s in %s, want %q", fields["type"], b, typ)
	}
	want := []string{"type"}
	for k := range viewKeys(view) {
		want = append(want, k)
	}
	var got []string
	for k := range fields {
		got = append(got, k)
	}
	sort.Strings(want)
	sort.Strings(got)
	if !slices.Equal(got, want) {
		t.Fatalf("keys %v in %s, want %v", got, b, want)
	}
}

// viewKeys are the keys of a view as the session package declares them: the
// hub's messages must carry every one (and no other but "type").
func viewKeys(view any) map[string]bool {
	b, err := json.Marshal(view)
	if err != nil { // a NaN rate: the keys do not depend on it
		switch v := view.(type) {
		case session.GlobalView:
			v.AdmittedPerMinute = 0
			b, _ = json.Marshal(v)
		case session.SessionView:
			v.AdmittedPerMinute = 0
			b, _ = json.Marshal(v)
		}
	}
	var m map[string]json.RawMessage
	_ = json.Unmarshal(b, &m)
	keys := map[string]bool{}
	for k := range m {
		keys[k] = true
	}
	return keys
}

// decodeStrict decodes b into v, refusing keys v does not have but "type".
func decodeStrict(t *testing.T, b []byte, v any) {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	delete(m, "type")
	rest, _ := json.Marshal(m)
	dec := json.NewDecoder(bytes.NewReader(rest))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
}

// expectedGlobal is v as a client must read it: the strings as JSON carries
// them (invalid UTF-8 becomes U+FFFD), a rate JSON cannot carry as 0.
func expectedGlobal(v session.GlobalView) session.GlobalView {
	v.Gate = jsonString(v.Gate)
	if math.IsNaN(v.AdmittedPerMinute) || math.IsInf(v.AdmittedPerMinute, 0) {
		v.AdmittedPerMinute = 0
	}
	return v
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	var out string
	_ = json.Unmarshal(b, &out)
	return out
}

// sameView compares views, NaN rates included.
func sameView(a, b session.SessionView) bool {
	ra, rb := a.AdmittedPerMinute, b.AdmittedPerMinute
	a.AdmittedPerMinute, b.AdmittedPerMinute = 0, 0
	return a.GlobalView.Equal(b.GlobalView) && a.Session == b.Session && a.Status == b.Status &&
		a.Position == b.Position && a.Place == b.Place && (a.ClaimDeadline == nil) == (b.ClaimDeadline == nil) &&
		(a.ClaimDeadline == nil || a.ClaimDeadline.Equal(*b.ClaimDeadline)) &&
		(ra == rb || math.IsNaN(ra) && math.IsNaN(rb))
}
