package control_test

import (
	"context"
	"fmt"
	"os"

	"github.com/leaseledger/leaseledger/control"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/ledger/bus"
	"github.com/leaseledger/leaseledger/ledger/busclient"
	"github.com/leaseledger/leaseledger/projector/live"
	"github.com/nats-io/nats.go"
)

// A bus serving the projection API over a live projection, and a
// read-only dashboard reading the live leases and one activation's
// verdict through a Client.
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "control-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	p, err := live.Open(ctx, live.Options{Ledger: ledger.Options{Dir: dir}, SnapshotEvery: -1})
	if err != nil {
		panic(err)
	}
	defer p.Close()
	if _, err := p.Ledger().Append(ctx, leaseDrafts("act-1", "s-1", "github", false, false)...); err != nil {
		panic(err)
	}
	if _, err := p.Ledger().Append(ctx, leaseDrafts("act-2", "s-1", "jira", false, true)...); err != nil {
		panic(err)
	}

	b, err := bus.Start(p.Ledger(), bus.Options{Port: bus.RandomPort, ReadOnlyUser: "dash", ReadOnlyPassword: "pw",
		Services: control.ProjectionServices(p)})
	if err != nil {
		panic(err)
	}
	defer b.Close()
	nc, err := nats.Connect(b.ClientURL(), busclient.UserOptions("dash", "pw")...)
	if err != nil {
		panic(err)
	}
	defer nc.Close()

	c := control.NewClient(nc, "dash")
	page, err := c.Leases(ctx, control.LeasesRequest{Live: true})
	if err != nil {
		panic(err)
	}
	for _, l := range page.Leases {
		fmt.Println(l.Key(), l.State)
	}
	a, err := c.Activation(ctx, control.ActivationRequest{Activation: "act-2"})
	if err != nil {
		panic(err)
	}
	fmt.Println(a.Report.Activation, a.Report.Events, "events, lease", a.Report.Lease.State)
	// Output:
	// s-1/github ready
	// act-2 5 events, lease terminated
}
