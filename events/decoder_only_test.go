package events_test

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/leaseledger/leaseledger/events"
)

// narrowing is what the tests narrow: the projection's reads of its most
// frequent kinds, and a kind narrowed to nothing.
var narrowing = map[events.Kind][]string{
	"call.admitted":  nil,
	"call.finished":  {"killed_on_cancel", "duration_ns"},
	"http.completed": {"ref", "status"},
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

// keepOnly returns a copy of p with every field not named in kept zeroed.
func keepOnly(p events.Payload, kept []string) events.Payload {
	v := reflect.New(reflect.TypeOf(p).Elem())
	v.Elem().Set(reflect.ValueOf(p).Elem())
	s := v.Elem()
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
		if _, narrowed := narrowing[h.Kind]; err == nil && !narrowed {
			t.Fatalf("narrowed Decoder accepted bytes of a kind it does not narrow that the strict decoder refuses (%v): %q", strictErr, raw)
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
