package projector_test

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/projector"
	"github.com/leaseledger/leaseledger/projector/internal/eventgen"
	"pgregory.net/rapid"
)

// payloadEvent is a sealed event with the draft payload it was sealed from.
type payloadEvent struct {
	sealed
	payload events.Payload
}

// genPayloadLog is genLog keeping each draft's payload. Some drafts'
// instants are moved to another zone with a monotonic reading (as
// time.Now gives): the canonical bytes are the same, the Go values not.
func genPayloadLog(t *rapid.T) []payloadEvent {
	n := rapid.IntRange(0, 300).Draw(t, "n")
	c := eventgen.NewChain(t0)
	zone := time.FixedZone("x", 5*3600+1800)
	var out []payloadEvent
	add := func(d events.Draft) {
		if rapid.Bool().Draw(t, "rezone") {
			for _, ip := range instantFields(d.Payload) {
				if *ip != nil {
					mono := time.Now()
					*ip = &events.Instant{Time: (*ip).In(zone).Add(mono.Sub(mono))}
				}
			}
		}
		env, raw := c.Seal(d)
		out = append(out, payloadEvent{sealed{env, raw}, d.Payload})
	}
	for i := range n {
		if rapid.IntRange(0, 9).Draw(t, "block") < 6 {
			add(genDraft(t))
			continue
		}
		for _, d := range eventgen.ConfirmedRequest("act-0", fmt.Sprintf("b%d", i), "request") {
			add(d)
		}
	}
	return out
}

// instantFields returns the address of every *events.Instant field of p.
func instantFields(p events.Payload) []**events.Instant {
	v := reflect.ValueOf(p).Elem()
	var out []**events.Instant
	for i := range v.NumField() {
		if f := v.Field(i); f.Type() == reflect.TypeFor[*events.Instant]() {
			out = append(out, f.Addr().Interface().(**events.Instant))
		}
	}
	return out
}

// scribble overwrites, in place, everything p points to: its instants and
// the elements of its int and string lists (a decision's policies).
func scribble(p events.Payload) {
	for _, ip := range instantFields(p) {
		if *ip != nil {
			(*ip).Time = time.Date(2001, 2, 3, 4, 5, 6, 7, time.UTC)
		}
	}
	v := reflect.ValueOf(p).Elem()
	for i := range v.NumField() {
		if f := v.Field(i); f.Kind() == reflect.Slice && f.Type().Elem().Kind() == reflect.Int {
			for j := range f.Len() {
				f.Index(j).SetInt(-7)
			}
		}
		if f := v.Field(i); f.Kind() == reflect.Slice && f.Type().Elem().Kind() == reflect.String {
			for j := range f.Len() {
				f.Index(j).SetString("scribbled")
			}
		}
	}
}

// TestApplyPayloadTwin: for random logs, the state built by ApplyPayload
// from the draft payloads (BeforeAck's path) serialises byte-identically to
// the state built by ApplyRaw from the stored bytes (replay's path) and by
// Apply from the envelopes, and their reports agree.
func TestApplyPayloadTwin(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		log := genPayloadLog(t)
		viaPayload, viaRaw, viaEnv := projector.New(), projector.New(), projector.New()
		for _, e := range log {
			if err := viaPayload.ApplyPayload(&e.env, e.payload); err != nil {
				t.Fatalf("ApplyPayload seq %d: %v", e.env.Seq, err)
			}
			if err := viaRaw.ApplyRaw(e.raw); err != nil {
				t.Fatalf("ApplyRaw seq %d: %v", e.env.Seq, err)
			}
			if err := viaEnv.Apply(&e.env); err != nil {
				t.Fatalf("Apply seq %d: %v", e.env.Seq, err)
			}
		}
		got, want := mustMarshal(t, viaPayload), mustMarshal(t, viaRaw)
		if !bytes.Equal(got, want) {
			t.Fatalf("payload path differs from replay:\n%s\n%s", got, want)
		}
		if env := mustMarshal(t, viaEnv); !bytes.Equal(got, env) {
			t.Fatalf("payload path differs from Apply:\n%s\n%s", got, env)
		}
		for _, id := range viaRaw.ActivationIDs() {
			a, _ := viaPayload.Report(id)
			b, _ := viaRaw.Report(id)
			if !reflect.DeepEqual(a, b) {
				t.Fatalf("report %s differs:\n%+v\n%+v", id, a, b)
			}
		}
	})
}

// TestApplyPayloadKeepsNoReference: once ApplyPayload returned, the
// payload is its owner's again: overwriting everything it points to (its
// instants, its int lists) changes nothing of the state.
func TestApplyPayloadKeepsNoReference(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		log := genPayloadLog(t)
		s := projector.New()
		for _, e := range log {
			if err := s.ApplyPayload(&e.env, e.payload); err != nil {
				t.Fatalf("ApplyPayload seq %d: %v", e.env.Seq, err)
			}
		}
		before := mustMarshal(t, s)
		for _, e := range log {
			scribble(e.payload)
		}
		if after := mustMarshal(t, s); !bytes.Equal(after, before) {
			t.Fatalf("the state changed with its payloads:\n%s\n%s", after, before)
		}
	})
}

// TestApplyPayloadRefuses: a payload of another kind than the envelope's,
// or none, is refused with ErrDecode and the state is unchanged; an event
// out of order with *SeqError.
func TestApplyPayloadRefuses(t *testing.T) {
	c := eventgen.NewChain(t0)
	d := eventgen.D("act-0", &events.LeaseAcquired{Fingerprint: eventgen.Digest, DurationNS: 5})
	env, _ := c.Seal(d)
	s := projector.New()
	for _, p := range []events.Payload{nil, &events.LeaseTerminated{Reason: "revoked"}} {
		if err := s.ApplyPayload(&env, p); !errors.Is(err, projector.ErrDecode) {
			t.Fatalf("payload %T: %v, want ErrDecode", p, err)
		}
		if s.Seq() != 0 {
			t.Fatalf("state moved to seq %d", s.Seq())
		}
	}
	if err := s.ApplyPayload(&env, d.Payload); err != nil {
		t.Fatal(err)
	}
	if err := s.ApplyPayload(&env, d.Payload); !errors.Is(err, projector.ErrOutOfOrder) {
		t.Fatalf("again: %v, want ErrOutOfOrder", err)
	}
}

// ExampleState_ApplyPayload applies an event with the payload it was
// written from, as the live projection does for the ledger's own appends.
func ExampleState_ApplyPayload() {
	d := eventgen.D("act-1", &events.LeaseAcquiring{KeySession: "s-1", Fingerprint: eventgen.Digest})
	env, _ := eventgen.NewChain(t0).Seal(d)
	s := projector.New()
	if err := s.ApplyPayload(&env, d.Payload); err != nil {
		fmt.Println(err)
		return
	}
	a, _ := s.Activation("act-1")
	fmt.Println(s.Seq(), a.ID, a.Events)
	// Output: 1 act-1 1
}

// BenchmarkBeforeAckApply compares, in one run, the live projection's two
// ways of applying a committed event of eventgen.Workload: decoding its
// payload from the envelope (Apply, what BeforeAck did before) and taking
// the draft's payload (ApplyPayload). Compare their ns/event.
func BenchmarkBeforeAckApply(b *testing.B) {
	drafts := eventgen.Workload(20000, 200)
	c := eventgen.NewChain(t0)
	envs := make([]events.Envelope, len(drafts))
	for i, d := range drafts {
		envs[i], _ = c.Seal(d)
	}
	for _, mode := range []string{"decode", "payload"} {
		b.Run(mode, func(b *testing.B) {
			for b.Loop() {
				s := projector.New()
				for i := range envs {
					var err error
					if mode == "payload" {
						err = s.ApplyPayload(&envs[i], drafts[i].Payload)
					} else {
						err = s.Apply(&envs[i])
					}
					if err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(envs)), "ns/event")
		})
	}
}
