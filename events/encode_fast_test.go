package events

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// genString draws strings that exercise every escaping rule: plain
// identifiers and digests, HTML characters, quotes and backslashes,
// control characters, U+2028/U+2029, other Unicode and invalid UTF-8.
func genString() *rapid.Generator[string] {
	return rapid.OneOf(
		rapid.StringMatching(`[a-z0-9_.:/-]{0,40}`),
		rapid.StringMatching(`[0-9a-f]{64}`),
		rapid.SampledFrom([]string{"", "<", ">", "&", `"`, `\`, "\n", "\x00", "\x1f", "\x7f", "\u2028", "\u2029", "é", "\xff", "a\xc3", "verified", "ok"}),
		rapid.String(),
		rapid.Custom(func(t *rapid.T) string { return string(rapid.SliceOfN(rapid.Byte(), 0, 24).Draw(t, "bytes")) }),
	)
}

// genInstant draws nil, valid instants in any zone, and instants outside
// ValidTime (which encoding/json refuses).
func genInstant(t *rapid.T, label string) *Instant {
	switch rapid.IntRange(0, 3).Draw(t, label+"_case") {
	case 0:
		return nil
	case 1:
		sec := rapid.Int64Range(-80_000_000_000, 300_000_000_000).Draw(t, label+"_sec")
		return At(time.Unix(sec, rapid.Int64Range(0, 999_999_999).Draw(t, label+"_ns")))
	default:
		sec := rapid.Int64Range(0, 253_402_300_799).Draw(t, label+"_sec")
		zone := time.FixedZone("z", rapid.IntRange(-14*3600, 14*3600).Draw(t, label+"_zone"))
		return At(time.Unix(sec, rapid.Int64Range(0, 999_999_999).Draw(t, label+"_ns")).In(zone))
	}
}

// randomize sets every field of the payload v points to, or with keep
// only some of them, to drawn values.
func randomize(t *rapid.T, v reflect.Value, keep bool) {
	v = v.Elem()
	for i := range v.NumField() {
		f, name := v.Field(i), v.Type().Field(i).Name
		if keep && rapid.IntRange(0, 3).Draw(t, "change_"+name) != 0 {
			continue
		}
		switch {
		case f.Type() == reflect.TypeFor[*Instant]():
			f.Set(reflect.ValueOf(genInstant(t, name)))
		case f.Kind() == reflect.String:
			f.SetString(genString().Draw(t, name))
		case f.Kind() == reflect.Int || f.Kind() == reflect.Int64:
			f.SetInt(rapid.OneOf(rapid.Int64Range(-3, 3), rapid.Int64()).Draw(t, name))
		case f.Kind() == reflect.Bool:
			f.SetBool(rapid.Bool().Draw(t, name))
		case f.Type() == reflect.TypeFor[[]int]():
			switch rapid.IntRange(0, 2).Draw(t, name+"_case") {
			case 0:
				f.Set(reflect.Zero(f.Type()))
			case 1:
				f.Set(reflect.ValueOf([]int{}))
			default:
				f.Set(reflect.ValueOf(rapid.SliceOfN(rapid.Int(), 1, 8).Draw(t, name)))
			}
		case f.Type() == reflect.TypeFor[[]string]():
			switch rapid.IntRange(0, 2).Draw(t, name+"_case") {
			case 0:
				f.Set(reflect.Zero(f.Type()))
			case 1:
				f.Set(reflect.ValueOf([]string{}))
			default:
				f.Set(reflect.ValueOf(rapid.SliceOfN(genString(), 1, 8).Draw(t, name)))
			}
		default:
			t.Fatalf("field %s: no generator for %s", name, f.Type())
		}
	}
}

// Every kind's generated appender writes what encoding/json writes, byte
// for byte after any prefix, and fails exactly where encoding/json does.
func TestFastEncodersMatchEncodingJSON(t *testing.T) {
	for _, mk := range kindList {
		kind := mk().Kind()
		t.Run(string(kind), func(t *testing.T) {
			rapid.Check(t, func(t *rapid.T) {
				p := mk()
				randomize(t, reflect.ValueOf(p), false)
				prefix := []byte(rapid.StringMatching(`[a-z,{]{0,3}`).Draw(t, "prefix"))
				got, ok := p.(jsonAppender).appendJSON(bytes.Clone(prefix))
				want, err := json.Marshal(p)
				if ok != (err == nil) {
					t.Fatalf("appender ok=%v, encoding/json err=%v", ok, err)
				}
				if ok && (!bytes.HasPrefix(got, prefix) || !bytes.Equal(got[len(prefix):], want)) {
					t.Fatalf("appender wrote\n%q\nencoding/json\n%q", got, want)
				}
			})
		})
	}
}

// Prepare (generated appenders) and the encoding/json path agree on every
// result and every error, starting from each kind's valid example with
// some fields and identifiers redrawn.
func TestPrepareFastMatchesReflect(t *testing.T) {
	f, err := os.Open("../examples/events.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	examples := map[Kind][]byte{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var in Input
		if err := json.Unmarshal(sc.Bytes(), &in); err != nil {
			t.Fatal(err)
		}
		examples[in.Kind] = bytes.Clone(sc.Bytes())
	}
	for _, k := range InputKinds() {
		line, ok := examples[k]
		if !ok {
			t.Fatalf("no example of %s", k)
		}
		t.Run(string(k), func(t *testing.T) {
			rapid.Check(t, func(t *rapid.T) {
				d, err := ParseInput(line)
				if err != nil {
					t.Fatal(err)
				}
				randomize(t, reflect.ValueOf(d.Payload), true)
				if rapid.IntRange(0, 4).Draw(t, "ids") == 0 {
					d.Activation = genString().Draw(t, "activation")
				}
				fast, ferr := Prepare(d)
				slow, serr := prepare(d, false, MaxDataBytes)
				if (ferr == nil) != (serr == nil) || ferr != nil && (ferr.Error() != serr.Error() ||
					errors.Is(ferr, ErrInvalid) != errors.Is(serr, ErrInvalid) || errors.Is(ferr, ErrTooLarge) != errors.Is(serr, ErrTooLarge)) {
					t.Fatalf("fast err %v, encoding/json err %v", ferr, serr)
				}
				if !reflect.DeepEqual(fast, slow) && !(bytes.Equal(fast.Data, slow.Data) && bytes.Equal(fast.middle, slow.middle) &&
					fast.Kind == slow.Kind && fast.Activation == slow.Activation && fast.Session == slow.Session && fast.Server == slow.Server) {
					t.Fatalf("fast %+v\nencoding/json %+v", fast, slow)
				}
			})
		})
	}
}

// exampleDrafts parses every line of examples/events.jsonl.
func exampleDrafts(tb testing.TB) []Draft {
	tb.Helper()
	f, err := os.ReadFile("../examples/events.jsonl")
	if err != nil {
		tb.Fatal(err)
	}
	var drafts []Draft
	for line := range bytes.Lines(f) {
		d, err := ParseInput(bytes.TrimSpace(line))
		if err != nil {
			tb.Fatal(err)
		}
		drafts = append(drafts, d)
	}
	return drafts
}

// sameOutcome fails unless the generated-appender and encoding/json
// results of encodePrepared are equal: both errors with the same text and
// the same sentinels, or both equal Prepared values.
func sameOutcome(t *testing.T, what string, fast Prepared, ferr error, slow Prepared, serr error) {
	t.Helper()
	if (ferr == nil) != (serr == nil) || ferr != nil && (ferr.Error() != serr.Error() ||
		errors.Is(ferr, ErrInvalid) != errors.Is(serr, ErrInvalid) || errors.Is(ferr, ErrTooLarge) != errors.Is(serr, ErrTooLarge)) {
		t.Fatalf("%s: fast err %v, encoding/json err %v", what, ferr, serr)
	}
	if ferr == nil && (!bytes.Equal(fast.Data, slow.Data) || !bytes.Equal(fast.middle, slow.middle)) {
		t.Fatalf("%s: fast %+v\nencoding/json %+v", what, fast, slow)
	}
}

// Both encodings refuse a payload over the limit with the same
// ErrTooLarge error (a limit one byte under each example's payload) and
// accept it at exactly the limit; where the generated appender declines
// (an instant outside ValidTime, which Validate refuses before encoding,
// so only encodePrepared reaches it) the fast path returns encoding/json's
// error.
func TestEncodePreparedLimitAndFallback(t *testing.T) {
	for _, d := range exampleDrafts(t) {
		kind := d.Payload.Kind()
		full, err := json.Marshal(d.Payload)
		if err != nil {
			t.Fatal(err)
		}
		for _, limit := range []int{len(full) - 1, len(full)} {
			fast, ferr := encodePrepared(d, kind, true, limit)
			slow, serr := encodePrepared(d, kind, false, limit)
			sameOutcome(t, fmt.Sprintf("%s limit %d", kind, limit), fast, ferr, slow, serr)
			if tooBig := limit < len(full); tooBig != errors.Is(ferr, ErrTooLarge) {
				t.Fatalf("%s: %d bytes at limit %d: err %v", kind, len(full), limit, ferr)
			}
		}
	}
	bad := &GuardianSignal{At: At(time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC))}
	if _, ok := bad.appendJSON(nil); ok {
		t.Fatal("the appender took an instant outside ValidTime")
	}
	d := Draft{Payload: bad}
	fast, ferr := encodePrepared(d, bad.Kind(), true, MaxDataBytes)
	slow, serr := encodePrepared(d, bad.Kind(), false, MaxDataBytes)
	if !errors.Is(ferr, ErrInvalid) {
		t.Fatalf("fallback: err %v, want ErrInvalid", ferr)
	}
	sameOutcome(t, "fallback", fast, ferr, slow, serr)
}

// appendTime writes what AppendFormat(TimeLayout) writes, for any instant
// and zone, including years AppendFormat handles itself.
func TestAppendTimeTwin(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		tm := time.Unix(rapid.Int64Range(-70_000_000_000, 400_000_000_000).Draw(t, "sec"), rapid.Int64Range(0, 999_999_999).Draw(t, "ns")).
			In(time.FixedZone("z", rapid.IntRange(-14*3600, 14*3600).Draw(t, "zone")))
		if got, want := appendTime([]byte("x"), tm), tm.UTC().AppendFormat([]byte("x"), TimeLayout); !bytes.Equal(got, want) {
			t.Fatalf("appendTime %q, AppendFormat %q", got, want)
		}
	})
}

// Seal makes one allocation: the sealed bytes, sized up front.
func TestSealAllocs(t *testing.T) {
	p, err := Prepare(Draft{Activation: "act-1", Session: "s", Server: "srv",
		Payload: &CallFinished{CallID: "c1", Tool: "echo", Outcome: CallOK, ArgsSHA256: strings.Repeat("ab", 32), ResultSHA256: strings.Repeat("cd", 32)}})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	var raw []byte
	if n := testing.AllocsPerRun(100, func() { _, raw = Seal(p, Seq(1)<<62, [16]byte{1}, now, Hash{2}) }); n != 1 {
		t.Fatalf("Seal: %v allocations, want 1", n)
	}
	if e, _ := Decode(raw); !e.CheckHash() {
		t.Fatal("sealed event does not check")
	}
	if cap(raw) < len(raw) || cap(raw) > len(raw)+maxLeadingBytes {
		t.Fatalf("sealed %d bytes in a %d-byte buffer", len(raw), cap(raw))
	}
}

// An object with no member written (every field omitted) closes as {}.
func TestCloseJSONObjectEmpty(t *testing.T) {
	if got := closeJSONObject([]byte("x"), 1); string(got) != "x{}" {
		t.Fatalf("got %q", got)
	}
	if got := closeJSONObject([]byte(`x,"a":1`), 1); string(got) != `x{"a":1}` {
		t.Fatalf("got %q", got)
	}
}

// BenchmarkPrepare prepares one event of every input kind (each kind's
// example line) with the generated appenders and with the encoding/json
// path in the same run, and reports fast over reflect time per event
// (ratio-fast/reflect; below 1 is faster) and allocations of each.
func BenchmarkPrepare(b *testing.B) {
	drafts := exampleDrafts(b)
	run := func(fast bool) (time.Duration, float64) {
		var ms0, ms1 runtime.MemStats
		runtime.ReadMemStats(&ms0)
		start := time.Now()
		for range b.N {
			for _, d := range drafts {
				if _, err := prepare(d, fast, MaxDataBytes); err != nil {
					b.Fatal(err)
				}
			}
		}
		elapsed := time.Since(start)
		runtime.ReadMemStats(&ms1)
		return elapsed, float64(ms1.Mallocs-ms0.Mallocs) / float64(b.N*len(drafts))
	}
	var fastT, slowT time.Duration
	var fastA, slowA float64
	for range 3 { // interleaved
		t, a := run(true)
		fastT, fastA = fastT+t, a
		t, a = run(false)
		slowT, slowA = slowT+t, a
	}
	n := float64(3 * b.N * len(drafts))
	b.ReportMetric(float64(fastT)/n, "fast-ns/event")
	b.ReportMetric(float64(slowT)/n, "reflect-ns/event")
	b.ReportMetric(float64(fastT)/float64(slowT), "ratio-fast/reflect")
	b.ReportMetric(fastA, "fast-allocs/event")
	b.ReportMetric(slowA, "reflect-allocs/event")
}

// wrappedAdmitted embeds a catalogue payload and adds a field: it
// inherits CallAdmitted's Kind, Validate and generated appender.
type wrappedAdmitted struct {
	*CallAdmitted
	Note string `json:"note"`
}

// ownMarshalAdmitted embeds a catalogue payload and has its own
// MarshalJSON, which the generated appender would bypass.
type ownMarshalAdmitted struct{ *CallAdmitted }

func (ownMarshalAdmitted) MarshalJSON() ([]byte, error) { return []byte(`{"own":true}`), nil }

// Prepare refuses a payload whose Go type is not its kind's own type,
// naming the kind and the type it wants, instead of encoding only the
// embedded part.
func TestPrepareRefusesOtherTypes(t *testing.T) {
	admitted := func() *CallAdmitted {
		return &CallAdmitted{CallID: "call-1", Tool: "search", Digest: strings.Repeat("ab", 32)}
	}
	if _, err := Prepare(Draft{Payload: admitted()}); err != nil {
		t.Fatalf("own type refused: %v", err)
	}
	for _, p := range []Payload{wrappedAdmitted{CallAdmitted: admitted(), Note: "lost"}, ownMarshalAdmitted{admitted()}} {
		_, err := Prepare(Draft{Payload: p})
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "call.admitted") || !strings.Contains(err.Error(), "*events.CallAdmitted") {
			t.Errorf("%T: err %v, want ErrInvalid naming call.admitted and *events.CallAdmitted", p, err)
		}
	}
}
