package audit_test

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/projector"
	"github.com/leaseledger/leaseledger/projector/audit"
	"github.com/leaseledger/leaseledger/projector/internal/eventgen"
)

// policyDigest is the digest of the policy set the tests decide under.
const policyDigest = "5d1e0f8a0c1b9e7d2f4a6c8e0b1d3f5a7c9e1b3d5f7a9c1e3b5d7f9a1c3e5b7d"

// An activation's audit lists what the access policy denied it, with the
// deciding policies (none: no permit applied), in seq order: tool calls
// refused with reason policy and access.decided denials; allowed
// decisions and refusals for other reasons are only counted (the report's
// access). The list is bounded by MaxDenials, the rest counted.
func TestAuditAccessDenied(t *testing.T) {
	ds := append(leaseStart("act-1"),
		d("act-1", &events.CallAdmitted{CallID: "c1", Tool: "search", Digest: eventgen.Digest, Policies: []string{"readers"}, PolicyDigest: policyDigest}),
		d("act-1", &events.CallRefused{CallID: "c2", Tool: "delete", Reason: events.RefusedPolicy, Policies: []string{"no-delete"}, PoliciesOmitted: 2, PolicyDigest: policyDigest}),
		d("act-1", &events.CallRefused{CallID: "c3", Tool: "t", Reason: events.RefusedCancelled}),
		d("act-1", &events.AccessDecided{Action: events.AccessReadResource, TargetSHA256: eventgen.Digest, PolicyDigest: policyDigest}),
		d("act-1", &events.AccessDecided{Action: events.AccessGetPrompt, Allowed: true, Policies: []string{"readers"}, PolicyDigest: policyDigest}),
	)
	n := len(ds)
	out := seal(ds...).fold(t, "act-1", audit.Options{})
	want := []audit.Denial{
		{Seq: uint64(n - 3), Action: events.AccessCallTool, Session: "s-1", CallID: "c2", Tool: "delete", Policies: []string{"no-delete"}, PoliciesOmitted: 2, PolicyDigest: policyDigest},
		{Seq: uint64(n - 1), Action: events.AccessReadResource, Session: "s-1", TargetSHA256: eventgen.Digest, Policies: []string{}, PolicyDigest: policyDigest},
	}
	if !reflect.DeepEqual(out.AccessDenied, want) || out.AccessDeniedOmitted != 0 {
		t.Fatalf("denied %+v", out.AccessDenied)
	}
	if c := out.Report.Access; c == nil || c.Allowed != 2 || c.Denied != 2 || c.Policies["readers"].Allowed != 2 || c.Policies[projector.PolicyNoPermit].Denied != 1 {
		t.Fatalf("report access %+v", c)
	}
	b, _ := json.Marshal(out.AccessDenied)
	if !strings.Contains(string(b), `"policies":[]`) {
		t.Fatalf("a denial no permit applied to: %s", b)
	}

	for i := range audit.MaxDenials + 3 {
		ds = append(ds, d("act-1", &events.CallRefused{CallID: fmt.Sprintf("x%d", i), Tool: "t", Reason: events.RefusedPolicy, PolicyDigest: policyDigest}))
	}
	out = seal(ds...).fold(t, "act-1", audit.Options{})
	if len(out.AccessDenied) != audit.MaxDenials || out.AccessDeniedOmitted != 5 || out.AccessDenied[0].CallID != "c2" || out.Report.Access.Denied != audit.MaxDenials+5 {
		t.Fatalf("bounded: %d listed, %d omitted, first %+v", len(out.AccessDenied), out.AccessDeniedOmitted, out.AccessDenied[0])
	}
}

// The summary carries the policy in force, its loads and every decision.
func TestAuditSummaryPolicy(t *testing.T) {
	s := projector.New()
	for _, env := range seal(
		events.Draft{Payload: &events.PolicyLoaded{Trigger: events.ConfigStart, Mode: events.PolicyEnforced, Digest: policyDigest, Policies: 3}},
		events.Draft{Session: "s-1", Server: "srv", Payload: &events.AccessDecided{Action: events.AccessStartServer, Policies: []string{"no-github"}, PolicyDigest: policyDigest}},
	).envs {
		if err := s.Apply(&env); err != nil {
			t.Fatal(err)
		}
	}
	p := audit.Summarize(s, 0).Policy
	if p.InForce == nil || p.InForce.Digest != policyDigest || p.Loads != 1 || p.Decisions == nil || p.Decisions.Denied != 1 ||
		p.Decisions.Policies["no-github"].Denied != 1 {
		t.Fatalf("policy %+v", p)
	}
}
