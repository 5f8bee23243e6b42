package bus_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/bus"
	"github.com/leaseledger/leaseledger/bus/busclient"
	"github.com/leaseledger/leaseledger/bus/bustest"
	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/internal/testproc"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// clusterWait bounds how long a test waits for a message to cross a
// route or a leaf connection: a hang bound, not a timing (see
// testproc.HangBound).
const clusterWait = testproc.HangBound

// startPeer starts a peer and connects to it in process; both are closed
// when the test ends.
var startPeer = bustest.StartPeer

// headIs waits until c sees want as the head of its host.
func headIs(t *testing.T, c *busclient.Client, want events.Seq) {
	t.Helper()
	testproc.Eventually(t, "head", func() error {
		h, err := c.Head(context.Background())
		if err != nil {
			return err
		}
		if h.Seq != want {
			return errors.New("head " + h.Hash)
		}
		return nil
	})
}

func TestClusterOptionsRefused(t *testing.T) {
	l := open(t, t.TempDir())
	defer l.Close()
	for name, o := range map[string]bus.Options{
		"no host id":         {Cluster: bus.ClusterOptions{Listen: "127.0.0.1:-1"}},
		"leaf, no host id":   {Cluster: bus.ClusterOptions{LeafRemotes: []bus.LeafRemote{{URL: "nats-leaf://127.0.0.1:7422"}}}},
		"bad host id":        {HostID: "h.1"},
		"routes, no listen":  {HostID: "h1", Cluster: bus.ClusterOptions{Routes: []string{"nats-route://127.0.0.1:6222"}}},
		"bad listen":         {HostID: "h1", Cluster: bus.ClusterOptions{Listen: "127.0.0.1"}},
		"port zero":          {HostID: "h1", Cluster: bus.ClusterOptions{Listen: "127.0.0.1:0"}},
		"bad route":          {HostID: "h1", Cluster: bus.ClusterOptions{Listen: "127.0.0.1:-1", Routes: []string{"http://x:1"}}},
		"user, no password":  {HostID: "h1", Cluster: bus.ClusterOptions{Listen: "127.0.0.1:-1", User: "u"}},
		"bad leaf":           {HostID: "h1", Cluster: bus.ClusterOptions{LeafRemotes: []bus.LeafRemote{{URL: "127.0.0.1:7422"}}}},
		"too many routes":    {HostID: "h1", Cluster: bus.ClusterOptions{Listen: "127.0.0.1:-1", Routes: make([]string, bus.MaxClusterRoutes+1)}},
		"TLS without key":    {HostID: "h1", TLS: &bus.TLSFiles{Cert: "c.pem"}},
		"TLS missing files":  {HostID: "h1", TLS: &bus.TLSFiles{Cert: "/nonexistent/c.pem", Key: "/nonexistent/k.pem"}},
		"too many leafnodes": {HostID: "h1", Cluster: bus.ClusterOptions{LeafRemotes: make([]bus.LeafRemote, bus.MaxLeafRemotes+1)}},
	} {
		o.Port = bus.RandomPort
		b, err := bus.Start(l, o)
		if err == nil {
			b.Close()
			t.Errorf("%s: started", name)
			continue
		}
		if !errors.Is(err, bus.ErrOptions) {
			t.Errorf("%s: %v, want ErrOptions", name, err)
		}
	}
	if _, err := bus.StartPeer(bus.PeerOptions{}); !errors.Is(err, bus.ErrOptions) {
		t.Errorf("peer without cluster: %v, want ErrOptions", err)
	}
}

// Three hosts on one cluster and a peer: each host's events, checkpoints
// and API stay in its own space, whichever server a client is on.
func TestHostSpacesOnCluster(t *testing.T) {
	co := func(routes ...string) bus.ClusterOptions {
		return bus.ClusterOptions{Name: "fleet", Listen: "127.0.0.1:-1", Routes: routes, User: "route", Password: "route-secret"}
	}
	l1, b1 := startBus(t, bus.Options{HostID: "h1", Cluster: co(), DenyAnonymous: true, ReadOnlyUser: "reader", ReadOnlyPassword: "pw", WriterUser: "w", WriterPassword: "wpw"})
	l2, b2 := startBus(t, bus.Options{HostID: "h2", Cluster: co(b1.ClusterURL())})
	l3, b3 := startBus(t, bus.Options{HostID: "h3", Cluster: co(b1.ClusterURL())})
	peer, pc := startPeer(t, bus.PeerOptions{Cluster: co(b1.ClusterURL(), b2.ClusterURL())})
	if b1.ClusterURL() == "" || peer.ClusterURL() == "" {
		t.Fatalf("cluster URLs %q %q", b1.ClusterURL(), peer.ClusterURL())
	}
	fleet, err := pc.SubscribeSync(busclient.FleetEventSubjects())
	if err != nil {
		t.Fatal(err)
	}
	ledgers := map[string]*ledger.Ledger{"h1": l1, "h2": l2, "h3": l3}
	peerClient := busclient.NewClient(pc)
	for h := range ledgers {
		headIs(t, peerClient.WithHost(h), 0) // the host's API is reachable: routes and interest are up
	}
	// The fleet subscription's interest must have reached every host before
	// they publish.
	testproc.Eventually(t, "fleet interest", func() error {
		for _, b := range []*bus.Bus{b1, b2, b3} {
			if !b.Server().GlobalAccount().SubscriptionInterest(busclient.HostSubject(b.HostID(), events.Subject("call.admitted", "x"))) {
				return errors.New(b.HostID() + " does not see the peer's subscription")
			}
		}
		return nil
	})
	for i, h := range []string{"h1", "h2", "h3"} {
		appendActivation(t, ledgers[h], 3*(i+1), h)
	}
	perHost := map[string][]events.Seq{}
	for range 3 + 6 + 9 {
		m, err := fleet.NextMsg(clusterWait)
		if err != nil {
			t.Fatalf("fleet subscription: %v (got %v)", err, perHost)
		}
		h, ok := busclient.HostOfSubject(m.Subject)
		if !ok {
			t.Fatalf("unqualified subject %q", m.Subject)
		}
		seq, _ := events.PeekSeq(m.Data)
		raw, err := ledgers[h].GetRaw(seq)
		if err != nil || string(raw) != string(m.Data) {
			t.Fatalf("%s seq %d on the fleet subject is not %s's event", m.Subject, seq, h)
		}
		perHost[h] = append(perHost[h], seq)
	}
	for i, h := range []string{"h1", "h2", "h3"} {
		if len(perHost[h]) != 3*(i+1) {
			t.Errorf("%s: %d events on the fleet subject, want %d", h, len(perHost[h]), 3*(i+1))
		}
	}
	// The peer reads every host through its space; each replay returns
	// that host's chain only.
	for i, h := range []string{"h1", "h2", "h3"} {
		var n int
		if _, err := peerClient.WithHost(h).Replay(context.Background(), 1, 0, busclient.TailFilter{}, func(seq events.Seq, raw []byte) error {
			want, err := ledgers[h].GetRaw(seq)
			if err != nil || string(want) != string(raw) {
				t.Errorf("%s replay seq %d differs from its ledger", h, seq)
			}
			n++
			return nil
		}); err != nil {
			t.Fatalf("replay %s from the peer: %v", h, err)
		}
		if n != 3*(i+1) {
			t.Errorf("replay %s: %d events, want %d", h, n, 3*(i+1))
		}
	}
	// A peer cannot speak as h1's named users: their subjects do not cross
	// routes.
	noNamedUserOverRoutes(t, pc, l1, "h1", "w", "reader")
	// A client of h2's server reads h2, not h1; the bare space has no
	// responder on a hosted bus.
	c2 := busclient.NewClient(connect(t, b2.ClientURL()))
	short, cancel := context.WithTimeout(context.Background(), time.Second) // refused requests time out
	defer cancel()
	if h, err := c2.WithHost("h2").Head(context.Background()); err != nil || h.Seq != 6 {
		t.Errorf("h2's head on h2: %+v, %v", h, err)
	}
	if _, err := c2.WithHost("h1").Head(short); err == nil {
		t.Error("a client of h2 called h1's API")
	}
	if h, err := c2.Head(short); err == nil {
		t.Errorf("bare head on a fleet: %+v", h)
	}
	// A local client may subscribe only to its own host's events.
	errs := make(chan error, 1)
	nc2 := connect(t, b2.ClientURL(), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { errs <- err }))
	if _, err := nc2.SubscribeSync(busclient.HostSubject("h1", busclient.EventSubjects())); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errs:
		if !errors.Is(err, nats.ErrPermissionViolation) {
			t.Errorf("subscribing to h1's events on h2: %v", err)
		}
	case <-time.After(clusterWait):
		t.Error("subscribing to h1's events on h2 was allowed")
	}
	// h1 denies anonymous clients, yet its bare read API serves cluster
	// peers; its named user reads h1 only.
	if nc, err := nats.Connect(b1.ClientURL(), nats.IgnoreDiscoveredServers(), nats.NoReconnect()); err == nil {
		nc.Close()
		t.Error("h1 admitted an anonymous client")
	}
	reader := busclient.NewClient(connect(t, b1.ClientURL(), busclient.UserOptions("reader", "pw")...))
	if h, err := reader.WithHost("h1").Head(context.Background()); err != nil || h.Seq != 3 {
		t.Errorf("h1's reader on h1: %+v, %v", h, err)
	}
	short2, cancel2 := context.WithTimeout(context.Background(), time.Second)
	defer cancel2()
	if _, err := reader.WithHost("h2").Head(short2); err == nil {
		t.Error("h1's reader called h2's API")
	}
}

// No route may publish into a host's own event subjects: a subscriber on
// the host's server sees only what its ledger published.
func TestRoutesCannotPublishIntoHostSpace(t *testing.T) {
	co := bus.ClusterOptions{Listen: "127.0.0.1:-1"}
	l1, b1 := startBus(t, bus.Options{HostID: "h1", Cluster: co})
	_, pc := startPeer(t, bus.PeerOptions{Cluster: bus.ClusterOptions{Listen: "127.0.0.1:-1", Routes: []string{b1.ClusterURL()}}})
	c1 := busclient.NewClient(connect(t, b1.ClientURL())).WithHost("h1")
	headIs(t, busclient.NewClient(pc).WithHost("h1"), 0)
	local := connect(t, b1.ClientURL())
	sub, err := local.SubscribeSync(busclient.HostSubject("h1", busclient.EventSubjects()))
	if err != nil {
		t.Fatal(err)
	}
	if err := local.Flush(); err != nil {
		t.Fatal(err)
	}
	fake := busclient.HostSubject("h1", events.Subject("call.admitted", "forged"))
	testproc.Eventually(t, "route interest", func() error {
		if err := pc.Publish(fake, []byte(`{"seq":1}`)); err != nil {
			return err
		}
		return pc.Flush()
	})
	time.Sleep(300 * time.Millisecond) // a forged message would have crossed the route by now
	appendActivation(t, l1, 1, "h1")
	m, err := sub.NextMsg(clusterWait)
	if err != nil {
		t.Fatal(err)
	}
	if raw, _ := l1.GetRaw(1); string(m.Data) != string(raw) {
		t.Fatalf("h1's subscriber got %s: %q, not h1's event", m.Subject, m.Data)
	}
	headIs(t, c1, 1)
}

// A host connected as a leaf node to a hub serves its space to the hub's
// clients, even when it denies anonymous clients of its own.
func TestLeafNodeHost(t *testing.T) {
	hub, leafURL := startHub(t)
	l1, b1 := startBus(t, bus.Options{HostID: "h1", DenyAnonymous: true, WriterUser: "w", WriterPassword: "wpw",
		Cluster: bus.ClusterOptions{LeafRemotes: []bus.LeafRemote{{URL: leafURL, User: "leaf", Password: "leaf-secret"}}}})
	hc := connect(t, hub.ClientURL())
	sub, err := hc.SubscribeSync(busclient.FleetEventSubjects())
	if err != nil {
		t.Fatal(err)
	}
	c := busclient.NewClient(hc).WithHost("h1")
	headIs(t, c, 0)
	testproc.Eventually(t, "the hub's subscription reaches the leaf", func() error {
		if !b1.Server().GlobalAccount().SubscriptionInterest(busclient.HostSubject("h1", events.Subject("call.admitted", "x"))) {
			return errors.New("no interest yet")
		}
		return nil
	})
	appendActivation(t, l1, 2, "h1")
	headIs(t, c, 2)
	noNamedUserOverRoutes(t, hc, l1, "h1", "w", "")
	for seq := events.Seq(1); seq <= 2; seq++ {
		m, err := sub.NextMsg(clusterWait)
		if err != nil {
			t.Fatal(err)
		}
		if h, _ := busclient.HostOfSubject(m.Subject); h != "h1" {
			t.Errorf("event on %s", m.Subject)
		}
	}
}

// startHub starts a plain NATS server with a leaf node listener (user
// "leaf", password "leaf-secret"), shut down when the test ends, and
// returns it and its nats-leaf:// URL.
func startHub(t *testing.T) (*server.Server, string) {
	t.Helper()
	leafPort := freePort(t) // the server does not say which port -1 picked for leaf nodes
	hub, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true,
		LeafNode: server.LeafNodeOpts{Host: "127.0.0.1", Port: leafPort, Username: "leaf", Password: "leaf-secret"}})
	if err != nil {
		t.Fatal(err)
	}
	go hub.Start()
	t.Cleanup(func() { hub.Shutdown(); hub.WaitForShutdown() })
	if !hub.ReadyForConnections(clusterWait) {
		t.Fatal("hub not ready")
	}
	return hub, fmt.Sprintf("nats-leaf://127.0.0.1:%d", leafPort)
}

// TLS on routes and on the client port, with a CA generated here.
func TestClusterTLS(t *testing.T) {
	files := genTLS(t)
	co := func(routes ...string) bus.ClusterOptions {
		return bus.ClusterOptions{Listen: "127.0.0.1:-1", Routes: routes, TLS: &files}
	}
	clientTLS := &bus.TLSFiles{Cert: files.Cert, Key: files.Key}
	l1, b1 := startBus(t, bus.Options{HostID: "h1", Cluster: co(), TLS: clientTLS})
	_, pc := startPeer(t, bus.PeerOptions{Cluster: co(b1.ClusterURL())})
	appendActivation(t, l1, 2, "h1")
	headIs(t, busclient.NewClient(pc).WithHost("h1"), 2) // across the TLS route
	nc := connect(t, b1.ClientURL(), nats.RootCAs(files.CA))
	headIs(t, busclient.NewClient(nc).WithHost("h1"), 2)
	if plain, err := nats.Connect(b1.ClientURL(), nats.Timeout(2*time.Second)); err == nil {
		plain.Close()
		t.Error("a client without TLS connected to a TLS client port")
	}
}

// noNamedUserOverRoutes checks that a connection on another server cannot
// append as host's writer nor read as its read-only user: those requests
// find no responder (or none answers), and nothing is written.
func noNamedUserOverRoutes(t *testing.T, nc *nats.Conn, l *ledger.Ledger, host, writer, reader string) {
	t.Helper()
	before := l.Head().Seq
	line := `{"activation":"x","session":"s","server":"srv","kind":"call.admitted","data":{"call_id":"c","tool":"echo","digest":"` + fp + `"}}` + "\n"
	try := func(subject, inbox string, body []byte) {
		sub, err := nc.SubscribeSync(inbox)
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Unsubscribe()
		if err := nc.PublishMsg(&nats.Msg{Subject: subject, Reply: inbox, Data: body}); err != nil {
			t.Fatal(err)
		}
		// No responder: the 503 status NATS sends back, or nothing at all.
		if m, err := sub.NextMsg(time.Second); err == nil && m.Header.Get("Status") != "503" {
			t.Errorf("%s answered over a route: %v %q", subject, m.Header, m.Data)
		}
	}
	try(busclient.UserSubject(busclient.HostSubject(host, busclient.AppendSubject), writer), busclient.InboxPrefix(writer)+".forged.1", []byte(line))
	if reader != "" {
		try(busclient.UserSubject(busclient.HostSubject(host, busclient.HeadSubject), reader), busclient.InboxPrefix(reader)+".forged.2", nil)
	}
	if after := l.Head().Seq; after != before {
		t.Errorf("a forged append over a route wrote seq %d..%d", before+1, after)
	}
}

// freePort returns a loopback port that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// appendActivation appends n events of activation a.
func appendActivation(t *testing.T, l *ledger.Ledger, n int, a string) {
	t.Helper()
	ds := make([]events.Draft, n)
	for i := range ds {
		ds[i] = draft(a, "s", i)
	}
	if _, err := l.Append(context.Background(), ds...); err != nil {
		t.Fatal(err)
	}
}

// genTLS writes a CA and a certificate it signs for 127.0.0.1 (server and
// client use) into a temporary directory.
func genTLS(t *testing.T) bus.TLSFiles {
	t.Helper()
	dir := t.TempDir()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalECPrivateKey(key)
	f := bus.TLSFiles{Cert: filepath.Join(dir, "cert.pem"), Key: filepath.Join(dir, "key.pem"), CA: filepath.Join(dir, "ca.pem")}
	for path, block := range map[string]*pem.Block{f.Cert: {Type: "CERTIFICATE", Bytes: der}, f.Key: {Type: "EC PRIVATE KEY", Bytes: keyDER}, f.CA: {Type: "CERTIFICATE", Bytes: caDER}} {
		if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// A peer's client port admits anonymous clients that may only read the
// hosts' spaces: subscribe to events, call replay and head.
func TestPeerClientPortReadOnly(t *testing.T) {
	l1, b1 := startBus(t, bus.Options{HostID: "h1", Cluster: bus.ClusterOptions{Listen: "127.0.0.1:-1"}})
	appendActivation(t, l1, 1, "h1")
	peer, err := bus.StartPeer(bus.PeerOptions{Port: bus.RandomPort, Cluster: bus.ClusterOptions{Listen: "127.0.0.1:-1", Routes: []string{b1.ClusterURL()}}})
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	errs := make(chan error, 4)
	nc := connect(t, peer.ClientURL(), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { errs <- err }))
	headIs(t, busclient.NewClient(nc).WithHost("h1"), 1)
	if _, err := nc.SubscribeSync(busclient.FleetEventSubjects()); err != nil {
		t.Fatal(err)
	}
	if err := nc.Publish(busclient.HostSubject("h1", busclient.AppendSubject), []byte("x")); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errs:
		if !errors.Is(err, nats.ErrPermissionViolation) || !strings.Contains(err.Error(), "Publish") {
			t.Errorf("append from a peer's client: %v", err)
		}
	case <-time.After(clusterWait):
		t.Error("a peer's client published to a host's append subject")
	}
	if bad, err := nats.Connect(peer.ClientURL(), nats.Token("guess"), nats.NoReconnect(), nats.IgnoreDiscoveredServers()); err == nil {
		bad.Close()
		t.Error("a wrong token was admitted")
	}
}

// A peer offers no client port unless asked: with Port 0 ClientURL is ""
// and its server, which listens for routes, admits no network client,
// while Connect still works in process.
func TestPeerClientPortOff(t *testing.T) {
	l1, b1 := startBus(t, bus.Options{HostID: "h1", Cluster: bus.ClusterOptions{Listen: "127.0.0.1:-1"}})
	appendActivation(t, l1, 1, "h1")
	peer, pc := startPeer(t, bus.PeerOptions{Cluster: bus.ClusterOptions{Listen: "127.0.0.1:-1", Routes: []string{b1.ClusterURL()}}})
	if u := peer.ClientURL(); u != "" {
		t.Errorf("a peer with Port 0 offers a client port: %q", u)
	}
	if a := peer.Server().Addr(); a != nil {
		if nc, err := nats.Connect("nats://"+a.String(), nats.NoReconnect(), nats.IgnoreDiscoveredServers()); err == nil {
			nc.Close()
			t.Errorf("a peer with Port 0 admitted an anonymous client on %v", a)
		}
	}
	headIs(t, busclient.NewClient(pc).WithHost("h1"), 1)
}
