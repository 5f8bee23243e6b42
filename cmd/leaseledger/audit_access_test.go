package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/projector"
	"github.com/leaseledger/leaseledger/projector/audit"
)

// accessLedger appends ds to a new ledger in a temporary directory and
// returns the directory.
func accessLedger(t *testing.T, ds []events.Draft) string {
	t.Helper()
	dir := t.TempDir()
	l, err := ledger.Open(ledger.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) > 0 {
		if _, err := l.Append(context.Background(), ds...); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestAuditAccess: `audit <activation>` prints the access policy's
// decisions naming the activation (by action and outcome, by deciding
// policy) and what it denied with the deciding policies — a call a forbid
// refused, one no permit applied to, a resource read denied — and a
// denial changes no verdict (exit 0); `audit --all` prints the policy in
// force with its loads and every decision's totals, `allow_all (default)`
// when that is what was loaded, and says when no policy was recorded.
func TestAuditAccess(t *testing.T) {
	const pd = "5d1e0f8a0c1b9e7d2f4a6c8e0b1d3f5a7c9e1b3d5f7a9c1e3b5d7f9a1c3e5b7d"
	target := strings.Repeat("8f", 32)
	ds := []events.Draft{
		{Payload: &events.PolicyLoaded{Trigger: events.ConfigStart, Mode: events.PolicyAllowAll}},
		{Payload: &events.PolicyLoaded{Trigger: events.ConfigReload, Mode: events.PolicyEnforced, Digest: pd, Policies: 4}},
		{Session: "s-1", Payload: &events.SessionOpened{Transport: events.SessionMCPHTTP}},
		{Session: "s-1", Server: "github", Payload: &events.AccessDecided{Action: events.AccessStartServer, Allowed: true, Policies: []string{"readers"}, PolicyDigest: pd}},
	}
	d := func(p events.Payload) {
		ds = append(ds, events.Draft{Activation: "act-pol", Session: "s-1", Server: "github", Payload: p})
	}
	d(&events.LeaseAcquiring{KeySession: "s-1", Fingerprint: pd})
	d(&events.LeaseAcquired{Fingerprint: pd, DurationNS: 1})
	d(&events.ConnectionOpened{Transport: events.TransportHTTP, Cleanup: events.CleanupBestEffort, OneShot: true})
	d(&events.CallAdmitted{CallID: "c1", Tool: "search", Digest: pd, Policies: []string{"readers"}, PolicyDigest: pd})
	d(&events.CallFinished{CallID: "c1", Tool: "search", Outcome: events.CallOK, ArgsSHA256: pd})
	d(&events.CallRefused{CallID: "c2", Tool: "delete", Reason: events.RefusedPolicy, Policies: []string{"no-delete"}, PoliciesOmitted: 2, PolicyDigest: pd})
	d(&events.CallRefused{CallID: "c3", Tool: "admin", Reason: events.RefusedPolicy, PolicyDigest: pd})
	d(&events.AccessDecided{Action: events.AccessReadResource, TargetSHA256: target, Policies: []string{"no-secrets"}, PolicyDigest: pd})
	for _, o := range projector.Obligations {
		d(&events.ConnectionBarrier{Obligation: o, Outcome: events.BarrierOK, ElapsedNS: 5})
	}
	d(&events.ConnectionClosed{ElapsedNS: 7})
	dir := accessLedger(t, ds)
	ctx := context.Background()

	r := runCLI(t, ctx, "", "--data-dir", dir, "audit", "act-pol")
	if r.code != 0 {
		t.Fatalf("audit act-pol: exit %d (a denial is no cleanup failure)\n%s%s", r.code, r.stdout, r.stderr)
	}
	want := "access: 4 decision(s) (1 allowed, 3 denied)\n" +
		"  call_tool: 1 allowed, 2 denied\n" +
		"  read_resource: 0 allowed, 1 denied\n" +
		"  policy (no permit): 0 allowed, 1 denied (no permit applied)\n" +
		"  policy no-delete: 0 allowed, 1 denied\n" +
		"  policy no-secrets: 0 allowed, 1 denied\n" +
		"  policy readers: 1 allowed, 0 denied\n" +
		"  deciding policies the records left out: 2\n" +
		"access denied (3):\n" +
		"  seq 10 call_tool (session s-1) call c2 tool delete: policies no-delete (+2 left out); policy set 5d1e0f8a0c1b\n" +
		"  seq 11 call_tool (session s-1) call c3 tool admin: no permit applied; policy set 5d1e0f8a0c1b\n" +
		"  seq 12 read_resource (session s-1) target 8f8f8f8f8f8f: policies no-secrets; policy set 5d1e0f8a0c1b\n"
	if !strings.Contains(r.stdout, want) {
		t.Fatalf("audit act-pol output lacks\n%s\nin\n%s", want, r.stdout)
	}
	r = runCLI(t, ctx, "", "--data-dir", dir, "audit", "act-pol", "--json")
	var out audit.Activation
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || r.code != 0 {
		t.Fatalf("json: %v %d\n%s", err, r.code, r.stdout)
	}
	if c := out.Report.Access; c == nil || c.Denied != 3 || len(out.AccessDenied) != 3 || out.AccessDenied[1].CallID != "c3" || len(out.AccessDenied[1].Policies) != 0 {
		t.Fatalf("json access %+v, denied %+v", out.Report.Access, out.AccessDenied)
	}

	r = runCLI(t, ctx, "", "--data-dir", dir, "audit", "--all")
	if r.code != 0 {
		t.Fatalf("audit --all: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	want = "policy: enforced 5d1e0f8a0c1b (4 policies, loaded at seq 2; 2 load(s))\n" +
		"access: 5 decision(s) (2 allowed, 3 denied)\n" +
		"  start_server: 1 allowed, 0 denied\n"
	if !strings.Contains(r.stdout, want) || !strings.Contains(r.stdout, "  policy readers: 2 allowed, 0 denied\n") {
		t.Fatalf("audit --all output lacks\n%s\nin\n%s", want, r.stdout)
	}
	r = runCLI(t, ctx, "", "--data-dir", dir, "audit", "--all", "--json")
	var sum audit.Summary
	if err := json.Unmarshal([]byte(r.stdout), &sum); err != nil || sum.Policy.InForce == nil || sum.Policy.InForce.Digest != pd ||
		sum.Policy.Loads != 2 || sum.Policy.Decisions == nil || sum.Policy.Decisions.Denied != 3 {
		t.Fatalf("json summary policy %+v: %v", sum.Policy, err)
	}

	dir = accessLedger(t, []events.Draft{{Payload: &events.PolicyLoaded{Trigger: events.ConfigStart, Mode: events.PolicyAllowAll}}})
	if r = runCLI(t, ctx, "", "--data-dir", dir, "audit", "--all"); !strings.Contains(r.stdout, "policy: allow_all (default), loaded at seq 1; 1 load(s)\n") ||
		strings.Contains(r.stdout, "access:") {
		t.Fatalf("allow_all: %+v", r)
	}
	dir = accessLedger(t, []events.Draft{{Session: "s-1", Payload: &events.SessionOpened{Transport: events.SessionMCPHTTP}}})
	if r = runCLI(t, ctx, "", "--data-dir", dir, "audit", "--all"); !strings.Contains(r.stdout, "policy: none recorded (no policy.loaded in the log)\n") {
		t.Fatalf("no policy: %+v", r)
	}
}
