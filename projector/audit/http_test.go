package audit_test

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/projector"
	"github.com/leaseledger/leaseledger/projector/audit"
	"github.com/leaseledger/leaseledger/projector/internal/eventgen"
)

const (
	oA = "https://a.example"
	oB = "https://b.example"
)

func reg(a, ref string) events.Draft {
	return d(a, &events.HTTPRegistered{Ref: ref, Scope: "request", Method: events.HTTPPost, Origin: oA})
}

func hop(a, ref string, n int, origin string) events.Draft {
	return d(a, &events.HTTPRedirect{Ref: ref, Hop: n, HopRef: fmt.Sprintf("%s-%d", ref, n), Status: 307, Origin: origin, SameOrigin: origin == oA})
}

func barrier(a, ref string, o events.HTTPBarrierOutcome) events.Draft {
	return d(a, &events.HTTPBarrier{Ref: ref, Outcome: o})
}

// Each HTTP request lists its hops (from and to origins chained as
// recorded), barriers, completion, worker end and loss, with the evidence
// status the projector gives each request and hop.
func TestAuditHTTPTimeline(t *testing.T) {
	a := "act-1"
	log := seal(
		reg(a, "h-1"),
		hop(a, "h-1", 1, oB),
		barrier(a, "h-1-1", events.HTTPBarrierOK),
		hop(a, "h-1", 2, oA),
		barrier(a, "h-1-2", events.HTTPBarrierError),
		barrier(a, "h-1-2", events.HTTPBarrierOK), // a retried barrier
		d(a, &events.HTTPCompleted{Ref: "h-1", Status: 200, Outcome: events.HTTPAborted, BodyBytes: 9, Detail: "aborted"}),
		barrier(a, "h-1", events.HTTPBarrierOK),
		d(a, &events.HTTPWorkerDown{Ref: "h-1", Worker: "w-1", Reason: "released"}), // covers the hops too
		reg(a, "h-2"),
		d(a, &events.HTTPLost{Ref: "h-2", Reason: "connection_dropped"}),
		reg(a, "h-3"),
		barrier(a, "h-3", events.HTTPBarrierTimeout),
		d(a, &events.ConnectionOpened{Transport: events.TransportHTTP, Cleanup: events.CleanupBestEffort, OneShot: true}),
		d(a, &events.ConnectionClosed{ElapsedNS: 1}),
		barrier(a, "h-3", events.HTTPBarrierOK), // after the close: no effect
	)
	out := log.fold(t, a, audit.Options{})
	if len(out.HTTPRequests) != 3 {
		t.Fatalf("http requests: %+v", out.HTTPRequests)
	}
	h1 := out.HTTPRequests[0]
	wantHops := []audit.HTTPHop{
		{Hop: 1, Ref: "h-1-1", Seq: 2, RedirectStatus: 307, FromOrigin: oA, ToOrigin: oB, Status: projector.StatusConfirmed,
			Barriers: []audit.HTTPBarrier{{Seq: 3, Outcome: events.HTTPBarrierOK}}},
		{Hop: 2, Ref: "h-1-2", Seq: 4, RedirectStatus: 307, FromOrigin: oB, ToOrigin: oA, SameOrigin: true, Status: projector.StatusConfirmed,
			Barriers: []audit.HTTPBarrier{{Seq: 5, Outcome: events.HTTPBarrierError}, {Seq: 6, Outcome: events.HTTPBarrierOK}}},
	}
	wantSteps := []string{
		"1 registered POST " + oA + " (scope request)",
		"2 redirect hop 1 (h-1-1): 307 " + oA + " → " + oB + ", cross origin",
		"3 barrier ok (hop 1, h-1-1)",
		"4 redirect hop 2 (h-1-2): 307 " + oB + " → " + oA + ", same origin",
		"5 barrier error (hop 2, h-1-2)",
		"6 barrier ok (hop 2, h-1-2)",
		"7 completed aborted, status 200, 9 bytes, aborted",
		"8 barrier ok",
		"9 worker w-1 down (released)",
	}
	if h1.Ref != "h-1" || h1.Method != events.HTTPPost || h1.Origin != oA || h1.Scope != "request" || h1.RegisteredSeq != 1 ||
		h1.Status != projector.StatusConfirmed || !reflect.DeepEqual(h1.Hops, wantHops) ||
		h1.Completed == nil || h1.Completed.Outcome != events.HTTPAborted ||
		!reflect.DeepEqual(h1.Barriers, []audit.HTTPBarrier{{Seq: 8, Outcome: events.HTTPBarrierOK}}) ||
		h1.WorkerDown == nil || h1.WorkerDown.Worker != "w-1" || h1.Lost != nil || !reflect.DeepEqual(h1.Steps, wantSteps) {
		t.Fatalf("h-1:\n%+v\nsteps %q", h1, h1.Steps)
	}
	if h2 := out.HTTPRequests[1]; h2.Status != projector.StatusLost || h2.Reason != "connection_dropped" || h2.Lost == nil ||
		len(h2.Hops) != 0 || len(h2.Barriers) != 0 || h2.Hops == nil || h2.Barriers == nil {
		t.Fatalf("h-2: %+v", h2)
	}
	h3 := out.HTTPRequests[2]
	if h3.Status != projector.StatusMissing || h3.Reason != "barrier_timeout" ||
		!reflect.DeepEqual(h3.Barriers, []audit.HTTPBarrier{{Seq: 13, Outcome: events.HTTPBarrierTimeout}, {Seq: 16, Outcome: events.HTTPBarrierOK, Late: true}}) ||
		h3.Steps[len(h3.Steps)-1] != "16 barrier ok — after the close, no effect" {
		t.Fatalf("h-3: %+v", h3)
	}
}

// A request whose receipt moved into an aggregate is still confirmed; an
// event for a reference never registered gets an entry with no status.
func TestAuditHTTPStatusAggregatedAndUnregistered(t *testing.T) {
	var ds []events.Draft
	for i := range projector.RecentReceipts + 1 {
		ds = append(ds, eventgen.ConfirmedRequest("act-1", fmt.Sprintf("h-%d", i), "request")...)
	}
	ds = append(ds, barrier("act-1", "ghost", events.HTTPBarrierOK))
	out := seal(ds...).fold(t, "act-1", audit.Options{Timeline: 1})
	if n := len(out.HTTPRequests); n != projector.RecentReceipts+2 {
		t.Fatalf("%d http requests", n)
	}
	if first := out.HTTPRequests[0]; first.Ref != "h-0" || first.Status != projector.StatusConfirmed || out.Report.Counts.Aggregated != 1 {
		t.Fatalf("aggregated h-0: %+v, counts %+v", first, out.Report.Counts)
	}
	if g := out.HTTPRequests[len(out.HTTPRequests)-1]; g.Ref != "ghost" || g.RegisteredSeq != 0 || g.Status != "" || len(g.Barriers) != 1 {
		t.Fatalf("ghost: %+v", g)
	}
}

// Past MaxHTTPRequests registrations are counted; past MaxBarriers a
// resource's barriers are counted; hops past MaxHops are counted and
// their later events stay with their request.
func TestAuditHTTPBounds(t *testing.T) {
	a := "act-1"
	ds := []events.Draft{reg(a, "h-0")}
	for n := 1; n <= audit.MaxHops+1; n++ {
		ds = append(ds, d(a, &events.HTTPRedirect{Ref: "h-0", Hop: min(n, events.MaxRedirectHops), HopRef: fmt.Sprintf("x-%d", n), Status: 307, Origin: oA, SameOrigin: true}))
	}
	ds = append(ds, barrier(a, fmt.Sprintf("x-%d", audit.MaxHops+1), events.HTTPBarrierOK))
	for range audit.MaxBarriers + 2 {
		ds = append(ds, barrier(a, "h-0", events.HTTPBarrierTimeout))
	}
	for i := 1; i < audit.MaxHTTPRequests+2; i++ {
		ds = append(ds, reg(a, fmt.Sprintf("h-%d", i)))
	}
	ds = append(ds, barrier(a, fmt.Sprintf("h-%d", audit.MaxHTTPRequests+1), events.HTTPBarrierOK))
	out := seal(ds...).fold(t, a, audit.Options{Timeline: 1})
	if len(out.HTTPRequests) != audit.MaxHTTPRequests || out.HTTPRequestsOmitted != 2 {
		t.Fatalf("%d http requests, %d omitted", len(out.HTTPRequests), out.HTTPRequestsOmitted)
	}
	r := out.HTTPRequests[0]
	if len(r.Hops) != audit.MaxHops || r.HopsOmitted != 1 || len(r.Barriers) != audit.MaxBarriers || r.BarriersOmitted != 2 {
		t.Fatalf("h-0: %d hops (%d omitted), %d barriers (%d omitted)", len(r.Hops), r.HopsOmitted, len(r.Barriers), r.BarriersOmitted)
	}
	want := fmt.Sprintf("barrier ok (x-%d, hop not listed)", audit.MaxHops+1)
	if !strings.HasSuffix(r.Steps[2+audit.MaxHops], want) {
		t.Fatalf("steps: %q", r.Steps)
	}
}
