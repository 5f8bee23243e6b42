// Package bustest starts real buses on real ledgers for tests: the tests of
// bus and bus/busclient share it; nothing else links it.
package bustest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/bus"
	"github.com/leaseledger/leaseledger/bus/busclient"
	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/nats-io/nats.go"
)

// Digest is a valid digest for test events.
var Digest = strings.Repeat("ab", 32)

// Draft returns a small valid event (call.admitted number i) for
// activation a and session s.
func Draft(a, s string, i int) events.Draft {
	return events.Draft{Activation: a, Session: s, Server: "srv",
		Payload: &events.CallAdmitted{CallID: fmt.Sprintf("c%d", i), Tool: "echo", Digest: Digest}}
}

// Open opens (creating) the ledger in dir, failing the test on error.
func Open(t testing.TB, dir string) *ledger.Ledger {
	t.Helper()
	l, err := ledger.Open(ledger.Options{Dir: dir})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return l
}

// Start opens a ledger in a temporary directory and starts a bus on it on
// a random port; both are closed when the test ends.
func Start(t *testing.T, opts bus.Options) (*ledger.Ledger, *bus.Bus) {
	t.Helper()
	l := Open(t, t.TempDir())
	opts.Port = bus.RandomPort
	b, err := bus.Start(l, opts)
	if err != nil {
		l.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		b.Close()
		l.Close()
	})
	return l, b
}

// Connect connects to url with busclient.ConnectOptions, closing the
// connection when the test ends.
func Connect(t *testing.T, url string, opts ...nats.Option) *nats.Conn {
	t.Helper()
	nc, err := busclient.Connect(url, opts...)
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// PeerWait bounds how long Peer waits for the route to its host.
const PeerWait = 15 * time.Second

// StartPeer starts a bus.Peer of opts and connects to it in process; both
// are closed when the test ends.
func StartPeer(t testing.TB, opts bus.PeerOptions) (*bus.Peer, *nats.Conn) {
	t.Helper()
	peer, err := bus.StartPeer(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { peer.Close() })
	pc, err := peer.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pc.Close)
	return peer, pc
}

// Peer starts a bus.Peer routed to b's cluster (b is a clustered host
// bus), with a client port and a silent logger, and returns it with its
// Connect connection once b's peer-class head (busclient.WithPeerClass)
// answers through it; both are closed when the test ends.
func Peer(t testing.TB, b *bus.Bus) (*bus.Peer, *nats.Conn) {
	t.Helper()
	peer, pc := StartPeer(t, bus.PeerOptions{Port: bus.RandomPort, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Cluster: bus.ClusterOptions{Listen: "127.0.0.1:-1", Routes: []string{b.ClusterURL()}}})
	c := busclient.NewClient(pc).WithHost(b.HostID()).WithPeerClass()
	for deadline := time.Now().Add(PeerWait); ; time.Sleep(50 * time.Millisecond) {
		_, err := c.Head(context.Background())
		if err == nil {
			return peer, pc
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s's peer class through a peer: %v", b.HostID(), err)
		}
	}
}
