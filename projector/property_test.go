package projector_test

import (
	"bytes"
	"fmt"
	"os"
	"reflect"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/projector"
	"github.com/leaseledger/leaseledger/projector/internal/eventgen"
	"pgregory.net/rapid"
)

var t0 = time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)

// genDraft draws one valid event over small identifier pools, so that
// random sequences hit every interaction: evidence before registration,
// redirects, barriers in any order, closes, late events, re-registration
// after confirmation, leases and request handles.
// pick draws one of vs (repeat a value to weight it).
func pick[T any](t *rapid.T, name string, vs ...T) T { return rapid.SampledFrom(vs).Draw(t, name) }

func genDraft(t *rapid.T) events.Draft {
	act := rapid.SampledFrom([]string{"act-0", "act-1", "act-2"}).Draw(t, "act")
	sess := rapid.SampledFrom([]string{"s-0", "s-1"}).Draw(t, "sess")
	srv := rapid.SampledFrom([]string{"srv-0", "srv-1"}).Draw(t, "srv")
	ref := rapid.SampledFrom([]string{"r0", "r1", "r2", "r3", "h0", "h1"}).Draw(t, "ref")
	pid := rapid.IntRange(100, 101).Draw(t, "pid")
	handle := rapid.SampledFrom([]string{"q0", "q1", "q2"}).Draw(t, "handle")
	owner := rapid.SampledFrom([]string{"o0", "o1"}).Draw(t, "owner")
	at := events.At(t0.Add(time.Duration(rapid.IntRange(0, 5).Draw(t, "at")) * time.Second))
	opt := func(name string) *events.Instant {
		if rapid.Bool().Draw(t, name) {
			return at
		}
		return nil
	}
	outcome := func(name string, vs ...string) string { return rapid.SampledFrom(vs).Draw(t, name) }
	var p events.Payload
	// Weighted: evidence events (which drive the ring) are most frequent.
	// The kinds of MCP traffic beside calls (subscriptions, list changes, log levels,
	// request methods) are drawn twice as often: their counts meet in few
	// events.
	uri := pick(t, "uri", eventgen.Digest, eventgen.Digest, otherDigest)
	switch k := rapid.IntRange(0, 64).Draw(t, "kind"); k {
	case 0:
		p = &events.LeaseAcquiring{KeySession: sess, Fingerprint: eventgen.Digest, Shared: rapid.Bool().Draw(t, "shared")}
	case 1:
		p = &events.LeaseAcquired{Fingerprint: eventgen.Digest, DurationNS: 5}
	case 2:
		p = &events.LeaseAcquireFailed{Reason: pick(t, "afr", "spawn_failed", "initialize_failed"), DurationNS: 5,
			Cause:  pick(t, "afc", "", events.CauseConnectionRefused, events.CauseHTTPStatus, events.CauseProcessExited),
			Target: pick(t, "aft", "", "127.0.0.1:3011"), HTTPStatus: pick(t, "afs", 0, 503)}
	case 3:
		p = &events.LeaseChildStarted{PID: pid, GuardianPID: pid + 10, Cleanup: pick(t, "cleanup", events.CleanupVerified, events.CleanupVerified, events.CleanupBestEffort)}
	case 4:
		p = &events.LeaseListingPinned{ToolCount: 3, Pages: 1, ListingBytes: 100, ListingDigest: eventgen.Digest}
	case 5:
		p = &events.LeasePoisoned{CallID: "c1", Reason: "digest_mismatch", Tool: "t", ExpectedDigest: eventgen.Digest}
	case 6:
		p = &events.LeaseRevoked{Reason: "host_request", CallsInFlight: 1}
	case 7:
		p = &events.LeaseTerminated{Reason: "revoked"}
	case 8:
		p = &events.CallAdmitted{CallID: "c1", Tool: "t", Digest: eventgen.Digest}
	case 9:
		p = &events.CallFinished{CallID: "c1", Tool: "t", Outcome: "ok", ArgsSHA256: eventgen.Digest, KilledOnCancel: rapid.Bool().Draw(t, "killed")}
	case 10:
		p = &events.CallRefused{CallID: "c1", Tool: "t", Reason: "cancelled"}
	case 11:
		return events.Draft{Session: sess, Payload: &events.SessionEnded{LeasesTerminated: 1}}
	case 12, 51:
		p = &events.RequestRegistered{Handle: handle, Owner: owner, TimeoutNS: 5,
			Method: pick(t, "method", events.MethodReadResource, events.MethodListPrompts, events.MethodGetPrompt, events.MethodComplete, events.MethodSubscribe, events.MethodUnsubscribe)}
	case 13:
		p = &events.RequestDispatched{Handle: handle, WireID: "17"}
	case 14:
		p = &events.RequestContinued{Handle: handle, WireID: "18", Round: rapid.IntRange(1, 10).Draw(t, "round")}
	case 15:
		p = &events.RequestCompleted{Handle: handle, Outcome: pick(t, "rc", events.RequestOK, events.RequestError, events.RequestTimeout), ResultBytes: 3}
	case 16:
		p = &events.RequestAwaitTimedOut{Handle: handle, WaitedNS: 3}
	case 17:
		p = &events.RequestCancelled{Handle: handle, Reason: "host_cancelled", LocalSettled: true, TransportAccepted: "yes", NotificationDelivered: "unknown", Remote: "unknown"}
	case 18:
		p = &events.RequestOwnerEnded{Owner: owner, HandlesSettled: 1}
	case 19:
		p = &events.ConnectionOpened{Transport: pick(t, "tr", events.TransportStdio, events.TransportHTTP), Cleanup: pick(t, "cl", events.CleanupVerified, events.CleanupBestEffort)}
	case 20:
		p = &events.ConnectionPhase{Phase: pick(t, "phase", events.PhaseClosing, events.PhaseClosed), BudgetNS: 7}
	case 21, 22:
		p = &events.ConnectionBarrier{Obligation: pick(t, "ob", projector.Obligations[:]...), Outcome: pick(t, "bo", events.BarrierOK, events.BarrierOK, events.BarrierOK, events.BarrierError, events.BarrierTimeout, events.BarrierMissing, events.BarrierUnsupported, events.BarrierPending), ElapsedNS: 1}
	case 23:
		p = &events.ConnectionClosed{ElapsedNS: 9, Repeat: rapid.Bool().Draw(t, "repeat")}
	case 24:
		p = &events.GuardianStarted{GuardianPID: pid + 10, TargetPID: pid, HelperVersion: "g/1", PIDFD: true}
	case 25:
		p = &events.GuardianSignal{TargetPID: pid, Signal: pick(t, "sig", events.SignalTERM, events.SignalKILL), At: at}
	case 26:
		p = &events.GuardianReaped{TargetPID: pid, ExitCode: rapid.IntRange(-1, 2).Draw(t, "exit"), At: at}
	case 27:
		p = &events.GuardianReceipt{HelperVersion: "g/1", TargetPID: pid, Reaped: rapid.Float64().Draw(t, "reaped") < 0.8,
			ExitCode: rapid.IntRange(-1, 2).Draw(t, "exit"), StdinClosedAt: opt("in"), StdoutClosedAt: opt("out"),
			StderrClosedAt: opt("err"), DescendantsSeen: []int{7, 8}[:rapid.IntRange(0, 2).Draw(t, "nd")],
			HelperExitCode: rapid.SampledFrom([]int{0, 0, 0, 1, -1}).Draw(t, "hx")}
	case 28:
		p = &events.GuardianLost{Reason: pick(t, "gl", events.LostReceipt, events.LostHelper, events.LostPipesClosed, events.LostDeadline), TargetPID: rapid.SampledFrom([]int{0, pid}).Draw(t, "lpid")}
	case 29, 30, 31, 32:
		p = &events.HTTPRegistered{Ref: ref, Scope: outcome("scope", "request", "sse", "jwks"), Method: events.HTTPGet, Origin: "https://a.example"}
	case 33:
		p = &events.HTTPRedirect{Ref: ref, Hop: rapid.IntRange(1, 3).Draw(t, "hop"), HopRef: rapid.SampledFrom([]string{"h0", "h1"}).Draw(t, "hopref"),
			Status: 307, Origin: "https://b.example", SameOrigin: rapid.Bool().Draw(t, "same")}
	case 34:
		p = &events.HTTPCompleted{Ref: ref, Status: 200, Outcome: pick(t, "hc", events.HTTPOK, events.HTTPError, events.HTTPTimeout, events.HTTPAborted), BodyBytes: 10}
	case 35, 36, 37:
		p = &events.HTTPBarrier{Ref: ref, Outcome: pick(t, "hb", events.HTTPBarrierOK, events.HTTPBarrierOK, events.HTTPBarrierOK, events.HTTPBarrierError, events.HTTPBarrierTimeout, events.HTTPBarrierUnsupported)}
	case 38, 39:
		p = &events.HTTPWorkerDown{Ref: ref, Worker: "w1", Reason: "normal"}
	case 40:
		p = &events.HTTPLost{Ref: ref, Reason: "connection_dropped"}
	case 41:
		return events.Draft{Session: sess, Payload: &events.SessionOpened{Principal: pick(t, "principal", "", "team-a"),
			Transport: pick(t, "st", events.SessionEmbedded, events.SessionMCPHTTP)}}
	case 42:
		return events.Draft{Payload: &events.HostBound{Host: pick(t, "host", "h1", "h2")}}
	case 43:
		p = &events.LeaseReaped{IdleNS: 5e9, IdleMaxNS: 4e9}
	case 44:
		p = &events.LeaseStaleReplaced{OldFingerprint: eventgen.Digest, NewFingerprint: eventgen.Digest, NewActivation: pick(t, "newact", "", "act-9")}
	case 45:
		return events.Draft{Payload: &events.ConfigLoaded{Trigger: pick(t, "trigger", events.ConfigStart, events.ConfigReload), Digest: eventgen.Digest,
			Servers: rapid.IntRange(0, 3).Draw(t, "servers"), Added: rapid.IntRange(0, 1).Draw(t, "added"), Removed: rapid.IntRange(0, 1).Draw(t, "removed")}}
	case 46, 52, 53:
		p = &events.SubscriptionStarted{Handle: handle, URISHA256: uri}
	case 47, 54:
		p = &events.SubscriptionEnded{URISHA256: uri,
			Reason:      pick(t, "subend", events.SubscriptionUnsubscribed, events.SubscriptionSessionEnded, events.SubscriptionLeaseEnded),
			Unsubscribe: pick(t, "unsub", "", events.RequestOK, events.RequestTimeout)}
	case 48:
		p = &events.RelayCompleted{Method: pick(t, "rm", events.RelaySampling, events.RelayElicit, events.RelayListRoots),
			Related: pick(t, "rrel", "", "c1"), DurationNS: 4,
			Outcome: pick(t, "ro", events.RelayAccepted, events.RelayDeclined, events.RelayCancelled, events.RelayError, events.RelayTimedOut, events.RelayRefused)}
	case 49, 55:
		p = &events.LeaseListChanged{List: pick(t, "list", events.ListTools, events.ListPrompts, events.ListResources)}
	case 50, 56:
		return events.Draft{Session: sess, Payload: &events.SessionLogLevel{Level: pick(t, "level", events.LogDebug, events.LogError)}}
	case 57:
		return events.Draft{Session: sess, Payload: &events.SessionOpened{Transport: events.SessionMCPHTTP}} // the log level starts anew
	case 58:
		sig, code := pick(t, "ccsig", "", "KILL", "TERM"), 0
		if sig != "" {
			code = -1
		}
		p = &events.LeaseChildClosed{PID: pid, Reaped: rapid.Float64().Draw(t, "ccreaped") < 0.8, ExitCode: code, Signal: sig, ReapedAt: opt("ccat"),
			ExitedBeforeClose: rapid.Bool().Draw(t, "ccbefore"), StdinClosedAt: opt("ccin"), StdoutClosedAt: opt("ccout"), StderrClosedAt: opt("ccerr"),
			StdoutForced: rapid.Bool().Draw(t, "ccforced"), TermSentAt: opt("ccterm"), KillSentAt: opt("cckill"),
			GroupSignalled: rapid.Bool().Draw(t, "ccgroup"), Descendants: events.DescendantsUnknown}
	// the access policy: its loads, its decisions (with and without an
	// activation), and the tool calls it admitted or refused
	case 59:
		pl := &events.PolicyLoaded{Trigger: pick(t, "ptrigger", events.ConfigStart, events.ConfigReload), Mode: events.PolicyAllowAll}
		if rapid.Bool().Draw(t, "enforced") {
			pl.Mode, pl.Digest, pl.Policies = events.PolicyEnforced, pick(t, "pdigest", eventgen.Digest, otherDigest), rapid.IntRange(0, 5).Draw(t, "npolicies")
		}
		return events.Draft{Payload: pl}
	case 60, 61:
		ad := &events.AccessDecided{Action: pick(t, "action", events.AccessActions()...), TargetSHA256: pick(t, "target", "", uri),
			Allowed: rapid.Bool().Draw(t, "allowed"), PolicyDigest: eventgen.Digest}
		ad.Policies, ad.PoliciesOmitted = genPolicies(t)
		if rapid.Bool().Draw(t, "noact") { // no lease involved (a start refused, a session's own request)
			return events.Draft{Session: sess, Server: srv, Payload: ad}
		}
		p = ad
	case 62:
		ca := &events.CallAdmitted{CallID: "c1", Tool: "t", Digest: eventgen.Digest, PolicyDigest: eventgen.Digest}
		ca.Policies, ca.PoliciesOmitted = genPolicies(t)
		p = ca
	case 63, 64:
		cr := &events.CallRefused{CallID: "c1", Tool: "t", Reason: events.RefusedPolicy, PolicyDigest: eventgen.Digest}
		cr.Policies, cr.PoliciesOmitted = genPolicies(t)
		p = cr
	}
	return events.Draft{Activation: act, Session: sess, Server: srv, Payload: p}
}

// genPolicies draws a decision's deciding policies: none (a denial: no
// permit applied), a few from a small pool (repeats included: counted
// once per decision), or the most a decision records from a pool wider
// than projector.MaxAccessPolicies, so that the ids past the bound meet
// in few events; and sometimes some left out.
func genPolicies(t *rapid.T) ([]string, int) {
	omitted := pick(t, "omitted", 0, 0, 0, 2)
	switch rapid.IntRange(0, 4).Draw(t, "policies") {
	case 0:
		return nil, omitted
	case 1:
		return []string{"p1"}, omitted
	case 2:
		return []string{"p1", "p2", "p1"}, omitted
	case 3:
		return []string{"forbid-all"}, omitted
	}
	ids := make([]string, events.MaxDecidingPolicies)
	for i, n := range rapid.SliceOfN(rapid.IntRange(0, 99), len(ids), len(ids)).Draw(t, "wide") {
		ids[i] = fmt.Sprintf("w%d", n)
	}
	return ids, omitted
}

// otherDigest is a second subscribed URI's digest.
const otherDigest = "572d8a8df0e5e80b1a41756724f90f09a7e0848f4a6ba4c2b2aa64efadba4ac6"

type sealed struct {
	env events.Envelope
	raw []byte
}

// genLog draws a log of random events interleaved with blocks that
// confirm a request (sometimes with a redirect hop), so that the recent
// window of act-0 overflows into aggregates in many runs.
func genLog(t *rapid.T) []sealed {
	n := rapid.IntRange(0, 300).Draw(t, "n")
	c := eventgen.NewChain(t0)
	var out []sealed
	add := func(d events.Draft) {
		env, raw := c.Seal(d)
		out = append(out, sealed{env, raw})
	}
	for i := range n {
		kind := rapid.IntRange(0, 10).Draw(t, "block")
		if kind < 6 {
			add(genDraft(t))
			continue
		}
		if kind == 10 { // a burst of policy loads and wide decisions: past MaxPolicyLoads and MaxAccessPolicies in few blocks
			for range rapid.IntRange(1, 6).Draw(t, "burst") {
				if rapid.Bool().Draw(t, "burstload") {
					add(events.Draft{Payload: &events.PolicyLoaded{Trigger: events.ConfigReload, Mode: events.PolicyEnforced, Digest: eventgen.Digest, Policies: 9}})
					continue
				}
				ids := make([]string, events.MaxDecidingPolicies)
				for j := range ids {
					ids[j] = fmt.Sprintf("b%d-%d", i, j)
				}
				add(events.Draft{Activation: "act-0", Session: "s-1", Server: "srv", Payload: &events.AccessDecided{Action: events.AccessReadResource,
					Allowed: rapid.Bool().Draw(t, "burstallowed"), Policies: ids, PolicyDigest: eventgen.Digest}})
			}
			continue
		}
		act := rapid.SampledFrom([]string{"act-0", "act-0", "act-0", "act-1"}).Draw(t, "bact")
		ref := fmt.Sprintf("b%d", i)
		scope := rapid.SampledFrom([]string{"request", "sse", "jwks"}).Draw(t, "bscope")
		block := eventgen.ConfirmedRequest(act, ref, scope)
		if rapid.IntRange(0, 4).Draw(t, "hop") == 0 {
			hop := events.Draft{Activation: act, Session: "s-1", Server: "srv", Payload: &events.HTTPRedirect{Ref: ref, Hop: 1, HopRef: ref + "-h1", Status: 307, Origin: "https://b.example", SameOrigin: true}}
			hb := events.Draft{Activation: act, Session: "s-1", Server: "srv", Payload: &events.HTTPBarrier{Ref: ref + "-h1", Outcome: "ok"}}
			block = append([]events.Draft{block[0], hop, hb}, block[1:]...)
		}
		for _, d := range block {
			add(d)
		}
	}
	return out
}

func mustMarshal(t interface{ Fatal(...any) }, s *projector.State) []byte {
	b, err := projector.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestReplayEquivalence is the replay = live property: incremental
// application of envelopes, full replay of the stored bytes, and a
// snapshot at a random point plus the tail all serialise byte-identically.
func TestReplayEquivalence(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		log := genLog(t)
		live := projector.New()
		for _, e := range log {
			if err := live.Apply(&e.env); err != nil {
				t.Fatalf("Apply seq %d: %v", e.env.Seq, err)
			}
		}
		want := mustMarshal(t, live)

		replay := projector.New()
		for _, e := range log {
			if err := replay.ApplyRaw(e.raw); err != nil {
				t.Fatalf("ApplyRaw seq %d: %v", e.env.Seq, err)
			}
		}
		if got := mustMarshal(t, replay); !bytes.Equal(got, want) {
			t.Fatalf("full replay differs from incremental:\n%s\n%s", got, want)
		}

		cut := rapid.IntRange(0, len(log)).Draw(t, "cut")
		head := projector.New()
		for _, e := range log[:cut] {
			if err := head.ApplyRaw(e.raw); err != nil {
				t.Fatal(err)
			}
		}
		snap := mustMarshal(t, head)
		restored, err := projector.Unmarshal(snap)
		if err != nil {
			t.Fatalf("Unmarshal: %v", err)
		}
		if again := mustMarshal(t, restored); !bytes.Equal(again, snap) {
			t.Fatalf("snapshot round trip differs")
		}
		for _, e := range log[cut:] {
			if err := restored.Apply(&e.env); err != nil {
				t.Fatal(err)
			}
		}
		if got := mustMarshal(t, restored); !bytes.Equal(got, want) {
			t.Fatalf("snapshot at %d + tail differs from incremental:\n%s\n%s", cut, got, want)
		}
		// Reports are derived from the state alone, so they agree too.
		for _, id := range live.ActivationIDs() {
			a, _ := live.Report(id)
			b, _ := restored.Report(id)
			if !reflect.DeepEqual(a, b) {
				t.Fatalf("report %s differs", id)
			}
			checkInvariants(t, live, id)
		}
	})
}

// checkInvariants checks what must hold after any sequence.
func checkInvariants(t *rapid.T, s *projector.State, id string) {
	a, _ := s.Activation(id)
	ev := &a.Evidence
	c := ev.Counts()
	var aggregated uint64
	for _, ag := range ev.Aggregates(id) {
		if !ag.Evidence.Aggregate || ag.ID.Reference != projector.AggregatePrefix+ag.Scope {
			t.Fatalf("aggregate %+v", ag)
		}
		aggregated += ag.Evidence.ConfirmedCount
	}
	if c.Recent > projector.RecentReceipts || c.Recent+aggregated != c.Confirmed || c.Aggregated != aggregated {
		t.Fatalf("counts %+v aggregated %d", c, aggregated)
	}
	if c.Aggregated > 0 && c.Recent != projector.RecentReceipts {
		t.Fatalf("aggregated while the recent window is not full: %+v", c)
	}
	for _, r := range ev.Tracked() {
		if r.Status == projector.StatusConfirmed {
			t.Fatalf("confirmed resource still tracked: %+v", r)
		}
	}
	for _, r := range ev.Recent() {
		if r.Status != projector.StatusConfirmed {
			t.Fatalf("unconfirmed receipt in recent: %+v", r)
		}
		if (r.Kind == projector.ResourceHTTPRequest || r.Kind == projector.ResourceHTTPHop) && (r.Facts.Barrier != "ok" || !r.Facts.WorkerDown) {
			t.Fatalf("http receipt confirmed without barrier ok and worker down: %+v", r)
		}
	}
	if sc := a.Subscriptions; sc != nil && sc.Open > sc.Started {
		t.Fatalf("subscriptions %+v: more open than started", sc)
	}
	checkAccess(t, a.Access)
	checkAccess(t, s.Policy().Decisions)
	for _, x := range s.Sessions() {
		checkAccess(t, x.Access)
	}
	if pr := s.Policy(); uint64(len(pr.Recent)) != min(pr.Loads, projector.MaxPolicyLoads) || pr.LoadsOmitted+uint64(len(pr.Recent)) != pr.Loads ||
		(pr.InForce == nil) != (pr.Loads == 0) || (pr.InForce != nil && *pr.InForce != pr.Recent[len(pr.Recent)-1]) {
		t.Fatalf("policy loads: %+v", pr)
	}
	if rep, ok := s.CloseReport(id); ok {
		if rep.Version != 1 {
			t.Fatalf("report version %d", rep.Version)
		}
		confirmed := rep.Result == projector.ResultConfirmed
		for _, o := range rep.Obligations {
			if o.Status != projector.StatusConfirmed && confirmed {
				t.Fatalf("confirmed report with obligation %+v", o)
			}
		}
		if confirmed && (rep.Counts.Pending+rep.Counts.Missing+rep.Counts.Lost+rep.Counts.Unsupported > 0 || !rep.Retained) {
			t.Fatalf("confirmed report with unconfirmed evidence: %+v", rep)
		}
		if !ev.Frozen() {
			t.Fatalf("closed but evidence not frozen")
		}
	}
}

// checkAccess checks what holds of any access counts: the actions sum to
// the totals, every decision is counted under at least one policy key or
// in policies_omitted, and the ids kept one by one stay within
// MaxAccessPolicies.
func checkAccess(t *rapid.T, c *projector.AccessCounts) {
	if c == nil {
		return
	}
	var allowed, denied, byPolicy uint64
	for _, o := range c.Actions {
		allowed, denied = allowed+o.Allowed, denied+o.Denied
	}
	ids := 0
	for k, o := range c.Policies {
		byPolicy += o.Allowed + o.Denied
		if k != projector.PolicyNoPermit && k != projector.PolicyUnnamed && k != projector.PolicyOther {
			ids++
		}
	}
	if allowed != c.Allowed || denied != c.Denied || c.Total() == 0 || ids > projector.MaxAccessPolicies ||
		byPolicy+c.PoliciesOmitted < c.Total() {
		t.Fatalf("access counts %+v", c)
	}
}

// TestFastDecodeMatchesStrict checks that the State's decoding (the events
// package's fast path) and events.DecodePayload agree on every generated
// event and on the catalogue's examples, and that Apply and ApplyRaw build
// the same state. That the fast path accepts canonical bytes at all is
// checked in package events.
func TestFastDecodeMatchesStrict(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		c := eventgen.NewChain(t0)
		env, raw := c.Seal(genDraft(t))
		checkDecode(t, env, raw)
	})
}

func checkDecode(t interface {
	Fatalf(string, ...any)
}, env events.Envelope, raw []byte) {
	strict, err := events.DecodePayload(env.Kind, env.Data)
	if err != nil {
		t.Fatalf("strict: %v", err)
	}
	fast, err := projector.DecodePayloadForTest(env.Kind, env.Data)
	if err != nil {
		t.Fatalf("fast: %v", err)
	}
	if !reflect.DeepEqual(strict, fast) {
		t.Fatalf("decoders disagree on %s:\n%#v\n%#v", env.Kind, strict, fast)
	}
	a, b := projector.New(), projector.New()
	if err := a.Apply(&env); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if err := b.ApplyRaw(raw); err != nil {
		t.Fatalf("ApplyRaw: %v", err)
	}
	x, _ := projector.Marshal(a)
	y, _ := projector.Marshal(b)
	if !bytes.Equal(x, y) {
		t.Fatalf("Apply and ApplyRaw differ:\n%s\n%s", x, y)
	}
}

func TestFastDecodeExamples(t *testing.T) {
	lines := readExamples(t)
	c := eventgen.NewChain(t0)
	for i, line := range lines {
		d, err := events.ParseInput(line)
		if err != nil {
			t.Fatalf("example %d: %v", i, err)
		}
		env, raw := c.Seal(d)
		checkDecode(t, env, raw)
	}
	if len(lines) != len(events.InputKinds()) {
		t.Fatalf("%d examples for %d input kinds", len(lines), len(events.InputKinds()))
	}
}

// TestRawFallback feeds ApplyRaw bytes the fast path refuses (escaped
// strings): the strict decoder takes over and the result is the same.
func TestRawFallback(t *testing.T) {
	c := eventgen.NewChain(t0)
	env, raw := c.Seal(eventgen.D("act-1", &events.HTTPRegistered{Ref: "r", Scope: "request", Method: "GET", Origin: "https://a<b>&c.example"}))
	if !bytes.Contains(raw, []byte(`\u003c`)) {
		t.Fatalf("expected an escaped origin: %s", raw)
	}
	checkDecode(t, env, raw)
	if err := projector.New().ApplyRaw([]byte(`{"seq":1}`)); err == nil {
		t.Fatal("ApplyRaw accepted garbage")
	}
}

func readExamples(t *testing.T) [][]byte {
	t.Helper()
	b, err := os.ReadFile("../examples/events.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Split(bytes.TrimSpace(b), []byte("\n"))
}
