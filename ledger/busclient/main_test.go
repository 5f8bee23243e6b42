package busclient_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/ledger/bus"
	"github.com/nats-io/nats.go"
	"go.uber.org/goleak"
)

// The client is tested against the real server (package ledger/bus) on a
// real ledger; only the tests of replies the server never sends use a bare
// NATS server with a scripted responder.

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var fp = strings.Repeat("ab", 32)

// draft returns a small valid event for activation a, session s.
func draft(a, s string, i int) events.Draft {
	return events.Draft{Activation: a, Session: s, Server: "srv",
		Payload: &events.CallAdmitted{CallID: fmt.Sprintf("c%d", i), Tool: "echo", Digest: fp}}
}

func open(t testing.TB, dir string) *ledger.Ledger {
	t.Helper()
	l, err := ledger.Open(ledger.Options{Dir: dir})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return l
}

func startBus(t *testing.T, opts bus.Options) (*ledger.Ledger, *bus.Bus) {
	t.Helper()
	l := open(t, t.TempDir())
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

func connect(t *testing.T, url string, opts ...nats.Option) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	t.Cleanup(nc.Close)
	return nc
}
