package collector_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/bus"
	"github.com/leaseledger/leaseledger/bus/busclient"
	"github.com/leaseledger/leaseledger/collector"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/ledger/ledgertest"
	"github.com/nats-io/nats.go"
)

// seeAnnouncement waits until sub (on the collector's own connection,
// whose messages arrive in one order) has received an announcement of
// host: the collector's discovery has received it too, before any
// announcement the connection receives later.
func seeAnnouncement(t *testing.T, sub *nats.Subscription, host string) {
	t.Helper()
	for {
		m, err := sub.NextMsg(waitFor)
		if err != nil {
			t.Fatalf("no announcement of %s: %v", host, err)
		}
		if a, err := busclient.ParseAnnouncement(m.Subject, m.Data); err == nil && a.Host == host {
			return
		}
	}
}

// A host started after the collector, whose id matches a discovery
// pattern, is mirrored without a restart — byte for byte, OnHostAdded told
// with its mirror before its mirroring started — while an announced host
// that matches no pattern is not.
func TestDiscoveredHostMirrored(t *testing.T) {
	f := newFleet(t, "h1")
	sub, err := f.nc.SubscribeSync(busclient.FleetAnnounceSubjects())
	if err != nil {
		t.Fatal(err)
	}
	added := make(chan string, 4)
	c := f.collector(t.TempDir(), []string{"h1"}, func(o *collector.Options) {
		o.Discover = []string{"h*"}
		o.OnHostAdded = func(host string, m *ledger.Ledger) {
			if m == nil {
				t.Errorf("OnHostAdded(%s) without a mirror", host)
			}
			added <- host
		}
	})
	defer c.Close()
	f.start("x1")
	seeAnnouncement(t, sub, "x1") // handled before h2's first announcement
	h2 := f.start("h2")
	h2.appendN(t, 30, 4)
	f.hosts["h1"].appendN(t, 10, 3)
	f.waitMirrored(c, "h1", "h2")
	assertSameRaws(t, "h2", h2.l, c.Mirror("h2"))
	if got := <-added; got != "h2" {
		t.Errorf("OnHostAdded(%s), want h2", got)
	}
	if hosts := c.Hosts(); !slices.Equal(hosts, []string{"h1", "h2"}) {
		t.Errorf("hosts %v, want [h1 h2]: x1 matches no pattern", hosts)
	}
	if err := c.AddHost("h2"); err != nil {
		t.Errorf("AddHost of a mirrored host: %v, want nil (left as it is)", err)
	}
	if len(added) != 0 {
		t.Errorf("OnHostAdded called again: %s", <-added)
	}
}

// An announcement never un-refuses a host: a collector that refused a
// host for a fork (its id reused by a chain other than the one mirrored)
// and is restarted with discovery finds the host's directory and keeps it
// refused, its mirror the history it showed first, while the host goes on
// announcing and a new host is discovered.
func TestDiscoveryKeepsRefusedHost(t *testing.T) {
	f := newFleet(t, "h1")
	dir := t.TempDir()
	discover := func(o *collector.Options) { o.Discover = []string{"*"} }
	c := f.collector(dir, nil, discover)
	h1 := f.hosts["h1"]
	h1.appendN(t, 20, 4)
	f.waitMirrored(c, "h1")
	before := h1.l.Head()
	h1.stop()
	ledgertest.Fork(t, h1.dir, before.Seq-5)
	h1 = f.start("h1")
	h1.appendN(t, 20, 4)
	waitStatus(t, c, "h1", "refused", func(s collector.HostStatus) bool { return s.State == collector.StateRefused })
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}

	sub, err := f.nc.SubscribeSync(busclient.FleetAnnounceSubjects())
	if err != nil {
		t.Fatal(err)
	}
	c = f.collector(dir, nil, discover)
	defer c.Close()
	seeAnnouncement(t, sub, "h1") // the discovery has it before h2's
	h2 := f.start("h2")
	h2.appendN(t, 5, 1)
	f.waitMirrored(c, "h2")
	if err := c.AddHost("h1"); err != nil {
		t.Errorf("AddHost(h1): %v, want nil (known)", err)
	}
	s := c.Status().Hosts["h1"]
	if s.State != collector.StateRefused || s.Finding == nil || s.Finding.Reason != collector.ReasonForked {
		t.Fatalf("h1 after its announcements: %+v, want still refused (forked)", s)
	}
	if got := c.Mirror("h1").Head(); got != before {
		t.Errorf("refused host mirrored on: head %v, want %v", got, before)
	}
	if _, err := os.Stat(filepath.Join(collector.HostDir(dir, "h1"), collector.RefusedFile)); err != nil {
		t.Errorf("finding: %v", err)
	}
}

// Two collectors mirroring the same fleet side by side, each through its
// own cluster peer into its own directory — one started while the hosts
// were appending, one after — hold the same mirrors, byte for byte, equal
// to each host's chain.
func TestRedundantCollectorsAgree(t *testing.T) {
	f := newFleet(t, "h1", "h2")
	a := f.collector(t.TempDir(), []string{"h1", "h2"}, nil)
	defer a.Close()
	f.appendConcurrently(50, "h1", "h2")
	peer, err := bus.StartPeer(bus.PeerOptions{Cluster: bus.ClusterOptions{Listen: "127.0.0.1:-1", Routes: []string{f.peer.ClusterURL()}}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	nc, err := peer.Connect(nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	b, err := collector.Start(collector.Options{Dir: t.TempDir(), Hosts: []string{"h1", "h2"}, Conn: nc, Logger: quiet, PollInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	f.appendConcurrently(50, "h1", "h2")
	f.waitMirrored(a, "h1", "h2")
	f.waitMirrored(b, "h1", "h2")
	for _, h := range []string{"h1", "h2"} {
		assertSameRaws(t, h, f.hosts[h].l, a.Mirror(h))
		assertSameRaws(t, h, a.Mirror(h), b.Mirror(h))
	}
}

// Discovery options are checked: bad patterns, too many, and no hosts
// without discovery are ErrOptions; AddHost refuses an invalid id and
// adds nothing once closed.
func TestDiscoverOptions(t *testing.T) {
	f := newFleet(t)
	for name, mod := range map[string]func(*collector.Options){
		"no hosts":    func(o *collector.Options) { o.Hosts = nil },
		"bad pattern": func(o *collector.Options) { o.Discover = []string{"h["} },
		"empty":       func(o *collector.Options) { o.Discover = []string{""} },
		"too many":    func(o *collector.Options) { o.Discover = make([]string, collector.MaxDiscoverPatterns+1) },
	} {
		opts := collector.Options{Dir: t.TempDir(), Hosts: []string{"h1"}, Conn: f.nc, Logger: quiet}
		mod(&opts)
		if c, err := collector.Start(opts); !errors.Is(err, collector.ErrOptions) {
			if c != nil {
				c.Close()
			}
			t.Errorf("%s: %v, want ErrOptions", name, err)
		}
	}
	// A discovering collector with no host yet still has its directory
	// (callers write beside the mirrors).
	dir := filepath.Join(t.TempDir(), "not-yet")
	c := f.collector(dir, nil, func(o *collector.Options) { o.Discover = []string{"*"} })
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		t.Errorf("the collector's directory: %v", err)
	}
	if err := c.AddHost("a.b"); !errors.Is(err, collector.ErrOptions) {
		t.Errorf("AddHost(a.b): %v, want ErrOptions", err)
	}
	c.Close()
	if err := c.AddHost("h9"); !errors.Is(err, collector.ErrClosed) {
		t.Errorf("AddHost after Close: %v, want ErrClosed", err)
	}
}
