package collector_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/bus"
	"github.com/leaseledger/leaseledger/bus/bustest"
	"github.com/leaseledger/leaseledger/collector"
	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/nats-io/nats.go"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// waitFor bounds every wait of these tests: mirroring on loopback takes
// well under a second; a loaded CI machine gets generous slack.
const waitFor = 60 * time.Second

// announceEvery is how often the test hosts announce themselves (host
// discovery, discover_test.go).
const announceEvery = 50 * time.Millisecond

// testHost is one fleet host: its own ledger (bound to its id) and its bus
// in the cluster, as serve --host-id runs them.
type testHost struct {
	id, dir string
	l       *ledger.Ledger
	b       *bus.Bus
}

// fleet is a NATS cluster of hosts joined by the collector's peer, all
// in-process on loopback.
type fleet struct {
	t     testing.TB
	root  string
	peer  *bus.Peer
	nc    *nats.Conn
	hosts map[string]*testHost
}

func newFleet(t testing.TB, ids ...string) *fleet {
	t.Helper()
	f := &fleet{t: t, root: t.TempDir(), hosts: map[string]*testHost{}}
	peer, err := bus.StartPeer(bus.PeerOptions{Host: "127.0.0.1", Port: bus.RandomPort,
		Cluster: bus.ClusterOptions{Listen: "127.0.0.1:-1"}, Logger: quiet})
	if err != nil {
		t.Fatalf("StartPeer: %v", err)
	}
	f.peer = peer
	t.Cleanup(func() { peer.Close() })
	nc, err := peer.Connect(nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {})) // drops are counted in HostStatus
	if err != nil {
		t.Fatalf("peer.Connect: %v", err)
	}
	f.nc = nc
	t.Cleanup(nc.Close)
	for _, id := range ids {
		f.start(id)
	}
	t.Cleanup(func() {
		for _, h := range f.hosts {
			h.stop()
		}
	})
	return f
}

// start opens (or reopens) host id's ledger in its directory, binds it to
// id and starts its bus in the cluster.
func (f *fleet) start(id string) *testHost {
	return f.startDir(id, filepath.Join(f.root, "host-"+id), id)
}

// startDir is start with the ledger in dir bound to bindAs (a host whose
// chain names another host when bindAs != id).
func (f *fleet) startDir(id, dir, bindAs string) *testHost {
	f.t.Helper()
	l := bustest.Open(f.t, dir)
	if _, err := l.BindHost(context.Background(), bindAs); err != nil {
		l.Close()
		f.t.Fatalf("BindHost %s: %v", bindAs, err)
	}
	b, err := bus.Start(l, bus.Options{Port: bus.RandomPort, HostID: id, Logger: quiet, AnnounceInterval: announceEvery,
		Cluster: bus.ClusterOptions{Listen: "127.0.0.1:-1", Routes: []string{f.peer.ClusterURL()}}})
	if err != nil {
		l.Close()
		f.t.Fatalf("bus.Start %s: %v", id, err)
	}
	h := &testHost{id: id, dir: dir, l: l, b: b}
	f.hosts[id] = h
	return h
}

func (h *testHost) stop() {
	if h.b != nil {
		h.b.Close()
		h.l.Close()
		h.b, h.l = nil, nil
	}
}

// appendN appends n events to h in calls of up to batch events.
func (h *testHost) appendN(t testing.TB, n, batch int) {
	t.Helper()
	for i := 0; i < n; i += batch {
		var ds []events.Draft
		for j := i; j < min(n, i+batch); j++ {
			ds = append(ds, bustest.Draft(fmt.Sprintf("a%d", j%5), "s1", j))
		}
		if _, err := h.l.Append(context.Background(), ds...); err != nil {
			t.Errorf("append to %s: %v", h.id, err)
			return
		}
	}
}

func (f *fleet) collector(dir string, hosts []string, mod func(*collector.Options)) *collector.Collector {
	f.t.Helper()
	opts := collector.Options{Dir: dir, Hosts: hosts, Conn: f.nc, Logger: quiet, PollInterval: 100 * time.Millisecond}
	if mod != nil {
		mod(&opts)
	}
	c, err := collector.Start(opts)
	if err != nil {
		f.t.Fatalf("collector.Start: %v", err)
	}
	return c
}

// waitStatus polls c's status until ok holds for host or the wait ends.
func waitStatus(t testing.TB, c *collector.Collector, host string, what string, ok func(collector.HostStatus) bool) collector.HostStatus {
	t.Helper()
	return waitStatusFor(t, c, host, what, waitFor, ok)
}

func waitStatusFor(t testing.TB, c *collector.Collector, host string, what string, waitFor time.Duration, ok func(collector.HostStatus) bool) collector.HostStatus {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for {
		s := c.Status().Hosts[host]
		if ok(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("host %s: not %s after %v: %+v", host, what, waitFor, s)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitMirrored waits until c's mirror of each host holds the host's head.
func (f *fleet) waitMirrored(c *collector.Collector, ids ...string) {
	f.t.Helper()
	for _, id := range ids {
		want := f.hosts[id].l.Head().Seq
		waitStatus(f.t, c, id, fmt.Sprintf("mirrored to %d", want), func(s collector.HostStatus) bool {
			return s.Head >= want
		})
	}
}

// assertSameRaws checks that mirror holds exactly the source's events,
// byte for byte, seq 1..head, and nothing past it.
func assertSameRaws(t testing.TB, host string, source, mirror *ledger.Ledger) {
	t.Helper()
	if sh, mh := source.Head(), mirror.Head(); sh != mh {
		t.Fatalf("host %s: mirror head %d %s, source head %d %s", host, mh.Seq, mh.Hash, sh.Seq, sh.Hash)
	}
	for seq := events.Seq(1); seq <= source.Head().Seq; seq++ {
		a, err := source.GetRaw(seq)
		if err != nil {
			t.Fatal(err)
		}
		b, err := mirror.GetRaw(seq)
		if err != nil {
			t.Fatalf("host %s: mirror lacks seq %d: %v", host, seq, err)
		}
		if !bytes.Equal(a, b) {
			t.Fatalf("host %s seq %d: mirror differs:\n%s\n%s", host, seq, a, b)
		}
	}
}

// appendConcurrently appends n events to each host at once, in calls of
// varied size, and waits for them.
func (f *fleet) appendConcurrently(n int, ids ...string) {
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Go(func() { f.hosts[id].appendN(f.t, n, 1+i*7) })
	}
	wg.Wait()
}
