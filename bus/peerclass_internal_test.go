package bus

import (
	"context"
	"strings"
	"testing"

	"github.com/leaseledger/leaseledger/bus/busclient"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/nats-io/nats.go"
)

// peerHandlers are the peer-class subjects among b's handlers.
func peerHandlers(b *Bus) []string {
	var out []string
	for _, sp := range b.spaces {
		handlers := map[string]nats.MsgHandler{}
		b.spaceHandlers(sp, handlers)
		for subject := range handlers {
			if strings.HasSuffix(subject, "."+busclient.PeerClass) {
				out = append(out, subject)
			}
		}
	}
	return out
}

// Only a clustered bus serves the peer class, and only replay and head;
// a standalone bus and a fleet bus serve none.
func TestPeerClassOnlyClustered(t *testing.T) {
	open := func() *ledger.Ledger {
		l, err := ledger.Open(ledger.Options{Dir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		return l
	}
	svc := []Service{{Subject: "leaseledger.api.x", Access: AccessRead, Handle: func(_ context.Context, _ string, b []byte) ([]byte, error) { return b, nil }}}
	clustered, err := Start(open(), Options{Port: RandomPort, HostID: "h1", Cluster: ClusterOptions{Listen: "127.0.0.1:-1"}, Services: svc,
		WriterUser: "w", WriterPassword: "wpw", ControlUser: "ops", ControlPassword: "pw"})
	if err != nil {
		t.Fatal(err)
	}
	defer clustered.Close()
	got := strings.Join(peerHandlers(clustered), " ")
	for _, want := range []string{busclient.ReplaySubject, busclient.HeadSubject} {
		if !strings.Contains(got, busclient.UserSubject(busclient.HostSubject("h1", want), busclient.PeerClass)) {
			t.Errorf("clustered bus: no peer-class %s among %q", want, got)
		}
	}
	if n := len(peerHandlers(clustered)); n != 2 {
		t.Errorf("clustered bus: %d peer-class subjects %q, want replay and head only", n, got)
	}
	standalone, err := Start(open(), Options{Port: RandomPort, HostID: "h1"})
	if err != nil {
		t.Fatal(err)
	}
	defer standalone.Close()
	if s := peerHandlers(standalone); len(s) != 0 {
		t.Errorf("standalone bus serves the peer class: %q", s)
	}
	f, err := StartFleet(FleetOptions{Port: RandomPort, Spaces: []Space{{HostID: "h1", Ledger: open()}}})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if s := peerHandlers(f.b); len(s) != 0 {
		t.Errorf("fleet bus serves the peer class: %q", s)
	}
}
