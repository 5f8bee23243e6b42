package bus_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/bus"
	"github.com/leaseledger/leaseledger/bus/busclient"
	"github.com/leaseledger/leaseledger/bus/bustest"
	"github.com/leaseledger/leaseledger/events"
	"github.com/nats-io/nats.go"
)

// peerSubject is the peer-class request subject of subject in host's space.
func peerSubject(host, subject string) string {
	return busclient.UserSubject(busclient.HostSubject(host, subject), busclient.PeerClass)
}

// chunkLines is the number of events in one replay reply from 1.
func chunkLines(t *testing.T, nc *nats.Conn, subject string) int {
	t.Helper()
	m, err := nc.Request(subject, []byte(`{"from":1}`), 5*time.Second)
	if err != nil {
		t.Fatalf("%s: %v", subject, err)
	}
	if e := m.Header.Get(busclient.HeaderError); e != "" {
		t.Fatalf("%s: %s", subject, e)
	}
	return bytes.Count(m.Data, []byte{'\n'})
}

// A Peer's Connect client made WithPeerClass replays a host over a route
// with the writer's chunks; the anonymous class over the same connection
// gets at most AnonymousReplayChunkEvents (and AnonymousReplayChunkBytes). The class is read-only: no append.
func TestPeerClassOverRoute(t *testing.T) {
	const n = 3 * bus.AnonymousReplayChunkEvents
	l1, b1 := startBus(t, bus.Options{HostID: "h1", Cluster: bus.ClusterOptions{Listen: "127.0.0.1:-1"}, WriterUser: "w", WriterPassword: "wpw"})
	appendN(t, l1, n)
	_, pc := bustest.Peer(t, b1)
	if got := chunkLines(t, pc, peerSubject("h1", busclient.ReplaySubject)); got != n {
		t.Errorf("peer class: %d events in the first chunk, want all %d (writer chunk %d)", got, n, bus.DefaultReplayChunkEvents)
	}
	if got := chunkLines(t, pc, busclient.HostSubject("h1", busclient.ReplaySubject)); got > bus.AnonymousReplayChunkEvents {
		t.Errorf("anonymous class: %d events in the first chunk, want at most %d", got, bus.AnonymousReplayChunkEvents)
	}
	c := busclient.NewClient(pc).WithHost("h1").WithPeerClass()
	if h, err := c.Head(context.Background()); err != nil || h.Seq != n || h.Hash != l1.Head().Hash.String() {
		t.Errorf("peer-class head %+v, %v; want seq %d", h, err, n)
	}
	got := 0
	if _, err := c.Replay(context.Background(), 1, 0, busclient.TailFilter{}, func(seq events.Seq, raw []byte) error {
		if !sameRaw(l1, seq, raw) {
			t.Errorf("seq %d differs from the ledger", seq)
		}
		got++
		return nil
	}); err != nil || got != n {
		t.Fatalf("peer-class replay: %d events, %v; want %d", got, err, n)
	}
	// No append for the class: nobody answers its subject, and the
	// client sends none.
	line := `{"activation":"x","session":"s","server":"srv","kind":"call.admitted","data":{"call_id":"c","tool":"echo","digest":"` + fp + `"}}` + "\n"
	if _, err := pc.Request(peerSubject("h1", busclient.AppendSubject), []byte(line), time.Second); !errors.Is(err, nats.ErrNoResponders) {
		t.Errorf("a peer-class append: %v, want no responders", err)
	}
	if _, err := c.Append(context.Background(), []byte(line)); !errors.Is(err, busclient.ErrReadOnlyClass) {
		t.Errorf("Append through WithPeerClass: %v, want ErrReadOnlyClass", err)
	}
	if l1.Head().Seq != n {
		t.Errorf("head %d after refused appends, want %d", l1.Head().Seq, n)
	}
}

// Over leaf connections too: a host and a Peer, both leaf nodes of a hub,
// the Peer's Connect client replays the host in the peer class with the
// writer's chunks.
func TestPeerClassOverLeaf(t *testing.T) {
	const n = 3 * bus.AnonymousReplayChunkEvents
	_, leafURL := startHub(t)
	leaf := bus.ClusterOptions{LeafRemotes: []bus.LeafRemote{{URL: leafURL, User: "leaf", Password: "leaf-secret"}}}
	l1, _ := startBus(t, bus.Options{HostID: "h1", DenyAnonymous: true, Cluster: leaf})
	appendN(t, l1, n)
	_, pc := bustest.StartPeer(t, bus.PeerOptions{Cluster: leaf})
	headIs(t, busclient.NewClient(pc).WithHost("h1").WithPeerClass(), n)
	if got := chunkLines(t, pc, peerSubject("h1", busclient.ReplaySubject)); got != n {
		t.Errorf("peer class through the hub: %d events in the first chunk, want all %d", got, n)
	}
}

// permissionViolation waits for a publish permission violation on errs.
func permissionViolation(t *testing.T, who string, errs <-chan error) {
	t.Helper()
	select {
	case err := <-errs:
		if !errors.Is(err, nats.ErrPermissionViolation) || !strings.Contains(err.Error(), "Publish") {
			t.Errorf("%s: %v, want a publish permission violation", who, err)
		}
	case <-time.After(5 * time.Second):
		t.Errorf("%s: no permission violation for a peer-class subject", who)
	}
}

// The host's own clients — anonymous, read-only, writer — and a Peer's
// client-port clients cannot publish a peer-class subject: a permission
// violation, and no answer.
func TestPeerClassNotForLocalClients(t *testing.T) {
	l1, b1 := startBus(t, bus.Options{HostID: "h1", Cluster: bus.ClusterOptions{Listen: "127.0.0.1:-1"},
		ReadOnlyUser: "reader", ReadOnlyPassword: "pw", WriterUser: "w", WriterPassword: "wpw"})
	appendN(t, l1, 3)
	peer, _ := bustest.Peer(t, b1)
	for _, u := range []struct{ who, url, user, pass string }{
		{"host anonymous", b1.ClientURL(), "", ""},
		{"host read-only", b1.ClientURL(), "reader", "pw"},
		{"host writer", b1.ClientURL(), "w", "wpw"},
		{"peer client port", peer.ClientURL(), "", ""},
	} {
		errs := make(chan error, 8)
		opts := append(busclient.UserOptions(u.user, u.pass), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case errs <- err:
			default:
			}
		}))
		nc := connect(t, u.url, opts...)
		// The connection works in its own class.
		if h, err := busclient.NewClient(nc).WithHost("h1").Head(context.Background()); err != nil || h.Seq != 3 {
			t.Fatalf("%s: own head %+v, %v", u.who, h, err)
		}
		for _, s := range []string{busclient.ReplaySubject, busclient.HeadSubject} {
			body := []byte(`{"from":1}`)
			if s == busclient.HeadSubject {
				body = nil
			}
			if m, err := nc.Request(peerSubject("h1", s), body, 500*time.Millisecond); err == nil {
				t.Errorf("%s: %s answered: %v %q", u.who, s, m.Header, m.Data)
			}
			permissionViolation(t, u.who+" "+s, errs)
		}
		c := busclient.NewClient(nc).WithHost("h1").WithPeerClass()
		short, cancel := context.WithTimeout(context.Background(), time.Second)
		if _, err := c.Head(short); err == nil {
			t.Errorf("%s: WithPeerClass head answered", u.who)
		}
		cancel()
		nc.Close()
	}
}

// Peer-class requests are charged to the writer's per-connection rate,
// never to the anonymous shared bucket: with the anonymous classes at
// their limit, a peer's requests are all answered.
func TestPeerClassRateNotAnonymous(t *testing.T) {
	l1, b1 := startBus(t, bus.Options{HostID: "h1", Cluster: bus.ClusterOptions{Listen: "127.0.0.1:-1"},
		Limits: bus.Limits{RequestRate: 1, RequestBurst: 1, AnonymousRate: 1}})
	appendN(t, l1, 3)
	_, pc := bustest.Peer(t, b1)
	anonymous := connect(t, b1.ClientURL())
	limited := 0
	for range 5 {
		m, err := anonymous.Request(busclient.HostSubject("h1", busclient.HeadSubject), nil, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if m.Header.Get(busclient.HeaderErrorCode) == busclient.CodeRateLimited {
			limited++
		}
	}
	if limited == 0 {
		t.Fatal("the anonymous class was not rate limited")
	}
	for i := range 200 {
		m, err := pc.Request(peerSubject("h1", busclient.HeadSubject), nil, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if e := m.Header.Get(busclient.HeaderError); e != "" {
			t.Fatalf("peer-class request %d refused: %s", i, e)
		}
	}
	// The anonymous class of the same connection is still limited.
	for range 3 {
		if m, err := pc.Request(busclient.HostSubject("h1", busclient.HeadSubject), nil, 5*time.Second); err == nil && m.Header.Get(busclient.HeaderErrorCode) == busclient.CodeRateLimited {
			return
		}
	}
	t.Error("the peer connection's anonymous-class requests were not limited")
}

// BenchmarkPeerClassReplay replays a host's backlog over a route through a
// Peer's Connect connection, in the anonymous class (the baseline) and in
// the peer class, in the same run: events/s of each, and their ratio is
// the peer class's speed-up. LEASELEDGER_BENCH_EVENTS sets the backlog
// (default 20000).
func BenchmarkPeerClassReplay(b *testing.B) {
	n := 20_000
	if s := os.Getenv("LEASELEDGER_BENCH_EVENTS"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v <= 0 {
			b.Fatalf("LEASELEDGER_BENCH_EVENTS=%q: want a positive count", s)
		}
		n = v
	}
	l := open(b, b.TempDir())
	defer l.Close()
	for i := 0; i < n; i += 100 {
		ds := make([]events.Draft, min(100, n-i))
		for j := range ds {
			ds[j] = draft(fmt.Sprintf("a%d", (i+j)%5), "s", i+j)
		}
		if _, err := l.Append(context.Background(), ds...); err != nil {
			b.Fatal(err)
		}
	}
	host, err := bus.Start(l, bus.Options{Port: bus.RandomPort, HostID: "h1", Cluster: bus.ClusterOptions{Listen: "127.0.0.1:-1"}})
	if err != nil {
		b.Fatal(err)
	}
	defer host.Close()
	_, pc := bustest.Peer(b, host)
	base := busclient.NewClient(pc).WithHost("h1")
	for _, c := range []struct {
		name   string
		client *busclient.Client
	}{{"anonymous", base}, {"peer", base.WithPeerClass()}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				got := 0
				if _, err := c.client.Replay(context.Background(), 1, 0, busclient.TailFilter{}, func(events.Seq, []byte) error { got++; return nil }); err != nil || got != n {
					b.Fatalf("replayed %d of %d: %v", got, n, err)
				}
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "events/s")
		})
	}
}
