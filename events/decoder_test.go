package events_test

import (
	"bytes"
	"os"
	"reflect"
	"testing"

	"github.com/leaseledger/leaseledger/events"
)

// sealExamples seals every line of examples/events.jsonl (one per input
// kind) and then a host.bound (SystemOnly: never an input line) into a
// chain, as the ledger would store it: one event per kind.
func sealExamples(t testing.TB) [][]byte {
	t.Helper()
	b, err := os.ReadFile("../examples/events.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	var drafts []events.Draft
	for i, line := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
		d, err := events.ParseInput(line)
		if err != nil {
			t.Fatalf("example %d: %v", i, err)
		}
		drafts = append(drafts, d)
	}
	drafts = append(drafts, events.Draft{Payload: &events.HostBound{Host: "host-eu-1"}})
	var out [][]byte
	var prev events.Hash
	for i, d := range drafts {
		p, err := events.Prepare(d)
		if err != nil {
			t.Fatalf("example %d: %v", i, err)
		}
		env, raw := events.Seal(p, events.Seq(i+1), [16]byte{byte(i)}, t0, prev)
		prev = env.Hash
		out = append(out, raw)
	}
	return out
}

// agree checks the twin property on raw: when the strict decoder accepts
// it, the fast path either declines (wantFast false) or yields the same
// header and payload; when the strict decoder refuses it, so does the
// Decoder as a whole.
func agree(t testing.TB, d *events.Decoder, raw []byte, wantFast bool) {
	t.Helper()
	env, strictErr := events.Decode(raw)
	h, p, fast := d.FastForTest(raw)
	if strictErr != nil {
		var h2 events.Header
		if _, err := d.Decode(raw, &h2); err == nil {
			t.Fatalf("Decoder accepted bytes the strict decoder refuses (%v): %q", strictErr, raw)
		}
		return
	}
	if wantFast && !fast {
		t.Fatalf("fast path declined canonical bytes: %s", raw)
	}
	if !fast {
		return
	}
	want := events.Header{Seq: env.Seq, Time: env.Time, Kind: env.Kind, Activation: env.Activation, Session: env.Session, Server: env.Server}
	if h != want {
		t.Fatalf("headers differ:\nfast   %+v\nstrict %+v", h, want)
	}
	sp, err := env.Payload()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(p, sp) {
		t.Fatalf("payloads differ on %s:\nfast   %#v\nstrict %#v", env.Kind, p, sp)
	}
}

// The fast decoder and the strict one agree on every kind, and the fast
// path takes every canonical example (otherwise it would be a slow path).
func TestDecoderMatchesStrictOnEveryKind(t *testing.T) {
	raws := sealExamples(t)
	if len(raws) != len(events.Kinds()) {
		t.Fatalf("%d examples for %d kinds", len(raws), len(events.Kinds()))
	}
	var d events.Decoder
	for range 2 { // the second pass hits the caches (interned names, scratch payloads, day)
		for _, raw := range raws {
			agree(t, &d, raw, true)
		}
	}
}

// Bytes the fast path does not read exactly (an escaped string) fall back
// to the strict decoder, with the same result.
func TestDecoderFallsBackToStrict(t *testing.T) {
	p, err := events.Prepare(events.Draft{Activation: "act-1",
		Payload: &events.HTTPRegistered{Ref: "r", Scope: "request", Method: "GET", Origin: "https://a<b>&c.example"}})
	if err != nil {
		t.Fatal(err)
	}
	env, raw := events.Seal(p, 1, [16]byte{1}, t0, events.Hash{})
	if !bytes.Contains(raw, []byte(`\u003c`)) {
		t.Fatalf("expected an escaped origin: %s", raw)
	}
	var d events.Decoder
	if _, _, fast := d.FastForTest(raw); fast {
		t.Fatal("fast path read an escaped string")
	}
	var h events.Header
	got, err := d.Decode(raw, &h)
	if err != nil {
		t.Fatal(err)
	}
	if h.Seq != env.Seq || h.Activation != "act-1" || got.(*events.HTTPRegistered).Origin != "https://a<b>&c.example" {
		t.Fatalf("fallback decoded %+v %#v", h, got)
	}
	if _, err := d.Decode([]byte(`{"seq":1}`), &h); err == nil {
		t.Fatal("Decoder accepted garbage")
	}
}

// mutants are canonical events altered in ways the strict decoder refuses
// and a careless fast path would read: a leading empty object in data,
// bytes encoding/json escapes, a lowercase ULID, invalid UTF-8.
func mutants(t testing.TB) [][]byte {
	var raw []byte // the first example with a free-text field
	for _, r := range sealExamples(t) {
		if bytes.Contains(r, []byte(`"origin":"`)) {
			raw = r
			break
		}
	}
	var out [][]byte
	swap := func(old, new string) {
		if m := bytes.Replace(raw, []byte(old), []byte(new), 1); !bytes.Equal(m, raw) {
			out = append(out, m)
		}
	}
	swap(`"data":{`, `"data":{},`)
	swap(`"data":{"`, `"data":{}"`)
	swap(`"origin":"`, `"origin":"<&>`)
	swap(`"origin":"`, "\"origin\":\"\x01")
	swap(`"origin":"`, "\"origin\":\"\u2028")
	swap(`"origin":"`, "\"origin\":\"\xff")
	i := bytes.Index(raw, []byte(`"id":"`)) + len(`"id":"`)
	lower := bytes.Clone(raw)
	copy(lower[i:], bytes.ToLower(raw[i:i+26]))
	if !bytes.Equal(lower, raw) {
		out = append(out, lower)
	}
	if len(out) < 6 {
		t.Fatalf("only %d mutants: the first example changed shape", len(out))
	}
	return out
}

// The mutants are refused by the strict decoder and by the Decoder alike.
func TestDecoderRefusesWhatStrictRefuses(t *testing.T) {
	var d events.Decoder
	for _, m := range mutants(t) {
		if _, err := events.Decode(m); err == nil {
			t.Fatalf("strict decoder accepted mutant %q", m)
		}
		agree(t, &d, m, false)
	}
}

// FuzzDecoderMatchesStrict mutates canonical events: whatever the strict
// decoder accepts, the fast path declines or reads identically, and the
// Decoder never accepts what the strict decoder refuses. It never panics.
func FuzzDecoderMatchesStrict(f *testing.F) {
	for _, raw := range append(sealExamples(f), mutants(f)...) {
		f.Add(raw)
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		var d events.Decoder
		agree(t, &d, raw, false)
	})
}

// FuzzWarmDecoderMatchesStrict is the same property for a Decoder whose
// caches (interned names, last identities, cached day, scratch payloads)
// are warm: every example is decoded first, then the input.
func FuzzWarmDecoderMatchesStrict(f *testing.F) {
	examples := sealExamples(f)
	for _, raw := range append(examples, mutants(f)...) {
		f.Add(raw)
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		var d events.Decoder
		for _, ex := range examples {
			agree(t, &d, ex, true)
		}
		agree(t, &d, raw, false)
		for _, ex := range examples { // and the caches still give the right answers after it
			agree(t, &d, ex, true)
		}
	})
}

// The fast path reads a decision's policy ids (a list of strings) exactly
// as the strict decoder does, and declines a list with an escaped string.
func TestDecoderPolicyLists(t *testing.T) {
	const pd = "5d1e0f8a0c1b9e7d2f4a6c8e0b1d3f5a7c9e1b3d5f7a9c1e3b5d7f9a1c3e5b7d"
	cases := []struct {
		payload  events.Payload
		wantFast bool
	}{
		{&events.CallAdmitted{CallID: "c-1", Tool: "search", Digest: pd, Policies: []string{"readers-read-only", "p1"}, PolicyDigest: pd}, true},
		{&events.CallRefused{CallID: "c-2", Tool: "delete", Reason: events.RefusedPolicy, PolicyDigest: pd}, true},
		{&events.AccessDecided{Action: events.AccessGetPrompt, TargetSHA256: pd, Allowed: true, Policies: []string{"p0"}, PoliciesOmitted: 3, PolicyDigest: pd}, true},
	}
	var prev events.Hash
	var d events.Decoder
	for i, c := range cases {
		p, err := events.Prepare(events.Draft{Session: "s-1", Server: "github", Payload: c.payload})
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		env, raw := events.Seal(p, events.Seq(i+1), [16]byte{byte(i)}, t0, prev)
		prev = env.Hash
		agree(t, &d, raw, c.wantFast)
	}
}
