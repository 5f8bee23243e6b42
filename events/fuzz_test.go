package events_test

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/events"
)

// FuzzDecode feeds arbitrary bytes to Decode: it must never panic, must
// refuse anything over MaxEventBytes, and whatever it accepts must re-encode
// to exactly the same bytes (the canonical form is a fixed point).
func FuzzDecode(f *testing.F) {
	d := events.Draft{Activation: "act-1", Session: "s", Server: "srv",
		Payload: &events.CallFinished{CallID: "c1", Tool: "echo", Outcome: "ok", ArgsSHA256: digestA, ResultSHA256: digestB}}
	p, _ := events.Prepare(d)
	_, raw := events.Seal(p, 3, [16]byte{1}, t0, events.Hash{})
	f.Add(raw)
	f.Add([]byte(`{"seq":1}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		env, err := events.Decode(b)
		if err != nil {
			if !errors.Is(err, events.ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
			}
			return
		}
		if len(b) > events.MaxEventBytes {
			t.Fatalf("accepted %d bytes", len(b))
		}
		if !bytes.Equal(env.AppendCanonical(nil, true), b) {
			t.Fatalf("accepted non-canonical bytes")
		}
	})
}

// FuzzParseInput feeds arbitrary lines to ParseInput and everything it
// accepts through Prepare: acceptance by one implies acceptance by the
// other (the input form and the append path agree).
func FuzzParseInput(f *testing.F) {
	f.Add([]byte(`{"kind":"lease.terminated","activation":"a","data":{"reason":"revoked"}}`))
	f.Add([]byte(`{"kind":"http.redirect","data":{"ref":"r","hop":1,"hop_ref":"h","status":307,"origin":"https://x","same_origin":true}}`))
	f.Add([]byte(`{"kind":"guardian.receipt","data":{"helper_version":"1","target_pid":5,"reaped":true,"exit_code":0,"eof_grace_ns":1,"helper_exit_code":0,"descendants_seen":[7]}}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		d, err := events.ParseInput(line)
		if err != nil {
			if !errors.Is(err, events.ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
			}
			return
		}
		p, err := events.Prepare(d)
		if err != nil {
			t.Fatalf("ParseInput accepted what Prepare refuses: %v", err)
		}
		if len(p.Data) > events.MaxDataBytes {
			t.Fatalf("prepared %d bytes", len(p.Data))
		}
		env, raw := events.Seal(p, 1, [16]byte{}, t0, events.Hash{})
		if _, err := events.Decode(raw); err != nil {
			t.Fatalf("sealed event does not decode: %v (%s)", err, raw)
		}
		_ = env
	})
}

// FuzzPrepareRoundTrip builds payloads from Go values (the runtime's path,
// which bypasses JSON decoding) with arbitrary strings and times: whatever
// Prepare accepts must seal into bytes that Decode accepts. An event that
// is acknowledged but can never be read back would break the log forever.
func FuzzPrepareRoundTrip(f *testing.F) {
	f.Add("https://x.example", "GET", "request", int64(0))
	f.Add("https://x\xff.example", "GET", "request", int64(1<<62))
	f.Add("o", "POST", "sse", int64(-1<<62))
	f.Fuzz(func(t *testing.T, origin, method, scope string, nanos int64) {
		at := events.At(time.Unix(0, nanos).AddDate(int(nanos%20000), 0, 0))
		payloads := []events.Payload{
			&events.HTTPRegistered{Ref: "r1", Scope: scope, Method: events.HTTPMethod(method), Origin: origin},
			&events.GuardianSignal{TargetPID: 7, Signal: "TERM", At: at},
			&events.GuardianReceipt{HelperVersion: origin, TargetPID: 7, Signal: scope, KillSentAt: at},
			&events.RequestDispatched{Handle: "h", WireID: origin},
		}
		for _, pl := range payloads {
			p, err := events.Prepare(events.Draft{Activation: "a", Payload: pl})
			if err != nil {
				continue
			}
			_, raw := events.Seal(p, 1, [16]byte{}, t0, events.Hash{})
			if _, err := events.Decode(raw); err != nil {
				t.Fatalf("%s accepted by Prepare but its sealed bytes do not decode: %v", pl.Kind(), err)
			}
		}
	})
}
