package projector_test

import (
	"bytes"
	"reflect"
	"strings"
	"testing"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/projector"
	"github.com/leaseledger/leaseledger/projector/internal/eventgen"
)

// callReason returns the verdict's call_outcome_unknown reason, "" when none.
func callReason(s *projector.State, a string) string {
	_, rs, _ := s.Verdict(a)
	for _, r := range rs {
		if strings.HasPrefix(r, "call_outcome_unknown: ") {
			return r
		}
	}
	return ""
}

// serve's recovery records lease.terminated{host_lost}, then session.ended,
// which drops the terminated lease from the table: the activation still
// says its admitted call's outcome is lost, live, by replay and from a
// snapshot alike. While the lease is live the call is running.
func TestCallOutcomeUnknownSurvivesSessionEnd(t *testing.T) {
	a := "act-1"
	ds := []events.Draft{
		d(a, &events.LeaseAcquiring{KeySession: "s-1", Fingerprint: eventgen.Digest}),
		d(a, &events.LeaseChildStarted{PID: 10, GuardianPID: 11, Cleanup: events.CleanupVerified}),
		d(a, &events.LeaseListingPinned{ToolCount: 1, Pages: 1, ListingBytes: 10, ListingDigest: eventgen.Digest}),
		d(a, &events.LeaseAcquired{Fingerprint: eventgen.Digest, DurationNS: 1000}),
		d(a, &events.CallAdmitted{CallID: "c1", Tool: "echo", Digest: eventgen.Digest}),
	}
	f := newFeed(t)
	f.apply(ds...)
	if r := callReason(f.s, a); !strings.HasPrefix(r, "call_outcome_unknown: 1 admitted call(s) with no call.finished: 1 running, 0 lost") {
		t.Fatalf("live lease: reason %q", r)
	}
	tail := []events.Draft{d(a, &events.LeaseTerminated{Reason: "host_lost"}), sessionEnded("s-1")}
	f.apply(tail...)
	if _, ok := f.s.Report(a); !ok {
		t.Fatal("no report")
	}
	if rep, _ := f.s.Report(a); rep.Lease != nil {
		t.Fatalf("the terminated lease is still in the table after its session's end: %+v", rep.Lease)
	}
	if r := callReason(f.s, a); !strings.HasPrefix(r, "call_outcome_unknown: 1 admitted call(s) with no call.finished: 0 running, 1 lost") {
		t.Fatalf("after host_lost and session.ended: reason %q", r)
	}

	// Replay of the stored bytes, and a snapshot taken between the
	// termination and the session's end, agree with live.
	c := eventgen.NewChain(t0)
	replay, head := projector.New(), projector.New()
	var envs []events.Envelope
	for i, x := range append(ds, tail...) {
		env, raw := c.Seal(x)
		envs = append(envs, env)
		if err := replay.ApplyRaw(raw); err != nil {
			t.Fatal(err)
		}
		if i < len(ds)+1 {
			if err := head.ApplyRaw(raw); err != nil {
				t.Fatal(err)
			}
		}
	}
	want := mustMarshal(t, f.s)
	if got := mustMarshal(t, replay); !bytes.Equal(got, want) {
		t.Fatalf("replay differs from live:\n%s\n%s", got, want)
	}
	restored, err := projector.Unmarshal(mustMarshal(t, head))
	if err != nil {
		t.Fatal(err)
	}
	if err := restored.Apply(&envs[len(envs)-1]); err != nil {
		t.Fatal(err)
	}
	if got := mustMarshal(t, restored); !bytes.Equal(got, want) {
		t.Fatalf("snapshot + tail differs from live:\n%s\n%s", got, want)
	}
	for _, s := range []*projector.State{replay, restored} {
		x, _ := s.Report(a)
		y, _ := f.s.Report(a)
		if !reflect.DeepEqual(x, y) {
			t.Fatalf("report differs:\n%+v\n%+v", x, y)
		}
	}
}

// An outcome recorded after its lease's termination (late) takes the call
// off the lost count; a call finished before the end is never counted.
func TestCallFinishedBeforeOrAfterLeaseEnd(t *testing.T) {
	a := "act-1"
	f := newFeed(t)
	f.apply(d(a, &events.LeaseAcquiring{KeySession: "s-1", Fingerprint: eventgen.Digest}),
		d(a, &events.LeaseAcquired{Fingerprint: eventgen.Digest, DurationNS: 1000}),
		d(a, &events.CallAdmitted{CallID: "c1", Tool: "echo", Digest: eventgen.Digest}),
		d(a, &events.CallAdmitted{CallID: "c2", Tool: "echo", Digest: eventgen.Digest}),
		d(a, &events.CallFinished{CallID: "c1", Tool: "echo", Outcome: events.CallOK, ArgsSHA256: eventgen.Digest}),
		d(a, &events.LeaseTerminated{Reason: "host_lost"}))
	if r := callReason(f.s, a); !strings.Contains(r, "0 running, 1 lost") {
		t.Fatalf("reason %q", r)
	}
	f.apply(d(a, &events.CallFinished{CallID: "c2", Tool: "echo", Outcome: events.CallOK, ArgsSHA256: eventgen.Digest}),
		sessionEnded("s-1"))
	if r := callReason(f.s, a); r != "" {
		t.Fatalf("every call has its outcome, reason %q", r)
	}
}
