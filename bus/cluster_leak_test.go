package bus_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/bus"
	"github.com/leaseledger/leaseledger/bus/busclient"
	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/internal/testproc"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/nats-io/nats.go"
)

// interestSettle is how long a test gives a subscription's interest to
// cross a route or leaf connection when the point is that it must not.
const interestSettle = 500 * time.Millisecond

// spyWait bounds how long a spy subscription is watched for a leaked reply.
const spyWait = 2 * time.Second

// errNotYet is what testproc.Eventually's conditions return until they hold.
var errNotYet = errors.New("not yet")

// noLeak fails the test when sub receives a message holding secret within
// spyWait.
func noLeak(t *testing.T, who string, sub *nats.Subscription, secret string) {
	t.Helper()
	for {
		m, err := sub.NextMsg(spyWait)
		if err != nil {
			return
		}
		if strings.Contains(string(m.Data), secret) {
			t.Errorf("%s received another host's reply on %s: %.120s", who, m.Subject, m.Data)
			return
		}
	}
}

// sameRaw reports whether raw is seq of l byte for byte.
func sameRaw(l *ledger.Ledger, seq events.Seq, raw []byte) bool {
	want, err := l.GetRaw(seq)
	return err == nil && string(want) == string(raw)
}

// replayAll replays c's whole chain and returns how many events it read.
func replayAll(t *testing.T, c *busclient.Client) int {
	t.Helper()
	var n int
	if _, err := c.Replay(context.Background(), 1, 0, busclient.TailFilter{}, func(events.Seq, []byte) error { n++; return nil }); err != nil {
		t.Fatalf("replay: %v", err)
	}
	return n
}

// Replies stay on their host: an anonymous client of h2 subscribed to the
// default inbox, and h2's user of the same name as h1's, receive none of
// h1's replies — neither those to a peer over the route nor those to h1's
// own user — while the peer and h1's user are answered.
func TestInboxRepliesStayOnHost(t *testing.T) {
	co := func(routes ...string) bus.ClusterOptions {
		return bus.ClusterOptions{Name: "fleet", Listen: "127.0.0.1:-1", Routes: routes, User: "route", Password: "route-secret"}
	}
	l1, b1 := startBus(t, bus.Options{HostID: "h1", Cluster: co(), DenyAnonymous: true, ReadOnlyUser: "reader", ReadOnlyPassword: "pw1"})
	_, b2 := startBus(t, bus.Options{HostID: "h2", Cluster: co(b1.ClusterURL()), ReadOnlyUser: "reader", ReadOnlyPassword: "pw2"})
	appendActivation(t, l1, 3, "secret-h1")
	testproc.Eventually(t, "route h1-h2", func() error {
		if b1.Server().NumRoutes() == 0 {
			return errNotYet
		}
		return nil
	})
	anon := connect(t, b2.ClientURL())
	anonSub, err := anon.SubscribeSync(busclient.InboxPrefix("") + ".>")
	if err != nil {
		t.Fatal(err)
	}
	rd2 := connect(t, b2.ClientURL(), busclient.UserOptions("reader", "pw2")...)
	rdSub, err := rd2.SubscribeSync(busclient.InboxPrefix("reader") + ".>")
	if err != nil {
		t.Fatal(err)
	}
	for _, nc := range []*nats.Conn{anon, rd2} {
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(interestSettle)
	_, pc := startPeer(t, bus.PeerOptions{Cluster: co(b1.ClusterURL())})
	fromPeer := busclient.NewClient(pc).WithHost("h1")
	headIs(t, fromPeer, 3) // host → peer replies cross the route
	if n := replayAll(t, fromPeer); n != 3 {
		t.Errorf("the peer replayed %d of h1's events, want 3", n)
	}
	r1 := busclient.NewClient(connect(t, b1.ClientURL(), busclient.UserOptions("reader", "pw1")...)).WithHost("h1")
	if n := replayAll(t, r1); n != 3 {
		t.Errorf("h1's reader replayed %d events, want 3", n)
	}
	noLeak(t, "an anonymous client of h2", anonSub, "secret-h1")
	noLeak(t, "h2's reader", rdSub, "secret-h1")
}

// A Peer is a leaf node of a hub (a plain NATS server with a leaf
// listener) that hosts are leaf nodes of too: through it the peer reads a
// host's events as they commit and replays its chain, and another leaf
// host's user of the same name as the host's own receives none of that
// user's replies.
func TestPeerLeafOfHub(t *testing.T) {
	_, leafURL := startHub(t)
	leaf := bus.ClusterOptions{LeafRemotes: []bus.LeafRemote{{URL: leafURL, User: "leaf", Password: "leaf-secret"}}}
	l1, b1 := startBus(t, bus.Options{HostID: "h1", DenyAnonymous: true, ReadOnlyUser: "reader", ReadOnlyPassword: "pw1", Cluster: leaf})
	_, b2 := startBus(t, bus.Options{HostID: "h2", ReadOnlyUser: "reader", ReadOnlyPassword: "pw2", Cluster: leaf})
	spy := connect(t, b2.ClientURL(), busclient.UserOptions("reader", "pw2")...)
	spySub, err := spy.SubscribeSync(busclient.InboxPrefix("reader") + ".>")
	if err != nil {
		t.Fatal(err)
	}
	if err := spy.Flush(); err != nil {
		t.Fatal(err)
	}
	peer, pc := startPeer(t, bus.PeerOptions{Cluster: leaf})
	if peer.ClusterURL() != "" || peer.ClientURL() != "" || peer.Server().Addr() != nil {
		t.Errorf("a leaf-only peer without a client port listens: route %q, client %q %v", peer.ClusterURL(), peer.ClientURL(), peer.Server().Addr())
	}
	fleet, err := pc.SubscribeSync(busclient.FleetEventSubjects())
	if err != nil {
		t.Fatal(err)
	}
	fromPeer := busclient.NewClient(pc).WithHost("h1")
	headIs(t, fromPeer, 0)
	testproc.Eventually(t, "the peer's subscription reaches h1", func() error {
		if !b1.Server().GlobalAccount().SubscriptionInterest(busclient.HostSubject("h1", events.Subject("call.admitted", "x"))) {
			return errNotYet
		}
		return nil
	})
	appendActivation(t, l1, 2, "secret-h1")
	for seq := events.Seq(1); seq <= 2; seq++ {
		m, err := fleet.NextMsg(clusterWait)
		if err != nil {
			t.Fatal(err)
		}
		if h, _ := busclient.HostOfSubject(m.Subject); h != "h1" || !sameRaw(l1, seq, m.Data) {
			t.Errorf("event %d through the hub: %s %q", seq, m.Subject, m.Data)
		}
	}
	headIs(t, fromPeer, 2)
	if n := replayAll(t, fromPeer); n != 2 {
		t.Errorf("the peer replayed %d of h1's events through the hub, want 2", n)
	}
	time.Sleep(interestSettle)
	r1 := busclient.NewClient(connect(t, b1.ClientURL(), busclient.UserOptions("reader", "pw1")...)).WithHost("h1")
	if n := replayAll(t, r1); n != 2 {
		t.Errorf("h1's reader replayed %d events, want 2", n)
	}
	noLeak(t, "h2's reader", spySub, "secret-h1")
}
