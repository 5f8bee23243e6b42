package audit_test

import (
	"fmt"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/projector"
	"github.com/leaseledger/leaseledger/projector/audit"
	"github.com/leaseledger/leaseledger/projector/internal/eventgen"
)

// Fold one activation's events (here sealed in memory; `leaseledger audit`
// reads them from the ledger's activation index) into its audit.
func ExampleFold() {
	c := eventgen.NewChain(t0)
	f := audit.NewFold("act-1", audit.Options{Timeline: 2})
	for _, p := range []events.Payload{
		&events.RequestRegistered{Handle: "r-1", Owner: "o-1", Method: events.MethodListResources, TimeoutNS: 1e9},
		&events.RequestDispatched{Handle: "r-1", WireID: "7"},
		&events.RequestCompleted{Handle: "r-1", Outcome: events.RequestOK, ResultBytes: 120},
	} {
		env, _ := c.Seal(eventgen.D("act-1", p))
		if err := f.Add(&env); err != nil {
			fmt.Println(err)
			return
		}
	}
	out, err := f.Result()
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("verdict:", out.Report.Verdict)
	for _, r := range out.Requests {
		fmt.Println(r.Handle, r.Steps)
	}
	fmt.Printf("timeline: %d events, %d earlier omitted\n", len(out.Timeline), out.TimelineOmitted)
	// Output:
	// verdict: unconfirmed
	// r-1 [1 registered 2 dispatched wire 7 3 completed ok, 120 bytes]
	// timeline: 2 events, 1 earlier omitted
}

// Summarise every activation of a projector state (`leaseledger audit
// --all` replays the whole log into it first).
func ExampleSummarize() {
	c := eventgen.NewChain(t0)
	s := projector.New()
	for _, x := range []events.Draft{
		eventgen.D("act-1", &events.HTTPRegistered{Ref: "h-1", Scope: "request", Method: events.HTTPPost, Origin: "https://mcp.example.com"}),
		eventgen.D("act-2", &events.LeaseAcquireFailed{Fingerprint: eventgen.Digest, Reason: "too_many_leases"}),
	} {
		env, _ := c.Seal(x)
		if err := s.Apply(&env); err != nil {
			fmt.Println(err)
			return
		}
	}
	sum := audit.Summarize(s, audit.DefaultUnconfirmed)
	fmt.Println(sum.Activations, "activations:", sum.Verdicts)
	for _, u := range sum.Unconfirmed {
		fmt.Println(u.Activation, "closed:", u.Closed, "first reason:", u.Reasons[0])
	}
	// Output:
	// 2 activations: map[confirmed:0 never_started:1 unconfirmed:1 unverified:0]
	// act-1 closed: false first reason: not_closed: no close report retained (phase active)
}
