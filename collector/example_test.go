package collector_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/leaseledger/leaseledger/bus"
	"github.com/leaseledger/leaseledger/bus/bustest"
	"github.com/leaseledger/leaseledger/collector"
	"github.com/leaseledger/leaseledger/ledger"
)

// A collector joins the cluster through a peer and mirrors host h1, whose
// ledger is bound to h1 and whose bus publishes in h1's subject space.
func ExampleStart() {
	tmp, _ := os.MkdirTemp("", "collector-example")
	defer os.RemoveAll(tmp)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))

	peer, err := bus.StartPeer(bus.PeerOptions{Cluster: bus.ClusterOptions{Listen: "127.0.0.1:-1"}, Logger: logger})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer peer.Close()
	l, _ := ledger.Open(ledger.Options{Dir: tmp + "/h1", Logger: logger})
	defer l.Close()
	ctx := context.Background()
	l.BindHost(ctx, "h1")
	b, err := bus.Start(l, bus.Options{Port: bus.RandomPort, HostID: "h1", Logger: logger,
		Cluster: bus.ClusterOptions{Listen: "127.0.0.1:-1", Routes: []string{peer.ClusterURL()}}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer b.Close()
	l.Append(ctx, bustest.Draft("a1", "s1", 1), bustest.Draft("a1", "s1", 2))

	nc, _ := peer.Connect()
	defer nc.Close()
	c, err := collector.Start(collector.Options{Dir: tmp + "/collector", Hosts: []string{"h1"}, Conn: nc, Logger: logger})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	// Bounded wait: a collector that never gets there prints its status,
	// and the output then differs (a failure, not a hang).
	deadline := time.Now().Add(exampleWait)
	s := c.Status().Hosts["h1"]
	for ; s.Head < l.Head().Seq || s.State != collector.StateLive; s = c.Status().Hosts["h1"] {
		if time.Now().After(deadline) {
			fmt.Printf("not mirrored after %v: %+v\n", exampleWait, s)
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	fmt.Println("mirrored", s.Head, "events of h1; state", s.State, "lag", s.Lag)
	// Output: mirrored 3 events of h1; state live lag 0
}

// Each mirror can be opened by the caller, here to print it; `collect`
// opens each through projector/live so that a live projection follows the
// mirror. Start opens every mirror, in the order of Hosts, before it
// returns; the collector imports into the returned ledger and closes it
// through the returned closer (nil: the ledger's own Close).
func ExampleOptions_openMirror() {
	tmp, _ := os.MkdirTemp("", "collector-openmirror")
	defer os.RemoveAll(tmp)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	peer, err := bus.StartPeer(bus.PeerOptions{Cluster: bus.ClusterOptions{Listen: "127.0.0.1:-1"}, Logger: logger})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer peer.Close()
	nc, _ := peer.Connect()
	defer nc.Close()

	dir := filepath.Join(tmp, "collector")
	c, err := collector.Start(collector.Options{Dir: dir, Hosts: []string{"h1", "h2"}, Conn: nc, Logger: logger,
		OpenMirror: func(_ context.Context, host string, lo ledger.Options) (*ledger.Ledger, io.Closer, error) {
			rel, _ := filepath.Rel(dir, lo.Dir)
			fmt.Println("opening mirror of", host, "in", filepath.ToSlash(rel), "mirror:", lo.Mirror)
			l, err := ledger.Open(lo)
			return l, nil, err
		}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	fmt.Println("h1's mirror is open:", c.Mirror("h1") != nil)
	// Output:
	// opening mirror of h1 in hosts/h1 mirror: true
	// opening mirror of h2 in hosts/h2 mirror: true
	// h1's mirror is open: true
}

// exampleWait bounds an Example's wait for the collector.
const exampleWait = 30 * time.Second
