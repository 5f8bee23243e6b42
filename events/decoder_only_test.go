package events_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/leaseledger/leaseledger/events"
)

// narrowing is what the tests narrow: the projection's reads of its most
// frequent kinds, and a kind narrowed to nothing.
var narrowing = map[events.Kind][]string{
	"call.admitted":   {"policies", "policies_omitted", "policy_digest"},
	"call.finished":   {"killed_on_cancel"},
	"lease.acquiring": {"shared"},
	"http.completed":  nil,
}

func narrowedDecoder(t testing.TB) *events.Decoder {
	t.Helper()
	var d events.Decoder
	for k, fields := range narrowing {
		if err := d.Only(k, fields...); err != nil {
			t.Fatal(err)
		}
	}
	return &d
}

// keepOnly returns a copy of p with every field not named in kept zeroed,
// or p whole when a kept field that is not a bool holds a value (such a
// payload is decoded whole and validated; see Decoder.Only).
func keepOnly(p events.Payload, kept []string) events.Payload {
	v := reflect.New(reflect.TypeOf(p).Elem())
	v.Elem().Set(reflect.ValueOf(p).Elem())
	s := v.Elem()
	for i := range s.NumField() {
		name, _, _ := strings.Cut(s.Type().Field(i).Tag.Get("json"), ",")
		if slices.Contains(kept, name) && s.Field(i).Kind() != reflect.Bool && !s.Field(i).IsZero() {
			return p
		}
	}
	for i := range s.NumField() {
		name, _, _ := strings.Cut(s.Type().Field(i).Tag.Get("json"), ",")
		keep := false
		for _, k := range kept {
			keep = keep || k == name
		}
		if !keep {
			s.Field(i).SetZero()
		}
	}
	return v.Interface().(events.Payload)
}

// agreeNarrowed is the twin property of a narrowed Decoder on raw: when
// the strict decoder accepts it, Decode yields the same header and the
// strict payload with the unkept fields zeroed (or, for a kind not
// narrowed, the whole payload); when the strict decoder refuses it, Decode
// refuses it too unless its kind is narrowed (whose values it does not
// check; TestNarrowedDecoderChecksFormOnly holds it to their form).
func agreeNarrowed(t testing.TB, d *events.Decoder, raw []byte) {
	t.Helper()
	env, strictErr := events.Decode(raw)
	var h events.Header
	p, err := d.Decode(raw, &h)
	if strictErr != nil {
		if err == nil {
			kept, narrowed := narrowing[h.Kind]
			if !narrowed {
				t.Fatalf("narrowed Decoder accepted bytes of a kind it does not narrow that the strict decoder refuses (%v): %q", strictErr, raw)
			}
			if why := unkeptValueOnly(t, h.Kind, kept, raw, p); why != "" {
				t.Fatalf("narrowed Decoder accepted bytes the strict decoder refuses (%v) for another reason than an unkept field's value: %s: %q", strictErr, why, raw)
			}
		}
		return
	}
	if err != nil {
		t.Fatalf("narrowed Decoder refused bytes the strict decoder accepts: %v", err)
	}
	want := events.Header{Seq: env.Seq, Time: env.Time, Kind: env.Kind, Activation: env.Activation, Session: env.Session, Server: env.Server}
	if h != want {
		t.Fatalf("headers differ:\nnarrowed %+v\nstrict   %+v", h, want)
	}
	sp, err := env.Payload()
	if err != nil {
		t.Fatal(err)
	}
	if kept, ok := narrowing[env.Kind]; ok {
		sp = keepOnly(sp, kept)
	}
	if !reflect.DeepEqual(p, sp) {
		t.Fatalf("payloads differ on %s:\nnarrowed %#v\nstrict   %#v", env.Kind, p, sp)
	}
}

var (
	validOnce     sync.Once
	validPayloads map[events.Kind]events.Payload // a valid payload of each example kind
)

// unkeptValueOnly says why raw, which the strict decoder refuses and the
// narrowed Decoder read as p, is not refused for an unkept field's value
// alone ("" when it is): its payload must decode (form), fail its
// Validate, yield p's kept fields, and, with its unkept fields taken from a
// valid example, validate and make the envelope one the strict decoder
// accepts.
func unkeptValueOnly(t testing.TB, kind events.Kind, kept []string, raw []byte, p events.Payload) string {
	validOnce.Do(func() {
		validPayloads = map[events.Kind]events.Payload{}
		for _, r := range sealExamples(t) {
			env, err := events.Decode(r)
			if err != nil {
				continue
			}
			if vp, err := env.Payload(); err == nil {
				validPayloads[env.Kind] = vp
			}
		}
	})
	var w struct {
		Data json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(raw, &w); err != nil {
		return "envelope is not JSON"
	}
	p0, err := events.New(kind)
	if err != nil {
		return "unknown kind"
	}
	dec := json.NewDecoder(bytes.NewReader(w.Data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(p0); err != nil {
		return "payload form: " + err.Error()
	}
	if p0.Validate() == nil {
		return "the payload is valid: the refusal is the envelope's"
	}
	if !reflect.DeepEqual(keepOnly(p0, kept), p) {
		return "kept fields read differently"
	}
	valid := validPayloads[kind]
	if valid == nil {
		return "no valid example of the kind"
	}
	p1 := reflect.New(reflect.TypeOf(valid).Elem())
	p1.Elem().Set(reflect.ValueOf(valid).Elem())
	for i := range p1.Elem().NumField() {
		name, _, _ := strings.Cut(p1.Elem().Type().Field(i).Tag.Get("json"), ",")
		if slices.Contains(kept, name) {
			p1.Elem().Field(i).Set(reflect.ValueOf(p0).Elem().Field(i))
		}
	}
	fixed := p1.Interface().(events.Payload)
	if err := fixed.Validate(); err != nil {
		return "a kept field's value is invalid: " + err.Error()
	}
	data, err := json.Marshal(fixed)
	if err != nil {
		return err.Error()
	}
	repaired := bytes.Replace(raw, append([]byte(`"data":`), w.Data...), append([]byte(`"data":`), data...), 1)
	if _, err := events.Decode(repaired); err != nil {
		return "the envelope is refused with valid unkept values: " + err.Error()
	}
	return ""
}

// unkeptValueMutants are canonical events of the narrowed kinds whose
// unkept values break their rules while keeping their form: each string
// value prefixed with "!", each number made negative.
func unkeptValueMutants(t testing.TB) [][]byte {
	var out [][]byte
	for _, raw := range sealExamples(t) {
		env, err := events.Decode(raw)
		if err != nil {
			t.Fatal(err)
		}
		kept, ok := narrowing[env.Kind]
		if !ok {
			continue
		}
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(env.Data, &fields); err != nil {
			t.Fatal(err)
		}
		start := bytes.Index(raw, []byte(`"data":{`))
		for name, v := range fields {
			if slices.Contains(kept, name) {
				continue
			}
			key := []byte(`"` + name + `":`)
			var to []byte
			switch {
			case len(v) > 0 && v[0] == '"':
				to = append(append(bytes.Clone(key), '"', '!'), v[1:]...)
			case len(v) > 0 && v[0] >= '1' && v[0] <= '9':
				to = append(append(bytes.Clone(key), '-'), v...)
			default:
				continue
			}
			m := append(bytes.Clone(raw[:start]), bytes.Replace(raw[start:], append(key, v...), to, 1)...)
			out = append(out, m)
		}
	}
	return out
}

// Generated events whose only fault is an unkept field's value: the
// strict decoder refuses each, the narrowed Decoder reads each (its kept
// fields right), and an event with a kept field's value broken is refused
// by both.
func TestNarrowedDecoderUnkeptValues(t *testing.T) {
	d := narrowedDecoder(t)
	ms := unkeptValueMutants(t)
	accepted := 0
	for _, m := range ms {
		if _, err := events.Decode(m); err == nil {
			continue // a rule the value still meets ("!" is no fault of free text)
		}
		var h events.Header
		if _, err := d.Decode(m, &h); err != nil {
			t.Fatalf("narrowed Decoder refused an unkept value: %v: %s", err, m)
		}
		accepted++
		agreeNarrowed(t, d, m)
	}
	if accepted < 3 {
		t.Fatalf("only %d of %d generated events exercised the narrowed-only path", accepted, len(ms))
	}
}

// A kept field with value rules is never read unchecked: absent, the
// payload is narrowed; present, the payload is decoded whole and
// validated, so a value Validate refuses is refused.
func TestNarrowedDecoderChecksKeptValues(t *testing.T) {
	const pd = "5d1e0f8a0c1b9e7d2f4a6c8e0b1d3f5a7c9e1b3d5f7a9c1e3b5d7f9a1c3e5b7d"
	seal := func(p events.Payload) []byte {
		pr, err := events.Prepare(events.Draft{Activation: "act-1", Session: "s-1", Server: "github", Payload: p})
		if err != nil {
			t.Fatal(err)
		}
		_, raw := events.Seal(pr, 1, [16]byte{1}, t0, events.Hash{})
		return raw
	}
	d := narrowedDecoder(t)
	var h events.Header
	plain := seal(&events.CallAdmitted{CallID: "c-1", Tool: "search", Digest: pd})
	p, err := d.Decode(plain, &h)
	if err != nil {
		t.Fatal(err)
	}
	if a := p.(*events.CallAdmitted); a.CallID != "" || a.Tool != "" {
		t.Fatalf("without its policies a call.admitted is narrowed: %+v", a)
	}
	decided := seal(&events.CallAdmitted{CallID: "c-2", Tool: "search", Digest: pd, Policies: []string{"p0"}, PolicyDigest: pd})
	p, err = d.Decode(decided, &h)
	if err != nil {
		t.Fatal(err)
	}
	if a := p.(*events.CallAdmitted); a.CallID != "c-2" || a.PolicyDigest != pd || len(a.Policies) != 1 {
		t.Fatalf("with its policies a call.admitted is decoded whole: %+v", a)
	}
	bad := bytes.Replace(decided, []byte(`"policy_digest":"5d1e`), []byte(`"policy_digest":"Xd1e`), 1)
	if bytes.Equal(bad, decided) {
		t.Fatalf("example changed shape: %s", decided)
	}
	if _, err := d.Decode(bad, &h); err == nil {
		t.Fatal("a narrowed Decoder read a kept value Validate refuses")
	}
	badUnkept := bytes.Replace(decided, []byte(`"call_id":"c-2"`), []byte(`"call_id":"c 2"`), 1)
	if _, err := d.Decode(badUnkept, &h); err == nil {
		t.Fatal("a payload decoded whole went unvalidated")
	}
}

// A narrowed Decoder reads every example as the strict decoder does, minus
// the fields it does not keep; narrowing does not touch DecodePayload.
func TestNarrowedDecoderMatchesStrict(t *testing.T) {
	raws := sealExamples(t)
	d := narrowedDecoder(t)
	for range 2 {
		for _, raw := range raws {
			agreeNarrowed(t, d, raw)
		}
	}
	for _, m := range mutants(t) {
		agreeNarrowed(t, d, m)
	}
	for _, raw := range raws {
		env, err := events.Decode(raw)
		if err != nil {
			t.Fatal(err)
		}
		p, err := d.DecodePayload(env.Kind, env.Data)
		if err != nil {
			t.Fatal(err)
		}
		if sp, _ := env.Payload(); !reflect.DeepEqual(p, sp) {
			t.Fatalf("DecodePayload narrowed %s", env.Kind)
		}
	}
}

// Narrowing skips the check of values, not of form: a narrowed call.finished
// with a value the strict decoder refuses is read (its kept fields right),
// the same bytes with an escaped string or a fraction are not.
func TestNarrowedDecoderChecksFormOnly(t *testing.T) {
	var raw []byte
	for _, r := range sealExamples(t) {
		if events.KindIs(r, "call.finished") {
			raw = r
		}
	}
	badValue := bytes.Replace(raw, []byte(`"outcome":"`), []byte(`"outcome":"x`), 1)
	if bytes.Equal(badValue, raw) {
		t.Fatalf("example changed shape: %s", raw)
	}
	if _, err := events.Decode(badValue); err == nil {
		t.Fatal("strict decoder accepted an unknown outcome")
	}
	d := narrowedDecoder(t)
	var h events.Header
	p, err := d.Decode(badValue, &h)
	if err != nil {
		t.Fatalf("narrowed Decoder checked a value it does not keep: %v", err)
	}
	if f := p.(*events.CallFinished); f.Outcome != "" || f.CallID != "" || h.Kind != "call.finished" {
		t.Fatalf("kept fields it was not asked for: %+v", f)
	}
	var full events.Decoder
	if _, err := full.Decode(badValue, &h); err == nil {
		t.Fatal("un-narrowed Decoder accepted an unknown outcome")
	}
	for _, bad := range [][]byte{
		bytes.Replace(raw, []byte(`"outcome":"`), []byte(`"outcome":"\u0041`), 1),
		bytes.Replace(raw, []byte(`"duration_ns":`), []byte(`"duration_ns":1.5,"x":`), 1),
	} {
		if _, err := d.Decode(bad, &h); err == nil {
			t.Fatalf("narrowed Decoder accepted a non-canonical form: %s", bad)
		}
	}
}

// Only refuses what it cannot narrow, and leaves the Decoder unchanged.
func TestOnlyRefusesUnknown(t *testing.T) {
	var d events.Decoder
	for _, tc := range []struct {
		kind   events.Kind
		fields []string
	}{{"no.such", nil}, {"call.finished", []string{"no_such_field"}}} {
		if err := d.Only(tc.kind, tc.fields...); !errors.Is(err, events.ErrInvalid) {
			t.Fatalf("Only(%s, %v) = %v", tc.kind, tc.fields, err)
		}
	}
	for _, raw := range sealExamples(t) {
		agree(t, &d, raw, true)
	}
}

// FuzzNarrowedDecoderMatchesStrict is the twin property of a narrowed
// Decoder (agreeNarrowed) on mutated canonical events, warm and cold.
func FuzzNarrowedDecoderMatchesStrict(f *testing.F) {
	examples := sealExamples(f)
	for _, raw := range append(examples, mutants(f)...) {
		f.Add(raw)
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		agreeNarrowed(t, narrowedDecoder(t), raw)
		d := narrowedDecoder(t)
		for _, ex := range examples {
			agreeNarrowed(t, d, ex)
		}
		agreeNarrowed(t, d, raw)
	})
}

// Random single-byte mutations of every example hold both Decoders (plain
// and narrowed, warm) to their twin properties: a fixed-seed complement
// to the fuzz targets that runs with the tests.
func TestDecodersOnRandomMutations(t *testing.T) {
	examples := sealExamples(t)
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []byte(`"\,:{}[]0123456789-.eEabfAZ _<>&` + "\x00\x7f\xff")
	var plain events.Decoder
	narrowed := narrowedDecoder(t)
	for range 20_000 {
		raw := bytes.Clone(examples[rng.IntN(len(examples))])
		pos := rng.IntN(len(raw))
		c := alphabet[rng.IntN(len(alphabet))]
		switch rng.IntN(3) {
		case 0:
			raw[pos] = c
		case 1:
			raw = append(raw[:pos], append([]byte{c}, raw[pos:]...)...)
		default:
			raw = append(raw[:pos], raw[pos+1:]...)
		}
		agree(t, &plain, raw, false)
		agreeNarrowed(t, narrowed, raw)
	}
	for _, ex := range examples { // the caches still give the right answers
		agree(t, &plain, ex, true)
		agreeNarrowed(t, narrowed, ex)
	}
}
