package bus_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/leaseledger/leaseledger/bus"
	"github.com/leaseledger/leaseledger/bus/busclient"
	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/nats-io/nats.go"
)

// One fleet bus serves two hosts' ledgers, each in its host's space: a
// client made WithHost(h) reads h's ledger as it would read h's own bus.
func ExampleStartFleet() {
	dir, _ := os.MkdirTemp("", "example-fleet")
	defer os.RemoveAll(dir)
	var spaces []bus.Space
	for i, host := range []string{"h1", "h2"} {
		l, _ := ledger.Open(ledger.Options{Dir: filepath.Join(dir, host)})
		defer l.Close()
		for j := 0; j <= i; j++ {
			_, _ = l.Append(context.Background(), events.Draft{Activation: "A1", Session: "s", Server: "srv",
				Payload: &events.CallAdmitted{CallID: fmt.Sprint("c", j), Tool: "echo", Digest: fp}})
		}
		spaces = append(spaces, bus.Space{HostID: host, Ledger: l})
	}
	fleet, err := bus.StartFleet(bus.FleetOptions{Port: bus.RandomPort, Spaces: spaces})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer fleet.Close() // before the ledgers

	nc, _ := nats.Connect(fleet.ClientURL())
	defer nc.Close()
	for _, host := range []string{"h1", "h2"} {
		head, err := busclient.NewClient(nc).WithHost(host).Head(context.Background())
		fmt.Println(host, "head:", head.Seq, err)
	}
	// Output:
	// h1 head: 1 <nil>
	// h2 head: 2 <nil>
}
