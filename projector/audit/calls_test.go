package audit_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/projector/audit"
	"github.com/leaseledger/leaseledger/projector/internal/eventgen"
)

// leaseStart is a lease's acquisition up to ready, keyed by session s-1.
func leaseStart(a string) []events.Draft {
	return []events.Draft{
		d(a, &events.LeaseAcquiring{KeySession: "s-1", Fingerprint: eventgen.Digest}),
		d(a, &events.LeaseChildStarted{PID: 10, GuardianPID: 11, Cleanup: events.CleanupVerified}),
		d(a, &events.LeaseListingPinned{ToolCount: 1, Pages: 1, ListingBytes: 10, ListingDigest: eventgen.Digest}),
		d(a, &events.LeaseAcquired{Fingerprint: eventgen.Digest, DurationNS: 1000}),
	}
}

func admitted(a, call string) events.Draft {
	return d(a, &events.CallAdmitted{CallID: call, Tool: "echo", Digest: eventgen.Digest})
}

func finished(a, call string) events.Draft {
	return d(a, &events.CallFinished{CallID: call, Tool: "echo", Outcome: events.CallOK, DurationNS: 1,
		ArgsBytes: 2, ArgsSHA256: eventgen.Digest, ResultBytes: 2, ResultSHA256: eventgen.Digest})
}

// A host lost after a call was admitted and before its call.finished was
// durable leaves the call with no outcome: the audit lists it as outcome
// unknown and the verdict says so; it never shows an outcome.
func TestAuditCallOutcomeUnknown(t *testing.T) {
	ds := leaseStart("act-1")
	ds = append(ds, admitted("act-1", "c1"), finished("act-1", "c1"), admitted("act-1", "c2"), admitted("act-1", "c3"),
		finished("act-1", "c3"),
		// The next serve's recovery ends the lease of the host it replaced.
		d("act-1", &events.LeaseTerminated{Reason: "host_lost"}))
	out := seal(ds...).fold(t, "act-1", audit.Options{})
	if len(out.CallsOutcomeUnknown) != 1 || out.CallsOutcomeUnknownOmitted != 0 {
		t.Fatalf("outcome unknown: %+v (%d omitted)", out.CallsOutcomeUnknown, out.CallsOutcomeUnknownOmitted)
	}
	if u := out.CallsOutcomeUnknown[0]; u.CallID != "c2" || u.Tool != "echo" || u.Session != "s-1" || u.AdmittedSeq != 7 || u.State != audit.CallLost {
		t.Fatalf("unknown call: %+v", u)
	}
	if !hasReason(out.Report.Reasons, "call_outcome_unknown: 1 admitted call(s) with no call.finished: 0 running, 1 lost") {
		t.Fatalf("reasons: %q", out.Report.Reasons)
	}
	// Every call with its outcome: nothing listed, no such reason.
	ds = append(leaseStart("act-2"), admitted("act-2", "c1"), finished("act-2", "c1"))
	out = seal(ds...).fold(t, "act-2", audit.Options{})
	if len(out.CallsOutcomeUnknown) != 0 || out.CallsOutcomeUnknown == nil || hasReason(out.Report.Reasons, "call_outcome_unknown") {
		t.Fatalf("complete calls: %+v %q", out.CallsOutcomeUnknown, out.Report.Reasons)
	}
}

// The list is bounded by MaxUnknownCalls; the rest are counted, and a
// call finished beyond the bound is taken off the count.
func TestAuditCallOutcomeUnknownBounded(t *testing.T) {
	ds := leaseStart("act-1")
	n := audit.MaxUnknownCalls + 5
	for i := range n {
		ds = append(ds, admitted("act-1", fmt.Sprintf("c%d", i)))
	}
	ds = append(ds, finished("act-1", "c0"), finished("act-1", fmt.Sprintf("c%d", n-1)))
	out := seal(ds...).fold(t, "act-1", audit.Options{})
	if len(out.CallsOutcomeUnknown) != audit.MaxUnknownCalls-1 || out.CallsOutcomeUnknownOmitted != 4 {
		t.Fatalf("%d listed, %d omitted", len(out.CallsOutcomeUnknown), out.CallsOutcomeUnknownOmitted)
	}
	if out.CallsOutcomeUnknown[0].CallID != "c1" {
		t.Fatalf("first listed %+v", out.CallsOutcomeUnknown[0])
	}
}

func hasReason(rs []string, prefix string) bool {
	for _, r := range rs {
		if strings.HasPrefix(r, prefix) {
			return true
		}
	}
	return false
}

// A call unpaired while its lease is live is running; the lease's end
// (host lost) makes it lost, in the list and in the verdict's reason.
func TestAuditUnknownCallRunningThenLost(t *testing.T) {
	ds := append(leaseStart("act-1"), admitted("act-1", "c1"))
	out := seal(ds...).fold(t, "act-1", audit.Options{})
	if len(out.CallsOutcomeUnknown) != 1 || out.CallsOutcomeUnknown[0].State != audit.CallRunning {
		t.Fatalf("live lease: %+v", out.CallsOutcomeUnknown)
	}
	if !hasReason(out.Report.Reasons, "call_outcome_unknown: 1 admitted call(s) with no call.finished: 1 running, 0 lost") {
		t.Fatalf("reasons: %q", out.Report.Reasons)
	}
	ds = append(ds, d("act-1", &events.LeaseTerminated{Reason: "host_lost"}))
	out = seal(ds...).fold(t, "act-1", audit.Options{})
	if len(out.CallsOutcomeUnknown) != 1 || out.CallsOutcomeUnknown[0].State != audit.CallLost {
		t.Fatalf("after host_lost: %+v", out.CallsOutcomeUnknown)
	}
}
