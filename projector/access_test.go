package projector_test

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/projector"
	"github.com/leaseledger/leaseledger/projector/internal/eventgen"
)

// policyDigest is the digest of the policy set the tests decide under.
const policyDigest = "5d1e0f8a0c1b9e7d2f4a6c8e0b1d3f5a7c9e1b3d5f7a9c1e3b5d7f9a1c3e5b7d"

// replayed applies ds live (Apply), by replay (ApplyRaw) and from a
// snapshot of the replay, fails unless all three serialise alike, and
// returns them.
func replayed(t *testing.T, ds []events.Draft) []*projector.State {
	t.Helper()
	c := eventgen.NewChain(t0)
	live, replay := projector.New(), projector.New()
	for i, dr := range ds {
		env, raw := c.Seal(dr)
		if err := live.Apply(&env); err != nil {
			t.Fatalf("Apply %d: %v", i, err)
		}
		if err := replay.ApplyRaw(raw); err != nil {
			t.Fatalf("ApplyRaw %d: %v", i, err)
		}
	}
	b := mustMarshal(t, live)
	if got := mustMarshal(t, replay); !bytes.Equal(got, b) {
		t.Fatalf("replay differs:\n%s\n%s", got, b)
	}
	restored, err := projector.Unmarshal(b)
	if err != nil {
		t.Fatal(err)
	}
	if again := mustMarshal(t, restored); !bytes.Equal(again, b) {
		t.Fatalf("snapshot round trip differs:\n%s\n%s", again, b)
	}
	return []*projector.State{live, replay, restored}
}

// A tool call allowed and one denied under a policy set, a denial no
// permit applied to, an access.decided denial with and without an
// activation: each counted in its activation, its open session and the
// state's total, by action × outcome and by deciding policy. A call
// admitted with no policy set, or refused for another reason, is no policy
// decision; the policy in force is the last loaded.
func TestAccessDecisions(t *testing.T) {
	wide := make([]string, events.MaxDecidingPolicies)
	for i := range wide {
		wide[i] = fmt.Sprintf("w%d", i)
	}
	s1 := func(p events.Payload) events.Draft { return events.Draft{Session: "s-1", Server: "srv", Payload: p} }
	ds := []events.Draft{
		{Payload: &events.PolicyLoaded{Trigger: events.ConfigStart, Mode: events.PolicyAllowAll}},
		sessionOpened("s-1", "team-a", events.SessionMCPHTTP),
		d("act-1", &events.LeaseAcquiring{KeySession: "s-1", Fingerprint: eventgen.Digest}),
		d("act-1", &events.LeaseAcquired{Fingerprint: eventgen.Digest, DurationNS: 1}),
		d("act-1", &events.CallAdmitted{CallID: "c0", Tool: "t", Digest: eventgen.Digest}), // allow_all: no policy decided
		{Payload: &events.PolicyLoaded{Trigger: events.ConfigReload, Mode: events.PolicyEnforced, Digest: policyDigest, Policies: 4}},
		d("act-1", &events.CallAdmitted{CallID: "c1", Tool: "t", Digest: eventgen.Digest, Policies: []string{"readers"}, PolicyDigest: policyDigest}),
		d("act-1", &events.CallRefused{CallID: "c2", Tool: "delete", Reason: events.RefusedPolicy, Policies: []string{"no-delete"}, PolicyDigest: policyDigest}),
		d("act-1", &events.CallRefused{CallID: "c3", Tool: "t", Reason: events.RefusedPolicy, PolicyDigest: policyDigest}), // no permit applied
		d("act-1", &events.CallRefused{CallID: "c4", Tool: "t", Reason: events.RefusedCancelled}),                          // no policy decision
		d("act-1", &events.AccessDecided{Action: events.AccessReadResource, TargetSHA256: eventgen.Digest, Policies: []string{"no-secrets"}, PolicyDigest: policyDigest}),
		d("act-1", &events.AccessDecided{Action: events.AccessGetPrompt, Allowed: true, Policies: wide, PoliciesOmitted: 3, PolicyDigest: policyDigest}),
		s1(&events.AccessDecided{Action: events.AccessStartServer, PolicyDigest: policyDigest}),                                                   // no lease: the session and the total only
		events.Draft{Session: "s-9", Server: "srv", Payload: &events.AccessDecided{Action: events.AccessStartServer, PolicyDigest: policyDigest}}, // s-9 not open
	}
	widePolicies := map[string]projector.AccessOutcomes{"readers": {Allowed: 1}, "no-delete": {Denied: 1}, projector.PolicyNoPermit: {Denied: 1}, "no-secrets": {Denied: 1}}
	for _, id := range wide {
		widePolicies[id] = projector.AccessOutcomes{Allowed: 1}
	}
	wantAct := &projector.AccessCounts{Allowed: 2, Denied: 3,
		Actions: map[events.AccessAction]projector.AccessOutcomes{
			events.AccessCallTool: {Allowed: 1, Denied: 2}, events.AccessReadResource: {Denied: 1}, events.AccessGetPrompt: {Allowed: 1}},
		Policies: widePolicies, PoliciesOmitted: 3}
	wantSession := deepCopy(wantAct)
	wantSession.Denied++
	wantSession.Actions[events.AccessStartServer] = projector.AccessOutcomes{Denied: 1}
	wantSession.Policies[projector.PolicyNoPermit] = projector.AccessOutcomes{Denied: 2}
	wantTotal := deepCopy(wantSession)
	wantTotal.Denied++
	wantTotal.Actions[events.AccessStartServer] = projector.AccessOutcomes{Denied: 2}
	wantTotal.Policies[projector.PolicyNoPermit] = projector.AccessOutcomes{Denied: 3}

	for _, s := range replayed(t, ds) {
		rep, _ := s.Report("act-1")
		if !reflect.DeepEqual(rep.Access, wantAct) {
			t.Fatalf("activation access\n%+v, want\n%+v", rep.Access, wantAct)
		}
		if x, _ := s.Session("s-1"); !reflect.DeepEqual(x.Access, wantSession) {
			t.Fatalf("session access\n%+v, want\n%+v", x.Access, wantSession)
		}
		pr := s.Policy()
		if !reflect.DeepEqual(pr.Decisions, wantTotal) {
			t.Fatalf("decisions\n%+v, want\n%+v", pr.Decisions, wantTotal)
		}
		in := pr.InForce
		if in == nil || in.Mode != events.PolicyEnforced || in.Digest != policyDigest || in.Policies != 4 || in.Seq != 6 || in.Trigger != events.ConfigReload ||
			pr.Loads != 2 || len(pr.Recent) != 2 || pr.Recent[0].Mode != events.PolicyAllowAll || pr.LoadsOmitted != 0 {
			t.Fatalf("policy %+v (in force %+v)", pr, in)
		}
		if l, _ := s.Lease(projector.LeaseKey{Session: "s-1", Server: "srv"}); l.CallsRefused != 3 || l.CallsAdmitted != 2 {
			t.Fatalf("lease %+v", l)
		}
		// A decision starts nothing, and none is an anomaly.
		if an := s.Anomalies(); an != (projector.Anomalies{}) {
			t.Fatalf("anomalies %+v", an)
		}
	}

	// The session's counts leave with it; the activation's stay.
	f := newFeed(t)
	f.apply(ds...)
	f.apply(sessionEnded("s-1"), sessionOpened("s-1", "", events.SessionMCPHTTP))
	if x, _ := f.s.Session("s-1"); x.Access != nil {
		t.Fatalf("reopened session %+v", x)
	}
	if rep, _ := f.s.Report("act-1"); rep.Access.Total() != 5 {
		t.Fatalf("activation access %+v", rep.Access)
	}
}

func deepCopy(c *projector.AccessCounts) *projector.AccessCounts {
	x := *c
	x.Actions = map[events.AccessAction]projector.AccessOutcomes{}
	for k, v := range c.Actions {
		x.Actions[k] = v
	}
	x.Policies = map[string]projector.AccessOutcomes{}
	for k, v := range c.Policies {
		x.Policies[k] = v
	}
	return &x
}

// The loads are kept bounded: the last MaxPolicyLoads, the count of every
// one, and how many were dropped, never silently; the last is in force.
func TestPolicyLoadsBound(t *testing.T) {
	var ds []events.Draft
	n := projector.MaxPolicyLoads + 4
	for i := range n {
		p := &events.PolicyLoaded{Trigger: events.ConfigReload, Mode: events.PolicyEnforced, Digest: eventgen.Digest, Policies: i}
		if i == 0 {
			p = &events.PolicyLoaded{Trigger: events.ConfigStart, Mode: events.PolicyAllowAll}
		}
		ds = append(ds, events.Draft{Payload: p})
	}
	for _, s := range replayed(t, ds) {
		pr := s.Policy()
		if pr.Loads != uint64(n) || len(pr.Recent) != projector.MaxPolicyLoads || pr.LoadsOmitted != 4 {
			t.Fatalf("loads %d, kept %d, omitted %d", pr.Loads, len(pr.Recent), pr.LoadsOmitted)
		}
		for i, l := range pr.Recent {
			if l.Seq != uint64(5+i) || l.Policies != 4+i {
				t.Fatalf("kept load %d: %+v", i, l)
			}
		}
		if pr.InForce == nil || *pr.InForce != pr.Recent[len(pr.Recent)-1] || pr.Decisions != nil {
			t.Fatalf("policy %+v", pr)
		}
	}
	if pr := projector.New().Policy(); pr.InForce != nil || pr.Loads != 0 || pr.Recent != nil {
		t.Fatalf("empty state's policy %+v", pr)
	}
}

// Past MaxAccessPolicies ids, an activation's decisions are counted under
// PolicyOther: its counts stay bounded, and the report says so.
func TestAccessPoliciesBound(t *testing.T) {
	var ds []events.Draft
	for i := range projector.MaxAccessPolicies + 6 {
		ds = append(ds, d("act-1", &events.AccessDecided{Action: events.AccessComplete, Allowed: i%2 == 0,
			Policies: []string{fmt.Sprintf("p%03d", i)}, PolicyDigest: policyDigest}))
	}
	ds = append(ds, d("act-1", &events.AccessDecided{Action: events.AccessComplete, Allowed: true, Policies: []string{"p000"}, PolicyDigest: policyDigest}))
	for _, s := range replayed(t, ds) {
		rep, _ := s.Report("act-1")
		c := rep.Access
		if len(c.Policies) != projector.MaxAccessPolicies+1 || c.Policies[projector.PolicyOther] != (projector.AccessOutcomes{Allowed: 3, Denied: 3}) ||
			c.Policies["p000"] != (projector.AccessOutcomes{Allowed: 2}) || c.Total() != projector.MaxAccessPolicies+7 {
			t.Fatalf("access %+v", c)
		}
		if _, ok := c.Policies[fmt.Sprintf("p%03d", projector.MaxAccessPolicies)]; ok {
			t.Fatal("an id past the bound kept")
		}
	}
}

// A start the policy denied, naming an activation nothing else started,
// is never started (no cleanup obligation); one allowed and then started
// is judged by its close as any other.
func TestAccessDeniedStartNeverStarted(t *testing.T) {
	f := newFeed(t)
	f.apply(d("act-1", &events.AccessDecided{Action: events.AccessStartServer, Policies: []string{"no-github"}, PolicyDigest: policyDigest}),
		d("act-2", &events.AccessDecided{Action: events.AccessStartServer, Allowed: true, Policies: []string{"readers"}, PolicyDigest: policyDigest}),
		d("act-2", &events.LeaseAcquiring{KeySession: "s-1", Fingerprint: eventgen.Digest}),
		opened("act-2"))
	v, reasons, _ := f.s.Verdict("act-1")
	if v != projector.ResultNeverStarted || len(reasons) != 1 || reasons[0] != "never_started: access.decided denied start_server, nothing was started" {
		t.Fatalf("act-1: %s %q", v, reasons)
	}
	if v, _, _ := f.s.Verdict("act-2"); v != projector.ResultUnconfirmed {
		t.Fatalf("act-2: %s", v)
	}
	f.apply(d("act-2", &events.AccessDecided{Action: events.AccessStartServer, PolicyDigest: policyDigest})) // after it started: judged by its close
	if v, _, _ := f.s.Verdict("act-2"); v != projector.ResultUnconfirmed {
		t.Fatalf("act-2 after a late denial: %s", v)
	}
}

// A snapshot whose access counts or policy loads could not have been
// reached is corrupt.
func TestAccessSnapshotCorrupt(t *testing.T) {
	f := newFeed(t)
	f.apply(sessionOpened("s-1", "", events.SessionMCPHTTP),
		events.Draft{Payload: &events.PolicyLoaded{Trigger: events.ConfigStart, Mode: events.PolicyAllowAll}},
		events.Draft{Payload: &events.PolicyLoaded{Trigger: events.ConfigReload, Mode: events.PolicyEnforced, Digest: policyDigest, Policies: 2}},
		d("act-1", &events.AccessDecided{Action: events.AccessAnswerRoots, Policies: []string{"no-roots"}, PolicyDigest: policyDigest}))
	b := mustMarshal(t, f.s)
	for _, c := range [][2]string{
		{`"answer_roots":{"denied":1}`, `"answer_roots":{"denied":2}`}, // actions no longer sum to the total
		{`"answer_roots"`, `"answer_rooots"`},                          // an unknown action
		{`"no-roots"`, `"no roots"`},                                   // not a policy id
		{`"loads":2`, `"loads":3`},                                     // kept loads disagree with the count
		{`"seq":3`, `"seq":1`},                                         // loads out of seq order
		{`"mode":"enforced"`, `"mode":"enforceed"`},
	} {
		n := bytes.Count(b, []byte(c[0]))
		if n == 0 {
			t.Fatalf("snapshot without %s: %s", c[0], b)
		}
		for i := range n { // each occurrence: the activation's, the session's, the total's
			bad := replaceNth(b, c[0], c[1], i)
			if _, err := projector.Unmarshal(bad); !errors.Is(err, projector.ErrSnapshotCorrupt) {
				t.Fatalf("%s (occurrence %d): %v", c[1], i, err)
			}
		}
	}
}

// replaceNth replaces the i-th occurrence of old in b.
func replaceNth(b []byte, old, new string, i int) []byte {
	at := 0
	for range i + 1 {
		j := bytes.Index(b[at:], []byte(old))
		at += j + len(old)
	}
	start := at - len(old)
	return append(append(append([]byte(nil), b[:start]...), new...), b[at:]...)
}
