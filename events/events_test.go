package events_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/events"
	"github.com/oklog/ulid/v2"
)

var (
	digestA = strings.Repeat("ab", 32)
	digestB = strings.Repeat("cd", 32)
	t0      = time.Date(2026, 11, 30, 10, 0, 0, 123456789, time.UTC)
)

func sealOne(t *testing.T, d events.Draft, seq uint64, prev events.Hash) (events.Envelope, []byte) {
	t.Helper()
	p, err := events.Prepare(d)
	if err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	id := ulid.MustNew(ulid.Timestamp(t0), bytes.NewReader(make([]byte, 16)))
	return events.Seal(p, events.Seq(seq), id, t0, prev)
}

func TestSealDecodeRoundTrip(t *testing.T) {
	d := events.Draft{Activation: "act-1", Session: "s-1", Server: "github",
		Payload: &events.LeaseAcquiring{KeySession: "s-1", Fingerprint: digestA, Shared: false}}
	env, raw := sealOne(t, d, 1, events.Hash{})
	want := `{"seq":1,"id":"` + env.ID.String() + `","time":"2026-11-30T10:00:00.123456789Z","kind":"lease.acquiring","v":1,"activation":"act-1","session":"s-1","server":"github","data":{"key_session":"s-1","fingerprint":"` + digestA + `","shared":false},"prev":"` + strings.Repeat("0", 64) + `","hash":"` + env.Hash.String() + `"}`
	if string(raw) != want {
		t.Fatalf("canonical bytes\n got %s\nwant %s", raw, want)
	}
	got, err := events.Decode(raw)
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	if !got.CheckHash() || got.Hash != env.Hash || got.Seq != 1 || got.Kind != "lease.acquiring" {
		t.Fatalf("decoded envelope differs: %+v", got)
	}
	if got.Subject() != "leaseledger.events.lease.acquiring.act-1" {
		t.Fatalf("subject %q", got.Subject())
	}
	// The chain rule: SHA-256(prev ‖ canonical bytes without hash).
	body := got.AppendCanonical(nil, false)
	if events.ChainHash(events.Hash{}, body) != got.Hash {
		t.Fatal("hash is not SHA-256(prev ‖ body)")
	}
}

func TestDecodeRefusesNonCanonical(t *testing.T) {
	d := events.Draft{Activation: "act-1", Payload: &events.LeaseTerminated{Reason: "revoked"}}
	_, raw := sealOne(t, d, 7, events.Hash{})
	cases := map[string][]byte{
		"extra space":    bytes.Replace(raw, []byte(`"seq":7`), []byte(`"seq": 7`), 1),
		"reordered":      bytes.Replace(raw, []byte(`{"seq":7,`), []byte(`{`), 1),
		"unknown field":  bytes.Replace(raw, []byte(`"v":1`), []byte(`"v":1,"x":2`), 1),
		"trailing data":  append(append([]byte{}, raw...), []byte(` {}`)...),
		"bad kind":       bytes.Replace(raw, []byte(`lease.terminated`), []byte(`lease.nope`), 1),
		"bad reason":     bytes.Replace(raw, []byte(`"revoked"`), []byte(`"Revoked!"`), 1),
		"reserved act":   bytes.Replace(raw, []byte(`"act-1"`), []byte(`"_"`), 1),
		"bad id":         bytes.Replace(raw, []byte(`"act-1"`), []byte(`"act 1"`), 1),
		"short time":     bytes.Replace(raw, []byte(`.123456789Z`), []byte(`.123Z`), 1),
		"v2":             bytes.Replace(raw, []byte(`"v":1`), []byte(`"v":2`), 1),
		"data spacing":   bytes.Replace(raw, []byte(`{"reason"`), []byte(`{ "reason"`), 1),
		"zero seq":       bytes.Replace(raw, []byte(`"seq":7`), []byte(`"seq":0`), 1),
		"negative seq":   bytes.Replace(raw, []byte(`"seq":7`), []byte(`"seq":-7`), 1),
		"not json":       []byte(`nope`),
		"empty":          nil,
		"uppercase hash": bytes.Replace(raw, []byte(`"prev":"00`), []byte(`"prev":"0A`), 1),
	}
	for name, b := range cases {
		if _, err := events.Decode(b); !errors.Is(err, events.ErrInvalid) {
			t.Errorf("%s: Decode error = %v, want ErrInvalid", name, err)
		}
	}
}

func TestPrepareRefusesInvalid(t *testing.T) {
	cases := map[string]events.Draft{
		"nil payload":     {},
		"bad activation":  {Activation: "a/b", Payload: &events.LeaseTerminated{Reason: events.TerminatedRevoked}},
		"long session":    {Session: strings.Repeat("s", 129), Payload: &events.LeaseTerminated{Reason: events.TerminatedRevoked}},
		"reserved act":    {Activation: "_", Payload: &events.LeaseTerminated{Reason: events.TerminatedRevoked}},
		"bad digest":      {Payload: &events.LeaseAcquired{Fingerprint: "xyz"}},
		"negative":        {Payload: &events.LeaseAcquired{Fingerprint: digestA, DurationNS: -1}},
		"bad enum":        {Payload: &events.CallFinished{CallID: "c1", Tool: "echo", Outcome: "maybe", ArgsSHA256: digestA}},
		"missing at":      {Payload: &events.GuardianSignal{TargetPID: 3, Signal: "TERM"}},
		"too many hops":   {Payload: &events.HTTPRedirect{Ref: "r", Hop: 4, HopRef: "h", Status: 307, Origin: "https://a"}},
		"too many pids":   {Payload: &events.GuardianReceipt{HelperVersion: "1", TargetPID: 1, DescendantsSeen: make([]int, events.MaxPIDList+1)}},
		"too long text":   {Payload: &events.HTTPRegistered{Ref: "r", Scope: "request", Method: "GET", Origin: strings.Repeat("o", events.MaxTextLen+1)}},
		"poison reason":   {Payload: &events.LeasePoisoned{CallID: "c", Reason: "other", Tool: "echo", ExpectedDigest: digestA}},
		"end reason":      {Payload: &events.LeaseTerminated{Reason: "forged"}},
		"refusal reason":  {Payload: &events.CallRefused{CallID: "c", Tool: "echo", Reason: "other"}},
		"phase active":    {Payload: &events.ConnectionPhase{Phase: events.PhaseActive}},
		"tool name space": {Payload: &events.CallAdmitted{CallID: "c", Tool: "ec ho", Digest: digestA}},
		"invalid utf-8":   {Payload: &events.HTTPRegistered{Ref: "r", Scope: "request", Method: "GET", Origin: "https://x\xff.example"}},
		"year 10000":      {Payload: &events.GuardianSignal{TargetPID: 3, Signal: "TERM", At: events.At(time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC))}},
		"before 1970":     {Payload: &events.GuardianReceipt{HelperVersion: "1", TargetPID: 1, KillSentAt: events.At(time.Date(1969, 1, 1, 0, 0, 0, 0, time.UTC))}},
	}
	for name, d := range cases {
		_, err := events.Prepare(d)
		if !errors.Is(err, events.ErrInvalid) {
			t.Errorf("%s: Prepare error = %v, want ErrInvalid", name, err)
		}
		var fe *events.FieldError
		if name != "nil payload" && !errors.As(err, &fe) {
			t.Errorf("%s: error %v carries no *FieldError", name, err)
		}
	}
}

func TestErrorsDoNotEchoValues(t *testing.T) {
	secret := "PROVIDER-SECRET-TEXT"
	for _, line := range []string{
		`{"kind":"lease.terminated","data":{"reason":"x","` + secret + `":1}}`,
		`{"kind":"lease.terminated","data":{"reason":` + secret + `}}`,
		`{"kind":"lease.terminated","` + secret + `":1,"data":{"reason":"x"}}`,
		`{"kind":"http.completed","data":{"ref":"r","status":"` + secret + `","outcome":"ok","body_bytes":0}}`,
	} {
		_, err := events.ParseInput([]byte(line))
		if err == nil || strings.Contains(err.Error(), secret) {
			t.Fatalf("ParseInput(%s): error %v must exist and not echo the input", line, err)
		}
	}
	_, err := events.ParseInput([]byte(`{"kind":"lease.terminated","activation":"` + secret + ` x","data":{"reason":"x"}}`))
	if err == nil || strings.Contains(err.Error(), secret) {
		t.Fatalf("error %v must exist and not echo the value", err)
	}
	_, err = events.Prepare(events.Draft{Payload: &events.LeaseRevoked{Reason: secret}})
	if err == nil || strings.Contains(err.Error(), secret) {
		t.Fatalf("error %v must exist and not echo the value", err)
	}
}

func TestParseInput(t *testing.T) {
	d, err := events.ParseInput([]byte(`{"kind":"call.refused","activation":"a1","session":"s1","server":"srv","data":{"call_id":"c1","tool":"echo","reason":"cancelled"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := d.Payload.(*events.CallRefused); !ok || p.Reason != "cancelled" || d.Server != "srv" {
		t.Fatalf("parsed %+v", d)
	}
	for _, bad := range []string{
		`{"kind":"call.refused","data":{"call_id":"c1","tool":"echo","reason":"cancelled","extra":1}}`,
		`{"kind":"call.refused","data":{"call_id":"c1","tool":"echo"}}`,
		`{"kind":"nope.nope","data":{}}`,
		`{"kind":"call.refused"}`,
		`{"kind":"call.refused","data":{"CALL_ID":"c1","tool":"echo","reason":"cancelled"}}`,
		`{"kind":"call.refused","data":{"call_id":"c1","tool":"echo","reason":null}}`,
		`{"kind":"connection.closed","data":{}}`,
		`{"kind":"connection.closed","data":null}`,
		`{"kind":"lease.acquire_failed","data":{"fingerprint":"","reason":"x","duration_ns":1}}`,
		`{"kind":"call.refused","data":{"call_id":"c1","tool":"echo","reason":"cancelled"}} trailing`,
	} {
		if _, err := events.ParseInput([]byte(bad)); !errors.Is(err, events.ErrInvalid) {
			t.Errorf("ParseInput(%s) = %v, want ErrInvalid", bad, err)
		}
	}
}

func TestKindsAreWellFormed(t *testing.T) {
	kinds := events.Kinds()
	if len(kinds) < 30 {
		t.Fatalf("only %d kinds registered", len(kinds))
	}
	families := map[string]bool{}
	for _, k := range kinds {
		if strings.Count(string(k), ".") != 1 || k.Family() == "" || k.Action() == "" {
			t.Errorf("kind %q is not <family>.<action>", k)
		}
		for _, r := range string(k) {
			if !(r == '.' || r == '_' || 'a' <= r && r <= 'z') {
				t.Errorf("kind %q has %q", k, r)
			}
		}
		families[k.Family()] = true
		p, err := events.New(k)
		if err != nil || p.Kind() != k {
			t.Errorf("New(%q) = %v, %v", k, p, err)
		}
	}
	for _, f := range []string{"lease", "call", "session", "request", "connection", "guardian", "http", "host"} {
		if !families[f] {
			t.Errorf("family %q has no kind", f)
		}
	}
}

func TestInstantEncoding(t *testing.T) {
	p := &events.GuardianSignal{TargetPID: 9, Signal: "KILL", At: events.At(time.Date(2026, 1, 2, 3, 4, 5, 6, time.FixedZone("x", 3600))), Alive: true}
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"at":"2026-01-02T02:04:05.000000006Z"`) {
		t.Fatalf("instant not canonical UTC: %s", b)
	}
}

func TestPayloadTooLarge(t *testing.T) {
	big := make([]int, events.MaxPIDList)
	for i := range big {
		big[i] = 1 << 30
	}
	// A receipt at its list bounds stays under MaxDataBytes: bounds compose.
	p := &events.GuardianReceipt{HelperVersion: "1", TargetPID: 1, DescendantsSeen: big, DescendantsKilled: big}
	if _, err := events.Prepare(events.Draft{Payload: p}); err != nil {
		t.Fatalf("receipt at its bounds refused: %v", err)
	}
	huge := []byte(`{"kind":"lease.terminated","data":{"reason":"` + strings.Repeat("a", events.MaxEventBytes) + `"}}`)
	if _, err := events.ParseInput(huge); !errors.Is(err, events.ErrTooLarge) {
		t.Fatalf("huge input: %v, want ErrTooLarge", err)
	}
}
