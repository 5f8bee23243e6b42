package control_test

import (
	"context"
	"errors"
	"testing"

	"github.com/leaseledger/leaseledger/bus"
	"github.com/leaseledger/leaseledger/control"
)

// On a bus with a host id, a control client made WithHost(host) calls
// the host's services; the bare subjects are refused (the bus's
// permissions confine every user to its host's space).
func TestClientWithHost(t *testing.T) {
	p := openProjection(t)
	fixture(t, p)
	b := startAPI(t, p, &fakeRuntime{}, bus.Options{HostID: "h1"})
	ctx := context.Background()
	for _, who := range []struct{ user, pass string }{{"", ""}, {ctlUser, ctlPass}} {
		c := client(t, b, who.user, who.pass)
		if _, err := c.WithHost("h1").Leases(ctx, control.LeasesRequest{}); err != nil {
			t.Errorf("%q: leases of h1: %v", who.user, err)
		}
		if _, err := c.WithHost("h1").Checkpoint(ctx); err != nil {
			t.Errorf("%q: checkpoint of h1: %v", who.user, err)
		}
		if _, err := c.Leases(ctx, control.LeasesRequest{}); !errors.Is(err, control.ErrForbidden) {
			t.Errorf("%q: leases in the bare space: %v, want ErrForbidden", who.user, err)
		}
		if _, err := c.WithHost("h2").Leases(ctx, control.LeasesRequest{}); !errors.Is(err, control.ErrForbidden) {
			t.Errorf("%q: leases of h2: %v, want ErrForbidden", who.user, err)
		}
	}
	if _, err := client(t, b, ctlUser, ctlPass).WithHost("h1").LiveLeases(ctx, control.LiveLeasesRequest{}); err != nil {
		t.Errorf("control user: live leases of h1: %v", err)
	}
}
