package projector_test

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/projector"
	"github.com/leaseledger/leaseledger/projector/audit"
	"github.com/leaseledger/leaseledger/projector/internal/eventgen"
)

// feed applies drafts in order through the given chain.
type feed struct {
	t *testing.T
	c *eventgen.Chain
	s *projector.State
}

func newFeed(t *testing.T) *feed {
	return &feed{t: t, c: eventgen.NewChain(t0), s: projector.New()}
}

func (f *feed) apply(ds ...events.Draft) {
	f.t.Helper()
	for _, d := range ds {
		env, _ := f.c.Seal(d)
		if err := f.s.Apply(&env); err != nil {
			f.t.Fatalf("apply %s: %v", env.Kind, err)
		}
	}
}

func (f *feed) ev(a string) *projector.Evidence {
	f.t.Helper()
	act, ok := f.s.Activation(a)
	if !ok {
		f.t.Fatalf("no activation %s", a)
	}
	return &act.Evidence
}

var d = eventgen.D

func opened(a string) events.Draft {
	return d(a, &events.ConnectionOpened{Transport: events.TransportHTTP, Cleanup: events.CleanupBestEffort, OneShot: true})
}

func barriers(a string, outcome events.BarrierOutcome) []events.Draft {
	var out []events.Draft
	for _, o := range projector.Obligations {
		out = append(out, d(a, &events.ConnectionBarrier{Obligation: o, Outcome: outcome, ElapsedNS: 1}))
	}
	return out
}

func closed(a string, repeat bool) events.Draft {
	return d(a, &events.ConnectionClosed{ElapsedNS: 42, Repeat: repeat})
}

func TestSixtyFifthReceiptMovesOldestIntoAggregate(t *testing.T) {
	f := newFeed(t)
	for i := range projector.RecentReceipts {
		f.apply(eventgen.ConfirmedRequest("act-1", fmt.Sprintf("r%d", i), "request")...)
	}
	ev := f.ev("act-1")
	if c := ev.Counts(); c.Recent != 64 || c.Aggregated != 0 || len(ev.Aggregates("act-1")) != 0 {
		t.Fatalf("after 64: %+v", c)
	}
	if ev.Recent()[0].ID.Reference != "r0" {
		t.Fatalf("oldest is %s", ev.Recent()[0].ID.Reference)
	}
	f.apply(eventgen.ConfirmedRequest("act-1", "r64", "request")...)
	c := ev.Counts()
	if c.Recent != 64 || c.Aggregated != 1 || c.Confirmed != 65 || c.Resources != 65 {
		t.Fatalf("after 65: %+v", c)
	}
	recent := ev.Recent()
	if recent[0].ID.Reference != "r1" || recent[63].ID.Reference != "r64" {
		t.Fatalf("window %s..%s", recent[0].ID.Reference, recent[63].ID.Reference)
	}
	ag := ev.Aggregates("act-1")
	want := projector.AggregateResource{ID: projector.ResourceID{Activation: "act-1", Reference: "confirmed_history:request"},
		Scope: "request", Status: projector.StatusConfirmed, Evidence: projector.AggregateEvidence{Aggregate: true, ConfirmedCount: 1}}
	if len(ag) != 1 || ag[0] != want {
		t.Fatalf("aggregates %+v", ag)
	}
	if _, ok := ev.Resource("r0"); ok {
		t.Fatal("r0 is still kept individually")
	}
}

// receiptEnvs returns the three envelopes (registered, barrier ok, worker
// down) confirming request ref of scope in act-1 at seqs seq+1..seq+3. The
// payloads are written in canonical form by hand, so that a million of them
// cost no encoding/json.
func receiptEnvs(seq uint64, ref, scope string) [3]events.Envelope {
	mk := func(i uint64, kind events.Kind, data string) events.Envelope {
		return events.Envelope{Seq: events.Seq(seq + i), Time: t0, Kind: kind, V: 1, Activation: "act-1", Data: []byte(data)}
	}
	return [3]events.Envelope{
		mk(1, "http.registered", `{"ref":"`+ref+`","scope":"`+scope+`","method":"GET","origin":"https://a.example"}`),
		mk(2, "http.barrier", `{"ref":"`+ref+`","outcome":"ok"}`),
		mk(3, "http.worker_down", `{"ref":"`+ref+`","worker":"w","reason":"normal"}`),
	}
}

// TestExactCountsOverAMillionReceipts applies 10^6 confirmed receipts in
// three scopes directly in memory: counts stay exact and the per-activation
// state stays at 64 receipts plus one counter per scope.
func TestExactCountsOverAMillionReceipts(t *testing.T) {
	n := 1_000_000
	if testing.Short() {
		n = 100_000
	}
	s := projector.New()
	scopes := []string{"request", "sse", "jwks"}
	want := map[string]uint64{}
	for i := range n {
		scope := scopes[i%7%3]
		want[scope]++
		envs := receiptEnvs(uint64(3*i), "r"+strconv.Itoa(i), scope)
		for j := range envs {
			if err := s.Apply(&envs[j]); err != nil {
				t.Fatal(err)
			}
		}
	}
	a, _ := s.Activation("act-1")
	ev := &a.Evidence
	c := ev.Counts()
	if c.Confirmed != uint64(n) || c.Resources != uint64(n) || c.Recent != 64 || c.Aggregated != uint64(n-64) {
		t.Fatalf("counts %+v", c)
	}
	for _, scope := range scopes {
		if got := ev.ConfirmedCount(scope); got != want[scope] {
			t.Fatalf("scope %s: %d, want %d", scope, got, want[scope])
		}
	}
	if len(ev.Tracked()) != 0 || len(ev.Aggregates("act-1")) != 3 {
		t.Fatalf("tracked %d aggregates %d", len(ev.Tracked()), len(ev.Aggregates("act-1")))
	}
	b, _ := projector.Marshal(s)
	if len(b) > 64<<10 {
		t.Fatalf("snapshot of one activation with %d receipts is %d bytes", n, len(b))
	}
}

func TestLateCompletionAfterCloseChangesNothing(t *testing.T) {
	f := newFeed(t)
	f.apply(opened("act-1"))
	f.apply(eventgen.ConfirmedRequest("act-1", "done", "request")...)
	f.apply(d("act-1", &events.HTTPRegistered{Ref: "slow", Scope: "request", Method: "GET", Origin: "https://a.example"}))
	f.apply(barriers("act-1", "ok")...)
	f.apply(d("act-1", &events.ConnectionPhase{Phase: "closing"}), closed("act-1", false))
	before, _ := f.s.CloseReport("act-1")
	if before.Result != projector.ResultUnconfirmed || before.Counts.Pending != 1 {
		t.Fatalf("report before %+v", before)
	}
	rep0, _ := f.s.Report("act-1")
	// The late completion arrives: barrier ok and worker down for "slow".
	f.apply(eventgen.ConfirmedRequest("act-1", "slow", "request")[1:]...)
	f.apply(d("act-1", &events.ConnectionBarrier{Obligation: "transport", Outcome: "error", ElapsedNS: 1}))
	after, _ := f.s.CloseReport("act-1")
	rep1, _ := f.s.Report("act-1")
	if fmt.Sprint(before) != fmt.Sprint(after) {
		t.Fatalf("close report changed:\n%+v\n%+v", before, after)
	}
	if fmt.Sprint(rep0.Resources, rep0.Recent, rep0.Aggregates, rep0.Counts, rep0.Verdict) !=
		fmt.Sprint(rep1.Resources, rep1.Recent, rep1.Aggregates, rep1.Counts, rep1.Verdict) {
		t.Fatal("frozen evidence changed")
	}
	if r, _ := f.ev("act-1").Resource("slow"); r.Status != projector.StatusPending {
		t.Fatalf("slow is %s", r.Status)
	}
	if late := f.ev("act-1").LateEvents(); late != 4 {
		t.Fatalf("late events %d, want 4", late)
	}
}

func TestPendingAndMissingBlockConfirmation(t *testing.T) {
	for _, tc := range []struct {
		name  string
		extra []events.Draft
		want  string
	}{
		{"barrier only (worker end not observed)", []events.Draft{
			d("act-1", &events.HTTPRegistered{Ref: "x", Scope: "request", Method: "GET", Origin: "o"}),
			d("act-1", &events.HTTPBarrier{Ref: "x", Outcome: "ok"})}, "pending (awaiting_worker_down)"},
		{"worker end only (no barrier)", []events.Draft{
			d("act-1", &events.HTTPRegistered{Ref: "x", Scope: "request", Method: "GET", Origin: "o"}),
			d("act-1", &events.HTTPWorkerDown{Ref: "x", Worker: "w", Reason: "normal"})}, "pending (awaiting_barrier)"},
		{"barrier timeout", []events.Draft{
			d("act-1", &events.HTTPRegistered{Ref: "x", Scope: "request", Method: "GET", Origin: "o"}),
			d("act-1", &events.HTTPBarrier{Ref: "x", Outcome: "timeout"}),
			d("act-1", &events.HTTPWorkerDown{Ref: "x", Worker: "w", Reason: "normal"})}, "missing (barrier_timeout)"},
		{"barrier unsupported", []events.Draft{
			d("act-1", &events.HTTPRegistered{Ref: "x", Scope: "request", Method: "GET", Origin: "o"}),
			d("act-1", &events.HTTPBarrier{Ref: "x", Outcome: "unsupported"}),
			d("act-1", &events.HTTPWorkerDown{Ref: "x", Worker: "w", Reason: "normal"})}, "unsupported (barrier_unsupported)"},
		{"lost", []events.Draft{
			d("act-1", &events.HTTPRegistered{Ref: "x", Scope: "request", Method: "GET", Origin: "o"}),
			d("act-1", &events.HTTPLost{Ref: "x", Reason: "connection_dropped"}),
			d("act-1", &events.HTTPBarrier{Ref: "x", Outcome: "ok"}),
			d("act-1", &events.HTTPWorkerDown{Ref: "x", Worker: "w", Reason: "normal"})}, "lost (connection_dropped)"},
		{"hop without its own barrier", append(eventgen.ConfirmedRequest("act-1", "x", "request")[:1],
			d("act-1", &events.HTTPRedirect{Ref: "x", Hop: 1, HopRef: "x-h1", Status: 307, Origin: "o", SameOrigin: true}),
			d("act-1", &events.HTTPBarrier{Ref: "x", Outcome: "ok"}),
			d("act-1", &events.HTTPWorkerDown{Ref: "x", Worker: "w", Reason: "normal"})), "{act-1, x-h1}: pending (awaiting_barrier)"},
		{"evidence for an unregistered request", []events.Draft{
			d("act-1", &events.HTTPBarrier{Ref: "ghost", Outcome: "ok"})}, "evidence_anomalies: 1"},
		{"transport barrier missing", nil, "obligation transport: missing (barrier_missing)"},
		{"obligation without barrier", nil, "obligation workers: missing (no_barrier_observed)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFeed(t)
			f.apply(opened("act-1"))
			f.apply(tc.extra...)
			bs := barriers("act-1", "ok")
			switch tc.name {
			case "transport barrier missing":
				bs[0] = d("act-1", &events.ConnectionBarrier{Obligation: "transport", Outcome: "missing"})
			case "obligation without barrier":
				bs = append(bs[:1], bs[2:]...)
			}
			f.apply(bs...)
			f.apply(closed("act-1", false))
			rep, _ := f.s.CloseReport("act-1")
			if rep.Result != projector.ResultUnconfirmed || !strings.Contains(strings.Join(rep.Reasons, "\n"), tc.want) {
				t.Fatalf("result %s, reasons %q, want one containing %q", rep.Result, rep.Reasons, tc.want)
			}
		})
	}
}

func TestConfirmedClose(t *testing.T) {
	f := newFeed(t)
	f.apply(d("act-1", &events.ConnectionOpened{Transport: "stdio", Cleanup: "verified", OneShot: true}),
		d("act-1", &events.LeaseChildStarted{PID: 7, GuardianPID: 6, Cleanup: "verified"}),
		d("act-1", &events.GuardianStarted{GuardianPID: 6, TargetPID: 7, HelperVersion: "g/1", PIDFD: true}))
	f.apply(eventgen.ConfirmedRequest("act-1", "r", "request")...)
	f.apply(d("act-1", &events.HTTPRegistered{Ref: "r2", Scope: "request", Method: "GET", Origin: "o"}),
		d("act-1", &events.HTTPRedirect{Ref: "r2", Hop: 1, HopRef: "r2-h1", Status: 307, Origin: "o", SameOrigin: true}),
		d("act-1", &events.HTTPBarrier{Ref: "r2-h1", Outcome: "ok"}),
		d("act-1", &events.HTTPBarrier{Ref: "r2", Outcome: "ok"}),
		d("act-1", &events.HTTPWorkerDown{Ref: "r2", Worker: "w", Reason: "normal"}))
	f.apply(d("act-1", &events.ConnectionPhase{Phase: "closing", BudgetNS: 5}))
	at := events.At(t0)
	f.apply(d("act-1", &events.GuardianReceipt{HelperVersion: "g/1", TargetPID: 7, Reaped: true, ExitCode: 3,
		StdinClosedAt: at, StdoutClosedAt: at, StderrClosedAt: at, HelperExitCode: 0}))
	f.apply(barriers("act-1", "ok")...)
	f.apply(d("act-1", &events.ConnectionPhase{Phase: "closed"}), closed("act-1", false))
	rep, ok := f.s.CloseReport("act-1")
	if !ok || rep.Result != projector.ResultConfirmed || len(rep.Reasons) != 0 || rep.Version != 1 || !rep.Retained {
		t.Fatalf("report %+v", rep)
	}
	if rep.Counts.Confirmed != 4 || rep.Counts.Resources != 4 || rep.ElapsedNS != 42 || rep.CloseCalls != 1 {
		t.Fatalf("counts %+v elapsed %d calls %d", rep.Counts, rep.ElapsedNS, rep.CloseCalls)
	}
	if v, reasons, _ := f.s.Verdict("act-1"); v != projector.ResultConfirmed || len(reasons) != 0 {
		t.Fatalf("verdict %s %q", v, reasons)
	}
	a, _ := f.s.Activation("act-1")
	if a.Connection.Phase != events.PhaseClosed {
		t.Fatalf("phase %s", a.Connection.Phase)
	}
}

func TestGuardianReceiptRules(t *testing.T) {
	at := events.At(t0)
	good := events.GuardianReceipt{HelperVersion: "g/1", TargetPID: 7, Reaped: true, ExitCode: -1, Signal: "KILL",
		StdinClosedAt: at, StdoutClosedAt: at, StderrClosedAt: at, HelperExitCode: 0}
	for _, tc := range []struct {
		name   string
		mod    func(r *events.GuardianReceipt)
		status projector.Status
		reason string
	}{
		{"killed target still confirms", func(*events.GuardianReceipt) {}, projector.StatusConfirmed, ""},
		{"not reaped", func(r *events.GuardianReceipt) { r.Reaped = false }, projector.StatusMissing, "not_reaped"},
		{"stdout close missing", func(r *events.GuardianReceipt) { r.StdoutClosedAt = nil }, projector.StatusMissing, "stdout_close_missing"},
		{"helper exit nonzero", func(r *events.GuardianReceipt) { r.HelperExitCode = -1 }, projector.StatusLost, "helper_lost"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFeed(t)
			r := good
			tc.mod(&r)
			f.apply(d("act-1", &events.GuardianStarted{GuardianPID: 6, TargetPID: 7, HelperVersion: "g/1"}), d("act-1", &r))
			got, ok := f.ev("act-1").Resource("guardian:7")
			if !ok || got.Status != tc.status || got.Reason != tc.reason || got.Kind != projector.ResourceGuardianChild {
				t.Fatalf("resource %+v", got)
			}
		})
	}
	f := newFeed(t)
	f.apply(d("act-1", &events.LeaseChildStarted{PID: 7, GuardianPID: 6, Cleanup: "verified"}),
		d("act-1", &events.GuardianLost{Reason: "deadline"}))
	if got, _ := f.ev("act-1").Resource("guardian:7"); got.Status != projector.StatusLost || got.Reason != "deadline" {
		t.Fatalf("lost without pid: %+v", got)
	}
	f.apply(d("act-1", &good)) // a receipt after loss cannot restore it
	if got, _ := f.ev("act-1").Resource("guardian:7"); got.Status != projector.StatusLost {
		t.Fatalf("receipt after loss: %+v", got)
	}
	f = newFeed(t)
	f.apply(d("act-2", &events.LeaseChildStarted{PID: 9, Cleanup: "best_effort"}))
	if got, _ := f.ev("act-2").Resource("child:9"); got.Status != projector.StatusUnsupported {
		t.Fatalf("best effort child: %+v", got)
	}
}

// A direct child ("cleanup": "direct"): lease.child_closed records the
// host's facts on the child, which stays unsupported; a close whose only
// gap is that child, seen exiting by the host, is unverified — never
// confirmed — and anything else about it keeps it unconfirmed.
func TestDirectChildUnverified(t *testing.T) {
	at := events.At(time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC))
	direct := func(a string, reaped bool, barrier func(events.Obligation) events.BarrierOutcome) []events.Draft {
		code := -1
		out := []events.Draft{
			d(a, &events.LeaseChildStarted{PID: 9, Cleanup: events.CleanupBestEffort}),
			d(a, &events.ConnectionOpened{Transport: events.TransportStdio, Cleanup: events.CleanupBestEffort}),
			d(a, &events.LeaseChildClosed{PID: 9, Reaped: reaped, ExitCode: code, Signal: "KILL", ReapedAt: at, ExitedBeforeClose: true,
				StdinClosedAt: at, StdoutClosedAt: at, StderrClosedAt: at, Descendants: events.DescendantsUnknown}),
		}
		for _, o := range projector.Obligations {
			out = append(out, d(a, &events.ConnectionBarrier{Obligation: o, Outcome: barrier(o), ElapsedNS: 1}))
		}
		return append(out, closed(a, false))
	}
	honest := func(o events.Obligation) events.BarrierOutcome {
		if o == events.ObligationSupervisor {
			return events.BarrierUnsupported
		}
		return events.BarrierOK
	}
	f := newFeed(t)
	f.apply(direct("act-1", true, honest)...)
	if v, reasons, _ := f.s.Verdict("act-1"); v != projector.ResultUnverified || len(reasons) == 0 {
		t.Fatalf("direct child closed as observed: %s %v", v, reasons)
	}
	rep, _ := f.s.Report("act-1")
	r := rep.Resources[0]
	if r.ID.Reference != "child:9" || r.Status != projector.StatusUnsupported || !r.Facts.Reaped || r.Facts.Signal != "KILL" ||
		!r.Facts.ExitedBeforeClose || r.Facts.Descendants != "unknown" || r.Facts.ExitCode == nil || *r.Facts.ExitCode != -1 {
		t.Fatalf("child facts: %+v", r)
	}
	// Not seen exiting: it may still run.
	f.apply(direct("act-2", false, honest)...)
	// A failed transport step is a failure, whatever the child.
	f.apply(direct("act-3", true, func(o events.Obligation) events.BarrierOutcome {
		if o == events.ObligationTransport {
			return events.BarrierError
		}
		return honest(o)
	})...)
	for _, a := range []string{"act-2", "act-3"} {
		if v, _, _ := f.s.Verdict(a); v != projector.ResultUnconfirmed {
			t.Fatalf("%s: %s", a, v)
		}
	}
	// Facts about a child that was never started are an anomaly.
	f.apply(d("act-4", &events.LeaseChildClosed{PID: 4, Reaped: true, Descendants: events.DescendantsUnknown}))
	if f.ev("act-4").Anomalies() != 1 {
		t.Fatalf("anomalies %d", f.ev("act-4").Anomalies())
	}
	sum := audit.Summarize(f.s, audit.All)
	if sum.Verdicts[projector.ResultUnverified] != 1 || len(sum.Unconfirmed) != 3 {
		t.Fatalf("summary: %+v", sum)
	}
}

func TestRepeatedCloseReturnsStoredReport(t *testing.T) {
	f := newFeed(t)
	f.apply(opened("act-1"))
	f.apply(barriers("act-1", "ok")...)
	f.apply(closed("act-1", false))
	first, _ := f.s.CloseReport("act-1")
	if first.Result != projector.ResultConfirmed || first.CloseCalls != 1 {
		t.Fatalf("first %+v", first)
	}
	f.apply(d("act-1", &events.ConnectionBarrier{Obligation: "transport", Outcome: "error"}), closed("act-1", true), closed("act-1", true))
	again, _ := f.s.CloseReport("act-1")
	if again.CloseCalls != 3 {
		t.Fatalf("close calls %d", again.CloseCalls)
	}
	again.CloseCalls = first.CloseCalls
	if fmt.Sprint(first) != fmt.Sprint(again) {
		t.Fatalf("stored report changed:\n%+v\n%+v", first, again)
	}
}

func TestCloseWithoutRetainedReportIsUnconfirmed(t *testing.T) {
	f := newFeed(t)
	f.apply(barriers("act-9", "ok")...)
	f.apply(closed("act-9", true))
	rep, ok := f.s.CloseReport("act-9")
	if !ok || rep.Result != projector.ResultUnconfirmed || rep.Retained || !strings.HasPrefix(rep.Reasons[0], "no_retained_report") {
		t.Fatalf("report %+v", rep)
	}
	// Never closed: no report, and the verdict says why.
	f.apply(opened("act-8"))
	if _, ok := f.s.CloseReport("act-8"); ok {
		t.Fatal("report without close")
	}
	if v, rs, _ := f.s.Verdict("act-8"); v != projector.ResultUnconfirmed || !strings.HasPrefix(rs[0], "not_closed") {
		t.Fatalf("verdict %s %q", v, rs)
	}
}

func TestPhaseNeverMovesBackwards(t *testing.T) {
	f := newFeed(t)
	f.apply(opened("act-1"), d("act-1", &events.ConnectionPhase{Phase: "closing"}), d("act-1", &events.ConnectionPhase{Phase: "closed"}),
		d("act-1", &events.ConnectionPhase{Phase: "closing"}), opened("act-1"))
	a, _ := f.s.Activation("act-1")
	if a.Connection.Phase != events.PhaseClosed || a.Connection.Regressions != 2 || a.Connection.Report == nil {
		t.Fatalf("connection %+v", a.Connection)
	}
}

func TestLeases(t *testing.T) {
	f := newFeed(t)
	ld := func(a string, p events.Payload) events.Draft {
		return events.Draft{Activation: a, Session: "s-1", Server: "github", Payload: p}
	}
	f.apply(ld("act-1", &events.LeaseAcquiring{KeySession: "s-1", Fingerprint: eventgen.Digest}))
	key := projector.LeaseKey{Session: "s-1", Server: "github"}
	if l, _ := f.s.Lease(key); l.State != projector.LeaseStarting {
		t.Fatalf("lease %+v", l)
	}
	f.apply(ld("act-1", &events.LeaseChildStarted{PID: 5, GuardianPID: 4, Cleanup: "verified"}),
		ld("act-1", &events.LeaseListingPinned{ToolCount: 2, Pages: 1, ListingBytes: 10, ListingDigest: strings.Repeat("cd", 32)}),
		ld("act-1", &events.LeaseAcquired{Fingerprint: eventgen.Digest}),
		ld("act-1", &events.CallAdmitted{CallID: "c1", Tool: "t", Digest: eventgen.Digest}),
		ld("act-1", &events.CallAdmitted{CallID: "c2", Tool: "t", Digest: eventgen.Digest}),
		ld("act-1", &events.CallFinished{CallID: "c1", Tool: "t", Outcome: "ok", ArgsSHA256: eventgen.Digest}))
	l, _ := f.s.Lease(key)
	if l.State != projector.LeaseReady || l.CallsInFlight != 1 || l.ListingDigest != strings.Repeat("cd", 32) ||
		l.Fingerprint != eventgen.Digest || l.PID != 5 || l.LastUse.IsZero() || !l.LastUse.Equal(t0.Add(7*time.Millisecond)) {
		t.Fatalf("ready lease %+v", l)
	}
	f.apply(ld("act-1", &events.LeaseRevoked{Reason: "host_request", CallsInFlight: 1}),
		ld("act-1", &events.CallRefused{CallID: "c3", Tool: "t", Reason: "cancelled"}),
		ld("act-1", &events.CallFinished{CallID: "c2", Tool: "t", Outcome: "cancelled", ArgsSHA256: eventgen.Digest, KilledOnCancel: true}))
	if l.State != projector.LeaseCancelled || l.CallsInFlight != 0 || l.CallsRefused != 1 || l.KilledOnCancel != 1 || l.GateViolations != 0 {
		t.Fatalf("cancelled lease %+v", l)
	}
	f.apply(ld("act-1", &events.CallAdmitted{CallID: "c4", Tool: "t", Digest: eventgen.Digest}))
	if l.GateViolations != 1 {
		t.Fatal("a call admitted after revocation is not flagged")
	}
	f.apply(ld("act-1", &events.LeaseTerminated{Reason: "revoked"}))
	if l.State != projector.LeaseTerminated || l.Reason != "host_request" || l.Live() {
		t.Fatalf("terminated %+v", l)
	}
	// Shared key and poison; a new lifetime at the same key replaces the old.
	f.apply(ld("act-2", &events.LeaseAcquiring{KeySession: "shared", Fingerprint: eventgen.Digest, Shared: true}),
		ld("act-2", &events.LeasePoisoned{CallID: "c", Reason: "digest_mismatch", Tool: "t", ExpectedDigest: eventgen.Digest}),
		ld("act-3", &events.LeaseAcquiring{KeySession: "s-1", Fingerprint: eventgen.Digest}))
	if l, _ := f.s.Lease(projector.LeaseKey{Session: "shared", Server: "github"}); l.State != projector.LeasePoisoned || !l.Shared {
		t.Fatalf("shared %+v", l)
	}
	if l, _ := f.s.Lease(key); l.Activation != "act-3" {
		t.Fatalf("replaced %+v", l)
	}
	// Session end drops terminated leases of the session, spares shared ones.
	f.apply(ld("act-3", &events.LeaseTerminated{Reason: "session_ended"}), events.Draft{Session: "s-1", Payload: &events.SessionEnded{LeasesTerminated: 1, SharedSpared: 1}})
	if _, ok := f.s.Lease(key); ok || len(f.s.Leases()) != 1 {
		t.Fatalf("leases after session end: %d", len(f.s.Leases()))
	}
}

func TestRequests(t *testing.T) {
	f := newFeed(t)
	f.apply(d("act-1", &events.RequestRegistered{Handle: "q1", Owner: "o1", Method: "resources/read", TimeoutNS: 5}),
		d("act-1", &events.RequestDispatched{Handle: "q1", WireID: "17"}),
		d("act-1", &events.RequestAwaitTimedOut{Handle: "q1", WaitedNS: 5}),
		d("act-1", &events.RequestContinued{Handle: "q1", WireID: "18", Round: 1}),
		d("act-1", &events.RequestCompleted{Handle: "q1", Outcome: "ok", ResultBytes: 9}),
		d("act-1", &events.RequestRegistered{Handle: "q2", Owner: "o1", Method: "resources/list", TimeoutNS: 5}),
		d("act-1", &events.RequestCancelled{Handle: "q2", Reason: "host_cancelled", LocalSettled: true, TransportAccepted: "yes", NotificationDelivered: "unknown", Remote: "unknown"}),
		d("act-1", &events.RequestRegistered{Handle: "q3", Owner: "o1", Method: "resources/list", TimeoutNS: 5}),
		d("act-1", &events.RequestDispatched{Handle: "ghost", WireID: "1"}))
	q1, _ := f.s.Request("q1")
	if q1.State != projector.RequestCompleted || fmt.Sprint(q1.WireIDs) != "[17 18]" || q1.AwaitTimeouts != 1 || q1.Rounds != 1 || q1.Outcome != "ok" {
		t.Fatalf("q1 %+v", q1)
	}
	q2, _ := f.s.Request("q2")
	if q2.State != projector.RequestCancelled || q2.Cancellation == nil || q2.Cancellation.Remote != "unknown" || q2.Cancellation.TransportAccepted != "yes" {
		t.Fatalf("q2 %+v", q2)
	}
	if f.s.Anomalies().OrphanRequest != 1 {
		t.Fatalf("dispatch before registration not flagged: %+v", f.s.Anomalies())
	}
	f.apply(d("act-1", &events.RequestOwnerEnded{Owner: "o1", HandlesSettled: 1}))
	o, _ := f.s.Owner("o1")
	if !o.Ended || o.Handles != nil || *o.Summary != (projector.OwnerSummary{Completed: 1, Cancelled: 1, Unsettled: 1}) {
		t.Fatalf("owner %+v", o)
	}
	if _, ok := f.s.Request("q1"); ok {
		t.Fatal("handles of an ended owner are kept")
	}
}

func TestOutOfOrderAndUndecodable(t *testing.T) {
	c := eventgen.NewChain(t0)
	e1, raw1 := c.Seal(opened("act-1"))
	s := projector.New()
	if err := s.Apply(&e1); err != nil {
		t.Fatal(err)
	}
	var se *projector.SeqError
	if err := s.Apply(&e1); !errors.As(err, &se) || !errors.Is(err, projector.ErrOutOfOrder) || se.Got != 1 || se.Last != 1 {
		t.Fatalf("replayed event: %v", err)
	}
	if err := s.ApplyRaw(raw1); !errors.Is(err, projector.ErrOutOfOrder) {
		t.Fatalf("replayed raw: %v", err)
	}
	before, _ := projector.Marshal(s)
	bad := e1
	bad.Seq = 2
	bad.Data = []byte(`{"transport":"carrier-pigeon","cleanup":"verified","one_shot":true}`)
	if err := s.Apply(&bad); !errors.Is(err, projector.ErrDecode) {
		t.Fatalf("bad payload: %v", err)
	}
	if after, _ := projector.Marshal(s); !bytes.Equal(before, after) {
		t.Fatal("a refused event changed the state")
	}
}

func TestSnapshotFormat(t *testing.T) {
	s := projector.New()
	b, _ := projector.Marshal(s)
	current := []byte(`"version":` + strconv.Itoa(projector.SnapshotVersion))
	if !bytes.Contains(b, current) {
		t.Fatalf("snapshot without %s", current)
	}
	old := bytes.Replace(b, current, []byte(`"version":1`), 1) // the layout before never-started activations
	var fe *projector.FormatError
	if _, err := projector.Unmarshal(old); !errors.As(err, &fe) || !errors.Is(err, projector.ErrSnapshotFormat) || fe.Version != 1 {
		t.Fatalf("old version: %v", err)
	}
	if _, err := projector.Unmarshal([]byte(`{"format":"other","version":1}`)); !errors.Is(err, projector.ErrSnapshotFormat) {
		t.Fatalf("other format: %v", err)
	}
	bad := bytes.Replace(b, []byte(`"seq":0`), []byte(`"seq":0,"extra":1`), 1)
	if _, err := projector.Unmarshal(bad); !errors.Is(err, projector.ErrSnapshotCorrupt) {
		t.Fatalf("unknown field: %v", err)
	}
}

// TestEvidenceMemory reports the heap held by one activation's evidence
// after 10^6 confirmed receipts (goal: < 1 MiB): the heap with the state
// alive minus the heap after it is dropped.
func TestEvidenceMemory(t *testing.T) {
	n := 1_000_000
	if testing.Short() {
		n = 100_000
	}
	s := projector.New()
	for i := range n {
		envs := receiptEnvs(uint64(3*i), "r"+strconv.Itoa(i), []string{"request", "sse"}[i%2])
		for j := range envs {
			if err := s.Apply(&envs[j]); err != nil {
				t.Fatal(err)
			}
		}
	}
	var with, without runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&with)
	snap, _ := projector.Marshal(s)
	runtime.KeepAlive(s)
	s = nil
	runtime.GC()
	runtime.ReadMemStats(&without)
	held := int64(with.HeapAlloc) - int64(without.HeapAlloc)
	t.Logf("one activation, %d confirmed receipts: state holds %d bytes of heap (%.1f KiB); snapshot %d bytes", n, held, float64(held)/1024, len(snap))
	if held > 1<<20 {
		t.Fatalf("evidence state holds %d bytes, goal < 1 MiB", held)
	}
}

// TestRawTimesAcrossMidnight: the replay parser's date cache gives the
// same times as the envelope decoder across a day boundary.
func TestRawTimesAcrossMidnight(t *testing.T) {
	c := eventgen.NewChain(time.Date(2026, 12, 31, 23, 59, 59, 995_000_000, time.UTC))
	a, b := projector.New(), projector.New()
	lease := events.Draft{Activation: "act-1", Session: "s-1", Server: "srv", Payload: &events.LeaseAcquiring{KeySession: "s-1", Fingerprint: eventgen.Digest}}
	env, raw := c.Seal(lease)
	if a.Apply(&env) != nil || b.ApplyRaw(raw) != nil {
		t.Fatal("lease")
	}
	for i := range 12 {
		env, raw := c.Seal(d("act-1", &events.CallAdmitted{CallID: "c", Tool: "t", Digest: eventgen.Digest}))
		if err := a.Apply(&env); err != nil {
			t.Fatal(err)
		}
		if err := b.ApplyRaw(raw); err != nil {
			t.Fatal(err)
		}
		mx, _ := projector.Marshal(a)
		my, _ := projector.Marshal(b)
		if !bytes.Equal(mx, my) {
			t.Fatalf("event %d at %s: states differ", i, env.Time)
		}
	}
}

// A pipe the helper had to close at its deadline (a descendant held it) is
// still a real close: the child confirms, and the facts say it was forced.
// The fast decoder and the strict one agree on the new fields.
func TestGuardianReceiptForcedFacts(t *testing.T) {
	at := events.At(t0)
	r := &events.GuardianReceipt{HelperVersion: "g/1", TargetPID: 7, Reaped: true, ExitCode: 0,
		StdinClosedAt: at, StdoutClosedAt: at, StderrClosedAt: at, DescendantsSeen: []int{9}, DescendantsDropped: 3,
		StdoutForced: true, StdinDroppedBytes: 4096, HelperExitCode: 0}
	f := newFeed(t)
	f.apply(d("act-1", &events.GuardianStarted{GuardianPID: 6, TargetPID: 7, HelperVersion: "g/1"}), d("act-1", r))
	got, ok := f.ev("act-1").Resource("guardian:7")
	if !ok || got.Status != projector.StatusConfirmed || !got.Facts.StdoutForced || got.Facts.StderrForced ||
		got.Facts.StdinDroppedBytes != 4096 || got.Facts.DescendantsSeen != 4 {
		t.Fatalf("resource %+v", got)
	}
	c := eventgen.NewChain(t0)
	env, raw := c.Seal(eventgen.D("act-1", r))
	checkDecode(t, env, raw)
}

// A refusal at the live-lease cap (lease.acquire_failed with no acquiring)
// and a spawn failure (acquiring, then acquire_failed) start nothing: their
// verdict is never_started, not an unconfirmed cleanup, and the cap
// refusal is no orphan-lease anomaly. Anything more makes the activation
// started, judged by its close report; a snapshot keeps the distinction.
func TestNeverStarted(t *testing.T) {
	f := newFeed(t)
	f.apply(
		eventgen.D("act-cap", &events.LeaseAcquireFailed{Fingerprint: eventgen.Digest, Reason: "too_many_leases"}),
		d("act-spawn", &events.LeaseAcquiring{KeySession: "s-1", Fingerprint: eventgen.Digest}),
		d("act-spawn", &events.LeaseAcquireFailed{Fingerprint: eventgen.Digest, Reason: "spawn_failed", DurationNS: 5}),
		d("act-init", &events.LeaseAcquiring{KeySession: "s-1", Fingerprint: eventgen.Digest}),
		d("act-init", &events.GuardianStarted{GuardianPID: 6, TargetPID: 7, HelperVersion: "g/1"}),
		d("act-init", &events.LeaseAcquireFailed{Fingerprint: eventgen.Digest, Reason: "initialize_failed", DurationNS: 5}),
		d("act-pending", &events.LeaseAcquiring{KeySession: "s-1", Fingerprint: eventgen.Digest}),
	)
	check := func(s *projector.State) {
		t.Helper()
		for act, want := range map[string]string{"act-cap": projector.ResultNeverStarted, "act-spawn": projector.ResultNeverStarted,
			"act-init": projector.ResultUnconfirmed, "act-pending": projector.ResultUnconfirmed} {
			v, reasons, _ := s.Verdict(act)
			if v != want {
				t.Errorf("%s: verdict %s %v, want %s", act, v, reasons, want)
			}
			if want == projector.ResultNeverStarted && (len(reasons) != 1 || !strings.HasPrefix(reasons[0], "never_started:")) {
				t.Errorf("%s: reasons %v", act, reasons)
			}
		}
		if an := s.Anomalies(); an.OrphanLease != 0 {
			t.Errorf("anomalies %+v", an)
		}
	}
	check(f.s)
	b, err := projector.Marshal(f.s)
	if err != nil {
		t.Fatal(err)
	}
	restored, err := projector.Unmarshal(b)
	if err != nil {
		t.Fatal(err)
	}
	check(restored)
}

// An activation id that starts a second lifetime after its close report
// (a host reusing an id) is unconfirmed: the frozen report cannot speak
// for the later child. A snapshot keeps it so.
func TestReopenedAfterClose(t *testing.T) {
	f := newFeed(t)
	f.apply(opened("act-1"))
	f.apply(barriers("act-1", events.BarrierOK)...)
	f.apply(d("act-1", &events.ConnectionClosed{ElapsedNS: 1}))
	if v, r, _ := f.s.Verdict("act-1"); v != projector.ResultConfirmed {
		t.Fatalf("first lifetime: %s %v", v, r)
	}
	f.apply(d("act-1", &events.GuardianStarted{GuardianPID: 8, TargetPID: 9, HelperVersion: "g/1"}))
	check := func(s *projector.State) {
		t.Helper()
		v, r, _ := s.Verdict("act-1")
		if v != projector.ResultUnconfirmed || len(r) != 1 || !strings.HasPrefix(r[0], "reopened_after_close") {
			t.Fatalf("reopened: %s %v", v, r)
		}
	}
	check(f.s)
	b, err := projector.Marshal(f.s)
	if err != nil {
		t.Fatal(err)
	}
	s2, err := projector.Unmarshal(b)
	if err != nil {
		t.Fatal(err)
	}
	check(s2)
}

// A confirmed resource's storage is reused for the next tracked one; the
// receipt kept in the recent window must not change with it (its signals
// slice is its own).
func TestReusedResourceLeavesReceiptIntact(t *testing.T) {
	f := newFeed(t)
	now := events.At(t0)
	guardian := func(pid int, sig events.Signal) []events.Draft {
		return []events.Draft{
			d("a", &events.GuardianStarted{GuardianPID: pid + 1, TargetPID: pid, HelperVersion: "g/1", PIDFD: true}),
			d("a", &events.GuardianSignal{TargetPID: pid, Signal: sig, At: now, Alive: true}),
			d("a", &events.GuardianReceipt{HelperVersion: "g/1", TargetPID: pid, Reaped: true, ExitCode: -1,
				Signal: string(sig), StdinClosedAt: now, StdoutClosedAt: now, StderrClosedAt: now, EOFGraceNS: 1}),
		}
	}
	f.apply(guardian(100, events.SignalTERM)...)
	f.apply(guardian(200, events.SignalKILL)[:2]...) // tracked in the reused storage, signalled
	recent := f.ev("a").Recent()
	if len(recent) != 1 || len(recent[0].Facts.Signals) != 1 || recent[0].Facts.Signals[0] != string(events.SignalTERM) {
		t.Fatalf("receipt changed: %+v", recent)
	}
	if r, ok := f.ev("a").Resource("guardian:200"); !ok || r.Status != projector.StatusPending ||
		len(r.Facts.Signals) != 1 || r.Facts.Signals[0] != string(events.SignalKILL) || r.Facts.Receipt {
		t.Fatalf("new resource: %+v", r)
	}
}
