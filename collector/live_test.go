package collector_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/bus"
	"github.com/leaseledger/leaseledger/bus/busclient"
	"github.com/leaseledger/leaseledger/bus/bustest"
	"github.com/leaseledger/leaseledger/collector"
	"github.com/leaseledger/leaseledger/events"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/oklog/ulid/v2"
)

// publishLive publishes raw on host's event subject with seq in the
// header, as the host's bus would — from a connection that is not the
// host's (here the collector's own, which may publish there, as any
// client of a hub may).
func (f *fleet) publishLive(host, subject string, seq events.Seq, raw []byte) {
	f.t.Helper()
	m := nats.NewMsg(busclient.HostSubject(host, subject))
	m.Header.Set(busclient.HeaderSeq, itoa(uint64(seq)))
	m.Data = raw
	if err := f.nc.PublishMsg(m); err != nil {
		f.t.Fatal(err)
	}
	if err := f.nc.Flush(); err != nil {
		f.t.Fatal(err)
	}
}

// forge seals a well-formed event at seq chained onto prev, as anyone can.
func forge(t *testing.T, seq events.Seq, prev events.Hash, i int) (events.Envelope, []byte) {
	t.Helper()
	p, err := events.Prepare(bustest.Draft("forged", "s1", i))
	if err != nil {
		t.Fatal(err)
	}
	return events.Seal(p, seq, ulid.Make(), time.Now(), prev)
}

// waitRejected waits until c counts want rejected live messages of host,
// failing at once if the host is refused or mirrors past head.
func waitRejected(t *testing.T, c *collector.Collector, host string, want uint64, head events.Seq) collector.HostStatus {
	t.Helper()
	s := waitStatus(t, c, host, "rejecting the message", func(s collector.HostStatus) bool {
		return s.LiveRejected >= want || s.State == collector.StateRefused || s.Head > head
	})
	if s.State == collector.StateRefused || s.Head > head || s.LiveRejected != want {
		t.Fatalf("host %s: %+v (finding %+v), want %d live messages rejected, head %d, not refused", host, s, s.Finding, want, head)
	}
	return s
}

// A live message is a hint, never the host speaking: messages that
// contradict the mirror (junk at a mirrored seq, a well-formed fork of a
// mirrored event, a header that disagrees with the body) published by a
// client that is not the host are checked against the host's replay,
// counted in LiveRejected and ignored; the host is not refused and goes
// on being mirrored.
func TestForgedLiveMessageDoesNotRefuse(t *testing.T) {
	f := newFleet(t, "h1")
	h1 := f.hosts["h1"]
	h1.appendN(t, 5, 5)
	c := f.collector(t.TempDir(), []string{"h1"}, nil)
	defer c.Close()
	f.waitMirrored(c, "h1")
	head := h1.l.Head().Seq
	subject := events.Subject((&events.CallAdmitted{}).Kind(), "x")

	f.publishLive("h1", subject, 1, []byte(`{"seq":1,"junk":true}`))
	waitRejected(t, c, "h1", 1, head)

	two, err := h1.l.Get(2)
	if err != nil {
		t.Fatal(err)
	}
	env, raw := forge(t, 3, two.Hash, 0) // another seq 3 on the real seq 2
	f.publishLive("h1", env.Subject(), 3, raw)
	waitRejected(t, c, "h1", 2, head)

	f.publishLive("h1", subject, 4, []byte(`{"seq":1}`)) // the header says another seq
	waitRejected(t, c, "h1", 3, head)

	h1.appendN(t, 20, 4)
	f.waitMirrored(c, "h1")
	assertSameRaws(t, "h1", h1.l, c.Mirror("h1"))
	if s := c.Status().Hosts["h1"]; s.State != collector.StateLive || s.Finding != nil {
		t.Errorf("h1 %+v, want live", s)
	}
	if _, err := os.Stat(filepath.Join(collector.HostDir(c.Dir(), "h1"), collector.RefusedFile)); !os.IsNotExist(err) {
		t.Errorf("%s exists (%v): a live message refused the host", collector.RefusedFile, err)
	}
}

// A forged event sealed onto the host's head and published on its
// subject is not stored: the host's replay does not confirm it (counted
// in LiveRejected), and the host's own next events are mirrored — no
// fork, no refusal. Two live events disagreeing on the next seq are
// both dropped.
func TestForgedLiveEventNotImported(t *testing.T) {
	f := newFleet(t, "h1")
	h1 := f.hosts["h1"]
	h1.appendN(t, 3, 3)
	c := f.collector(t.TempDir(), []string{"h1"}, func(o *collector.Options) { o.PollInterval = time.Hour })
	defer c.Close()
	f.waitMirrored(c, "h1")
	head := h1.l.Head()

	env, raw := forge(t, head.Seq+1, head.Hash, 1)
	f.publishLive("h1", env.Subject(), env.Seq, raw)
	waitRejected(t, c, "h1", 1, head.Seq)

	env2, raw2 := forge(t, head.Seq+1, head.Hash, 2)
	f.publishLive("h1", env.Subject(), env.Seq, raw)
	f.publishLive("h1", env2.Subject(), env2.Seq, raw2)
	s := waitStatus(t, c, "h1", "rejecting both", func(s collector.HostStatus) bool {
		return s.LiveRejected >= 2 || s.State == collector.StateRefused || s.Head > head.Seq
	})
	if s.State == collector.StateRefused || s.Head > head.Seq {
		t.Fatalf("h1 %+v (finding %+v) after two forged events at seq %d", s, s.Finding, head.Seq+1)
	}

	h1.appendN(t, 10, 2)
	f.waitMirrored(c, "h1")
	assertSameRaws(t, "h1", h1.l, c.Mirror("h1"))
	if s := c.Status().Hosts["h1"]; s.State != collector.StateLive || s.Finding != nil {
		t.Errorf("h1 %+v (finding %+v), want live", s, s.Finding)
	}
}

// The documented leaf setup: hosts and the collector are leaf nodes of a
// hub, and a plain client of the hub (no host) publishes on h1's event
// subject — junk at a mirrored seq, then an event sealed onto h1's head.
// Neither refuses h1 nor is stored; h1's own next event is mirrored.
func TestForgedLiveFromHubClient(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	leafPort := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	hub, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true,
		LeafNode: server.LeafNodeOpts{Host: "127.0.0.1", Port: leafPort}})
	if err != nil {
		t.Fatal(err)
	}
	go hub.Start()
	defer func() { hub.Shutdown(); hub.WaitForShutdown() }()
	if !hub.ReadyForConnections(waitFor) {
		t.Fatal("hub not ready")
	}
	leaf := bus.ClusterOptions{LeafRemotes: []bus.LeafRemote{{URL: fmt.Sprintf("nats-leaf://127.0.0.1:%d", leafPort)}}}
	l := bustest.Open(t, t.TempDir())
	defer l.Close()
	if _, err := l.BindHost(context.Background(), "h1"); err != nil {
		t.Fatal(err)
	}
	b, err := bus.Start(l, bus.Options{HostID: "h1", Port: bus.RandomPort, Cluster: leaf, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	peer, err := bus.StartPeer(bus.PeerOptions{Cluster: leaf, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	pc, err := peer.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	c, err := collector.Start(collector.Options{Dir: t.TempDir(), Hosts: []string{"h1"}, Conn: pc, Logger: quiet, PollInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	waitStatus(t, c, "h1", "live at 1", func(s collector.HostStatus) bool { return s.State == collector.StateLive && s.Head == 1 })
	attacker, err := nats.Connect(hub.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer attacker.Close()
	publish := func(subject string, seq events.Seq, raw []byte) {
		m := nats.NewMsg(busclient.HostSubject("h1", subject))
		m.Header.Set(busclient.HeaderSeq, itoa(uint64(seq)))
		m.Data = raw
		if err := attacker.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
		if err := attacker.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	// Until the collector's interest reaches the hub, a message is lost:
	// publish again until one is counted (or, before the fix, refuses h1).
	junk := func() bool {
		publish(events.Subject((&events.CallAdmitted{}).Kind(), "x"), 1, []byte(`{"seq":1,"junk":true}`))
		deadline := time.Now().Add(2 * time.Second)
		for time.Now().Before(deadline) {
			if s := c.Status().Hosts["h1"]; s.LiveRejected > 0 || s.State == collector.StateRefused {
				return true
			}
			time.Sleep(10 * time.Millisecond)
		}
		return false
	}
	for i := 0; !junk(); i++ {
		if i == 30 {
			t.Fatal("no junk message reached the collector")
		}
	}
	if s := c.Status().Hosts["h1"]; s.State == collector.StateRefused {
		t.Fatalf("a hub client's junk message refused h1: %+v", s.Finding)
	}
	head := l.Head()
	env, raw := forge(t, head.Seq+1, head.Hash, 1)
	rejected := c.Status().Hosts["h1"].LiveRejected
	publish(env.Subject(), env.Seq, raw)
	s := waitStatus(t, c, "h1", "rejecting the forged event", func(s collector.HostStatus) bool {
		return s.LiveRejected > rejected || s.State == collector.StateRefused || s.Head > head.Seq
	})
	if s.State == collector.StateRefused || s.Head > head.Seq {
		t.Fatalf("h1 %+v (finding %+v) after a hub client's forged seq %d", s, s.Finding, head.Seq+1)
	}
	if _, err := l.Append(context.Background(), bustest.Draft("real", "s1", 1)); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, c, "h1", "mirrored to 2", func(s collector.HostStatus) bool { return s.Head == 2 || s.State == collector.StateRefused })
	assertSameRaws(t, "h1", l, c.Mirror("h1"))
	if s := c.Status().Hosts["h1"]; s.State != collector.StateLive {
		t.Errorf("h1 %+v (finding %+v), want live", s, s.Finding)
	}
}
