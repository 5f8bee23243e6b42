package bus_test

import (
	"context"
	"fmt"
	"os"

	"github.com/leaseledger/leaseledger/bus"
	"github.com/leaseledger/leaseledger/bus/busclient"
	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/internal/testproc"
	"github.com/leaseledger/leaseledger/ledger"
)

// A host's bus joins a cluster under its host id; a Peer (no ledger) in
// the same cluster reads the host's chain through the host's space.
func ExampleStartPeer() {
	dir, _ := os.MkdirTemp("", "example-peer")
	defer os.RemoveAll(dir)
	l, _ := ledger.Open(ledger.Options{Dir: dir})
	defer l.Close()
	host, err := bus.Start(l, bus.Options{Port: bus.RandomPort, HostID: "h1",
		Cluster: bus.ClusterOptions{Listen: "127.0.0.1:-1"}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer host.Close()
	peer, err := bus.StartPeer(bus.PeerOptions{Cluster: bus.ClusterOptions{Listen: "127.0.0.1:-1", Routes: []string{host.ClusterURL()}}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer peer.Close()
	nc, _ := peer.Connect()
	defer nc.Close()
	_, _ = l.Append(context.Background(), events.Draft{Activation: "A1", Session: "s", Server: "srv",
		Payload: &events.CallAdmitted{CallID: "c1", Tool: "echo", Digest: fp}})

	h1 := busclient.NewClient(nc).WithHost("h1")
	// The route comes up in the background: wait until the host answers.
	var head busclient.HeadReply
	if err := testproc.Await(testproc.HangBound, func() (err error) { head, err = h1.Head(context.Background()); return err }); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("h1 head:", head.Seq)
	// Output: h1 head: 1
}
