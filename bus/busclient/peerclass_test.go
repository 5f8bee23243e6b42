package busclient_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/bus"
	"github.com/leaseledger/leaseledger/bus/busclient"
	"github.com/leaseledger/leaseledger/bus/bustest"
	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/internal/testproc"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/nats-io/nats.go"
)

// A Client made WithPeerClass sends head and replay on its host's
// peer-class subjects, and no append at all (ErrReadOnlyClass).
func TestPeerClassSubjects(t *testing.T) {
	l, b := startBus(t, bus.Options{HostID: "h1", Cluster: bus.ClusterOptions{Listen: "127.0.0.1:-1"}})
	if _, err := l.Append(context.Background(), draft("a1", "s", 1)); err != nil {
		t.Fatal(err)
	}
	_, nc := bustest.Peer(t, b)
	seen, err := nc.SubscribeSync(busclient.HostSubject("h1", busclient.APISubjects)) // the peer's connection may read anything
	if err != nil {
		t.Fatal(err)
	}
	c := busclient.NewClient(nc).WithHost("h1").WithPeerClass()
	head, err := c.Head(context.Background())
	if err != nil || head.Seq != 1 {
		t.Fatalf("peer-class head %+v, %v", head, err)
	}
	n := 0
	if _, err := c.Replay(context.Background(), 1, 0, busclient.TailFilter{}, func(events.Seq, []byte) error { n++; return nil }); err != nil || n != 1 {
		t.Fatalf("peer-class replay: %d events, %v", n, err)
	}
	if _, err := c.Append(context.Background(), []byte("{}\n")); !errors.Is(err, busclient.ErrReadOnlyClass) {
		t.Errorf("Append: %v, want ErrReadOnlyClass", err)
	}
	if _, err := busclient.NewAppender(c).Append(context.Background(), draft("a1", "s", 2)); !errors.Is(err, busclient.ErrReadOnlyClass) {
		t.Errorf("Appender.Append: %v, want ErrReadOnlyClass", err)
	}
	for {
		m, err := seen.NextMsg(200 * time.Millisecond)
		if errors.Is(err, nats.ErrTimeout) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasSuffix(m.Subject, "."+busclient.PeerClass) || strings.Contains(m.Subject, "append") {
			t.Errorf("a peer-class client sent %s", m.Subject)
		}
	}
	if l.Head().Seq != 1 {
		t.Errorf("head %d after refused appends", l.Head().Seq)
	}
}

// A collector reads a clustered host through a Peer's Connect connection
// in the peer class: writer-size replay chunks at the writer's request
// rate, read-only.
func ExampleClient_WithPeerClass() {
	dir, _ := os.MkdirTemp("", "example-peerclass-")
	defer os.RemoveAll(dir)
	l, err := ledger.Open(ledger.Options{Dir: dir})
	if err != nil {
		panic(err)
	}
	defer l.Close()
	host, err := bus.Start(l, bus.Options{Port: bus.RandomPort, HostID: "h1", Cluster: bus.ClusterOptions{Listen: "127.0.0.1:-1"}})
	if err != nil {
		panic(err)
	}
	defer host.Close()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	peer, err := bus.StartPeer(bus.PeerOptions{Logger: quiet, Cluster: bus.ClusterOptions{Listen: "127.0.0.1:-1", Routes: []string{host.ClusterURL()}}})
	if err != nil {
		panic(err)
	}
	defer peer.Close()
	nc, err := peer.Connect() // every permission: the peer class is for this connection
	if err != nil {
		panic(err)
	}
	defer nc.Close()
	if _, err := l.Append(context.Background(), events.Draft{Activation: "A1", Payload: &events.LeaseRevoked{Reason: "revoked"}}); err != nil {
		panic(err)
	}

	c := busclient.NewClient(nc).WithHost("h1").WithPeerClass()
	// The route comes up in the background: wait until the host answers.
	_ = testproc.Await(testproc.HangBound, func() error { _, err := c.Head(context.Background()); return err })
	_, err = c.Replay(context.Background(), 1, 0, busclient.TailFilter{}, func(seq events.Seq, raw []byte) error {
		kind, _ := events.PeekKind(raw)
		fmt.Println(seq, kind)
		return nil
	})
	fmt.Println(err)
	_, err = c.Append(context.Background(), []byte("{}\n"))
	fmt.Println(errors.Is(err, busclient.ErrReadOnlyClass))
	// Output:
	// 1 lease.revoked
	// <nil>
	// true
}
