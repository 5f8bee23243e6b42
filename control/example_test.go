package control_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/leaseledger/leaseledger/bus"
	"github.com/leaseledger/leaseledger/bus/busclient"
	"github.com/leaseledger/leaseledger/control"
	"github.com/leaseledger/leaseledger/ledger"
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

// exampleRuntime stands in for serve's runtime: one lease, s-1's of
// github, which a revoke finds once.
type exampleRuntime struct{ leased bool }

func (r *exampleRuntime) Revoke(_ context.Context, req control.RevokeRequest) (int, error) {
	if !r.leased || req.Session != "s-1" || req.Server != "github" {
		return 0, control.ErrNotFound
	}
	r.leased = false
	return 1, nil
}

func (r *exampleRuntime) Allow(context.Context, control.AllowRequest) error { return nil }

func (r *exampleRuntime) EndSession(context.Context, string) error { return nil }

func (r *exampleRuntime) ReapIdle(context.Context, time.Duration) (int, error) { return 0, nil }

func (r *exampleRuntime) Reload(context.Context) (control.ReloadReply, error) {
	return control.ReloadReply{}, nil
}

// The control user revokes and denies a lease, learns that a second
// revoke finds nothing (ErrNotFound, not a silent success), and lifts the
// denial.
func ExampleClient_Revoke() {
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
	b, err := bus.Start(p.Ledger(), bus.Options{Port: bus.RandomPort, ControlUser: "ops", ControlPassword: "pw",
		Services: control.RuntimeServices(&exampleRuntime{leased: true}, p)})
	if err != nil {
		panic(err)
	}
	defer b.Close()
	nc, err := nats.Connect(b.ClientURL(), busclient.UserOptions("ops", "pw")...)
	if err != nil {
		panic(err)
	}
	defer nc.Close()

	c := control.NewClient(nc, "ops")
	req := control.RevokeRequest{Session: "s-1", Server: "github", Reason: "incident_7", Deny: true}
	r, err := c.Revoke(ctx, req)
	fmt.Println("revoked", r.Revoked, err)
	_, err = c.Revoke(ctx, req)
	fmt.Println(errors.Is(err, control.ErrNotFound))
	fmt.Println(c.Allow(ctx, control.AllowRequest{Session: "s-1", Server: "github"}))
	// Output:
	// revoked 1 <nil>
	// true
	// <nil>
}
