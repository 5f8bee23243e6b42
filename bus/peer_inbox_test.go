package bus_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/bus"
	"github.com/leaseledger/leaseledger/bus/busclient"
	"github.com/leaseledger/leaseledger/bus/bustest"
	"github.com/nats-io/nats.go"
)

// On a leaf fleet, the peer class's replies reach the Peer and no host's
// local client: an anonymous client of another host (h2) subscribed to the
// whole default inbox receives none of h1's peer-class head and replay
// replies, even though h1 denies anonymous clients, and it may not
// subscribe to the peer's reply prefix.
func TestPeerRepliesNotForLocalClients(t *testing.T) {
	_, leafURL := startHub(t)
	leaf := bus.ClusterOptions{LeafRemotes: []bus.LeafRemote{{URL: leafURL, User: "leaf", Password: "leaf-secret"}}}
	l1, _ := startBus(t, bus.Options{HostID: "h1", DenyAnonymous: true, Cluster: leaf})
	_, b2 := startBus(t, bus.Options{HostID: "h2", Cluster: leaf})
	appendActivation(t, l1, 5, "secret-h1")
	perm := make(chan error, 4)
	spy := connect(t, b2.ClientURL(), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { perm <- err }))
	spySub, err := spy.SubscribeSync(busclient.InboxPrefix("") + ".>")
	if err != nil {
		t.Fatal(err)
	}
	if err := spy.Flush(); err != nil {
		t.Fatal(err)
	}
	_, pc := bustest.StartPeer(t, bus.PeerOptions{Cluster: leaf})
	c := busclient.NewClient(pc).WithHost("h1").WithPeerClass()
	headIs(t, c, 5)
	if n := replayAll(t, c); n != 5 {
		t.Errorf("the peer replayed %d of h1's events in the peer class, want 5", n)
	}
	if m, err := spySub.NextMsg(spyWait); err == nil {
		t.Errorf("an anonymous client of h2 received a peer-class reply of h1 on %s: %.120s", m.Subject, m.Data)
	}
	// Nor may it subscribe to the peer's reply prefix.
	if _, err := spy.SubscribeSync(busclient.InboxPrefix(busclient.PeerClass) + ".>"); err != nil {
		t.Fatal(err)
	}
	_ = spy.Flush()
	select {
	case err := <-perm:
		if !errors.Is(err, nats.ErrPermissionViolation) || !strings.Contains(err.Error(), "Subscription") {
			t.Errorf("subscribing to the peer's inbox: %v, want a subscription permission violation", err)
		}
	case <-time.After(5 * time.Second):
		t.Error("an anonymous client subscribed to the peer's inbox")
	}
}

// Peer-class requests share one bucket per host (Limits.PeerRequestRate
// and PeerRequestBurst), whatever their reply inbox: fresh inbox tokens
// and fresh connections mint no fresh buckets.
func TestPeerClassSharedBucket(t *testing.T) {
	const rate, burst = 1, 5
	l1, b1 := startBus(t, bus.Options{HostID: "h1", Cluster: bus.ClusterOptions{Listen: "127.0.0.1:-1"},
		Limits: bus.Limits{PeerRequestRate: rate, PeerRequestBurst: burst}})
	appendN(t, l1, 1)
	peer, pc := bustest.Peer(t, b1) // takes some of the burst
	conns := []*nats.Conn{pc}
	for range 3 {
		nc, err := peer.Connect()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		conns = append(conns, nc)
	}
	answered, start := 0, time.Now()
	for i := range 40 {
		nc := conns[i%len(conns)]
		inbox := nc.NewInbox() // a fresh connection token each time
		sub, err := nc.SubscribeSync(inbox)
		if err != nil {
			t.Fatal(err)
		}
		if err := nc.PublishRequest(peerSubject("h1", busclient.HeadSubject), inbox, nil); err != nil {
			t.Fatal(err)
		}
		m, err := sub.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		_ = sub.Unsubscribe()
		if m.Header.Get(busclient.HeaderError) == "" {
			answered++
		} else if m.Header.Get(busclient.HeaderErrorCode) != busclient.CodeRateLimited {
			t.Fatalf("request %d refused: %s", i, m.Header.Get(busclient.HeaderError))
		}
	}
	if most := burst + int(time.Since(start).Seconds()*rate) + 1; answered > most {
		t.Errorf("%d peer-class requests with fresh inboxes answered, want at most %d (burst %d, rate %d/s)", answered, most, burst, rate)
	}
	// Waited out by the client: it still gets its answer.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := busclient.NewClient(pc).WithHost("h1").WithPeerClass().Head(ctx); err != nil {
		t.Errorf("a rate-limited peer-class head: %v", err)
	}
}
