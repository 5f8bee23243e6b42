package collector_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/leaseledger/leaseledger/collector"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/ledger/bus"
	"github.com/leaseledger/leaseledger/ledger/bus/bustest"
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
	for s := c.Status().Hosts["h1"]; s.Head < l.Head().Seq || s.State != collector.StateLive; s = c.Status().Hosts["h1"] {
		time.Sleep(10 * time.Millisecond)
	}
	s := c.Status().Hosts["h1"]
	fmt.Println("mirrored", s.Head, "events of h1; state", s.State, "lag", s.Lag)
	// Output: mirrored 3 events of h1; state live lag 0
}

// Each mirror can be opened by the caller, here to log it; `collect` opens
// each through projector/live so that a live projection follows the
// mirror. The collector imports into the returned ledger and closes it
// through the returned closer (nil: the ledger's own Close).
func ExampleOptions_openMirror() {
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	opts := collector.Options{Dir: "/var/lib/ll/collector", Hosts: []string{"h1", "h2"}, Logger: logger,
		OpenMirror: func(_ context.Context, host string, lo ledger.Options) (*ledger.Ledger, io.Closer, error) {
			logger.Info("opening mirror", "host", host, "dir", lo.Dir)
			l, err := ledger.Open(lo)
			return l, nil, err
		}}
	_ = opts // with Conn set: collector.Start(opts)
}
